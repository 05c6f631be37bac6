"""The controller is the one judge of whether moving state is worth it, seen from a Spark driver: a steady stream
moves nothing, a stream whose hot keys shift is rebalanced in the first full window after the shift — in automatic
mode (one round trip per batch) and in proposal mode. Real local Spark, a real controller over HTTP.

The streams: 120 key groups on 8 partitions, each key group's records per batch drawn from Poisson(208) (a
node's load per batch is about 3,120 ± 56 records: an imbalance that sampling noise alone explains). The shifting
stream doubles the rate of the 15 key groups of partition 0 from batch ``SHIFT`` on.

Automatic rounds are solved in the background; so that the test does not depend on how fast the machine solves,
each batch waits until the controller is not solving a round any more (a stream whose batches take longer than a
solve), then the next batch's answer carries the placement.
"""

from __future__ import annotations

import uuid

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.routing import key_group_column  # noqa: E402

G, N, RATE, WINDOW = 120, 8, 208.0, 3
#: the first batch of the shifting stream's new rates: one full steady window before it
SHIFT = 3
#: batches of the steady stream: three full windows, each judged (bench_policy runs 60 batches × 3 seeds of it for
#: each planner, tests/controller/test_policy.py 30 batches of it on the controller alone)
STEADY = 9


@pytest.fixture(scope="module")
def keys_by_group(spark) -> list[np.ndarray]:
    """About 100 user keys per key group (which key group a key is in is Spark's xxhash64, asked once)."""
    users = spark.createDataFrame(pd.DataFrame({"key": [f"u{i}" for i in range(12_000)]}))
    rows = users.select("key", key_group_column("key", G).alias("g")).toPandas()
    return [rows.key[rows.g == k].to_numpy() for k in range(G)]


def _batch(rng: np.random.Generator, keys: list[np.ndarray], rates: np.ndarray) -> pd.DataFrame:
    counts = rng.poisson(rates)
    picked = [rng.choice(keys[k], size=int(c)) for k, c in enumerate(counts)]
    return pd.DataFrame({"key": np.concatenate(picked)})


def _run(spark, controller, settle, keys, mode: str, batches: int, shift: int | None, seed: int):
    rc = RebalancerClient(controller.url, timeout=30, retries=1)
    jid = f"policy-{mode}-" + uuid.uuid4().hex[:6]
    driver = RebalancingDriver(spark, key="key", key_groups=G, partitions=N, controller=ControllerConfig(
        rc, jid, algorithm="albic-milp", budget={"max_migrations": 15}, window_batches=WINDOW, time_limit_s=1.0,
        auto=mode == "auto", async_plans=False))
    assert driver.start()
    rng = np.random.default_rng(seed)
    base = np.full(G, RATE)
    hot = base.copy()
    hot[:15] *= 2                      # partition 0's key groups (the contiguous layout puts 0..14 on p0)
    for b in range(batches):
        rates = hot if shift is not None and b >= shift else base
        driver.process(spark.createDataFrame(_batch(rng, keys, rates)), b)
        settle(rc, jid)
    driver.close()
    return driver, rc.history(jid)


@pytest.mark.parametrize("mode", ["auto", "proposal"])
def test_a_steady_stream_moves_nothing(spark, controller, settle, keys_by_group, mode):
    driver, history = _run(spark, controller, settle, keys_by_group, mode, batches=STEADY, shift=None, seed=1)
    assert sum(r.migrations for r in driver.reports) == 0
    assert history.epoch == 0 and driver.epoch == 0
    assert {r.controller for r in driver.reports} == {"ok"}
    assert driver.link is not None and driver.link.proposals == 0     # not even a proposal was asked for
    assert driver.link.decision is not None and driver.link.decision.reason in ("noise", "gain")


@pytest.mark.parametrize("mode", ["auto", "proposal"])
def test_hot_keys_that_shift_are_rebalanced_in_the_first_full_window(spark, controller, settle, keys_by_group,
                                                                     mode):
    driver, history = _run(spark, controller, settle, keys_by_group, mode, batches=SHIFT + WINDOW + 3, shift=SHIFT,
                           seed=2)
    reports = driver.reports
    assert sum(r.migrations for r in reports[:SHIFT]) == 0            # steady before the shift
    rounds = [e for e in history.epochs if e.epoch > 0]
    assert rounds, [r.controller for r in reports]
    first = rounds[0]
    assert first.decision is not None and first.decision.worth
    # the round was decided on a window that ends in the first full window after the shift ...
    assert first.decision.batch_id is not None and SHIFT <= first.decision.batch_id <= SHIFT + WINDOW - 1
    # ... and applied at the boundary after the answer that carried it
    moved = next(r.batch_id for r in reports if r.migrations)
    assert moved <= first.decision.batch_id + (2 if mode == "auto" else 1)
    after = reports[moved]
    before = reports[SHIFT + 1]
    assert after.rebalanced_max_over_mean < before.rebalanced_max_over_mean
