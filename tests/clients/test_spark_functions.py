"""The pandas function API: sessionisation and top-N against pandas references on the same input,
event-time and processing-time timeouts, a restart on the durable state (a replayed batch's output rewritten, not
recomputed), and a routing change in the middle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client.spark.config import DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.functions import KeyedFunction  # noqa: E402
from rebalancer_client.spark.recipes import sessions, top_n  # noqa: E402
from rebalancer_client.spark.sink import BatchIdSink  # noqa: E402

pytestmark = pytest.mark.spark

GAP = 30.0


def _clicks(batches: int = 5, rows: int = 300, users: int = 40, seed: int = 5) -> list[pd.DataFrame]:
    """Per batch, clicks of Zipf-skewed users in time order (batch b covers [100 b, 100 b + 100) seconds), gaps
    of random length so that some sessions span batches and some close inside one."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(batches):
        ranks = np.minimum(rng.zipf(1.4, rows), users)
        ts = np.sort(rng.uniform(100 * b, 100 * b + 100, rows))
        out.append(pd.DataFrame({"user": [f"u{r}" for r in ranks], "ts": ts, "v": rng.integers(0, 1000, rows)}))
    return out


def _reference_sessions(frames: list[pd.DataFrame]) -> pd.DataFrame:
    every = pd.concat(frames).sort_values(["user", "ts"], kind="stable")
    rows = []
    for user, g in every.groupby("user", sort=True):
        start = end = None
        n = 0
        for t in g.ts:
            if n and t - end > GAP:
                rows.append((user, start, end, n))
                n = 0
            if n == 0:
                start = t
            end = t
            n += 1
        rows.append((user, start, end, n))
    return pd.DataFrame(rows, columns=["user", "start", "end", "events"])


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["user", "start"]).reset_index(drop=True)


def _driver(spark, tmp_path, function, **kw):
    return RebalancingDriver(spark, key="user", function=function, key_groups=12, partitions=3,
                             durability=DurabilityConfig(state_dir=str(tmp_path / "state")), **kw)


def _emitted(spark, out) -> pd.DataFrame:
    return spark.read.parquet(str(out)).toPandas()


def test_sessions_equal_a_pandas_reference_and_expire_under_the_watermark(spark, tmp_path):
    frames = _clicks()
    out = tmp_path / "out"
    d = _driver(spark, tmp_path, sessions("user", "ts", GAP), output=BatchIdSink(str(out)))
    for b, f in enumerate(frames):
        d.process(spark.createDataFrame(f), b)
    ref = _reference_sessions(frames)
    closed = _emitted(spark, out).drop(columns=["batch_id"])
    open_ = d.state_frame().toPandas()
    assert open_.user.is_unique  # one open session per user
    got = _sorted(pd.concat([closed, open_], ignore_index=True))
    exp = _sorted(ref)
    assert len(got) == len(exp)
    assert got.user.tolist() == exp.user.tolist() and got.events.tolist() == exp.events.tolist()
    assert np.allclose(got[["start", "end"]].to_numpy(float), exp[["start", "end"]].to_numpy(float))

    # time moves on for one user only: the watermark (newest event time of the batches before) passes every other
    # open session's end + gap — those under the old watermark in the next batch, the rest in the one after
    # (the jump to t=10,000 counts from the batch after it) — each emitted once and its state removed
    late = len(frames)
    d.process(spark.createDataFrame(pd.DataFrame({"user": ["u1"], "ts": [10_000.0], "v": [1]})), late)
    wm = d.state.watermark
    d.process(spark.createDataFrame(pd.DataFrame({"user": ["u1"], "ts": [10_001.0], "v": [1]})), late + 1)
    state_after = d.state_frame().toPandas()
    assert state_after.user.tolist() == ["u1"] and wm == 10_000.0
    emitted = _emitted(spark, out)
    expired = emitted[emitted.batch_id.isin([late, late + 1]) & (emitted.user != "u1")]
    first_wave = emitted[(emitted.batch_id == late) & (emitted.user != "u1")]
    assert (first_wave.end + GAP <= frames[-1].ts.max()).all()  # expired under the watermark of batches < late
    expired = expired.drop(columns=["batch_id"])
    exp_open = _sorted(open_[open_.user != "u1"])
    assert _sorted(expired).user.tolist() == exp_open.user.tolist()
    assert _sorted(expired).events.tolist() == exp_open.events.tolist()
    d.close()


def test_top_n_equals_pandas_and_survives_a_restart_with_a_replay(spark, tmp_path):
    frames = _clicks(batches=4, seed=9)
    out = tmp_path / "out"
    fn = top_n("user", "v", 3, value_type="long")
    d1 = _driver(spark, tmp_path, fn, output=BatchIdSink(str(out)))
    for b in range(3):
        d1.process(spark.createDataFrame(frames[b]), b)
    first = _emitted(spark, out)
    d1.close()

    d2 = _driver(spark, tmp_path, fn, output=BatchIdSink(str(out)))  # the restarted driver
    r = d2.process(spark.createDataFrame(frames[2]), 2)            # Spark replays the uncommitted batch
    assert r.replayed
    again = _emitted(spark, out)
    cols = ["user", "rank", "value"]
    assert (again[again.batch_id == 2][cols].sort_values(cols).to_numpy()
            == first[first.batch_id == 2][cols].sort_values(cols).to_numpy()).all()  # rewritten, not recomputed
    d2.process(spark.createDataFrame(frames[3]), 3)
    every = pd.concat(frames)
    exp = (every.sort_values("v", ascending=False, kind="stable").groupby("user").head(3)
           .groupby("user")["v"].apply(lambda s: sorted(s.tolist(), reverse=True)).to_dict())
    got = d2.state_frame().toPandas().groupby("user")["value"].apply(lambda s: sorted(s.tolist(), reverse=True))
    assert got.to_dict() == exp
    d2.close()


def test_processing_time_timeout_and_a_routing_change_keep_every_key(spark, tmp_path):
    """A key untouched for longer than the timeout (the driver's clock) is expired with empty rows; a routing
    change between batches moves the state of the moved key groups only, and nothing is lost."""
    calls: list[tuple[str, int]] = []

    def count(key, rows, state):
        n = (0 if state is None else int(state["n"].iloc[0])) + len(rows)
        calls.append((key, len(rows)))
        if len(rows) == 0:
            return pd.DataFrame({"user": [key], "n": [n]}), None
        return None, pd.DataFrame({"n": [n]})

    f = KeyedFunction(count, output_schema="user string, n long", state_schema="n long", timeout_s=3600)
    d = _driver(spark, tmp_path, f)
    frames = _clicks(batches=2, seed=2)
    d.process(spark.createDataFrame(frames[0]), 0)
    moved = d.routing.partition_of.copy()
    moved[:4] = (moved[:4] + 1) % 3
    d.place(moved, epoch=1)  # a placement applied at the next boundary
    d.process(spark.createDataFrame(frames[1]), 1)
    every = pd.concat(frames)
    got = d.state_frame().toPandas().set_index("user")["n"].sort_index()
    assert got.to_dict() == every.groupby("user").size().sort_index().to_dict()
    # every state row sits on the partition the (new) routing gives its key group: the co-group kept the placement
    # (3 partitions here while spark.sql.shuffle.partitions is 4)
    from pyspark.sql import functions as F

    from rebalancer_client.spark.routing import KG_COL

    placed = d.state.df.select(KG_COL, F.spark_partition_id().alias("p")).collect()
    assert placed and all(d.routing.partition_of[r[KG_COL]] == r["p"] for r in placed)
    assert d.state.df.rdd.getNumPartitions() == 3
    assert not [c for c in calls if c[1] == 0]  # nothing timed out within the hour
    f.timeout_s = 1e-9  # every key not in the next batch times out now
    d.process(spark.createDataFrame(frames[0][frames[0].user == "u1"]), 2)
    assert d.state_frame().toPandas().user.tolist() == ["u1"]
    d.close()


def test_stored_output_rows_of_both_formats_are_read(spark, tmp_path):
    """A version's output is one JSON array per key (this format) or one JSON object per output row (stores written
    by the first release of the function API): a replay reads both, row for row."""
    from rebalancer_client.spark.functions import DATA_COL, KIND_COL, OUTPUT

    driver = RebalancingDriver(spark, key="user", function=top_n("user", "v", 2), key_groups=12, partitions=3)
    rows = [("a", OUTPUT, '[{"user":"a","rank":1,"value":9.5},{"user":"a","rank":2,"value":3.0}]'),
            ("b", OUTPUT, '{"user":"b","rank":1,"value":7.25}'),
            ("c", "s", '[{"value":1.0}]')]
    df = spark.createDataFrame(rows, f"user string, {KIND_COL} string, {DATA_COL} string")
    got = sorted(tuple(r) for r in driver.state.output_frame(df).collect())
    assert got == [("a", 1, 9.5), ("a", 2, 3.0), ("b", 1, 7.25)]


def test_a_key_group_with_state_and_no_rows_in_the_batch_passes_its_state_on_without_a_warning():
    """The per-route function of a batch (what each co-group task runs): a key group with state but no records in
    the batch gets its state rows back, unchanged and unmarked, and pandas warns about nothing (an empty frame in
    a concatenation printed a FutureWarning in every batch)."""
    import warnings

    from rebalancer_client.spark.functions import ACT_COL, DATA_COL, KIND_COL, STATE, _make_apply
    from rebalancer_client.spark.routing import B_COL, KG_COL, ROUTE_COL, TOUCHED_COL

    f = KeyedFunction(lambda k, rows, st: (None, st), output_schema="user string, n long", state_schema="n long",
                      timeout_s=3600)
    apply = _make_apply(f, ["user"], ["user", "ts", "v"], ["n"], 1000.0, None, ["user", "n"])
    batch = pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                          [(ROUTE_COL, "int32"), (KG_COL, "int32"), ("user", object), ("ts", float), ("v", "int64"),
                           (B_COL, "int64")]})
    state = pd.DataFrame({ROUTE_COL: [5, 5], KG_COL: [5, 5], "user": ["a", "b"], KIND_COL: [STATE, STATE],
                          DATA_COL: ['[{"n":1}]', '[{"n":2}]'], ACT_COL: [999.0, 998.0], TOUCHED_COL: [True, False]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = apply(batch, state)
    assert out.user.tolist() == ["a", "b"] and out[DATA_COL].tolist() == state[DATA_COL].tolist()
    assert not out[TOUCHED_COL].any()
