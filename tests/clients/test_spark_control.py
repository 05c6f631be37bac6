"""The driver against a real controller when the controller misbehaves or the job is misconfigured."""

from __future__ import annotations

import logging
import time
import uuid

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig  # noqa: E402
from rebalancer_client.spark.control import ConfigurationError  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.routing import contiguous  # noqa: E402

#: every full window is worth a round (the tests here look at the link, not at the policy)
EAGER = {"noise_sigmas": None, "min_gain": 0.0, "cooldown_batches": 0}

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
    ({"policy": {"min_gain": -1}}, "min_gain"),
])
def test_a_configuration_the_controller_refuses_fails_start_with_its_message(spark, controller, kw, field):
    rc = RebalancerClient(controller.url, timeout=10, retries=0)
    driver = RebalancingDriver(spark, key="key", key_groups=12, partitions=3,
                               controller=ControllerConfig(rc, _jid(), **kw))
    with pytest.raises(ConfigurationError, match="422") as err:
        driver.start()
    assert field in str(err.value)


def test_a_controller_that_comes_back_empty_gets_the_current_assignment(spark, controller, make_controller):
    jid = _jid()
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    config = ControllerConfig(rc, jid, algorithm="flux", budget={"max_migrations": 4}, window_batches=1,
                              policy=EAGER, auto=False, async_plans=False)
    driver = RebalancingDriver(spark, key="key", key_groups=12, partitions=3, controller=config)
    driver.start()
    rng = np.random.default_rng(4)
    b = 0
    while driver.epoch == 0 and b < 6:                        # until a plan has moved key groups
        driver.process(spark.createDataFrame(_batch(rng)), b)
        b += 1
    assert driver.epoch > 0
    before = driver.routing.partition_of.copy()
    assert (before != contiguous(12, 3)).any()

    fresh = make_controller()                                 # the controller restarted on an empty database
    driver.link.client = RebalancerClient(fresh.url, timeout=10, retries=1)
    driver.link.pending = None
    config.policy = {"min_gain": 1e9}                         # no new rounds: look at the registration alone
    r1 = driver.process(spark.createDataFrame(_batch(rng)), b)
    r2 = driver.process(spark.createDataFrame(_batch(rng)), b + 1)
    job = driver.link.client.get_job(jid)
    assert job.epoch == 0
    assert job.assignment == {f"agg/{k}": f"p{p}" for k, p in enumerate(before.tolist())}
    assert (driver.routing.partition_of == before).all() and driver.epoch == 0
    assert r1.migrations == 0 and r2.migrations == 0          # nothing moved back to the default layout
    assert r2.controller == "ok"
    driver.close()


def test_plans_are_computed_off_the_batch_and_applied_at_a_later_boundary(spark, controller):
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    driver = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None)}, key_groups=12,
                               partitions=3, controller=ControllerConfig(
                                   rc, _jid(), algorithm="flux", budget={"max_migrations": 4}, window_batches=1,
                                   policy=EAGER, auto=False))  # async_plans by default
    driver.start()
    rng = np.random.default_rng(9)
    frames = [_batch(rng), _batch(rng)]
    r0 = driver.process(spark.createDataFrame(frames[0]), 0)
    assert r0.controller == "ok" and driver.link._inflight is not None  # the batch returned; the plan is on its way
    driver.wait_for_plan(120)
    assert driver.link.pending is not None and driver.epoch == 0
    epoch = driver.link.pending.epoch
    r1 = driver.process(spark.createDataFrame(frames[1]), 1)        # applied at the next boundary
    assert r1.epoch == epoch >= 1 and r1.migrations >= 1
    got = driver.state_frame().toPandas().set_index("key")["count"].sort_index()
    assert got.tolist() == pd.concat(frames).groupby("key").size().sort_index().tolist()
    driver.close()


def test_job_ids_are_sent_encoded_and_an_id_the_controller_refuses_fails_start(spark, controller):
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    jid = "team.a:clicks-" + uuid.uuid4().hex[:4]
    driver = RebalancingDriver(spark, key="key", key_groups=12, partitions=3, controller=ControllerConfig(rc, jid))
    assert driver.start()
    r = driver.process(spark.createDataFrame(_batch(np.random.default_rng(8))), 0)
    assert r.controller == "ok" and rc.get_job(jid).window.batches == [0]
    driver.close()
    for bad, why in (("team a?x=1#", "job_id"), ("a/b", "job_id")):   # 422s: configuration, not "down"
        with pytest.raises(ConfigurationError, match=why.replace("?", "")):
            RebalancingDriver(spark, key="key", key_groups=12, partitions=3,
                              controller=ControllerConfig(rc, bad)).start()


def test_back_off_is_in_time_not_in_batches(caplog):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc = RebalancerClient(f"http://127.0.0.1:{port}", timeout=0.5, connect_timeout=0.2, retries=0)
    driver = RebalancingDriver(None, key="key", key_groups=12, partitions=3,
                               controller=ControllerConfig(rc, backoff_s=0.3, max_backoff_s=0.6))
    assert driver.start() is False                            # down: not an error
    assert not driver.link.available()
    time.sleep(0.35)
    assert driver.link.available()                            # 0.3 s later, whatever the number of batches
    driver.start()
    driver.start()
    time.sleep(0.35)
    assert not driver.link.available()                        # capped at 0.6 s after the third failure
    time.sleep(0.3)
    assert driver.link.available()


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
    code = "import sys, rebalancer_client.spark.example as e; assert callable(e.main); print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(root), TMPDIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"                 # no Spark imported, let alone started
    assert list(tmp_path.iterdir()) == []                # no files written
