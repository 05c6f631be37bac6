"""Changing a running job's parallelism, with its state placed by load: a query restarted with more partitions,
then scaled in between two batches after asking the controller what-if — the state exact against a direct count,
each first batch after a change balanced, only the key groups that change place moved; a change of the number of
key groups refused with a clear error. Real local Spark, a real controller over HTTP."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver, StateMismatchError  # noqa: E402

G = 24


def _batch(rng: np.random.Generator, rows: int = 12_000) -> pd.DataFrame:
    """Users drawn uniformly from 4,000 and one hot user with 2 % of the records: balanced to within 10 % on
    up to 6 partitions when the key groups are placed by load, not by count."""
    users = rng.integers(0, 4000, rows)
    users[rng.random(rows) < 0.02] = -1
    return pd.DataFrame({"key": [f"u{u}" for u in users], "v": rng.integers(0, 10, rows).astype("int64")})


def _driver(spark, rc, jid, chk, partitions, **kw):
    return RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                             key_groups=G, partitions=partitions, durability=DurabilityConfig(str(chk)), **kw,
                             controller=ControllerConfig(rc, jid, algorithm="albic-milp", window_batches=2,
                                                         time_limit_s=2.0))


def _exact(driver, frames):
    got = driver.state_frame().toPandas().set_index("key").sort_index()
    exp = pd.concat(frames).groupby("key")["v"].agg(["size", "sum"]).sort_index()
    assert got.index.tolist() == exp.index.tolist()
    assert got["count"].tolist() == exp["size"].tolist() and got["total"].tolist() == exp["sum"].tolist()


def test_a_restart_with_more_partitions_and_a_scale_in_between_batches_place_the_state_by_load(
        spark, controller, settle, tmp_path):
    rc = RebalancerClient(controller.url, timeout=60, retries=1)
    jid = "scale-" + uuid.uuid4().hex[:6]
    rng = np.random.default_rng(3)
    frames = [_batch(rng) for _ in range(6)]
    first = _driver(spark, rc, jid, tmp_path / "chk", partitions=4)
    assert first.start()
    for b in range(2):
        first.process(spark.createDataFrame(frames[b]), b)
        settle(rc, jid)
    first.close()

    # restarted with 6 partitions: the controller places the key groups on them before the state is read
    driver = _driver(spark, rc, jid, tmp_path / "chk", partitions=6)
    assert driver.start()
    job = rc.get_job(jid)
    assert len(job.nodes) == 6 and driver.nodes == [nd.id for nd in job.nodes] and driver.epoch == job.epoch
    assert driver.routing.partition_of.tolist() == job.placement
    scale_out = rc.history(jid).epochs[-1]
    assert scale_out.kind == "scale" and scale_out.moves is not None
    r2 = driver.process(spark.createDataFrame(frames[2]), 2)
    assert len(r2.partition_records) == 6 and r2.rebalanced_max_over_mean <= 1.10, r2.partition_records
    settle(rc, jid)
    driver.process(spark.createDataFrame(frames[3]), 3)
    settle(rc, jid)

    # what-if on the job's own window, then a scale-in to 3 partitions between two batches
    report = driver.what_if([3, 6])
    assert [cand.nodes for cand in report.candidates] == [3, 6]
    scaled = driver.scale(3)
    assert scaled is not None and len(scaled.nodes) == 3 and driver.partitions == 6   # from the next boundary on
    moved = {mv.key_group for mv in scaled.moves}
    assert {f"agg/{k}" for k in np.flatnonzero(driver.routing.partition_of >= 3).tolist()} <= moved
    r4 = driver.process(spark.createDataFrame(frames[4]), 4)
    assert driver.partitions == 3 and len(r4.partition_records) == 3
    assert r4.migrations == len(moved) and r4.rebalanced_max_over_mean <= 1.10, r4.partition_records
    assert 0 < r4.moved_bytes < r4.state_bytes                 # the key groups that change place, not everything
    driver.process(spark.createDataFrame(frames[5]), 5)
    _exact(driver, frames)
    driver.close()

    # the number of key groups is fixed for a state directory and a job
    with pytest.raises(StateMismatchError, match="number of key groups is fixed"):
        RebalancingDriver(spark, key="key", key_groups=G * 2, partitions=3,
                          durability=DurabilityConfig(str(tmp_path / "chk"))).start()


def test_a_restart_with_another_partition_count_and_the_controller_down_places_by_the_latest_loads(
        spark, tmp_path):
    rng = np.random.default_rng(4)
    frames = [_batch(rng, rows=4000) for _ in range(3)]
    first = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                              key_groups=G, partitions=4, durability=DurabilityConfig(str(tmp_path / "chk")))
    for b in range(2):
        first.process(spark.createDataFrame(frames[b]), b)
    first.close()
    again = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                              key_groups=G, partitions=5, durability=DurabilityConfig(str(tmp_path / "chk")))
    again.start()
    assert again.partitions == 5 and set(again.routing.partition_of.tolist()) == set(range(5))
    r = again.process(spark.createDataFrame(frames[2]), 2)
    assert len(r.partition_records) == 5 and min(r.partition_records) > 0
    _exact(again, frames)
    again.close()
