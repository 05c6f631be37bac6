"""Ready-made per-key functions for :class:`rebalancer_client.spark.functions.KeyedFunction` (sessions, top-N).

- :func:`sessions`: sessionisation — a key's events in event-time order form a session until a gap longer than
  ``gap_s``; a closed session is emitted ``(key, start, end, events)``; the open session is the key's state and
  is emitted when the key times out (event-time timeout ``gap_s`` past its newest event, under the watermark).
- :func:`top_n`: the ``n`` largest values of a column per key; the state is those rows, and each batch emits the
  key's new top-n (update mode).
Both assume a key's records arrive in event-time order across batches (out-of-order records within a batch are
sorted); a record older than the key's open session's end starts no new session and extends nothing backwards.
"""

from __future__ import annotations

from typing import Any

from rebalancer_client.spark.functions import KeyedFunction


def sessions(key: str, time_col: str, gap_s: float, *, key_type: str = "string",
             watermark_delay_s: float = 0.0) -> KeyedFunction:
    """Sessions with an inactivity gap of ``gap_s`` seconds on the event time ``time_col`` (seconds or timestamp);
    output ``key, start, end, events`` (start/end in seconds)."""
    import pandas as pd

    out_cols = [key, "start", "end", "events"]

    def fn(k: Any, rows: Any, state: Any) -> tuple[Any, Any]:
        if state is not None and len(state):
            start, end, n = float(state["start"].iloc[0]), float(state["end"].iloc[0]), int(state["events"].iloc[0])
        else:
            start = end = float("nan")
            n = 0
        if len(rows) == 0:  # timed out: the open session is over
            return (pd.DataFrame([[k, start, end, n]], columns=out_cols) if n else None), None
        ts = rows[time_col]
        times = (ts.astype("int64") / 1e9) if pd.api.types.is_datetime64_any_dtype(ts) else ts.astype("float64")
        closed, (start, end, n) = close_sessions(k, times, start, end, n, gap_s)
        out = pd.DataFrame(closed, columns=out_cols) if closed else None
        return out, pd.DataFrame([[start, end, n]], columns=["start", "end", "events"])

    return KeyedFunction(fn, output_schema=f"`{key}` {key_type}, start double, end double, events long",
                         state_schema="start double, end double, events long", timeout_s=gap_s,
                         event_time=time_col, watermark_delay_s=watermark_delay_s)


def close_sessions(key: Any, times: Any, start: float, end: float, n: int, gap_s: float
                   ) -> tuple[list[list[Any]], tuple[float, float, int]]:
    """The session logic of :func:`sessions` for one key: its new event times (seconds, any order) against the open
    session ``(start, end, n)`` (``n`` = 0: none). Returns the sessions they close, ``[key, start, end, events]``
    each, and the open session after them."""
    closed: list[list[Any]] = []
    for t in sorted(float(x) for x in times):
        if n and t - end > gap_s:
            closed.append([key, start, end, n])
            n = 0
        if n == 0:
            start = end = t
        end = max(end, t)
        n += 1
    return closed, (start, end, n)


def top_n(key: str, value_col: str, n: int, *, key_type: str = "string",
          value_type: str = "double") -> KeyedFunction:
    """The ``n`` largest ``value_col`` per key (ties: the earlier record); emits ``key, rank, value`` for the keys
    of each batch."""
    import pandas as pd

    if n < 1:
        raise ValueError("n must be >= 1")

    def fn(k: Any, rows: Any, state: Any) -> tuple[Any, Any]:
        vals = rows[[value_col]].rename(columns={value_col: "value"})
        both = vals if state is None else pd.concat([state[["value"]], vals], ignore_index=True)
        top = both.sort_values("value", ascending=False, kind="stable").head(n).reset_index(drop=True)
        out = pd.DataFrame({key: [k] * len(top), "rank": range(1, len(top) + 1), "value": top["value"]})
        return out, top

    return KeyedFunction(fn, output_schema=f"`{key}` {key_type}, rank int, value {value_type}",
                         state_schema=f"value {value_type}")
