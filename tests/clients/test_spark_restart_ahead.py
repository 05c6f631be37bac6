"""A restart's state is planned in a thread while the query starts (``RebalancingDriver.start``), and read ahead
in a job of its own in a new process (``DurabilityConfig.read_ahead``): what it meets is raised at the first batch,
not lost, and closing before any batch frees what it read ahead."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client.spark.config import DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402

pytestmark = pytest.mark.spark

AGGS = {"count": ("count", None), "total": ("sum", "v")}


def _driver(spark, state_dir, **kw):
    """Restarts read the files (``keep_s=0``: nothing is taken over from memory)."""
    return RebalancingDriver(spark, key="key", aggregations=AGGS, key_groups=8, partitions=2,
                             durability=DurabilityConfig(state_dir=str(state_dir), **{"keep_s": 0, **kw}))


def _frame(spark, seed):
    rng = np.random.default_rng(seed)
    return spark.createDataFrame(pd.DataFrame({"key": [f"k{r}" for r in rng.integers(0, 40, 200)],
                                               "v": rng.integers(0, 9, 200).astype("int64")}))


def _committed(spark, state_dir, batches=2):
    d = _driver(spark, state_dir)
    for b in range(batches):
        d.process(_frame(spark, b), b)
    d.close()


def _cached_rdds(spark) -> set[int]:
    infos = spark.sparkContext._jsc.sc().getRDDStorageInfo()
    return {int(i.id()) for i in infos if i.numCachedPartitions() > 0}


def _until(check, seconds=120.0):
    end = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def test_an_error_of_the_restore_started_ahead_is_raised_at_the_first_batch_each_time(spark, tmp_path):
    _committed(spark, tmp_path / "s")
    snapshot = max((tmp_path / "s").rglob("snapshot"))  # the newest (the close's): the one a restart reads
    for f in snapshot.iterdir():  # the stored rows are gone, the commit record is not
        f.unlink()
    snapshot.rmdir()
    d = _driver(spark, tmp_path / "s")
    d.start()                     # the record is read and checked here; the rows in the background
    for _ in range(2):            # not swallowed by the thread, and not forgotten after the first time
        with pytest.raises(Exception, match="PATH_NOT_FOUND|does not exist"):
            d.process(_frame(spark, 9), 2)
    d.close()


def test_reading_ahead_by_default_only_in_a_process_that_has_run_no_batch(spark, tmp_path):
    _committed(spark, tmp_path / "s")              # this process has now run batches (its JVM compiled a query)
    assert not _driver(spark, tmp_path / "s")._reads_ahead()
    assert _driver(spark, tmp_path / "s", read_ahead=True)._reads_ahead()
    assert not _driver(spark, tmp_path / "s", read_ahead=False)._reads_ahead()
    # a new process reads ahead by default: the kill -9 restarts of tests/spark/test_spark_recovery.py do


def test_closing_before_the_first_batch_frees_the_rows_read_ahead(spark, tmp_path):
    _committed(spark, tmp_path / "s")
    before = _cached_rdds(spark)
    d = _driver(spark, tmp_path / "s", read_ahead=True)
    d.start()
    _until(lambda: _cached_rdds(spark) - before)   # the read-ahead job has placed the stored rows
    d.close()
    _until(lambda: not _cached_rdds(spark) - before)


@pytest.mark.parametrize("field", ["read_ahead", "snapshot_on_close"])
def test_a_setting_that_is_not_a_boolean_is_refused_naming_it(field):
    with pytest.raises(ValueError, match=f"{field} must be"):
        DurabilityConfig(state_dir="/tmp/x", **{field: "yes"})
