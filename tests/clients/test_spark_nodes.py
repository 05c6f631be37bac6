"""A Spark job's nodes are its partitions: node changes made on the controller while the query runs — a node added,
one removed (drained, then deleted), both before a placement was applied, and a restart — converge with the
driver, which runs every node the controller plans onto. Real local Spark, a real controller over HTTP."""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402

#: the controller's policy without a cooldown: a drain starts at the first batch after a node is marked removing
POLICY = {"cooldown_batches": 0}


def _batch(rng: np.random.Generator, rows: int = 1200) -> pd.DataFrame:
    ranks = np.minimum(rng.zipf(1.3, rows), 300)
    return pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 10, rows).astype("int64")})


def _driver(spark, rc, jid, chk, partitions):
    return RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                             key_groups=12, partitions=partitions,
                             controller=ControllerConfig(rc, jid, algorithm="flux", window_batches=3, policy=POLICY),
                             durability=DurabilityConfig(str(chk)))


def _exact(driver, frames):
    got = driver.state_frame().toPandas().set_index("key").sort_index()
    exp = pd.concat(frames).groupby("key")["v"].agg(["size", "sum"]).sort_index()
    assert got.index.tolist() == exp.index.tolist()
    assert got["count"].tolist() == exp["size"].tolist() and got["total"].tolist() == exp["sum"].tolist()


def test_nodes_added_removed_and_deleted_on_the_controller_are_followed_and_the_removed_one_drained(
        spark, controller, settle, tmp_path):
    rc = RebalancerClient(controller.url, timeout=30, retries=1)
    jid = "nodes-" + uuid.uuid4().hex[:6]
    driver = _driver(spark, rc, jid, tmp_path / "chk", partitions=3)
    assert driver.start()
    rng = np.random.default_rng(7)
    frames: list[pd.DataFrame] = []

    def run(b: int):
        frames.append(_batch(rng))
        r = driver.process(spark.createDataFrame(frames[-1]), b)
        settle(rc, jid)
        return r

    run(0)
    run(1)
    # a node added and one marked for removal before the driver applied anything of it
    rc.change_nodes(jid, add=["p3"])
    rc.change_nodes(jid, remove=["p1"])
    b = 2
    while driver.partitions != 4 and b < 6:                    # the newest placement's nodes run as partitions
        run(b)
        b += 1
    assert driver.partitions == 4 and driver.nodes == ["p0", "p1", "p2", "p3"]
    drained = None
    for _ in range(6):                                         # automatic rounds drain p1 (partition 1)
        r = run(b)
        b += 1
        if r.partition_records[1] == 0 and (driver.routing.partition_of != 1).all():
            drained = r.batch_id
            break
    assert drained is not None, [r.partition_records for r in driver.reports]
    job = rc.get_job(jid)
    assert job.nodes[1].key_groups == 0
    rc.change_nodes(jid, delete=["p1"])                        # the empty node goes: three partitions again
    for _ in range(4):                                         # until both sides hold the same epoch
        r = run(b)
        b += 1
        job = rc.get_job(jid)
        if driver.link.pending is None and job.epoch == driver.epoch:
            break
    assert driver.partitions == 3 and driver.nodes == ["p0", "p2", "p3"] and len(r.partition_records) == 3
    assert (job.epoch, job.placement) == (driver.epoch, driver.routing.partition_of.tolist())
    _exact(driver, frames)
    driver.close()

    # a restart with the job's partition count resumes on its nodes, with the state as committed
    again = _driver(spark, rc, jid, tmp_path / "chk", partitions=3)
    assert again.start() and again.nodes == ["p0", "p2", "p3"] and again.epoch == job.epoch
    frames.append(_batch(rng))
    r = again.process(spark.createDataFrame(frames[-1]), b)
    assert r.controller == "ok" and r.migrations == 0
    _exact(again, frames)
    again.close()
