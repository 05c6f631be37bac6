"""One user function, two engines: Spark's own ``applyInPandasWithState`` (a streaming query) against the
rebalancing driver running the same function as a
:class:`rebalancer_client.spark.group_state.GroupStateFunction`, fed the same files (file source,
``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``: one file per micro-batch).

The user function is written once, against Spark's interface ``(key, pdf_iter, state) -> iterator of DataFrames``
with a ``GroupState``. Compared: the rows emitted per batch (as multisets), the state left at the end (Spark's read
with the ``statestore`` source), timeouts (event time, per key), late records, and what each side does with output
rows or a state that do not match the declared schemas (more in ``test_spark_group_state.py``).

Equal (tested): update-mode output and state without timeouts; sessions that close and time out per key under an
event-time watermark, batch by batch — the watermark of a batch is the newest event time of the batches before it;
a key with records in a batch is not timed out in it; a timed-out key is called once with one empty frame, emits,
and its state is gone (``remove()``). Differences found, and what became of them:

* a timeout equal to the watermark: Spark's rule is strict (``timeout < watermark``) — the driver follows it;
* output or state frames with other columns than the declared ones: Spark fails the batch (one more or one less
  column, a state tuple of another length); the driver fails it too, with a ``ValueError`` naming the columns (a
  state tuple of another length already in ``update``);
* the number of batches: after the last file Spark runs a no-data batch (the watermark moved, timeouts may fire);
  a ``foreachBatch`` query without a stateful operator (the driver's) runs none, so the tests give the driver that
  empty batch themselves — a deployment's driver times such keys out only when the next batch comes;
* late records: with an event-time timeout Spark drops records at or below the watermark of the batch before
  (in batch 0 it is 0, so an event time of 0 is dropped) — the driver drops them too;
* per-key timeouts: ``setTimeoutTimestamp`` / ``setTimeoutDuration`` per key, a key keeps its state on its timeout
  call unless ``remove()``, the watermark and the processing time are readable — as in Spark;
* value types: Spark converts output with Arrow (``"x"`` for a long fails, ``2.0`` becomes 2); so does the driver
  (typed columns, no JSON). A state value of the wrong type: Spark stores null, the driver fails the batch.

Processing-time timeouts are not compared (the two clocks differ: each side's batch timestamp is its own clock);
``test_spark_group_state.py`` tests them on the driver.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.helpers.streams import write_stream

pytest.importorskip("pyspark")

from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.group_state import GroupStateFunction  # noqa: E402

pytestmark = pytest.mark.spark

IN_SCHEMA = "user string, ts double, v long"
SPARK_STATE_PARTITIONS = 1   # Spark's side: state partitions, the tasks of a batch (the driver runs on 2)


# ---------------------------------------------------------------------------------------------------- the runs
def _write(src: Path, frames: list[pd.DataFrame]) -> None:
    write_stream(src, frames)


def _rows(df: Any) -> list[tuple]:
    return [tuple(r) for r in df.collect()]


def run_spark(spark: Any, src: Path, chk: Path, func: Callable, output_schema: str, state_schema: str,
              mode: str = "update", timeout: str = "NoTimeout", watermark_s: float | None = None
              ) -> dict[int, list[tuple]]:
    """Spark's ``applyInPandasWithState`` over the files: the rows of each micro-batch (no-data batches included)."""
    from pyspark.sql import functions as F

    stream = spark.readStream.schema(IN_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(src))
    if watermark_s is not None:
        stream = stream.withColumn("et", F.col("ts").cast("timestamp")).withWatermark("et", f"{watermark_s} seconds")
    got: dict[int, list[tuple]] = {}

    def collect(df: Any, batch_id: int) -> None:
        got[int(batch_id)] = _rows(df)

    out = stream.groupBy("user").applyInPandasWithState(func, output_schema, state_schema, mode, timeout)
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(SPARK_STATE_PARTITIONS))  # kept in the checkpoint
    try:
        q = (out.writeStream.outputMode(mode).foreachBatch(collect).trigger(availableNow=True)
             .option("checkpointLocation", str(chk)).start())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    try:
        q.awaitTermination()
    finally:
        q.stop()
    return got


def run_driver(spark: Any, src: Path, chk: Path, function: Any, extra_batches: int = 0
               ) -> tuple[dict[int, list[tuple]], RebalancingDriver]:
    """The driver (no controller, state on the executors) over the same files; ``extra_batches`` empty batches
    after them (Spark's no-data batches: a ``foreachBatch`` query without a stateful operator runs none)."""
    got: dict[int, list[tuple]] = {}

    def output(df: Any, batch_id: int) -> None:
        got[int(batch_id)] = _rows(df)

    d = RebalancingDriver(spark, key="user", function=function, key_groups=8, partitions=2, output=output)
    stream = spark.readStream.schema(IN_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(src))
    q = (stream.writeStream.foreachBatch(d.foreach_batch).trigger(availableNow=True)
         .option("checkpointLocation", str(chk)).start())
    try:
        q.awaitTermination()
    finally:
        q.stop()
    last = max(r.batch_id for r in d.reports)
    for i in range(extra_batches):
        d.process(spark.createDataFrame([], IN_SCHEMA), last + 1 + i)
        got.setdefault(last + 1 + i, [])
    return got, d


def spark_state(spark: Any, chk: Path) -> Counter:
    """The state Spark's query left (its state store, read with the ``statestore`` source): ``(user, *state)``."""
    rows = spark.read.format("statestore").load(str(chk)).select("key.*", "value.groupState.*").collect()
    return _norm([tuple(r) for r in rows])


def driver_state(d: RebalancingDriver) -> Counter:
    return _norm([tuple(r) for r in d.state_frame().collect()])


def _norm(rows: list[tuple]) -> Counter:
    """A multiset of rows, floats rounded (both sides compute them with the same float operations)."""
    return Counter(tuple(round(x, 9) if isinstance(x, float) and not math.isnan(x) else x for x in r) for r in rows)


def _per_batch(got: dict[int, list[tuple]]) -> dict[int, Counter]:
    return {b: _norm(rows) for b, rows in sorted(got.items())}


# ---------------------------------------------------------------------------------------------------- no timeout
COUNT_OUT = "user string, n long, total long"
COUNT_STATE = "n long, total long"


def running_count(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """Records and the sum of ``v`` per user so far; emits the user's new totals (update mode)."""
    n, total = state.get if state.exists else (0, 0)
    for pdf in pdfs:
        n += len(pdf)
        total += int(pdf["v"].sum())
    state.update((n, total))
    yield pd.DataFrame({"user": [key[0]], "n": [n], "total": [total]})


def _count_frames(batches: int = 3, rows: int = 40, seed: int = 3) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    return [pd.DataFrame({"user": [f"u{u}" for u in rng.integers(0, 9, rows)],
                          "ts": np.sort(rng.uniform(100 * b, 100 * b + 100, rows)).round(0),
                          "v": rng.integers(0, 100, rows)}) for b in range(batches)]


def test_no_timeout_update_mode_emits_the_same_rows_per_batch(spark, tmp_path):
    frames = _count_frames()
    _write(tmp_path / "in", frames)
    ref = run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", running_count, COUNT_OUT, COUNT_STATE)
    got, d = run_driver(spark, tmp_path / "in", tmp_path / "chk-driver",
                        GroupStateFunction(running_count, COUNT_OUT, COUNT_STATE))
    assert sorted(ref) == list(range(len(frames)))  # no timeouts: no no-data batch
    assert _per_batch(got) == _per_batch(ref)
    every = pd.concat(frames)
    exp = every.groupby("user").agg(n=("v", "size"), total=("v", "sum"))
    assert driver_state(d) == spark_state(spark, tmp_path / "chk-spark") == _norm(list(exp.itertuples()))
    d.close()


# ---------------------------------------------------------------------------------------------------- event time
GAP = 30.0
SESSION_OUT = "user string, start double, end double, events long"
SESSION_STATE = "start double, end double, events long"


def sessions(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """Sessions of ``GAP`` seconds of inactivity on ``ts``; a closed session is emitted, the open one is the state
    and times out (per key) once the watermark passes its end + ``GAP``."""
    cols = ["user", "start", "end", "events"]
    if state.hasTimedOut:
        start, end, n = state.get
        state.remove()
        yield pd.DataFrame([[key[0], start, end, n]], columns=cols)
        return
    start, end, n = state.get if state.exists else (0.0, 0.0, 0)
    closed = []
    for pdf in pdfs:
        for t in sorted(pdf["ts"].tolist()):
            if n and t - end > GAP:
                closed.append([key[0], start, end, n])
                n = 0
            if n == 0:
                start = end = t
            end = max(end, t)
            n += 1
    state.update((start, end, n))
    state.setTimeoutTimestamp(round((end + GAP) * 1000))
    yield pd.DataFrame(closed, columns=cols)


def session_fn(func: Callable = sessions) -> GroupStateFunction:
    return GroupStateFunction(func, SESSION_OUT, SESSION_STATE, "append", "EventTimeTimeout", event_time="ts")


def _session_frames(batches: int = 4, rows: int = 24, seed: int = 12) -> list[pd.DataFrame]:
    """Batch ``b`` covers event times ``(100 b, 100 b + 100)`` in time order (no late record: every record is
    beyond the watermark of the batches before it), users skewed so that rare users' sessions time out in the
    middle of the stream; millisecond event times."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(batches):
        users = np.minimum(rng.zipf(1.6, rows), 8)
        ts = np.sort(rng.uniform(100 * b + 1, 100 * b + 99, rows)).round(3)
        out.append(pd.DataFrame({"user": [f"u{u}" for u in users], "ts": ts, "v": rng.integers(0, 9, rows)}))
    return out


def _no_ties(frames: list[pd.DataFrame]) -> bool:
    """No event time + GAP within 10 ms of a watermark (the newest event time of the batches before): Spark's
    watermark is in milliseconds (truncated), the driver's a float in seconds."""
    marks = np.maximum.accumulate([f.ts.max() for f in frames])
    t = pd.concat(frames).ts.to_numpy() + GAP
    return bool(np.abs(t[:, None] - marks[None, :]).min() > 0.01)


def test_event_time_timeouts_emit_the_same_sessions_in_the_same_batches(spark, tmp_path):
    """Per-key event-time timeouts (``setTimeoutTimestamp(end + GAP)``) under a 0 s watermark: the same sessions
    close (in-batch gaps) and time out (keys without records whose end + GAP the watermark passed) in the same
    micro-batches. After the last file Spark runs one no-data batch (the watermark moved): the driver gets an
    empty batch for it — a ``foreachBatch`` query has no stateful operator, so Spark runs none for it."""
    frames = _session_frames()
    assert _no_ties(frames)
    _write(tmp_path / "in", frames)
    ref = run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", sessions, SESSION_OUT, SESSION_STATE,
                    mode="append", timeout="EventTimeTimeout", watermark_s=0)
    assert sorted(ref) == list(range(len(frames) + 1))  # the files, then the no-data batch
    got, d = run_driver(spark, tmp_path / "in", tmp_path / "chk-driver", session_fn(), extra_batches=1)
    # timeouts in the middle: rows emitted in a batch of files for a user without records in that batch
    timed_out = [(b, r[0]) for b in range(1, len(frames)) for r in ref[b] if r[0] not in set(frames[b].user)]
    assert len(timed_out) >= 3 and len({b for b, _ in timed_out}) >= 2, timed_out
    assert _per_batch(got) == _per_batch(ref)
    # the sessions still open: the same state on both sides (a key that timed out has none); with the emitted
    # sessions they hold every record exactly once
    open_ = driver_state(d)
    assert open_ == spark_state(spark, tmp_path / "chk-spark")
    emitted = sum(r[3] for rows in got.values() for r in rows)
    assert emitted + sum(r[3] * k for r, k in open_.items()) == sum(len(f) for f in frames)
    assert d.state.watermark_ms == int(frames[-1].ts.max() * 1e6) // 1000  # Spark's cast to a timestamp, in ms
    d.close()


def test_a_timeout_equal_to_the_watermark_has_not_passed(spark, tmp_path):
    """Spark times a key out once the watermark is *beyond* its timeout timestamp (``timeout < watermark``): a
    session ending at 20 s with GAP 30 s is still open under the watermark 50 s and closes under the next one."""
    frames = [pd.DataFrame({"user": ["x", "c", "d"], "ts": [1.0, 20.0, 50.0], "v": [1, 1, 1]}),
              pd.DataFrame({"user": ["d", "e"], "ts": [55.0, 100.0], "v": [1, 1]})]
    _write(tmp_path / "in", frames)
    ref = run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", sessions, SESSION_OUT, SESSION_STATE,
                    mode="append", timeout="EventTimeTimeout", watermark_s=0)
    assert _per_batch(ref) == {0: Counter(), 1: Counter([("x", 1.0, 1.0, 1)]),
                               2: Counter([("c", 20.0, 20.0, 1), ("d", 50.0, 55.0, 2)])}
    got, d = run_driver(spark, tmp_path / "in", tmp_path / "chk-driver", session_fn(), extra_batches=1)
    assert _per_batch(got) == _per_batch(ref)
    assert driver_state(d) == spark_state(spark, tmp_path / "chk-spark") == Counter([("e", 100.0, 100.0, 1)])
    d.close()


def test_late_records_are_dropped_as_spark_drops_them(spark, tmp_path):
    frames = [pd.DataFrame({"user": ["a", "b"], "ts": [10.0, 50.0], "v": [1, 1]}),
              pd.DataFrame({"user": ["b", "c"], "ts": [60.0, 120.0], "v": [1, 1]}),
              pd.DataFrame({"user": ["b", "d"], "ts": [45.0, 130.0], "v": [1, 1]})]
    _write(tmp_path / "in", frames)
    ref = run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", sessions, SESSION_OUT, SESSION_STATE,
                    mode="append", timeout="EventTimeTimeout", watermark_s=0)
    assert Counter([("b", 50.0, 60.0, 2)]) <= _per_batch(ref)[2]  # b@45 dropped: b timed out under 120 s
    got, d = run_driver(spark, tmp_path / "in", tmp_path / "chk-driver", session_fn(),
                        extra_batches=len(ref) - len(frames))
    d.close()
    assert _per_batch(got) == _per_batch(ref)


def short_gap_for_q(key: tuple, pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """Sessions whose timeout depends on the key: 10 s after the end for users ``q*``, ``GAP`` for the others."""
    gap = 10.0 if key[0].startswith("q") else GAP
    if state.hasTimedOut:
        start, end, n = state.get
        state.remove()
        yield pd.DataFrame([[key[0], start, end, n]], columns=["user", "start", "end", "events"])
        return
    start, end, n = state.get if state.exists else (0.0, 0.0, 0)
    for pdf in pdfs:
        for t in sorted(pdf["ts"].tolist()):
            start, end, n = (t if n == 0 else start), max(end, t), n + 1
    state.update((start, end, n))
    state.setTimeoutTimestamp(round((end + gap) * 1000))
    yield pd.DataFrame(columns=["user", "start", "end", "events"])


def test_per_key_timeout_timestamps_are_honoured(spark, tmp_path):
    frames = [pd.DataFrame({"user": ["q", "a"], "ts": [10.0, 12.0], "v": [1, 1]}),
              pd.DataFrame({"user": ["z"], "ts": [35.0], "v": [1]}),
              pd.DataFrame({"user": ["z"], "ts": [60.0], "v": [1]})]
    _write(tmp_path / "in", frames)
    ref = run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", short_gap_for_q, SESSION_OUT, SESSION_STATE,
                    mode="append", timeout="EventTimeTimeout", watermark_s=0)
    assert _per_batch(ref)[2] == Counter([("q", 10.0, 10.0, 1)])
    got, d = run_driver(spark, tmp_path / "in", tmp_path / "chk-driver", session_fn(short_gap_for_q),
                        extra_batches=len(ref) - len(frames))
    d.close()
    assert _per_batch(got) == _per_batch(ref)


# ---------------------------------------------------------------------------------------------------- schemas
def _bad(output: Callable[[str, int], pd.DataFrame], state: Callable[[int], tuple]) -> Callable:
    def func(key: tuple, pdfs: Iterator[pd.DataFrame], st: Any) -> Iterator[pd.DataFrame]:
        n = sum(len(p) for p in pdfs) + (st.get[0] if st.exists else 0)
        st.update(state(n))
        yield output(key[0], n)
    return func


def _good_out(k: str, n: int) -> pd.DataFrame:
    return pd.DataFrame({"user": [k], "n": [n], "total": [n]})


def _fails(run: Callable[[], Any]) -> str:
    """The message of the query's failure (the batch fails: a StreamingQueryException on both sides)."""
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as e:
        run()
    return str(e.value)


SCHEMA_CASES = {
    # name: (output, state, what Spark's message names, what the driver's names)
    "output without a declared column": (lambda k, n: pd.DataFrame({"user": [k], "n": [n]}), lambda n: (n, n),
                                         "RESULT_COLUMN_SCHEMA_MISMATCH", "total"),
    "output with an extra column": (lambda k, n: _good_out(k, n).assign(extra=1), lambda n: (n, n),
                                    "RESULT_COLUMN_SCHEMA_MISMATCH", "extra"),
    "state tuple too long": (_good_out, lambda n: (n, n, n), "STRUCT_ARRAY_LENGTH_MISMATCH", "3 values"),
}


@pytest.mark.parametrize("case", list(SCHEMA_CASES))
def test_output_or_state_not_matching_the_declared_schema_fails_the_batch_on_both_sides(spark, tmp_path, case):
    output, state, spark_says, driver_says = SCHEMA_CASES[case]
    func = _bad(output, state)
    _write(tmp_path / "in", [pd.DataFrame({"user": ["a", "b", "a"], "ts": [1.0, 2.0, 3.0], "v": [1, 2, 3]})])
    msg = _fails(lambda: run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", func, COUNT_OUT, COUNT_STATE))
    assert spark_says in msg
    msg = _fails(lambda: run_driver(spark, tmp_path / "in", tmp_path / "chk-driver",
                                    GroupStateFunction(func, COUNT_OUT, COUNT_STATE)))
    assert driver_says in msg and "schema" in msg


def test_an_output_value_of_the_wrong_type_fails_the_batch_on_both_sides(spark, tmp_path):
    func = _bad(lambda k, n: pd.DataFrame({"user": [k], "n": ["x"], "total": [n]}), lambda n: (n, n))
    _write(tmp_path / "in", [pd.DataFrame({"user": ["a"], "ts": [1.0], "v": [1]})])
    msg = _fails(lambda: run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", func, COUNT_OUT, COUNT_STATE))
    assert "ArrowInvalid" in msg or "ArrowTypeError" in msg
    from pyspark.errors import StreamingQueryException

    got: dict[int, list[tuple]] = {}
    with contextlib.suppress(StreamingQueryException):
        got, _ = run_driver(spark, tmp_path / "in", tmp_path / "chk-driver",
                            GroupStateFunction(func, COUNT_OUT, COUNT_STATE))
    assert not got, f"the driver ran the batch and emitted {got} where Spark failed"
