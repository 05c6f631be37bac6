"""Spark's own side of ``bench_spark_state``'s sessions workload, written as a Spark user writes it: per-user sessions
with a ``GAP_S`` inactivity gap on the event time, on ``applyInPandasWithState`` (:func:`builtin_sessions`) and on
Spark 4's ``transformWithStateInPandas`` (:func:`tws_processor`); both emit a frame only when a session closes and run
the session logic of :func:`rebalancer_client.spark.recipes.sessions` (:func:`close_sessions`)."""

from __future__ import annotations

SESSION_COLS = ["key", "start", "end", "events"]
SESSION_OUT = "key string, start double, end double, events long"
GAP_S = 30.0


def close_sessions(key, times, start, end, n):
    """The recipe's session logic (:func:`rebalancer_client.spark.recipes.close_sessions`) with the gap ``GAP_S``:
    the Spark sides run the very per-key code our side runs; only the frameworks differ."""
    from rebalancer_client.spark.recipes import close_sessions as close

    return close(key, times, start, end, n, GAP_S)


def builtin_sessions(key, pdfs, state):
    """Spark's side of the sessions workload as a Spark user writes it: the logic of
    :func:`rebalancer_client.spark.recipes.sessions` on ``GroupState`` (event-time timeout at the open session's
    end + gap), a frame only when a session closes."""
    import pandas as pd

    if state.hasTimedOut:
        start, end, n = state.get
        state.remove()
        yield pd.DataFrame([[key[0], start, end, n]], columns=SESSION_COLS)
        return
    times = [t for pdf in pdfs for t in pdf["ts"].tolist()]
    closed, (start, end, n) = close_sessions(key[0], times, *(state.get if state.exists else (0.0, 0.0, 0)))
    state.update((start, end, n))
    state.setTimeoutTimestamp(int((end + GAP_S) * 1000) + 1)
    if closed:
        yield pd.DataFrame(closed, columns=SESSION_COLS)


def tws_processor():
    """The same sessions on Spark 4's ``transformWithStateInPandas``: a value state per key and an event-time timer
    at the open session's end + gap; a frame only when a session closes."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Sessions(StatefulProcessor):
        def init(self, handle):
            self.handle = handle
            self.session = handle.getValueState("session", "start double, end double, events long")

        def handleInputRows(self, key, rows, timerValues):
            old = self.session.get() if self.session.exists() else None
            times = [t for pdf in rows for t in pdf["ts"].tolist()]
            closed, (start, end, n) = close_sessions(key[0], times, *(old or (0.0, 0.0, 0)))
            if old is not None:
                self.handle.deleteTimer(int((old[1] + GAP_S) * 1000) + 1)
            self.session.update((start, end, n))
            self.handle.registerTimer(int((end + GAP_S) * 1000) + 1)
            if closed:
                yield pd.DataFrame(closed, columns=SESSION_COLS)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            if self.session.exists():
                start, end, n = self.session.get()
                self.session.clear()
                yield pd.DataFrame([[key[0], start, end, n]], columns=SESSION_COLS)

        def close(self):
            pass

    return Sessions()


def sessions_query(stream, side: str):
    """The Spark baselines of the sessions workload on ``stream`` (append mode)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    timed = stream.withColumn("et", F.col("ts").cast("timestamp")).withWatermark("et", "0 seconds")
    if side == "tws":
        return timed.groupBy("key").transformWithStateInPandas(tws_processor(), SESSION_OUT, "Append", "EventTime")
    return timed.groupBy("key").applyInPandasWithState(
        builtin_sessions, SESSION_OUT, "start double, end double, events long", "append",
        GroupStateTimeout.EventTimeTimeout)
