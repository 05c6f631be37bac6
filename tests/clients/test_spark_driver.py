"""The driver with a real controller over HTTP: epochs, stale plans, a controller that goes away mid-run."""

from __future__ import annotations

import os
import signal
import uuid

import numpy as np
import pandas as pd
import pytest

from tests.helpers.streams import write_stream

pytestmark = pytest.mark.spark  # starts a local Spark session (make test-fast skips it)
pytest.importorskip("pyspark")

from rebalancer_client import ConflictError, RebalancerClient  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.stats import communication_stats  # noqa: E402


def _batch(rng, rows=800, keys=200, z=1.2):
    ranks = np.minimum(rng.zipf(z, rows), keys)
    return pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 10, rows).astype("int64")})


def _check_state(driver, frames):
    every = pd.concat(frames)
    expected = every.groupby("key")["v"].agg(["size", "sum"])
    got = driver.state_frame().toPandas().set_index("key").sort_index()
    assert got.index.is_unique and got.index.tolist() == sorted(expected.index.tolist())
    assert (got["count"] == expected.loc[got.index, "size"]).all()
    assert (got["total"] == expected.loc[got.index, "sum"]).all()


def test_stale_epoch_is_refused_and_the_driver_recovers(spark, controller):
    jid = "drv-" + uuid.uuid4().hex[:8]
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    # communication from an upstream stage keyed by v is posted with the statistics (the controller must accept it)
    config = ControllerConfig(rc, jid, algorithm="flux", budget={"max_migrations": 3}, window_batches=2,
                              auto=False, async_plans=False, policy={"noise_sigmas": None, "cooldown_batches": 0},
                              extra_operators=[{"id": "src", "key_groups": 4}],
                              communication=lambda df: communication_stats(
                                  df, "v", "key", src_operator="src", dst_operator="agg", src_key_groups=4,
                                  dst_key_groups=12))
    driver = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                               key_groups=12, partitions=3, controller=config)
    assert driver.start() and driver.epoch == 0
    job = rc.get_job(jid)
    assert len(job.key_groups) == 12 + 4
    assert driver.link.order is not None and driver.link.order.index is not None   # statistics go as arrays
    rng = np.random.default_rng(1)
    frames = []

    def run(b):
        frames.append(_batch(rng))
        return driver.process(spark.createDataFrame(frames[-1]), b)

    r0 = run(0)
    assert r0.controller == "ok"
    r1 = run(1)  # window full: the driver proposes and executes; applied at the next boundary
    assert r1.controller == "ok" and r1.plan_received and driver.link.pending.epoch == 1
    r2 = run(2)
    assert r2.epoch == 1 and r2.migrations >= 1 and r2.migrations <= 3
    assert rc.get_job(jid).epoch >= 1

    # another actor executes a plan of the same epoch first: the driver's own execute is a stale one
    mine = rc.create_proposal(jid)
    theirs = rc.create_proposal(jid)
    executed = rc.execute_proposal(jid, theirs.id, force=True)
    with pytest.raises(ConflictError):
        rc.execute_proposal(jid, mine.id, force=True)
    assert driver.link.apply_proposal(mine) == "conflict"  # refused; the driver adopts the job's epoch instead
    assert driver.link.pending is not None and driver.link.pending.epoch == executed.epoch

    r3 = run(3)  # the boundary: the controller's placement of the new epoch is in force
    assert r3.epoch == executed.epoch
    ack = rc.post_stats(jid, batch_id=3, epoch=r3.epoch, key_groups=[])
    assert ack.duplicate  # the batch under the new epoch had been accepted
    job = rc.get_job(jid)  # the driver may have executed its next round already (applied at the next boundary)
    pending = driver.link.pending
    epoch, layout = (pending.epoch, pending.layout) if pending else (driver.epoch, driver.layout())
    own = [int(p) for k, p in zip(job.key_groups, job.placement, strict=True) if k.startswith("agg/")]
    assert (epoch, layout["agg"].tolist()) == (job.epoch, own)
    _check_state(driver, frames)
    driver.close()


def test_controller_slow_then_stopped_mid_run_every_batch_completes(spark, make_controller, tmp_path):
    ctl = make_controller()
    src = tmp_path / "events"
    rng = np.random.default_rng(2)
    frames = [_batch(rng, rows=600) for _ in range(5)]
    write_stream(src, frames)

    rc = RebalancerClient(ctl.url, timeout=1.5, connect_timeout=1, retries=1, backoff=0.05)

    def on_batch(report):
        if report.batch_id == 0:
            os.kill(ctl.proc.pid, signal.SIGSTOP)  # the controller hangs: requests time out
        elif report.batch_id == 2:
            os.kill(ctl.proc.pid, signal.SIGCONT)
            ctl.stop()  # and then it is gone

    driver = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                               key_groups=12, partitions=3, on_batch=on_batch,
                               # a back-off longer than the run: however slow the batches, it is never over
                               controller=ControllerConfig(rc, "stop-test", algorithm="flux", window_batches=1,
                                                           backoff_s=120.0, max_backoff_s=120.0))
    driver.start()
    stream = (spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1)
              .parquet(str(src)))
    query = (stream.writeStream.foreachBatch(driver.foreach_batch).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "chk")).start())
    try:
        query.awaitTermination(300)
    finally:
        if ctl.proc.poll() is None:
            os.kill(ctl.proc.pid, signal.SIGCONT)
    assert query.exception() is None
    assert [r.batch_id for r in driver.reports] == [0, 1, 2, 3, 4]
    statuses = [r.controller for r in driver.reports]
    assert statuses[0] == "ok" and statuses[1] == "down"  # slow: timed out, the batch went on
    assert statuses[2:] == ["skipped"] * 3  # backed off instead of waiting for a timeout every batch
    assert len({r.epoch for r in driver.reports[1:]}) == 1  # the last routing was kept
    assert sum(r.records for r in driver.reports) == sum(len(f) for f in frames)
    assert driver.state.fallback_merges == 0  # the state was merged without a shuffle in the stream's session
    _check_state(driver, frames)
    driver.close()
