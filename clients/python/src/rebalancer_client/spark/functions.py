"""Any per-key logic on placed partitions: a pandas function API in the spirit of Spark's
``applyInPandasWithState``, with the integration's durable, versioned and rebalanced state.

``fn(key, rows, state) -> (output, new_state)``: ``key`` is the key value (a tuple for several key columns),
``rows`` a pandas DataFrame of the key's records in this micro-batch (the stream's columns), ``state`` the key's
state as a pandas DataFrame with the declared state columns, or ``None`` for a new key; ``fn`` returns the rows
to emit (a DataFrame with the declared output columns, or ``None``) and the new state (a DataFrame, or ``None`` to
remove the key's state). State values must be JSON values (numbers, strings, booleans; timestamps as numbers).

Timeouts (optional, :class:`KeyedFunction`): with ``timeout_s`` and no ``event_time`` a key's state expires once
``timeout_s`` seconds of processing time (the driver's clock at a batch start) have passed since its last update;
with ``event_time="ts"`` it expires once the watermark passes the newest event time of the key plus ``timeout_s``,
the watermark being the newest event time seen in earlier batches minus ``watermark_delay_s`` (Spark's rule: a
batch runs under the watermark of the batches before it; "passes" is Spark's strict rule: a key whose newest event
time plus ``timeout_s`` equals the watermark has not expired yet). An expired key gets ``fn(key, rows, state)`` with an
**empty** ``rows`` — the only time ``rows`` is empty — its output is emitted and its state removed.

How it runs (:class:`FunctionState`, used by :class:`rebalancer_client.spark.driver.RebalancingDriver` with
``function=``): the batch is routed and placed as for the mergeable aggregations, then the placed batch and the
state are co-grouped by the route value (``groupBy(route).cogroup(...).applyInPandas``): both sides are already
hash-partitioned by the route, so each key group's records meet its state on the partition the routing gives it.
The state is one row per key ``(route, key group, key…, kind, data, activity, changed)``: ``kind`` is ``s`` (state,
``data`` the JSON of the state rows, ``activity`` the key's last update time or newest event time), ``x``
(removed by the batch: a tombstone) or ``o`` (the key's output of the batch, ``data`` the JSON array of its
rows); ``changed`` is true on the rows of the latest batch (the others are passed on with false). Those rows are
the version's delta the durable store writes, so a replayed batch's output is rewritten from the store and
never computed twice; the watermark is stored in the commit record. Only the batch's keys and the keys that time
out reach ``fn``; the other state rows pass through the co-group untouched (they still travel through Arrow:
the whole state is read each batch — "touch only the batch's keys" holds for the Python work, not
for the state's bytes). Each key group of the batch also returns one statistics row (kind ``n``: records, bytes,
newest event time), read by an ``Observation`` while the durable store writes the version's delta and never
stored: with a store, a batch is one Spark job (the co-group, the lazily checkpointed new state and the delta
write), plus the state-size measurement every ``state_stats_every`` batches.

The commit record keeps the declared state and output schemas; a restart with other schemas accepts new nullable
columns and refuses a changed type, a removed or a renamed column (:mod:`rebalancer_client.spark.schemas`). For a
function written against Spark's own ``applyInPandasWithState`` interface (``GroupState``, per-key timeouts, typed
state), see :mod:`rebalancer_client.spark.group_state`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rebalancer_client.spark.jvm import joined, text_pieces
from rebalancer_client.spark.placement import StateBase, no_adaptive
from rebalancer_client.spark.routing import B_COL, KG_COL, ROUTE_COL, TOUCHED_COL, RoutingTable, key_group_column
from rebalancer_client.spark.schemas import FORMAT_KEY, SCHEMAS_KEY, check_evolution, check_format
from rebalancer_client.spark.stats import row_bytes_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

KIND_COL = "_rb_kind"
DATA_COL = "_rb_data"
ACT_COL = "_rb_act"      # the key's last activity: processing time of its last update, or its newest event time
STATE, TOMBSTONE, OUTPUT, STATS = "s", "x", "o", "n"

PandasFn = Callable[[Any, Any, Any], tuple[Any, Any]]
#: a key's values (one per key column)
Key = tuple[Any, ...]


@dataclass
class KeyedFunction:
    """``fn`` with its declared schemas (Spark DDL strings, e.g. ``"user string, start double, clicks long"``)
    and optional timeouts (see the module docstring)."""

    fn: PandasFn
    output_schema: str
    state_schema: str
    timeout_s: float | None = None
    event_time: str | None = None
    watermark_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError("timeout_s must be > 0")
        if self.event_time is not None and self.timeout_s is None:
            raise ValueError("event_time needs timeout_s (the inactivity that expires a key)")
        if self.watermark_delay_s < 0:
            raise ValueError("watermark_delay_s must be >= 0")


def _seconds(values: Any) -> Any:
    """Event times as float seconds (timestamps or numbers)."""
    import pandas as pd

    if pd.api.types.is_datetime64_any_dtype(values):
        return values.astype("int64") / 1e9
    return values.astype("float64")


def _columns(df: Any, cols: list[str] | None, what: str = "output") -> Any:
    """``df[cols]`` — without the copy when ``df`` has exactly those columns already (the usual case). Other
    columns than the declared ones (one missing, one more: Spark's ``applyInPandasWithState`` fails on both) are
    a ``ValueError`` naming them, not a ``KeyError`` or a column silently left out."""
    if cols is None or list(df.columns) == cols:
        return df
    if len(df.columns) != len(cols) or set(df.columns) != set(cols):
        missing = [c for c in cols if c not in set(df.columns)]
        extra = [c for c in df.columns if c not in set(cols)]
        raise ValueError(f"fn returned a {what} frame with columns {list(df.columns)}, not those of the declared "
                         f"{what} schema {cols} (missing: {missing}, not declared: {extra})")
    return df[cols]


def _make_apply(f: KeyedFunction, keys: list[str], user_cols: list[str], state_cols: list[str], now: float,
                watermark: float | None, output_cols: Sequence[str] | None = None
                ) -> Callable[[Any, Any], Any]:
    """The per-route-value function of one batch: ``(batch rows, state rows) -> state/output/tombstone rows``.

    Only the keys of the batch and the keys that time out reach ``fn`` (and have their state decoded); the other
    state rows go back as they came (vectorised). The batch is grouped by key once (``pandas.factorize`` and one
    stable sort: each key's rows are a slice, in arrival order), the keys' newest event times are one
    ``reduceat``, and a key's output rows and new state are each one JSON array written by pandas — the per-key
    work outside ``fn`` is a few slices and two ``to_json`` calls."""
    import pandas as pd

    out_cols = [ROUTE_COL, KG_COL, *keys, KIND_COL, DATA_COL, ACT_COL, TOUCHED_COL]
    no_key = [None] * len(keys)
    limit = (now if f.event_time is None else watermark) if f.timeout_s is not None else None
    emit_cols = list(output_cols) if output_cols is not None else None

    def call(key: Key, rows: Any, st_row: Mapping[str, Any] | None, res: list[list[Any]], route: int, kg: int) -> Any:
        st = None
        if st_row is not None:
            st = pd.DataFrame(json.loads(st_row[DATA_COL]), columns=state_cols)
        out, new = f.fn(key[0] if len(key) == 1 else key, rows, st)
        if out is not None and len(out):
            data = _columns(out, emit_cols).to_json(orient="records", double_precision=15)
            res.append([route, kg, *key, OUTPUT, data, np.nan, True])
        return new

    def groups(batch: Any) -> tuple[list[Key], Any, np.ndarray, np.ndarray | None]:
        """(key tuples in order of first appearance, the user columns sorted by key, group bounds, newest event
        time per key or None)."""
        # codes in order of first appearance; a null key gets -1 and is left out (as pandas' groupby does)
        codes = (pd.factorize(batch[keys[0]])[0] if len(keys) == 1 else
                 batch.groupby(keys, sort=False).ngroup().to_numpy())
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(int(codes.max(initial=-1)) + 2))
        key_list = [tuple(r) for r in batch[keys].iloc[order[bounds[:-1]]].itertuples(index=False)]
        rows = batch[user_cols].take(order)
        newest = None
        if f.event_time is not None and len(key_list):
            newest = np.fmax.reduceat(_seconds(rows[f.event_time]).to_numpy(), bounds[:-1])
        return key_list, rows, bounds, newest

    def apply(batch: Any, state: Any) -> Any:
        res: list[list[Any]] = []
        src = batch if len(batch) else state
        route, kg = int(src[ROUTE_COL].iloc[0]), int(src[KG_COL].iloc[0])
        kept = state.iloc[0:0]
        current: dict[Key, dict[str, Any]] = {}
        expired: list[Key] = []
        if len(state):
            if not len(batch):
                touched = np.zeros(len(state), dtype=bool)
            elif len(keys) == 1:
                touched = state[keys[0]].isin(batch[keys[0]].unique()).to_numpy()
            else:
                touched = pd.MultiIndex.from_frame(state[keys]).isin(
                    pd.MultiIndex.from_frame(batch[keys].drop_duplicates()))
            expire = np.zeros(len(state), dtype=bool)
            if limit is not None:
                expire = ~touched & (state[ACT_COL].to_numpy(dtype=float) + float(f.timeout_s or 0) < limit)
            kept = state[~touched & ~expire]
            for r in state[touched | expire].to_dict("records"):
                key = tuple(r[k] for k in keys)
                current[key] = r
            expired = [tuple(r) for r in state.loc[expire, keys].itertuples(index=False)]

        if len(batch):
            key_list, sorted_rows, bounds, newest = groups(batch)
            # the key group's batch statistics: records, bytes, newest event time (read by the observation)
            emax = float(np.nanmax(newest)) if newest is not None and np.isfinite(newest).any() else np.nan
            res.append([route, kg, *no_key, STATS, f"{len(batch)},{int(batch[B_COL].sum())}", emax, True])
            for i, key in enumerate(key_list):
                a, b = int(bounds[i]), int(bounds[i + 1])
                rows = sorted_rows.iloc[a:b]
                rows.index = pd.RangeIndex(b - a)
                st_row = current.pop(key, None)
                new = call(key, rows, st_row, res, route, kg)
                if new is None:
                    if st_row is not None:
                        res.append([route, kg, *key, TOMBSTONE, None, np.nan, True])
                    continue
                act = now
                if newest is not None:
                    act = float(newest[i])
                    if st_row is not None and not np.isnan(st_row[ACT_COL]):
                        act = max(act, float(st_row[ACT_COL]))
                data = _columns(new, state_cols, "state").to_json(orient="records", double_precision=15)
                res.append([route, kg, *key, STATE, data, act, True])
        for key in expired:
            call(key, pd.DataFrame(columns=user_cols), current[key], res, route, kg)
            res.append([route, kg, *key, TOMBSTONE, None, np.nan, True])
        fresh = pd.DataFrame(res, columns=out_cols)
        if not len(kept):
            return fresh
        passed = kept[out_cols].assign(**{TOUCHED_COL: False})
        # (no empty frame in a concatenation: pandas deprecates how it decides the dtypes then)
        return pd.concat([passed, fresh], ignore_index=True) if res else passed

    return apply


class FunctionState(StateBase):
    """The state of a :class:`KeyedFunction`, partitioned by a :class:`RoutingTable` (see the module docstring).
    Routing changes, placement checks, state bytes, restores and the durable store are :class:`StateBase`'s.

    The declared state and output schemas are kept in each commit record and checked on a restart
    (:mod:`rebalancer_client.spark.schemas`: a new nullable column is accepted, a changed type, a removed or
    renamed column is a ``ValueError``)."""

    #: the kinds of rows that are a key's state (read back by the next batch and by a restore)
    live_kinds: tuple[str, ...] = (STATE,)
    #: how the state is stored (kept in the commit record: a restart with another kind of function is refused)
    store_format = "json"

    def __init__(self, spark: SparkSession, key: str | Sequence[str], function: Any, routing: RoutingTable):
        super().__init__(spark, key, routing)
        self.function = function
        from pyspark.sql.types import StructType

        self.state_type = cast(StructType, StructType.fromDDL(function.state_schema))
        self.output_type = cast(StructType, StructType.fromDDL(function.output_schema))
        self.state_cols = self.state_type.names
        self.output_cols = self.output_type.names
        self.watermark: float | None = None       # used by the next batch
        self._max_event: float | None = None      # newest event time seen so far

    def value_columns(self) -> list[str]:
        return [KIND_COL, DATA_COL, ACT_COL]

    def _schema(self, batch_df: DataFrame) -> str:
        types = {f.name: f.dataType.simpleString() for f in batch_df.schema.fields}
        key_ddl = ", ".join(f"`{k}` {types[k]}" for k in self.keys)
        return (f"`{ROUTE_COL}` int, `{KG_COL}` int, {key_ddl}, `{KIND_COL}` string, `{DATA_COL}` string, "
                f"`{ACT_COL}` double, `{TOUCHED_COL}` boolean")

    def check_columns(self, batch_df: DataFrame) -> None:
        super().check_columns(batch_df)
        if self.function.event_time is not None and self.function.event_time not in batch_df.columns:
            raise ValueError(f"event_time column {self.function.event_time!r} is not in the stream (columns: "
                             f"{', '.join(batch_df.columns)})")

    def step(self, batch_df: DataFrame, version: int, lazy: bool) -> None:
        """Route and place the batch, run ``fn`` per key against the state (see the module docstring). Besides the
        state, output and tombstone rows of ``version``, each key group of the batch gets one statistics row
        (kind ``n``: records, bytes, newest event time) that :meth:`batch_observation` reads and no store keeps."""
        from pyspark.sql import functions as F

        self.session = batch_df.sparkSession
        G = self.routing.key_groups
        schema = self._schema(batch_df)
        apply = self._batch_apply(list(batch_df.columns))
        with no_adaptive(self.session):
            route = self.routing.route_column(key_group_column(self.keys, G))
            routed = self._batch_frame(batch_df).withColumns({B_COL: row_bytes_column(batch_df), ROUTE_COL: route})
            placed = self.routing.place(routed).withColumn(KG_COL, F.pmod(F.col(ROUTE_COL), F.lit(G)))
            if self.df is None:
                state = self.session.createDataFrame([], schema)
            else:
                state = self.df.filter(F.col(KIND_COL).isin(*self.live_kinds)).select(*self.state_columns())
            new = placed.groupBy(ROUTE_COL).cogroup(state.groupBy(ROUTE_COL)).applyInPandas(apply, schema)
            self._replace(new.select(*self.state_columns()), lazy=lazy)
        self.updates += 1

    def _batch_apply(self, batch_cols: list[str]) -> Callable[[Any, Any], Any]:
        """The per-route-value function of the batch about to run."""
        return _make_apply(self.function, self.keys, batch_cols, self.state_cols, time.time(), self.watermark,
                           self.output_cols)

    def _batch_frame(self, batch_df: DataFrame) -> DataFrame:
        """The batch as the co-group reads it (before routing)."""
        return batch_df

    def batch_observation(self) -> list[Column]:
        from pyspark.sql import functions as F

        is_stats = F.col(KIND_COL) == STATS
        # one text "kg,records,bytes;…", in pieces (see KeyedState.batch_observation)
        stats = F.when(is_stats, F.concat_ws(",", F.col(KG_COL).cast("string"), F.col(DATA_COL)))
        return [text_pieces(F.concat_ws(";", F.collect_list(stats))).alias("rows"),
                F.max(F.when(is_stats, F.col(ACT_COL))).alias("max_event"),
                F.count(F.when(~is_stats, F.lit(1))).alias("keys")]

    def stored_rows(self) -> Column:
        from pyspark.sql import functions as F

        return F.col(KIND_COL) != STATS

    def absorb(self, observed: Mapping[str, Any]) -> dict[str, Any]:
        """The newest event time of the batch moves the watermark the next batch runs under."""
        m = observed.get("max_event")
        if self.function.event_time is not None and m is not None and m == m:
            self._max_event = float(m) if self._max_event is None else max(self._max_event, float(m))
            self.watermark = self._max_event - self.function.watermark_delay_s
        return self.commit_extra()

    def statistics(self, observed: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, None]:
        n = np.zeros(self.routing.key_groups, dtype=np.int64)
        b = np.zeros(self.routing.key_groups, dtype=np.int64)
        for text in joined(observed.get("rows")).split(";"):
            if not text:
                continue
            k, rn, rb = (int(x) for x in text.split(","))
            n[k] += rn
            b[k] += rb
        return n, b, None

    # ------------------------------------------------------------------ reading and durability
    def output_frame(self, df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        # one JSON array of the key's output rows per key and version; a store written before that format holds one
        # JSON object per output row, which from_json with an array schema reads as a one-row array (tested)
        rows = F.from_json(DATA_COL, _rows_ddl(self.function.output_schema))
        out = df.filter(F.col(KIND_COL) == OUTPUT).select(F.explode(rows).alias("_rb_o"))
        return out.select(*[F.col("_rb_o." + c).alias(c) for c in self.output_cols])

    def state_frame(self) -> DataFrame | None:
        """One row per state row: the keys and the declared state columns."""
        from pyspark.sql import functions as F

        if self.df is None:
            return None
        parsed = self.df.filter(F.col(KIND_COL) == STATE).select(
            *self.keys, F.explode(F.from_json(DATA_COL, _rows_ddl(self.function.state_schema))).alias("_rb_s"))
        return parsed.select(*self.keys, *[F.col("_rb_s." + c).alias(c) for c in self.state_cols])

    def commit_extra(self) -> dict[str, Any]:
        return {"max_event_time": self._max_event, "watermark": self.watermark, FORMAT_KEY: self.store_format,
                SCHEMAS_KEY: {"state": self.state_type.jsonValue(), "output": self.output_type.jsonValue()}}

    def restore_extra(self, extra: Mapping[str, Any]) -> None:
        """The watermark, after checking the stored schemas against the declared ones (``ValueError``)."""
        check_format(extra.get(FORMAT_KEY), self.store_format)
        schemas = extra.get(SCHEMAS_KEY) or {}
        check_evolution(schemas.get("state"), self.state_type.jsonValue(), "state")
        check_evolution(schemas.get("output"), self.output_type.jsonValue(), "output")
        self._max_event = extra.get("max_event_time")
        self.watermark = extra.get("watermark")

    def _restorable(self, stored_df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        return stored_df.filter(F.col(KIND_COL).isin(*self.live_kinds, TOMBSTONE))

    def _live(self, placed_df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        return placed_df.filter(F.col(KIND_COL).isin(*self.live_kinds))


def _rows_ddl(state_schema: str) -> str:
    """``"a double, b string"`` → the DDL of a key's state JSON (its rows): ``array<struct<a:double,b:string>>``."""
    from pyspark.sql.types import ArrayType, StructType

    return ArrayType(StructType.fromDDL(state_schema)).simpleString()
