"""Any per-key logic on placed partitions: a pandas function API in the spirit of Spark's
``applyInPandasWithState`` (issue 15), with the integration's durable, versioned and rebalanced state.

``fn(key, rows, state) -> (output, new_state)``: ``key`` is the key value (a tuple for several key columns),
``rows`` a pandas DataFrame of the key's records in this micro-batch (the stream's columns), ``state`` the key's
state as a pandas DataFrame with the declared state columns, or ``None`` for a new key; ``fn`` returns the rows
to emit (a DataFrame with the declared output columns, or ``None``) and the new state (a DataFrame, or ``None`` to
remove the key's state). State values must be JSON values (numbers, strings, booleans; timestamps as numbers).

Timeouts (optional, :class:`KeyedFunction`): with ``timeout_s`` and no ``event_time`` a key's state expires once
``timeout_s`` seconds of processing time (the driver's clock at a batch start) have passed since its last update;
with ``event_time="ts"`` it expires once the watermark passes the newest event time of the key plus ``timeout_s``,
the watermark being the newest event time seen in earlier batches minus ``watermark_delay_s`` (Spark's rule: a
batch runs under the watermark of the batches before it). An expired key gets ``fn(key, rows, state)`` with an
**empty** ``rows`` — the only time ``rows`` is empty — its output is emitted and its state removed.

How it runs (:class:`FunctionState`, used by :class:`clients.spark.driver.RebalancingDriver` with
``function=``): the batch is routed and placed as for the mergeable aggregations, then the placed batch and the
state are co-grouped by the route value (``groupBy(route).cogroup(...).applyInPandas``): both sides are already
hash-partitioned by the route, so each key group's records meet its state on the partition the routing gives it.
The state is one row per key ``(route, key group, key…, kind, data, version)``: ``kind`` is ``s`` (state, ``data``
the JSON of the state rows and the key's timestamps), ``x`` (removed in that version: a tombstone) or ``o`` (one
output row of that version, ``data`` its JSON). The rows of version ``v`` are the delta the durable store writes,
so a replayed batch's output is rewritten from the store and never computed twice; the watermark is stored in the
commit record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clients.spark.routing import KG_COL, ROUTE_COL, RoutingTable, key_group_column
from clients.spark.state import BatchPartials, KeyedState, _no_adaptive
from clients.spark.store import VERSION_COL

KIND_COL = "_rb_kind"
DATA_COL = "_rb_data"
EMAX_COL = "_rb_emax"
STATE, TOMBSTONE, OUTPUT = "s", "x", "o"

PandasFn = Callable[[Any, Any, Any], tuple[Any, Any]]


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


def _make_apply(f: KeyedFunction, keys: list[str], user_cols: list[str], state_cols: list[str], version: int,
                now: float, watermark: float | None) -> Callable[[Any, Any], Any]:
    """The per-route-value function of one batch: ``(batch rows, state rows) -> state/output/tombstone rows``."""
    import pandas as pd

    out_cols = [ROUTE_COL, KG_COL, *keys, KIND_COL, DATA_COL, VERSION_COL]

    def rows_of(route: int, kg: int, key: tuple, kind: str, data: str | None, v: int) -> list:
        return [route, kg, *key, kind, data, v]

    def apply(batch: Any, state: Any) -> Any:
        res: list[list] = []
        if len(batch):
            route, kg = int(batch[ROUTE_COL].iloc[0]), int(batch[KG_COL].iloc[0])
        else:
            route, kg = int(state[ROUTE_COL].iloc[0]), int(state[KG_COL].iloc[0])
        current = {tuple(r[k] for k in keys): r for r in state.to_dict("records")}

        def call(key: tuple, rows: Any, st_row: Mapping[str, Any] | None) -> tuple[Any, Any]:
            st = None
            if st_row is not None:
                st = pd.DataFrame(json.loads(st_row[DATA_COL])["state"], columns=state_cols)
            out, new = f.fn(key[0] if len(key) == 1 else key, rows, st)
            if out is not None and len(out):
                for rec in json.loads(out.to_json(orient="records")):
                    res.append(rows_of(route, kg, key, OUTPUT, json.dumps(rec), version))
            return out, new

        if len(batch):
            for key_value, rows in batch.groupby(keys, sort=False):
                key = key_value if isinstance(key_value, tuple) else (key_value,)
                st_row = current.pop(key, None)
                _, new = call(key, rows[user_cols].reset_index(drop=True), st_row)
                if new is None:
                    if st_row is not None:
                        res.append(rows_of(route, kg, key, TOMBSTONE, None, version))
                    continue
                meta = {} if st_row is None else json.loads(st_row[DATA_COL])
                emax = meta.get("e")
                if f.event_time is not None:
                    m = float(_seconds(rows[f.event_time]).max())
                    emax = m if emax is None else max(emax, m)
                state_json = json.loads(new[state_cols].to_json(orient="records"))
                data = json.dumps({"state": state_json, "t": now, "e": emax})
                res.append(rows_of(route, kg, key, STATE, data, version))
        for key, st_row in current.items():  # keys without records in this batch: expire or keep
            meta = json.loads(st_row[DATA_COL])
            expired = False
            if f.timeout_s is not None:
                if f.event_time is None:
                    expired = now - float(meta["t"]) >= f.timeout_s
                elif watermark is not None and meta.get("e") is not None:
                    expired = watermark >= float(meta["e"]) + f.timeout_s
            if expired:
                call(key, pd.DataFrame(columns=user_cols), st_row)
                res.append(rows_of(route, kg, key, TOMBSTONE, None, version))
            else:
                res.append(rows_of(route, kg, key, STATE, st_row[DATA_COL], int(st_row[VERSION_COL])))
        return pd.DataFrame(res, columns=out_cols)

    return apply


class FunctionState(KeyedState):
    """The state of a :class:`KeyedFunction`, partitioned by a :class:`RoutingTable` (see the module docstring).
    Routing changes, placement checks, state bytes, restores and the durable store are :class:`KeyedState`'s."""

    def __init__(self, spark, key: str | Sequence[str], function: KeyedFunction, routing: RoutingTable):
        emax = {EMAX_COL: ("max", function.event_time)} if function.event_time else {}
        super().__init__(spark, key, emax, routing)  # the "aggregation" is the batch's newest event time
        self.function = function
        from pyspark.sql.types import StructType

        self.state_cols = [fld.name for fld in StructType.fromDDL(function.state_schema).fields]
        self.output_cols = [fld.name for fld in StructType.fromDDL(function.output_schema).fields]
        self.watermark: float | None = None       # used by the next batch
        self._max_event: float | None = None      # newest event time seen so far

    def value_columns(self) -> list[str]:
        return [KIND_COL, DATA_COL]

    def _schema(self, batch_df) -> str:
        types = {f.name: f.dataType.simpleString() for f in batch_df.schema.fields}
        key_ddl = ", ".join(f"`{k}` {types[k]}" for k in self.keys)
        return (f"`{ROUTE_COL}` int, `{KG_COL}` int, {key_ddl}, `{KIND_COL}` string, `{DATA_COL}` string, "
                f"`{VERSION_COL}` long")

    def update(self, batch_df, version: int = 0) -> BatchPartials:
        """Route and place the batch, run ``fn`` per key against the state (see the module docstring); the
        statistics come from the batch's pre-aggregation (:meth:`KeyedState.partials`)."""
        from pyspark.sql import functions as F

        partials = self.partials(batch_df)
        G = self.routing.key_groups
        now = time.time()
        schema = self._schema(batch_df)
        apply = _make_apply(self.function, self.keys, list(batch_df.columns), self.state_cols, int(version), now,
                            self.watermark)
        with _no_adaptive(self.session):
            placed = self.routing.place(batch_df.withColumn(ROUTE_COL, self.routing.route_column(
                key_group_column(self.keys, G)))).withColumn(KG_COL, F.pmod(F.col(ROUTE_COL), F.lit(G)))
            if self.df is None:
                state = self.session.createDataFrame([], schema)
            else:
                state = self.df.filter(F.col(KIND_COL) == STATE).select(*self._state_columns())
            new = placed.groupBy(ROUTE_COL).cogroup(state.groupBy(ROUTE_COL)).applyInPandas(apply, schema)
            self._replace(new.select(*self._state_columns()))
        if self.function.event_time is not None:
            m = partials.df.agg(F.max(EMAX_COL)).collect()[0][0]
            if m is not None:
                m = float(m.timestamp()) if hasattr(m, "timestamp") else float(m)
                self._max_event = m if self._max_event is None else max(self._max_event, m)
                self.watermark = self._max_event - self.function.watermark_delay_s
        self.updates += 1
        return partials

    def merge(self, partials: BatchPartials, version: int = 0) -> None:
        raise NotImplementedError("a FunctionState is updated from the batch's records (update), not partials")

    # ------------------------------------------------------------------ reading and durability
    def output_frame(self, df):
        from pyspark.sql import functions as F

        out = df.filter(F.col(KIND_COL) == OUTPUT).select(F.from_json(DATA_COL, self.function.output_schema)
                                                          .alias("_rb_o"))
        return out.select(*[F.col("_rb_o." + c).alias(c) for c in self.output_cols])

    def state_frame(self):
        """One row per state row: the keys and the declared state columns."""
        from pyspark.sql import functions as F

        if self.df is None:
            return None
        parsed = self.df.filter(F.col(KIND_COL) == STATE).select(
            *self.keys, F.explode(F.from_json(DATA_COL, _struct_ddl(self.function.state_schema)).getField("state"))
            .alias("_rb_s"))
        return parsed.select(*self.keys, *[F.col("_rb_s." + c).alias(c) for c in self.state_cols])

    def commit_extra(self) -> dict:
        return {"max_event_time": self._max_event, "watermark": self.watermark}

    def restore_extra(self, extra: Mapping) -> None:
        self._max_event = extra.get("max_event_time")
        self.watermark = extra.get("watermark")

    def _restorable(self, stored_df):
        from pyspark.sql import functions as F

        return stored_df.filter(F.col(KIND_COL) != OUTPUT)

    def _live(self, placed_df):
        from pyspark.sql import functions as F

        return placed_df.filter(F.col(KIND_COL) == STATE)


def _struct_ddl(state_schema: str) -> str:
    """``"a double, b string"`` → the DDL of the state's JSON: ``struct<state: array<struct<a: double, …>>>``."""
    from pyspark.sql.types import ArrayType, StructField, StructType

    inner = StructType.fromDDL(state_schema)
    return StructType([StructField("state", ArrayType(inner))]).simpleString()
