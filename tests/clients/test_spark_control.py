"""The driver against a real controller when the controller misbehaves or the job is misconfigured (issue 15)."""

from __future__ import annotations

import logging
import time
import uuid

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from clients.python import RebalancerClient  # noqa: E402
from clients.spark.control import ConfigurationError  # noqa: E402
from clients.spark.driver import RebalancingDriver  # noqa: E402
from clients.spark.routing import RoutingTable  # noqa: E402

pytestmark = pytest.mark.spark


def _batch(rng, rows=800, keys=200, z=1.2):
    ranks = np.minimum(rng.zipf(z, rows), keys)
    return pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 10, rows).astype("int64")})


def _jid() -> str:
    return "ctl-" + uuid.uuid4().hex[:8]


@pytest.mark.parametrize("kw, field", [
    ({"algorithm": "no-such-planner"}, "algorithm"),
    ({"budget": {"max_migrations": -1}}, "max_migrations"),
    ({"budget": {"max_moves": 3}}, "max_moves"),
    ({"window_batches": 0}, "window_batches"),
])
def test_a_configuration_the_controller_refuses_fails_start_with_its_message(spark, controller, kw, field):
    rc = RebalancerClient(controller.url, timeout=10, retries=0)
    driver = RebalancingDriver(spark, key="key", client=rc, job_id=_jid(), key_groups=12, partitions=3, **kw)
    with pytest.raises(ConfigurationError, match="422") as err:
        driver.start()
    assert field in str(err.value)


def test_a_node_the_query_has_no_partition_for_is_refused_and_every_batch_completes(spark, controller, caplog):
    jid = _jid()
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    driver = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None)}, client=rc, job_id=jid,
                               key_groups=12, partitions=3, algorithm="flux", budget={"max_migrations": 4},
                               window_batches=1, min_gain=0.0, async_plans=False)
    assert driver.start()
    rng = np.random.default_rng(3)
    frames = [_batch(rng)]
    driver.process(spark.createDataFrame(frames[0]), 0)
    driver.pending = None
    rc.change_nodes(jid, add=["p8"])                         # the operator scales the job out: p8 is no partition
    job = rc.get_job(jid)
    theirs = {**job.assignment, "agg/0": "p8"}
    assert not driver._accept(job.epoch + 1, theirs)          # an assignment naming p8 is refused ...
    assert "node 'p8', which is not one of this query's 3 partitions" in caplog.text
    with caplog.at_level(logging.ERROR, logger="rebalancer.spark"):
        for b in range(1, 5):                                 # ... and the controller's own plans onto p8 too
            frames.append(_batch(rng))
            r = driver.process(spark.createDataFrame(frames[-1]), b)
            assert r.records == len(frames[-1])
    assert set(driver.routing.partition_of.tolist()) <= {0, 1, 2}
    statuses = [r.controller for r in driver.reports]
    assert "refused" in statuses, statuses
    got = driver.state_frame().toPandas().set_index("key")["count"].sort_index()
    exp = pd.concat(frames).groupby("key").size().sort_index()
    assert got.tolist() == exp.tolist() and got.index.tolist() == exp.index.tolist()
    driver.close()


def test_a_controller_that_comes_back_empty_gets_the_current_assignment(spark, controller, make_controller):
    jid = _jid()
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    driver = RebalancingDriver(spark, key="key", client=rc, job_id=jid, key_groups=12, partitions=3,
                               algorithm="flux", budget={"max_migrations": 4}, window_batches=1, min_gain=0.0,
                               async_plans=False)
    driver.start()
    rng = np.random.default_rng(4)
    b = 0
    while driver.epoch == 0 and b < 6:                        # until a plan has moved key groups
        driver.process(spark.createDataFrame(_batch(rng)), b)
        b += 1
    assert driver.epoch > 0
    default = RoutingTable.contiguous("agg", 12, 3).assignment()
    before = driver.routing.assignment()
    assert before != default

    fresh = make_controller()                                 # the controller restarted on an empty database
    driver.client = RebalancerClient(fresh.url, timeout=10, retries=1)
    driver.pending = None
    driver.min_gain = 1e9                                     # no new plans: look at the registration alone
    r1 = driver.process(spark.createDataFrame(_batch(rng)), b)
    r2 = driver.process(spark.createDataFrame(_batch(rng)), b + 1)
    job = driver.client.get_job(jid)
    assert job.epoch == 0
    assert {k: v for k, v in job.assignment.items() if k.startswith("agg/")} == before
    assert driver.routing.assignment() == before and driver.epoch == 0
    assert r1.migrations == 0 and r2.migrations == 0          # nothing moved back to the default layout
    assert r2.controller == "ok"
    driver.close()


def test_plans_are_computed_off_the_batch_and_applied_at_a_later_boundary(spark, controller):
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    driver = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None)}, client=rc, job_id=_jid(),
                               key_groups=12, partitions=3, algorithm="flux", budget={"max_migrations": 4},
                               window_batches=1, min_gain=0.0)  # async_plans by default
    driver.start()
    rng = np.random.default_rng(9)
    frames = [_batch(rng), _batch(rng)]
    r0 = driver.process(spark.createDataFrame(frames[0]), 0)
    assert r0.controller == "ok" and driver._inflight is not None   # the batch returned; the plan is on its way
    driver.wait_for_plan(120)
    assert driver.pending is not None and driver.epoch == 0
    epoch = driver.pending[0]
    r1 = driver.process(spark.createDataFrame(frames[1]), 1)        # applied at the next boundary
    assert r1.epoch == epoch >= 1 and r1.migrations >= 1
    got = driver.state_frame().toPandas().set_index("key")["count"].sort_index()
    assert got.tolist() == pd.concat(frames).groupby("key").size().sort_index().tolist()
    driver.close()


def test_job_ids_are_sent_encoded_and_an_id_the_controller_refuses_fails_start(spark, controller):
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    jid = "team.a:clicks-" + uuid.uuid4().hex[:4]
    driver = RebalancingDriver(spark, key="key", client=rc, job_id=jid, key_groups=12, partitions=3)
    assert driver.start()
    r = driver.process(spark.createDataFrame(_batch(np.random.default_rng(8))), 0)
    assert r.controller == "ok" and rc.get_job(jid).window.get("batches") == [0]
    driver.close()
    for bad, why in (("team a?x=1#", "job_id"), ("a/b", "job_id")):   # 422s: configuration, not "down"
        with pytest.raises(ConfigurationError, match=why.replace("?", "")):
            RebalancingDriver(spark, key="key", client=rc, job_id=bad, key_groups=12, partitions=3).start()


def test_back_off_is_in_time_not_in_batches(caplog):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = RebalancerClient(f"http://127.0.0.1:{port}", timeout=0.5, connect_timeout=0.2, retries=0)
    driver = RebalancingDriver(None, key="key", client=rc, key_groups=12, partitions=3, backoff_s=0.3,
                               max_backoff_s=0.6)
    assert driver.start() is False                            # down: not an error
    assert not driver._controller_available()
    time.sleep(0.35)
    assert driver._controller_available()                     # 0.3 s later, whatever the number of batches
    driver.start()
    driver.start()
    time.sleep(0.35)
    assert not driver._controller_available()                 # capped at 0.6 s after the third failure
    time.sleep(0.3)
    assert driver._controller_available()


def test_fewer_key_groups_than_partitions_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="rebalancer.spark"):
        RebalancingDriver(None, key="key", key_groups=4, partitions=8)
    assert "key_groups=4 < partitions=8" in caplog.text


def test_the_example_does_nothing_on_import(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "import sys, clients.spark.example as e; assert callable(e.main); print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(root), TMPDIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"                 # no Spark imported, let alone started
    assert list(tmp_path.iterdir()) == []                # no files written


def test_an_imbalance_that_sampling_noise_explains_is_not_chased():
    from clients.spark.control import worth_executing

    # 8 nodes of ~1250 records: Poisson noise alone gives a load distance of about 2 × √1250 ≈ 70
    assert not worth_executing(70.0, 10.0, 1250.0, min_gain=0.02, noise_sigmas=3.0)
    assert worth_executing(400.0, 50.0, 1250.0, min_gain=0.02, noise_sigmas=3.0)      # real skew
    assert worth_executing(70.0, 10.0, 1250.0, min_gain=0.02, noise_sigmas=None)      # guard off
    assert not worth_executing(400.0, 390.0, 1250.0, min_gain=0.02)                   # gain below 2% of the mean
    assert not worth_executing(400.0, 50.0, 1250.0, min_gain=0.02, threshold=500.0)


def test_a_stationary_stream_asks_for_no_proposal_a_skewed_one_does(spark, controller):
    """The pre-check of ControllerLink._may_gain: an imbalance that sampling noise explains asks the controller for
    no solve at all (it would burn its time limit for a plan that is then thrown away); a skewed stream still asks
    and rebalances."""
    rc = RebalancerClient(controller.url, timeout=10, retries=1)

    def run(make, seed):
        driver = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None)}, client=rc,
                                   job_id=_jid(), key_groups=12, partitions=3, algorithm="flux",
                                   budget={"max_migrations": 4}, window_batches=1, async_plans=False)
        assert driver.start()
        rng = np.random.default_rng(seed)
        for b in range(4):
            driver.process(spark.createDataFrame(make(rng)), b)
        driver.close()
        return driver

    def uniform(rng):  # 3,000 users drawn uniformly: node loads differ by noise only
        return pd.DataFrame({"key": [f"u{r}" for r in rng.integers(0, 3000, 2000)],
                             "v": rng.integers(0, 10, 2000).astype("int64")})

    steady = run(uniform, 5)
    assert steady.proposals_skipped == 4 and steady.epoch == 0
    assert [r.controller for r in steady.reports] == ["ok"] * 4
    skewed = run(lambda rng: _batch(rng, rows=2000), 6)
    assert skewed.reports[0].plan_received and skewed.epoch >= 1       # asked at once, and the plan was executed
    assert sum(r.migrations for r in skewed.reports) >= 1 and skewed.proposals_skipped < 4


def test_the_pre_check_leaves_jobs_it_cannot_judge_to_the_controller(spark):
    """_may_gain says "no plan can pay off" only for a job that is exactly the driver's view: its partitions as
    nodes, one capacity, no communication cost, none removing; anything else goes to the controller."""
    from clients.python.models import Job

    driver = RebalancingDriver(spark, key="key", client=None, key_groups=12, partitions=3, window_batches=1)
    ids = [f"agg/{k}" for k in range(12)]
    driver._remember([{"id": i, "load": 100.0 + (k % 3)} for k, i in enumerate(ids)])  # noise-sized imbalance

    def job(**kw):
        base = {"job_id": "j", "epoch": 0, "nodes": ["p0", "p1", "p2"], "assignment": driver.routing.assignment(),
                "capacity": {"p0": 1.0, "p1": 1.0, "p2": 1.0}, "communication_cost": 0.0}
        return Job(**{**base, **kw})

    driver._note_job(job())
    assert not driver._may_gain(None)
    assert driver._may_gain([{"src": "agg/0", "dst": "agg/1", "rate": 1.0}])     # communication: ask
    for other in (job(nodes=["p0", "p1", "p2", "p8"]), job(removing=["p2"]), job(communication_cost=0.5),
                  job(capacity={"p0": 2.0, "p1": 1.0, "p2": 1.0})):
        driver._note_job(other)
        assert driver._may_gain(None), other
    driver._note_job(job())
    driver._remember([{"id": i, "load": 1000.0 if k < 4 else 10.0} for k, i in enumerate(ids)])  # real skew
    assert driver._may_gain(None)
