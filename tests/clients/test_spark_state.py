"""Durable, versioned state: commit, restart, replay, lost blocks, exactly-once output, retention."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client.spark.config import DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver, StateMismatchError  # noqa: E402
from rebalancer_client.spark.placement import release_checkpoint  # noqa: E402
from rebalancer_client.spark.sink import BatchIdSink  # noqa: E402
from rebalancer_client.spark.store import StateStore  # noqa: E402

pytestmark = pytest.mark.spark

AGGS = {"count": ("count", None), "total": ("sum", "v"), "top": ("max", "v")}


def _batches(n=4, rows=500, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ranks = np.minimum(rng.zipf(1.3, rows), 150)
        out.append(pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 50, rows).astype("int64")}))
    return out


def _expected(frames):
    every = pd.concat(frames)
    e = every.groupby("key")["v"].agg(["size", "sum", "max"])
    e.columns = ["count", "total", "top"]
    return e.sort_index()


def _state(driver):
    got = driver.state_frame().toPandas().set_index("key").sort_index()
    assert got.index.is_unique
    return got[["count", "total", "top"]]


def _driver(spark, state_dir, output=None, **kw):
    """A durable driver whose restarts read the stored files (``keep_s=0``: a close frees the state, which a restart in
    this process would otherwise take over from memory — tests/clients/test_spark_handover.py)."""
    return RebalancingDriver(spark, key="key", aggregations=AGGS, key_groups=12, partitions=3, output=output,
                             durability=DurabilityConfig(state_dir=str(state_dir), **{"keep_s": 0, **kw}))


def _eq(got, exp):
    assert got.index.tolist() == exp.index.tolist()
    assert (got.to_numpy() == exp.to_numpy()).all()


def test_restart_loads_the_last_version_and_a_replayed_batch_is_not_applied_twice(spark, tmp_path):
    frames = _batches()
    out = tmp_path / "out"
    d1 = _driver(spark, tmp_path / "state", snapshot_every=2, output=BatchIdSink(str(out)))
    for b in range(3):
        r = d1.process(spark.createDataFrame(frames[b]), b)
        assert r.state_version == b and r.written_bytes > 0
    _eq(_state(d1), _expected(frames[:3]))
    d1.close()

    # a new driver (the restarted process) on the same directory; Spark replays batch 2, then runs batch 3
    d2 = _driver(spark, tmp_path / "state", snapshot_every=2, output=BatchIdSink(str(out)))
    r2 = d2.process(spark.createDataFrame(frames[2]), 2)
    assert r2.replayed and r2.controller == "replayed"
    _eq(_state(d2), _expected(frames[:3]))          # not counted twice
    r3 = d2.process(spark.createDataFrame(frames[3]), 3)
    assert not r3.replayed and r3.state_version == 3
    _eq(_state(d2), _expected(frames))

    # the output: one directory per batch with the rows each batch changed, exactly once (batch 2 rewritten)
    written = spark.read.parquet(str(out)).toPandas()
    assert sorted(os.listdir(out)) == [f"batch_id={b}" for b in range(4)]    # nothing left in _tmp
    for b in range(4):
        mine = written[written.batch_id == b].set_index("key").sort_index()
        exp = _expected(frames[:b + 1])
        exp = exp[exp.index.isin(frames[b].key)]
        _eq(mine[["count", "total", "top"]], exp)
    d2.close()


def test_a_fresh_driver_on_committed_state_equals_a_direct_count(spark, tmp_path):
    frames = _batches(n=5, seed=4)
    d = _driver(spark, tmp_path / "s", snapshot_every=2, retain_versions=2)
    for b, f in enumerate(frames):
        d.process(spark.createDataFrame(f), b)
    d.close()
    store = StateStore(spark, str(tmp_path / "s"), snapshot_every=2, retain_versions=2)
    rec = store.latest()
    assert rec.version == 4 and rec.kind == "snapshot"
    assert store.versions() == [3, 4] or store.versions()[0] >= 2   # retention removed the old versions
    assert not (tmp_path / "s" / "v00000000000000000000").exists()
    df, _ = store.load()
    got = df.toPandas().set_index("key").sort_index()[["count", "total", "top"]]
    _eq(got, _expected(frames))
    record = json.loads((tmp_path / "s" / "_commits" / f"{4:020d}.json").read_text())
    assert record["epoch"] == 0 and len(record["partition_of"]) == 12 and record["delta_rows"] > 0


def test_lost_state_blocks_are_rebuilt_from_the_last_committed_version(spark, tmp_path):
    frames = _batches(seed=5)
    d = _driver(spark, tmp_path / "s")
    d.process(spark.createDataFrame(frames[0]), 0)
    d.process(spark.createDataFrame(frames[1]), 1)
    release_checkpoint(d.state.df)                  # the executor holding the cached state is gone
    r = d.process(spark.createDataFrame(frames[2]), 2)
    assert r.recovered
    _eq(_state(d), _expected(frames[:3]))
    d.close()


def test_lost_blocks_without_a_state_directory_fail_loudly(spark):
    frames = _batches(seed=6)
    d = RebalancingDriver(spark, key="key", aggregations=AGGS, key_groups=12, partitions=3)
    d.process(spark.createDataFrame(frames[0]), 0)
    release_checkpoint(d.state.df)
    with pytest.raises(Exception, match="Checkpoint block"):
        d.process(spark.createDataFrame(frames[1]), 1)
    d.close()


def test_a_batch_after_a_gap_in_the_versions_is_refused(spark, tmp_path):
    frames = _batches(seed=7)
    d = _driver(spark, tmp_path / "s")
    with pytest.raises(StateMismatchError, match="batches 0..2 is missing"):
        d.process(spark.createDataFrame(frames[0]), 3)


def test_a_wrong_key_column_names_the_users_column(spark, tmp_path):
    d = RebalancingDriver(spark, key="user", key_groups=12, partitions=3)
    df = spark.createDataFrame(_batches(n=1)[0])
    with pytest.raises(ValueError, match="key column 'user' is not in the stream"):
        d.process(df, 0)
    d2 = RebalancingDriver(spark, key="key", aggregations={"s": ("sum", "amount")}, key_groups=12, partitions=3)
    with pytest.raises(ValueError, match="input column 'amount'"):
        d2.process(df, 0)


def test_state_bytes_tracked_from_the_batches_equal_a_measurement_of_the_whole_state(spark, tmp_path):
    """Mergeable aggregations keep the state bytes per key group from each batch's changes (no job of their own):
    after new keys, updated keys whose values grow from null, a routing change and a restart they must equal
    an aggregation over the whole state."""
    frames = _batches(n=6, seed=8)

    def with_nulls(f):  # nulls count 0 bytes: the rows of keys seen only with nulls grow later
        return spark.createDataFrame([(k, None if i % 3 == 0 else int(v)) for i, (k, v) in
                                      enumerate(zip(f.key, f.v, strict=True))], "key string, v long")

    d = _driver(spark, tmp_path / "s")
    for b in range(3):
        d.process(with_nulls(frames[b]) if b == 0 else spark.createDataFrame(frames[b]), b)
        assert d.state_bytes.at is not None and d.state_bytes.at[0] == b
        assert (d.state_bytes.at[1] == d.state.state_bytes_per_key_group()).all()
    # a routing change at the next boundary: bytes move with their key groups, the count per key group stays
    moved = d.routing.partition_of.copy()
    moved[:4] = (moved[:4] + 1) % 3
    d.place(moved, epoch=1)
    r = d.process(spark.createDataFrame(frames[3]), 3)
    assert r.migrations == 4
    tracked = d.state_bytes.at[1].copy()
    assert (tracked == d.state.state_bytes_per_key_group()).all() and tracked.sum() > 0
    assert r.state_bytes == tracked.sum()
    d.close()
    d2 = _driver(spark, tmp_path / "s")             # a restart: measured once, then tracked again
    for b in (4, 5):
        d2.process(spark.createDataFrame(frames[b]), b)
        assert (d2.state_bytes.at[1] == d2.state.state_bytes_per_key_group()).all()
    d2.close()


def test_a_store_of_the_first_release_whose_rows_carry_their_version_is_loaded_and_continued(spark, tmp_path):
    """The first release wrote ``_rb_v`` (the version that last changed a row) into every file and listed it in the
    commit records; files are now version-free (a row's version is its directory's). A store in the old format is
    rebuilt here from a new one — each row gets the version the first release gave it — and must load and go on
    exactly: a snapshot row's own (older) version is replaced by the snapshot's, which keeps the newest row per key
    only if the loader compares deltas against the snapshot's version (a wrong replacement double-counts)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    frames = _batches(n=5, seed=12)
    root = tmp_path / "s"
    d = _driver(spark, root, snapshot_every=2, snapshot_on_close=False)
    for b in range(4):                                  # v0 snapshot, v1 delta, v2 snapshot, v3 delta
        d.process(spark.createDataFrame(frames[b]), b)
    d.close()
    last_change = {}                                    # key -> the batch that last changed it (the old _rb_v)
    for b in range(4):
        for k in frames[b].key:
            last_change[k] = b
    older = 0                                           # snapshot rows older than their snapshot
    for v in range(4):
        vdir = root / f"v{v:020d}"
        for part in ("delta", "snapshot"):
            if not (vdir / part).exists():
                continue
            table = pq.read_table(vdir / part)
            versions = [last_change[k] if part == "snapshot" else v for k in table.column("key").to_pylist()]
            older += sum(1 for x in versions if x < v)
            for f in [*(vdir / part).glob("*.parquet"), *(vdir / part).glob(".*.crc")]:
                f.unlink()                              # (Hadoop's checksums of the files replaced)
            pq.write_table(table.append_column("_rb_v", pa.array(versions, pa.int64())), vdir / part / "p.parquet")
        record = root / "_commits" / f"{v:020d}.json"
        doc = json.loads(record.read_text())
        doc["columns"] = [*doc["columns"], "_rb_v"]
        doc.pop("schema")                               # (the first release kept no schema: it is inferred)
        record.write_text(json.dumps(doc))
        (record.parent / f".{record.name}.crc").unlink(missing_ok=True)
    assert older > 0

    d2 = _driver(spark, root, snapshot_every=2)
    assert d2.process(spark.createDataFrame(frames[3]), 3).replayed
    _eq(_state(d2), _expected(frames[:4]))
    d2.process(spark.createDataFrame(frames[4]), 4)
    _eq(_state(d2), _expected(frames))
    d2.close()


def test_a_batch_plan_is_compiled_once_per_query_not_once_per_batch(spark, tmp_path):
    """No batch-specific literal (a batch id) may reach a batch's plan: Spark inlines such literals into the
    generated code, so every batch compiled its code anew (~6 Janino compilations, 0.1-0.4 s per batch). After the
    first batches (no state yet; the first merge) the same plans must hit Spark's code cache."""
    frames = _batches(n=6, seed=13)
    metric = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    d = _driver(spark, tmp_path / "s")
    compiled = []
    for b, f in enumerate(frames):
        df = spark.createDataFrame(f)
        before = metric.getCount()
        d.process(df, b)
        compiled.append(metric.getCount() - before)
    d.close()
    before = metric.getCount()                  # the metric counts: a literal never seen compiles new code
    spark.range(3).selectExpr(f"id * {int.from_bytes(os.urandom(4), 'big')} as x").collect()
    assert metric.getCount() > before
    assert compiled[3:] == [0, 0, 0], compiled



def test_a_restart_reads_with_the_stored_schema_and_its_first_batch_is_the_only_job(spark, tmp_path):
    """A commit record keeps the stored columns' schema: a restart plans the stored state without a job in the
    caller's thread (no schema inference, one per directory read), and the first batch after it reads, places
    and merges the state in its one job (a process whose drivers have run a batch does not read ahead). A record
    without a schema (an earlier release) is still read."""
    from pyspark.sql.types import StructType

    frames = _batches(n=5, seed=14)
    d = _driver(spark, tmp_path / "s", snapshot_on_close=False)  # (a clean close would write v2 whole)
    for b in range(3):                                  # v0 snapshot, deltas v1 and v2
        d.process(spark.createDataFrame(frames[b]), b)
    d.close()
    record = json.loads((tmp_path / "s" / "_commits" / f"{2:020d}.json").read_text())
    assert StructType.fromJson(json.loads(record["schema"])).names == record["columns"]
    sc = spark.sparkContext
    batch = spark.createDataFrame(frames[3])
    sc.setJobGroup("restart", "a restart and its first batch")
    try:
        d2 = _driver(spark, tmp_path / "s", snapshot_on_close=False)
        d2.start()
        assert list(sc.statusTracker().getJobIdsForGroup("restart")) == []
        d2.process(batch, 3)
        assert len(sc.statusTracker().getJobIdsForGroup("restart")) == 1
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    _eq(_state(d2), _expected(frames[:4]))
    d2.close()
    for v in range(4):                                  # the same store without schemas: inferred, same state
        path = tmp_path / "s" / "_commits" / f"{v:020d}.json"
        doc = json.loads(path.read_text())
        doc.pop("schema")
        path.write_text(json.dumps(doc))
        (path.parent / f".{path.name}.crc").unlink(missing_ok=True)
    d3 = _driver(spark, tmp_path / "s")
    d3.process(spark.createDataFrame(frames[4]), 4)
    _eq(_state(d3), _expected(frames))
    d3.close()


def test_a_restarts_first_batch_merges_every_stored_version_in_the_aggregation_of_every_batch(spark, tmp_path):
    """The first batch after a restart merges the stored rows of every version (a snapshot and its deltas, read
    and placed by the batch's job) in the merge's own aggregation — no aggregation of their own keeps the
    newest row per key first (a ``max_by`` of a struct sorted the whole stored state) — and that merge has the plan
    and code of every batch: the restart compiles the code that reads and places the stored rows, nothing else (a
    plan of its own compiled 11 classes)."""
    frames = _batches(n=6, seed=15)
    d = _driver(spark, tmp_path / "s", snapshot_on_close=False)  # (a clean close would write v4 whole)
    for b in range(5):                                  # v0 snapshot, deltas v1..v4: several versions per key
        d.process(spark.createDataFrame(frames[b]), b)
    d.close()
    metric = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    batch = spark.createDataFrame(frames[5])
    batch.count()                                       # (the batch's own scan code, not the restart's)
    d2 = _driver(spark, tmp_path / "s")
    plans = []
    replace, replace_placed = d2.state._replace, d2.state._replace_placed

    def planned(new_df, **kw):
        if kw.get("checkpoint", True):                  # (a lazy restore is not checkpointed; a merge's checkpoint is
            plans.append(new_df._jdf.queryExecution().executedPlan().toString())  # made by _replace_placed)
        replace(new_df, **kw)

    def merged(new_df, fallback, **kw):
        plans.append(new_df._jdf.queryExecution().executedPlan().toString())
        return replace_placed(new_df, fallback, **kw)

    d2.state._replace, d2.state._replace_placed = planned, merged
    before = metric.getCount()
    d2.start()
    d2.process(batch, 5)
    compiled = metric.getCount() - before
    assert len(plans) == 1                              # the merge's: no restored state of its own
    merge = plans[0]
    assert merge.count("HashAggregate(") == 2, merge    # the batch's partial aggregation and the merge
    assert "SortAggregate" not in merge and "ObjectHashAggregate" not in merge
    # the stored read (driver-side check, task; its shuffle) and its placement: 5 in a JVM that has run nothing else,
    # fewer after other tests compiled some of it (the count falls with what the JVM has cached, never rises)
    assert compiled <= 5, compiled
    _eq(_state(d2), _expected(frames))
    d2.close()


def test_values_that_do_not_combine_in_their_type_and_nulls_merge_exactly_across_restarts(spark, tmp_path):
    """Maxima of strings (no hash aggregation: the classic merge) and sums of keys seen only with nulls, across
    restarts that read a snapshot and deltas: the same state as an aggregation of all batches."""
    from pyspark.sql import functions as F

    aggs = {"n": ("count", None), "total": ("sum", "v"), "last": ("max", "s"), "low": ("min", "v")}
    schema = "key string, v long, s string"
    rng = np.random.default_rng(16)
    frames = []
    for _ in range(6):
        ranks = np.minimum(rng.zipf(1.3, 300), 60)
        frames.append([(f"k{r}", None if r % 5 == 0 else int(x), f"s{x}")
                       for r, x in zip(ranks, rng.integers(0, 50, 300), strict=True)])

    def driver(aggregations):
        return RebalancingDriver(spark, key="key", aggregations=aggregations, key_groups=12, partitions=3,
                                 durability=DurabilityConfig(state_dir=str(tmp_path / str(len(aggregations))),
                                                             snapshot_every=3, keep_s=0))

    every = spark.createDataFrame([r for f in frames for r in f], schema)
    for kept in (["n", "total", "low"], list(aggs)):   # every value combines in its type; a string maximum too
        chosen = {k: aggs[k] for k in kept}
        for run in ((0, 1, 2, 3), (4,), (5,)):          # restarts after a snapshot's delta, then after a delta
            d = driver(chosen)
            for b in run:
                d.process(spark.createDataFrame(frames[b], schema), b)
            assert d.state._versioned == ("last" not in kept)
            got = d.state_frame().toPandas().set_index("key").sort_index()
            d.close()
        exp = every.groupBy("key").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("total"),
                                       F.max("s").alias("last"), F.min("v").alias("low"))
        exp = exp.toPandas().set_index("key").sort_index()
        assert got.index.tolist() == exp.index.tolist()
        for c in kept:
            assert [None if pd.isna(x) else x for x in got[c]] == [None if pd.isna(x) else x for x in exp[c]], c


def test_a_decimal_sum_keeps_its_type_across_batches_and_restarts(spark, tmp_path):
    """A sum of decimals has the type of Spark's ``groupBy().sum()`` in every batch (merged as is, it widened by 10
    digits a batch, and a restart failed reading files of different types); the state equals that aggregation."""
    from decimal import Decimal

    from pyspark.sql import functions as F

    schema = "key string, v decimal(10,2)"
    rng = np.random.default_rng(17)
    frames = [[(f"k{r}", Decimal(int(x)) / 100) for r, x in zip(np.minimum(rng.zipf(1.3, 200), 40),
                                                              rng.integers(0, 10_000, 200), strict=True)]
              for _ in range(5)]
    for run in ((0, 1, 2), (3,), (4,)):
        d = RebalancingDriver(spark, key="key", aggregations={"total": ("sum", "v")}, key_groups=8, partitions=2,
                              durability=DurabilityConfig(state_dir=str(tmp_path / "st"), snapshot_every=2, keep_s=0))
        for b in run:
            d.process(spark.createDataFrame(frames[b], schema), b)
        frame = d.state_frame()
        assert frame is not None and dict(frame.dtypes)["total"] == "decimal(20,2)"
        got = frame.toPandas().set_index("key").sort_index()
        d.close()
    exp = (spark.createDataFrame([r for f in frames for r in f], schema).groupBy("key").agg(F.sum("v").alias("total"))
           .toPandas().set_index("key").sort_index())
    assert got.index.tolist() == exp.index.tolist() and got["total"].tolist() == exp["total"].tolist()
