"""Functions written against Spark's own ``applyInPandasWithState`` interface, run by the rebalancing driver.

``func(key, pdfs, state) -> Iterator[pd.DataFrame]``: ``key`` is the tuple of the key's values, ``pdfs`` an iterator
of pandas DataFrames holding the key's records of the micro-batch (at most ``max_rows_per_frame`` rows each), and
``state`` a :class:`GroupState` with the names, semantics and argument errors of
``pyspark.sql.streaming.state.GroupState`` — the source of the rules below is Spark's API documentation of
``GroupState`` / ``GroupStateTimeout`` (Scala ``org.apache.spark.sql.streaming.GroupState``, whose rules the Python
class follows) and ``pyspark/sql/streaming/state.py``:

* ``state.get`` / ``getOption`` / ``exists``: the key's state as a **tuple** of the declared state schema's
  values, converted to the schema's Python types (``bigint`` → ``int``, ``double`` → ``float``, ``string`` →
  ``str``, ``boolean`` → ``bool``, ``timestamp`` → ``datetime.datetime``, ``date`` → ``datetime.date``, null →
  ``None``); ``update(tuple)`` replaces it (NumPy scalars become Python values, as in Spark), ``remove()`` drops it.
* **Timeouts** (``timeout_conf`` of :class:`GroupStateFunction`, as the ``timeoutConf`` of
  ``applyInPandasWithState``): with ``ProcessingTimeTimeout``, ``setTimeoutDuration(d)`` times the key out in the
  first batch whose processing time (the driver's clock when the batch starts, ``getCurrentProcessingTimeMs()``)
  is beyond this batch's plus ``d``; with ``EventTimeTimeout`` (needs ``event_time``), ``setTimeoutTimestamp(t)``
  times it out in the first batch whose watermark is beyond ``t`` (strictly: ``t < watermark``; ``t`` may not be
  below the current watermark). The timeout is cleared each time ``func`` is called for the key (with records or
  on its timeout), so it must be set again in each call, and a timeout fires once. A key that times out is called
  with ``hasTimedOut`` true and one empty DataFrame (Spark's worker passes one empty frame with the stream's
  columns); it keeps its state unless ``func`` calls ``remove()``. A key with records in a batch is never timed out
  in it. Like Spark, a removed state with a timeout still set keeps the timeout (and is called on it with
  ``exists`` false).
* **Watermark** (``event_time`` and ``watermark_delay_s``, Spark's ``withWatermark``): the newest event time of
  the earlier batches minus the delay, in milliseconds (0 in the first batch, as in Spark);
  ``getCurrentWatermarkMs()`` needs ``event_time``. With ``EventTimeTimeout``, records whose event time is at or
  below the watermark of the batch before (Spark's "watermark for late events": the batch before's, not the one
  the batch runs under) are **late and dropped** before grouping, as Spark drops them for event-time timeouts; a
  key whose records were all late may still time out in that batch. They still count in the batch's load.
* **Output**: ``func`` yields DataFrames with the declared output columns (by name); empty frames are skipped. The
  values are converted to the declared types by Arrow, as in Spark: ``'x'`` for a ``bigint`` fails the batch.

How it is stored and run (:mod:`rebalancer_client.spark.group_state_run`): the state is typed (one column per
state column, ``_rb_s_<name>``), the key's timeout timestamp in ms is the state row's ``_rb_act`` (null: none).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["GroupState", "GroupStateFunction", "GroupStateTimeout"]

SparkFn = Callable[[tuple[Any, ...], Iterator[Any], "GroupState"], Any]


class GroupStateTimeout:
    """The timeouts of :class:`GroupStateFunction` (``pyspark.sql.streaming.state.GroupStateTimeout``)."""

    NoTimeout: str = "NoTimeout"
    ProcessingTimeTimeout: str = "ProcessingTimeTimeout"
    EventTimeTimeout: str = "EventTimeTimeout"


TIMEOUTS = (GroupStateTimeout.NoTimeout, GroupStateTimeout.ProcessingTimeTimeout, GroupStateTimeout.EventTimeTimeout)


class GroupState:
    """A key's state in one call of ``func`` (``pyspark.sql.streaming.state.GroupState``: same names, semantics and
    argument errors — ``ValueError``, ``TypeError`` and ``RuntimeError`` as Spark's ``PySparkValueError``,
    ``PySparkTypeError`` and ``PySparkRuntimeError``, which derive from them, with Spark's error class in the
    message). See the module docstring for the rules."""

    NO_TIMESTAMP: int = -1

    def __init__(self, value: tuple[Any, ...] | None, *, batch_processing_time_ms: int, watermark_ms: int,
                 timeout_conf: str, has_timed_out: bool, watermark_present: bool,
                 state_columns: Sequence[str] = ()):
        if timeout_conf not in TIMEOUTS:
            raise ValueError(f"timeout_conf must be one of {', '.join(TIMEOUTS)}, not {timeout_conf!r}")
        self._value = value
        self._batch_processing_time_ms = int(batch_processing_time_ms)
        self._event_time_watermark_ms = int(watermark_ms)
        self._timeout_conf = timeout_conf
        self._has_timed_out = bool(has_timed_out)
        self._watermark_present = bool(watermark_present)
        self._columns = list(state_columns)
        self._updated = False
        self._removed = False
        self._timeout_timestamp: float = GroupState.NO_TIMESTAMP  # cleared on every call (Spark's rule)

    @property
    def exists(self) -> bool:
        """Whether the key has a state."""
        return self._value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        """The state, or ``ValueError`` (``STATE_NOT_EXISTS``) when there is none."""
        if self._value is None:
            raise ValueError("[STATE_NOT_EXISTS] the key has no state: check state.exists, or use state.getOption")
        return tuple(self._value)

    @property
    def getOption(self) -> tuple[Any, ...] | None:  # noqa: N802 - Spark's name
        """The state, or None."""
        return None if self._value is None else tuple(self._value)

    @property
    def hasTimedOut(self) -> bool:  # noqa: N802 - Spark's name
        """Whether this call is the key's timeout (never true without a timeout configured)."""
        return self._has_timed_out

    def update(self, newValue: tuple[Any, ...]) -> None:  # noqa: N803 - Spark's name
        """Replace the state by ``newValue``, a tuple of the state schema's values (NumPy scalars and pandas
        timestamps are converted as Spark converts them). A tuple of another length is a ``ValueError`` here
        (Spark fails the batch when it serialises the state)."""
        if newValue is None:
            raise TypeError("[CANNOT_BE_NONE] argument newValue cannot be None: use state.remove() to drop the state")
        try:
            values = list(newValue)
        except TypeError:
            raise TypeError(f"[NOT_EXPECTED_TYPE] newValue must be a tuple of the state schema's values, not "
                            f"{type(newValue).__name__}") from None
        if self._columns and len(values) != len(self._columns):
            raise ValueError(f"the state tuple has {len(values)} values, the declared state schema {len(self._columns)}"
                             f" columns ({', '.join(self._columns)}): {tuple(values)!r}")
        self._value = tuple(_from_numpy(v) for v in values)
        self._updated, self._removed = True, False

    def remove(self) -> None:
        """Drop the key's state (a timeout set in this call is kept, as in Spark)."""
        self._value = None
        self._updated, self._removed = False, True

    def setTimeoutDuration(self, durationMs: int) -> None:  # noqa: N802, N803 - Spark's names
        """Time the key out ``durationMs`` after this batch's processing time (``ProcessingTimeTimeout`` only)."""
        if isinstance(durationMs, str):
            raise TypeError(f"[NOT_EXPECTED_TYPE] argument durationMs should be an int, got str ({durationMs!r})")
        if self._timeout_conf != GroupStateTimeout.ProcessingTimeTimeout:
            raise RuntimeError("[CANNOT_WITHOUT] cannot set timeout duration without enabling processing time "
                               f"timeout (timeout_conf is {self._timeout_conf})")
        if durationMs <= 0:
            raise ValueError(f"[VALUE_NOT_POSITIVE] value for argument durationMs must be positive, got {durationMs}")
        self._timeout_timestamp = durationMs + self._batch_processing_time_ms

    def setTimeoutTimestamp(self, timestampMs: int | datetime.datetime) -> None:  # noqa: N802, N803 - Spark's names
        """Time the key out once the watermark is beyond ``timestampMs`` (ms since the epoch, or a datetime;
        ``EventTimeTimeout`` only; not below the current watermark)."""
        if self._timeout_conf != GroupStateTimeout.EventTimeTimeout:
            raise RuntimeError("[CANNOT_WITHOUT] cannot set timeout timestamp without enabling event time timeout "
                               f"(timeout_conf is {self._timeout_conf})")
        if isinstance(timestampMs, datetime.datetime):
            ts = timestampMs if timestampMs.tzinfo is not None else timestampMs.astimezone()
            timestampMs = int(ts.timestamp() * 1000)
        if timestampMs <= 0:
            raise ValueError(f"[VALUE_NOT_POSITIVE] value for argument timestampMs must be positive, got {timestampMs}")
        wm = self._event_time_watermark_ms
        if wm != GroupState.NO_TIMESTAMP and timestampMs < wm:
            raise ValueError(f"[INVALID_TIMEOUT_TIMESTAMP] timeout timestamp ({timestampMs}) cannot be earlier than "
                             f"the current watermark ({wm})")
        self._timeout_timestamp = timestampMs

    def getCurrentWatermarkMs(self) -> int:  # noqa: N802 - Spark's name
        """The watermark of this batch in ms (needs ``event_time``, Spark's ``withWatermark``)."""
        if not self._watermark_present:
            raise RuntimeError("[CANNOT_WITHOUT] cannot get event time watermark timestamp without setting a "
                               "watermark (give GroupStateFunction an event_time column)")
        return self._event_time_watermark_ms

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802 - Spark's name
        """The batch's processing time in ms (the same for every key of the batch)."""
        return self._batch_processing_time_ms

    @property
    def timeout_timestamp(self) -> float | None:
        """The timeout set in this call (ms), or None."""
        return None if self._timeout_timestamp == GroupState.NO_TIMESTAMP else self._timeout_timestamp

    def __str__(self) -> str:
        return f"GroupState({self.get})" if self.exists else "GroupState(<undefined>)"


@dataclass
class GroupStateFunction:
    """A function with Spark's ``applyInPandasWithState`` signature and arguments, for
    ``RebalancingDriver(function=...)`` (see the module docstring).

    Args:
        func: ``func(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]``.
        output_schema, state_schema: Spark DDL strings (``"user string, n long"``), as in Spark.
        output_mode: ``"update"`` or ``"append"`` (checked; the driver's output sink gets what ``func`` yields).
        timeout_conf: ``"NoTimeout"``, ``"ProcessingTimeTimeout"`` or ``"EventTimeTimeout"``.
        event_time: the event-time column (timestamp, or numbers of seconds cast as Spark casts them), Spark's
            ``withWatermark`` column; needed by ``EventTimeTimeout``.
        watermark_delay_s: the watermark's delay (``withWatermark(col, "<delay> seconds")``).
        max_rows_per_frame: the most rows in one frame of ``pdfs`` (Spark's
            ``spark.sql.execution.arrow.maxRecordsPerBatch``, 10,000).
    """

    func: SparkFn
    output_schema: str
    state_schema: str
    output_mode: str = "update"
    timeout_conf: str = GroupStateTimeout.NoTimeout
    event_time: str | None = None
    watermark_delay_s: float = 0.0
    max_rows_per_frame: int = 10_000

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise ValueError("func must be a function (key, pdfs, state) -> iterator of pandas DataFrames")
        if str(self.output_mode).lower() not in ("update", "append"):
            raise ValueError(f"output_mode must be 'update' or 'append', not {self.output_mode!r}")
        if self.timeout_conf not in TIMEOUTS:
            raise ValueError(f"timeout_conf must be one of {', '.join(TIMEOUTS)}, not {self.timeout_conf!r}")
        if self.timeout_conf == GroupStateTimeout.EventTimeTimeout and self.event_time is None:
            raise ValueError("EventTimeTimeout needs event_time, the column of the watermark (Spark: withWatermark)")
        if not self.watermark_delay_s >= 0:
            raise ValueError("watermark_delay_s must be >= 0")
        if isinstance(self.max_rows_per_frame, bool) or int(self.max_rows_per_frame) < 1:
            raise ValueError(f"max_rows_per_frame must be >= 1, not {self.max_rows_per_frame!r}")
        self.max_rows_per_frame = int(self.max_rows_per_frame)


def _from_numpy(v: Any) -> Any:
    """A value given to ``update``: NumPy scalars and pandas timestamps as Python values (Spark's conversion)."""
    import numpy as np

    if isinstance(v, np.generic):
        return v.tolist()
    if hasattr(v, "to_pytimedelta"):
        return v.to_pytimedelta()
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    return v


def _is_null(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float):
        return math.isnan(v)
    try:
        import pandas as pd

        return v is pd.NaT or (not hasattr(v, "__len__") and bool(pd.isna(v)))
    except (TypeError, ValueError):
        return False


def python_converter(type_name: str) -> Callable[[Any], Any]:
    """The function that turns a state value read by pandas into the Python type of ``type_name`` (a Spark type's
    simple string); nested types are passed as pandas gives them."""
    def of(conv: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda v: None if _is_null(v) else conv(_from_numpy(v))

    if type_name in ("bigint", "int", "smallint", "tinyint"):
        return of(int)
    if type_name in ("double", "float"):
        return of(float)
    if type_name == "string":
        return of(str)
    if type_name == "boolean":
        return of(bool)
    if type_name.startswith("decimal"):
        return of(lambda v: v if isinstance(v, Decimal) else Decimal(str(v)))
    if type_name == "date":
        return of(lambda v: v.date() if isinstance(v, datetime.datetime) else v)
    if type_name == "binary":
        return of(bytes)
    return of(lambda v: v)
