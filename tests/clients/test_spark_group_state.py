"""Spark-style functions (:class:`rebalancer_client.spark.group_state.GroupStateFunction`) under the driver: the same
function, written against Spark's ``applyInPandasWithState`` interface, runs under Spark and under the driver on the
same files and gives the same rows per batch and the same final state (per-key event-time timeouts, a key that
keeps its state on its timeout, a removed state whose timeout stays set, late records, the watermark it reads);
processing-time timeouts; a key's rows as frames of at most ``max_rows_per_frame`` rows; the schema checks of a
restart (a new nullable column is accepted, a changed type is refused); the example of docs/spark.md as printed.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client.spark.config import DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.functions import KeyedFunction  # noqa: E402
from rebalancer_client.spark.group_state import GroupState, GroupStateFunction  # noqa: E402
from tests.clients import test_spark_pandas_state as ps  # noqa: E402

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
OUT = "user string, start double, end double, events long, wm long, what string, frames long"
STATE = "start double, end double, events long, timeouts long"


def tracker(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """Sessions with a per-key event-time timeout (10 s after the end for ``q*``, 30 s for the others). On its
    timeout a ``k*`` key keeps its state (one more timeout counted, no timeout set again: it fires once); ``r*``
    never stores a state but sets a timeout (Spark keeps the timeout of a key without a state). Each call emits one
    row with the watermark it saw and the frames it got."""
    user = key[0]
    start, end, n, timeouts = state.getOption or (0.0, 0.0, 0, 0)
    frames = list(pdfs)
    if state.hasTimedOut:
        assert sum(len(f) for f in frames) == 0
        if user.startswith("k"):
            state.update((start, end, n, timeouts + 1))
        else:
            state.remove()
        yield pd.DataFrame([[user, start, end, n, state.getCurrentWatermarkMs(), "timeout", len(frames)]],
                           columns=OUT_COLS)
        return
    for f in frames:
        for t in sorted(f["ts"].tolist()):
            start, end, n = (t if n == 0 else start), max(end, t), n + 1
    if not user.startswith("r"):
        state.update((start, end, n, timeouts))
    state.setTimeoutTimestamp(round((end + (10.0 if user.startswith("q") else 30.0)) * 1000))
    yield pd.DataFrame([[user, start, end, n, state.getCurrentWatermarkMs(), "data", len(frames)]], columns=OUT_COLS)


OUT_COLS = [c.split()[0] for c in OUT.split(", ")]


def test_the_same_spark_function_gives_the_same_rows_and_state_under_spark_and_the_driver(spark, tmp_path):
    """Watermarks 0, 12 s, 35 s, 60 s (the last one in Spark's no-data batch, an empty batch for the driver); late
    records are those at or below the watermark of the batch before (0, 0, 12 s, 35 s). Batch 1: a@11 is not late.
    Batch 2: q@11.5 and e@5 are late and dropped, so e (timeout 32 s) times out under 35 s although a record of it
    came; q@33 is not late (its timeout moves to 43 s). k (35 s) is not timed out under 35 s (strict rule) and is
    under 60 s, where it keeps its state; r (38 s, never a state) and a (42 s) and q time out under 60 s; b (60 s)
    and z keep their sessions."""
    frames = [pd.DataFrame({"user": ["q", "a", "k", "r", "e"], "ts": [10.0, 12.0, 5.0, 8.0, 2.0], "v": 1}),
              pd.DataFrame({"user": ["z", "a"], "ts": [35.0, 11.0], "v": 1}),
              pd.DataFrame({"user": ["z", "q", "b", "q", "e"], "ts": [60.0, 33.0, 30.0, 11.5, 5.0], "v": 1})]
    ps._write(tmp_path / "in", frames)
    ref = ps.run_spark(spark, tmp_path / "in", tmp_path / "chk-spark", tracker, OUT, STATE, mode="update",
                    timeout="EventTimeTimeout", watermark_s=0)
    fn = GroupStateFunction(tracker, OUT, STATE, "update", "EventTimeTimeout", event_time="ts")
    got, d = ps.run_driver(spark, tmp_path / "in", tmp_path / "chk-driver", fn, extra_batches=len(ref) - len(frames))
    timeouts = {(b, r[0]) for b, rows in ref.items() for r in rows if r[5] == "timeout"}
    assert timeouts == {(2, "e"), (3, "q"), (3, "a"), (3, "k"), (3, "r")}, ref
    assert ("q", 10.0, 33.0, 2, 60_000, "timeout", 1) in ref[3]  # q@11.5 dropped
    assert ps._per_batch(got) == ps._per_batch(ref)
    assert ps.driver_state(d) == ps.spark_state(spark, tmp_path / "chk-spark") == Counter(
        [("k", 5.0, 5.0, 1, 1), ("z", 35.0, 60.0, 2, 0), ("b", 30.0, 30.0, 1, 0)])
    assert d.state.watermark_ms == 60_000
    d.close()


def test_processing_time_timeouts_fire_once_and_keep_the_state_unless_removed(spark):
    def func(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        n = sum(len(p) for p in pdfs)
        if not state.hasTimedOut:
            state.update(((state.get[0] if state.exists else 0) + n,))
            state.setTimeoutDuration(1 if key[0] == "a" else 3_600_000)
        yield pd.DataFrame({"user": [key[0]], "timed_out": [state.hasTimedOut],
                            "now": [state.getCurrentProcessingTimeMs()]})

    got: dict[int, list[tuple]] = {}
    d = RebalancingDriver(spark, key="user", key_groups=8, partitions=2,
                          function=GroupStateFunction(func, "user string, timed_out boolean, now long", "n long",
                                                      timeout_conf="ProcessingTimeTimeout"),
                          output=lambda df, b: got.setdefault(b, sorted(tuple(r) for r in df.collect())))
    t0 = int(time.time() * 1000)
    for b, users in enumerate([["a", "a", "c"], ["c"], ["c"]]):
        time.sleep(0.01)
        d.process(spark.createDataFrame(pd.DataFrame({"user": users, "v": range(len(users))})), b)
    assert [[(u, t) for u, t, _ in got[b]] for b in range(3)] == [
        [("a", False), ("c", False)], [("a", True), ("c", False)], [("c", False)]]
    assert t0 <= got[0][0][2] < got[1][0][2] <= int(time.time() * 1000)
    assert sorted(tuple(r) for r in d.state_frame().collect()) == [("a", 2), ("c", 3)]
    d.close()


def test_a_hot_key_comes_as_frames_of_at_most_max_rows_per_frame(spark):
    def func(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        for i, pdf in enumerate(pdfs):
            yield pd.DataFrame({"user": [key[0]], "frame": [i], "rows": [len(pdf)], "first": [int(pdf.v.iloc[0])],
                                "index0": [int(pdf.index[0])]})

    got: list[tuple] = []
    d = RebalancingDriver(spark, key="user", key_groups=8, partitions=2,
                          function=GroupStateFunction(func, "user string, frame int, rows int, first long, index0 int",
                                                      "n long", max_rows_per_frame=2),
                          output=lambda df, b: got.extend(tuple(r) for r in df.collect()))
    d.process(spark.createDataFrame(pd.DataFrame({"user": list("hhhhhc"), "v": range(6)})), 0)
    assert sorted(got) == [("c", 0, 1, 5, 0), ("h", 0, 2, 0, 0), ("h", 1, 2, 2, 0), ("h", 2, 1, 4, 0)]
    d.close()


def _counter(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    n = sum(len(p) for p in pdfs) + (state.get[0] if state.exists else 0)
    state.update((n,))
    yield pd.DataFrame({"user": [key[0]], "n": [n]})


def _counter_with_note(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """``_counter`` after a nullable ``note`` was added to its state: a key stored before reads None for it."""
    n, note = state.get if state.exists else (0, "new")
    assert note is None or note.startswith(("new", "seen"))
    n += sum(len(p) for p in pdfs)
    state.update((n, f"seen {n}"))
    yield pd.DataFrame({"user": [key[0]], "n": [n]})


def test_a_restart_accepts_a_new_nullable_state_column_and_refuses_a_changed_type(spark, tmp_path):
    dur = DurabilityConfig(state_dir=str(tmp_path / "state"))
    batch = [pd.DataFrame({"user": ["a", "a", "b"], "v": [1, 2, 3]}), pd.DataFrame({"user": ["b", "c"], "v": [4, 5]})]

    out: dict[int, list[tuple]] = {}

    def driver(state_schema: str, func: Any = _counter) -> RebalancingDriver:
        return RebalancingDriver(spark, key="user", key_groups=8, partitions=2, durability=dur,
                                 function=GroupStateFunction(func, "user string, n long", state_schema),
                                 output=lambda df, b: out.__setitem__(b, sorted(tuple(r) for r in df.collect())))

    d = driver("n long")
    d.process(spark.createDataFrame(batch[0]), 0)
    d.close()
    assert out == {0: [("a", 2), ("b", 1)]}
    d = driver("n long, note string", _counter_with_note)
    d.start()
    assert sorted(tuple(r) for r in d.state_frame().collect()) == [("a", 2, None), ("b", 1, None)]
    out.clear()
    d.process(spark.createDataFrame(batch[0]), 0)  # a replay: its output is read back from the store
    assert out == {0: [("a", 2), ("b", 1)]} and d.reports[-1].replayed
    d.process(spark.createDataFrame(batch[1]), 1)
    assert sorted(tuple(r) for r in d.state_frame().collect()) == [
        ("a", 2, None), ("b", 2, "seen 2"), ("c", 1, "seen 1")]
    d.close()
    with pytest.raises(ValueError, match=r"column 'n' of the state schema changed type: stored as bigint.*string"):
        driver("n string, note string").start()
    with pytest.raises(ValueError, match=r"no column 'note' \(string\)"):
        driver("n long").start()


def test_a_keyed_function_restart_refuses_a_changed_state_type(spark, tmp_path):
    dur = DurabilityConfig(state_dir=str(tmp_path / "state"))

    def driver(state_schema: str) -> RebalancingDriver:
        fn = KeyedFunction(lambda k, rows, st: (None, pd.DataFrame({"n": [len(rows)]})), "user string", state_schema)
        return RebalancingDriver(spark, key="user", key_groups=8, partitions=2, durability=dur, function=fn)

    d = driver("n long")
    d.process(spark.createDataFrame(pd.DataFrame({"user": ["a"], "v": [1]})), 0)
    d.close()
    with pytest.raises(ValueError, match=r"column 'n' .*stored as bigint.*declared as string"):
        driver("n string").start()
    with pytest.raises(ValueError, match=r"written by a 'json' function"):
        RebalancingDriver(spark, key="user", key_groups=8, partitions=2, durability=dur,
                          function=GroupStateFunction(_counter, "user string, n long", "n long")).start()


def test_the_example_of_the_docs_runs_as_printed(spark):
    """The Python block after ``<!-- group-state example -->`` in docs/spark.md prints the block after it."""
    page = (ROOT / "docs" / "spark.md").read_text()
    m = re.search(r"<!-- group-state example -->\n```python\n(.*?)```\n.*?```text\n(.*?)```", page, re.S)
    assert m, "docs/spark.md has no group-state example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(m.group(1), "docs/spark.md", "exec"), {"__name__": "docs_example"})  # noqa: S102
    assert out.getvalue() == m.group(2)
