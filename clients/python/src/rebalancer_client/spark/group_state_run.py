"""How a :class:`rebalancer_client.spark.group_state.GroupStateFunction` runs: :class:`GroupFunctionState`, the
typed state of its keys, and the per-key-group function of a batch.

The batch and the state are co-grouped by the route value as for a
:class:`rebalancer_client.spark.functions.KeyedFunction` (same routing, placement, durable store, replays). The
state is one row per key ``(route, key group, key…, kind, data, act, changed, _rb_s_<state column>…,
_rb_o_<output column>…)``, with typed columns instead of JSON:

* kind ``s``: the key's state in the ``_rb_s_*`` columns; ``_rb_act`` is the key's timeout timestamp in ms
  (processing or event time, null when none is set);
* kind ``t``: a key whose state was removed while a timeout stays set (Spark keeps such a key until its timeout);
* kind ``x``: a tombstone; kind ``o``: one output row of the batch in the ``_rb_o_*`` columns (one stored row per
  output row); kind ``n``: the key group's batch statistics (records and bytes in ``_rb_data``, the newest event
  time in microseconds in ``_rb_act``), never stored.

Values go through Arrow with the declared types, both ways (a value of another type fails the batch, as in Spark).
A ``bigint`` state column that holds a null in a key group reaches pandas as ``float64`` in that key group (how
Spark's Arrow conversion gives it to pandas): its values are exact up to 2^53 in magnitude.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rebalancer_client.spark.functions import (
    ACT_COL,
    DATA_COL,
    KIND_COL,
    OUTPUT,
    STATE,
    STATS,
    TOMBSTONE,
    FunctionState,
    KeyedFunction,
    _columns,
)
from rebalancer_client.spark.group_state import GroupState, GroupStateFunction, GroupStateTimeout, python_converter
from rebalancer_client.spark.routing import B_COL, KG_COL, ROUTE_COL, TOUCHED_COL, RoutingTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TIMER = "t"               # a removed state whose timeout is still set
EVENT_US = "_rb_event_us"  # the event time in microseconds (Spark's cast to a timestamp), a column of the batch
S_PREFIX, O_PREFIX = "_rb_s_", "_rb_o_"


class _Batch:
    """What every key group of one batch shares: the clocks, the columns and the converters."""

    def __init__(self, f: GroupStateFunction, keys: list[str], user_cols: list[str], state_types: Sequence[str],
                 state_cols: list[str], output_cols: list[str], batch_ms: int, watermark_ms: int | None,
                 late_ms: int = 0):
        self.f, self.keys, self.user_cols = f, keys, user_cols
        self.state_cols, self.output_cols = state_cols, output_cols
        self.s_cols = [S_PREFIX + c for c in state_cols]
        self.o_cols = [O_PREFIX + c for c in output_cols]
        self.res_cols = [ROUTE_COL, KG_COL, *keys, KIND_COL, DATA_COL, ACT_COL, TOUCHED_COL, *self.s_cols,
                         *self.o_cols]
        self.convert = [python_converter(t) for t in state_types]
        self.batch_ms = batch_ms
        self.watermark_ms = watermark_ms          # None: no event time
        conf = f.timeout_conf
        self.threshold = (batch_ms if conf == GroupStateTimeout.ProcessingTimeTimeout else
                          (watermark_ms or 0) if conf == GroupStateTimeout.EventTimeTimeout else None)
        self.drop_late = conf == GroupStateTimeout.EventTimeTimeout
        self.late_ms = late_ms                    # records at or below it are late (the batch before's watermark)

    def state_of(self, row: Mapping[str, Any]) -> tuple[Any, ...] | None:
        if row[KIND_COL] != STATE:
            return None
        return tuple(conv(row[c]) for conv, c in zip(self.convert, self.s_cols, strict=True))

    def call(self, key: tuple[Any, ...], frames: Iterator[Any], value: tuple[Any, ...] | None,
             timed_out: bool) -> tuple[list[Any], GroupState]:
        """Run ``func`` for one key: (its output frames with the declared columns, its GroupState after)."""
        import pandas as pd

        gs = GroupState(value, batch_processing_time_ms=self.batch_ms,
                        watermark_ms=GroupState.NO_TIMESTAMP if self.watermark_ms is None else self.watermark_ms,
                        timeout_conf=self.f.timeout_conf, has_timed_out=timed_out,
                        watermark_present=self.watermark_ms is not None, state_columns=self.state_cols)
        result = self.f.func(key, frames, gs)
        if isinstance(result, pd.DataFrame):
            raise TypeError("func must return an iterator of pandas DataFrames (e.g. `yield df`), not a DataFrame")
        try:
            it = iter(result)
        except TypeError:
            raise TypeError(f"func must return an iterator of pandas DataFrames, not {type(result).__name__}"
                            ) from None
        outs = []
        for o in it:
            if not isinstance(o, pd.DataFrame):
                raise TypeError(f"func yielded a {type(o).__name__}, not a pandas DataFrame")
            if len(o.columns) == 0 and o.empty:
                continue
            o = _columns(o, self.output_cols)
            if len(o):
                outs.append(o)
        return outs, gs

    def frames(self, rows: Any) -> Iterator[Any]:
        """A key's rows as frames of at most ``max_rows_per_frame`` rows, each indexed from 0."""
        import pandas as pd

        n = self.f.max_rows_per_frame
        for a in range(0, len(rows), n):
            part = rows.iloc[a:a + n]
            part.index = pd.RangeIndex(len(part))
            yield part


def _group(batch: Any, keys: list[str]) -> tuple[list[tuple[Any, ...]], np.ndarray, np.ndarray]:
    """(key tuples in order of first appearance, the row order that sorts by key, group bounds); null keys are
    left out, as pandas' groupby does."""
    import pandas as pd

    codes = (pd.factorize(batch[keys[0]])[0] if len(keys) == 1 else
             batch.groupby(keys, sort=False).ngroup().to_numpy())
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(int(codes.max(initial=-1)) + 2))
    key_list = [tuple(r) for r in batch[keys].iloc[order[bounds[:-1]]].itertuples(index=False)]
    return key_list, order, bounds


def _touched(state: Any, batch: Any, keys: list[str]) -> np.ndarray:
    import pandas as pd

    if not len(batch):
        return np.zeros(len(state), dtype=bool)
    if len(keys) == 1:
        return np.asarray(state[keys[0]].isin(batch[keys[0]].unique()).to_numpy(), dtype=bool)
    return np.asarray(pd.MultiIndex.from_frame(state[keys]).isin(
        pd.MultiIndex.from_frame(batch[keys].drop_duplicates())), dtype=bool)


def make_group_apply(b: _Batch) -> Callable[[Any, Any], Any]:
    """The per-route-value function of one batch: ``(batch rows, state rows) -> state/output/tombstone rows``.
    Keys with records are called first (in order of first appearance), then the keys that time out; the other
    state rows go back as they came."""
    import pandas as pd

    keys, n_s, n_o = b.keys, len(b.s_cols), len(b.o_cols)

    def emit(res: list[list[Any]], outs: list[Any], head: list[Any], key: tuple[Any, ...], had: bool,
             frames: list[Any], gs: GroupState) -> None:
        for o in frames:
            o = o.set_axis(b.o_cols, axis=1)
            outs.append(o.assign(**dict(zip([ROUTE_COL, KG_COL, *keys], [*head, *key], strict=True)),
                                 **{KIND_COL: OUTPUT, DATA_COL: None, ACT_COL: np.nan, TOUCHED_COL: True}))
        t = gs.timeout_timestamp
        act = np.nan if t is None else float(t)
        if gs.exists:
            res.append([*head, *key, STATE, None, act, True, *gs.get, *[None] * n_o])
        elif t is not None:
            res.append([*head, *key, TIMER, None, act, True, *[None] * (n_s + n_o)])
        elif had:
            res.append([*head, *key, TOMBSTONE, None, np.nan, True, *[None] * (n_s + n_o)])

    def apply(batch: Any, state: Any) -> Any:
        res: list[list[Any]] = []
        outs: list[Any] = []
        src = batch if len(batch) else state
        head = [int(src[ROUTE_COL].iloc[0]), int(src[KG_COL].iloc[0])]
        if len(batch):
            ev = batch[EVENT_US].to_numpy(dtype=float) if EVENT_US in batch.columns else None
            newest = float(np.nanmax(ev)) if ev is not None and np.isfinite(ev).any() else np.nan
            res.append([*head, *[None] * len(keys), STATS, f"{len(batch)},{int(batch[B_COL].sum())}", newest, True,
                        *[None] * (n_s + n_o)])
            if b.drop_late and ev is not None:  # late records are dropped (null event times are kept)
                batch = batch[~(ev <= float(b.late_ms) * 1000.0)]
        touched = _touched(state, batch, keys) if len(state) else np.zeros(0, dtype=bool)
        expire = np.zeros(len(state), dtype=bool)
        if b.threshold is not None and len(state):
            expire = ~touched & (state[ACT_COL].to_numpy(dtype=float) < float(b.threshold))
        current = {tuple(r[k] for k in keys): r for r in state[touched | expire].to_dict("records")}
        if len(batch):
            key_list, order, bounds = _group(batch, keys)
            rows = batch[b.user_cols].take(order)
            for i, key in enumerate(key_list):
                row = current.pop(key, None)
                value = None if row is None else b.state_of(row)
                frames, gs = b.call(key, b.frames(rows.iloc[int(bounds[i]):int(bounds[i + 1])]), value, False)
                emit(res, outs, head, key, row is not None, frames, gs)
        for key, row in current.items():  # the keys that time out
            frames, gs = b.call(key, iter([pd.DataFrame(columns=b.user_cols)]), b.state_of(row), True)
            emit(res, outs, head, key, True, frames, gs)
        parts = [state[~touched & ~expire][b.res_cols].assign(**{TOUCHED_COL: False})] if len(state) else []
        if res:
            parts.append(pd.DataFrame(res, columns=b.res_cols, dtype=object))
        parts = [p for p in (*parts, *outs) if len(p)]
        if not parts:
            return pd.DataFrame(columns=b.res_cols)
        with warnings.catch_warnings():  # all-null columns of a piece: Arrow casts to the declared types anyway
            warnings.simplefilter("ignore", FutureWarning)
            return pd.concat(parts, ignore_index=True)

    return apply


class GroupFunctionState(FunctionState):
    """The state of a :class:`GroupStateFunction` (see the module docstring); the watermark is kept in ms as
    Spark keeps it (``watermark_ms``; ``watermark`` in seconds for the driver's report)."""

    live_kinds = (STATE, TIMER)
    store_format = "group_state"

    def __init__(self, spark: SparkSession, key: str | Sequence[str], function: GroupStateFunction,
                 routing: RoutingTable):
        super().__init__(spark, key, function, routing)
        self.group_function = function
        self._max_us: float | None = None
        self.watermark_ms: int | None = None
        self.late_ms = 0          # the watermark the latest batch ran under: the next one's limit for late records

    def value_columns(self) -> list[str]:
        return [KIND_COL, DATA_COL, ACT_COL, *self._typed()]

    def _typed(self) -> dict[str, str]:
        """The typed columns: ``{column: Spark type}`` of the state and output columns."""
        return {**{S_PREFIX + f.name: f.dataType.simpleString() for f in self.state_type.fields},
                **{O_PREFIX + f.name: f.dataType.simpleString() for f in self.output_type.fields}}

    def _schema(self, batch_df: DataFrame) -> str:
        typed = ", ".join(f"`{c}` {t}" for c, t in self._typed().items())
        return f"{super()._schema(batch_df)}, {typed}"

    def _batch_frame(self, batch_df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        et = self.group_function.event_time
        return batch_df if et is None else batch_df.withColumn(EVENT_US, F.unix_micros(F.col(et).cast("timestamp")))

    def _batch_apply(self, batch_cols: list[str]) -> Callable[[Any, Any], Any]:
        f = self.group_function
        wm = None if f.event_time is None else (self.watermark_ms or 0)
        b = _Batch(f, self.keys, [c for c in batch_cols if c != EVENT_US],
                   [fl.dataType.simpleString() for fl in self.state_type.fields], self.state_cols, self.output_cols,
                   int(time.time() * 1000), wm, self.late_ms)
        self.late_ms = wm or 0
        return make_group_apply(b)

    def absorb(self, observed: Mapping[str, Any]) -> dict[str, Any]:
        """The newest event time (µs) of the batch moves the watermark (ms) of the next batch: Spark's
        ``max event time in ms - delay``, never backwards."""
        m = observed.get("max_event")
        if self.group_function.event_time is not None and m is not None and m == m:
            self._max_us = float(m) if self._max_us is None else max(self._max_us, float(m))
            wm = int(self._max_us) // 1000 - int(round(self.group_function.watermark_delay_s * 1000))
            self.watermark_ms = wm if self.watermark_ms is None else max(self.watermark_ms, wm)
            self._max_event, self.watermark = self._max_us / 1e6, self.watermark_ms / 1000
        return self.commit_extra()

    def commit_extra(self) -> dict[str, Any]:
        return {**super().commit_extra(), "max_event_us": self._max_us, "watermark_ms": self.watermark_ms,
                "late_ms": self.late_ms}

    def restore_extra(self, extra: Mapping[str, Any]) -> None:
        super().restore_extra(extra)
        self._max_us = extra.get("max_event_us")
        self.watermark_ms = extra.get("watermark_ms")
        self.late_ms = int(extra.get("late_ms") or 0)

    def restore(self, stored_df: DataFrame, routing: RoutingTable, *, dedup: bool = False, lazy: bool = False) -> None:
        """A restore in which the columns the declared schemas gained (checked by :meth:`restore_extra`) are
        null for the stored keys."""
        from pyspark.sql import functions as F

        typed = {c: (F.col(c) if c in stored_df.columns else F.lit(None)).cast(t) for c, t in self._typed().items()}
        super().restore(stored_df.withColumns(typed), routing, dedup=dedup, lazy=lazy)

    def output_frame(self, df: DataFrame) -> DataFrame:
        return self._typed_frame(df.filter(df[KIND_COL] == OUTPUT), O_PREFIX, self.output_type, [])

    def state_frame(self) -> DataFrame | None:
        """One row per key with a state: the keys and the declared state columns."""
        if self.df is None:
            return None
        return self._typed_frame(self.df.filter(self.df[KIND_COL] == STATE), S_PREFIX, self.state_type, self.keys)

    @staticmethod
    def _typed_frame(df: DataFrame, prefix: str, schema: Any, keys: list[str]) -> DataFrame:
        from pyspark.sql import functions as F

        cols = [(F.col(prefix + f.name) if prefix + f.name in df.columns else F.lit(None).cast(f.dataType))
                .alias(f.name) for f in schema.fields]
        return df.select(*keys, *cols)


def function_state(spark: SparkSession, keys: list[str], function: KeyedFunction | GroupStateFunction,
                   routing: RoutingTable) -> FunctionState:
    """The state of a driver's ``function``: a :class:`GroupFunctionState` or a ``FunctionState``."""
    if isinstance(function, GroupStateFunction):
        return GroupFunctionState(spark, keys, function, routing)
    return FunctionState(spark, keys, function, routing)
