"""Local recovery: a clean close keeps the committed state in executor memory, and the next driver of the process on
the same state directory takes it over instead of reading the files (``DurabilityConfig.keep_s``,
:mod:`rebalancer_client.spark.handover`) — only for the version the store names, under the same routing, and with
the files as the fallback when the blocks are gone."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client.spark import handover  # noqa: E402
from rebalancer_client.spark.config import DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.placement import release_checkpoint  # noqa: E402

pytestmark = pytest.mark.spark

AGGS = {"count": ("count", None), "total": ("sum", "v")}


@pytest.fixture(autouse=True)
def _nothing_kept():
    handover.clear()
    yield
    handover.clear()


def _driver(spark, state_dir, partitions=2, **kw):
    return RebalancingDriver(spark, key="key", aggregations=AGGS, key_groups=8, partitions=partitions,
                             durability=DurabilityConfig(state_dir=str(state_dir), **kw))


def _frame(seed) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"key": [f"k{r}" for r in rng.integers(0, 40, 200)],
                         "v": rng.integers(0, 9, 200).astype("int64")})


def _expected(batches) -> dict[str, tuple[int, int]]:
    every = pd.concat([_frame(b) for b in batches])
    g = every.groupby("key")["v"].agg(["count", "sum"])
    return {k: (int(r["count"]), int(r["sum"])) for k, r in g.iterrows()}


def _state(d) -> dict[str, tuple[int, int]]:
    return {r["key"]: (int(r["count"]), int(r["total"])) for r in d.state_frame().collect()}


def _committed(spark, state_dir, batches=2, **kw):
    d = _driver(spark, state_dir, **kw)
    for b in range(batches):
        d.process(spark.createDataFrame(_frame(b)), b)
    d.close()


def _drop_stored_rows(state_dir):
    """The stored rows of every version are gone; the commit records are not."""
    for data in [p for p in state_dir.iterdir() if p.name.startswith("v")]:
        shutil.rmtree(data)


def _restart(spark, state_dir, batch, **kw):
    d = _driver(spark, state_dir, **kw)
    d.start()
    report = d.process(spark.createDataFrame(_frame(batch)), batch)
    return d, report


def test_a_restart_in_the_same_process_takes_over_the_state_the_closed_driver_kept(spark, tmp_path):
    _committed(spark, tmp_path / "s")
    _drop_stored_rows(tmp_path / "s")   # a restart that read the files would fail
    d, _ = _restart(spark, tmp_path / "s", 2)
    assert _state(d) == _expected(range(3))
    d.close()
    # and the next one takes over what this one kept, the version it committed
    d, _ = _restart(spark, tmp_path / "s", 3)
    assert _state(d) == _expected(range(4))
    d.close()


def test_a_function_taken_over_without_start_keeps_its_watermark(spark, tmp_path):
    """The function API's state besides its rows (the watermark) comes from the commit record also when the rows
    are taken over, and without ``start()`` (the first batch recovers): a session the watermark has passed times out
    in the first batch."""
    from rebalancer_client.spark.recipes import sessions

    def driver():
        return RebalancingDriver(spark, key="key", function=sessions("key", "ts", 10.0), key_groups=8, partitions=2,
                                 durability=DurabilityConfig(state_dir=str(tmp_path / "s")))

    def batch(key, ts):
        return spark.createDataFrame(pd.DataFrame({"key": [key], "ts": [ts]}))

    d = driver()
    d.process(batch("a", 0.0), 0)
    d.process(batch("b", 50.0), 1)   # the next batch runs under the watermark 50: a's session (0 + 10 s) is over
    d.close()
    d = driver()
    d.process(batch("c", 60.0), 2)
    assert d.in_memory == 2
    assert sorted(r["key"] for r in d.state_frame().collect()) == ["b", "c"]
    d.close()


def test_a_state_ahead_of_the_store_is_not_kept(spark, tmp_path):
    """A batch that failed before its commit leaves its rows in the state in memory: kept and taken over, they would
    count twice when Spark runs the batch again."""
    def fail(point, version):
        if point == "data-written" and version == 2:
            raise OSError("the disk is gone")

    d = _driver(spark, tmp_path / "s", on_event=fail)
    for b in range(2):
        d.process(spark.createDataFrame(_frame(b)), b)
    with pytest.raises(OSError, match="the disk is gone"):
        d.process(spark.createDataFrame(_frame(2)), 2)
    d.close()
    d, _ = _restart(spark, tmp_path / "s", 2)   # Spark runs the batch again
    assert _state(d) == _expected(range(3))
    d.close()


def test_with_keep_s_0_the_close_frees_the_state_and_a_restart_reads_the_files(spark, tmp_path):
    _committed(spark, tmp_path / "s", keep_s=0)
    _drop_stored_rows(tmp_path / "s")
    d = _driver(spark, tmp_path / "s")
    d.start()
    with pytest.raises(Exception, match="PATH_NOT_FOUND|does not exist"):
        d.process(spark.createDataFrame(_frame(2)), 2)
    d.close()


def test_the_kept_state_is_not_taken_under_another_routing(spark, tmp_path):
    _committed(spark, tmp_path / "s")
    d, _ = _restart(spark, tmp_path / "s", 2, partitions=3)   # another partition count: the files are read
    assert _state(d) == _expected(range(3))
    assert d.state.n_partitions == 3
    where = d.state.df.rdd.mapPartitionsWithIndex(lambda i, rows: [(i, r["_rb_kg"]) for r in rows]).collect()
    assert {p for p, _ in where} == {0, 1, 2}
    assert all(p == d.routing.partition_of[kg] for p, kg in where)   # placed under the new routing
    d.close()


def test_lost_blocks_of_the_kept_state_are_read_again_from_the_files(spark, tmp_path):
    _committed(spark, tmp_path / "s")
    release_checkpoint(handover._kept[str(tmp_path / "s")].df)   # an executor lost them
    d, report = _restart(spark, tmp_path / "s", 2)
    assert report.recovered
    assert _state(d) == _expected(range(3))
    d.close()


def _checkpoint(spark):
    return spark.createDataFrame(_frame(0)).localCheckpoint(eager=True)


def _cached(spark, df) -> bool:
    rdd = df._jdf.queryExecution().analyzed().rdd().id()
    return any(int(i.id()) == rdd and i.numCachedPartitions() > 0
               for i in spark.sparkContext._jsc.sc().getRDDStorageInfo())


def test_a_kept_state_is_taken_once_by_its_version_and_what_it_must_match_else_freed(spark):
    sc = spark.sparkContext
    df = _checkpoint(spark)
    handover.keep("/r", 3, ("a",), df, 60)
    assert handover.take("/r", 3, ("a",), sc) is df
    assert handover.take("/r", 3, ("a",), sc) is None            # taken once
    for version, what, context in ((4, ("a",), sc), (3, ("b",), sc), (3, ("a",), object())):
        df = _checkpoint(spark)
        handover.keep("/r", 3, ("a",), df, 60)
        assert handover.take("/r", version, what, context) is None
        assert not _cached(spark, df)                            # and its blocks are freed


def test_a_kept_state_is_freed_when_its_time_runs_out_or_another_replaces_it(spark):
    first, second = _checkpoint(spark), _checkpoint(spark)
    handover.keep("/r", 1, (), first, 60)
    handover.keep("/r", 2, (), second, 0.2)
    assert not _cached(spark, first)
    end = time.monotonic() + 60
    while _cached(spark, second):
        assert time.monotonic() < end, "the kept state was not freed"
        time.sleep(0.1)
    assert handover.take("/r", 2, (), spark.sparkContext) is None


@pytest.mark.parametrize("value", [-1, "60", True, float("nan"), float("inf")])
def test_a_keep_s_that_is_not_a_number_of_seconds_is_refused(value):
    with pytest.raises(ValueError, match="keep_s must be"):
        DurabilityConfig(state_dir="/tmp/x", keep_s=value)
