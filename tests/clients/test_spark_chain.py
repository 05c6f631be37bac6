"""Two keyed operators in one query as two operators of one controller job: per-user aggregates feeding
per-region aggregates, the communication between them counted, a plan applied to both, a restart, and a
controller that is down — real local Spark and a real controller over HTTP."""

from __future__ import annotations

import uuid
from collections import Counter

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.chain import OperatorChain  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig  # noqa: E402
from rebalancer_client.spark.routing import KG_COL, key_group_column  # noqa: E402

USERS = {"operator": "users", "key": "user", "key_groups": 12,
         "aggregations": {"region": ("max", "region"), "clicks": ("count", None)}}
REGIONS = {"operator": "regions", "key": "region", "key_groups": 6,
           "aggregations": {"updates": ("count", None), "top_clicks": ("max", "clicks")}}


def _batch(rng, rows=600):
    ids = np.minimum(rng.zipf(1.3, rows), 300)
    return pd.DataFrame({"user": [f"u{i}" for i in ids], "region": [f"r{i % 7}" for i in ids]})


def _key_groups(spark, values, column, groups):
    df = spark.createDataFrame(pd.DataFrame({column: sorted(set(values))}))
    rows = df.select(column, key_group_column(column, groups).alias("g")).collect()
    return {r[column]: int(r["g"]) for r in rows}


def _expected_edges(spark, frame):
    """The rows the users stage emits for a batch are its distinct users (update mode): one record per user from
    the user's key group to the region's key group — counted here in pandas."""
    users = frame.drop_duplicates("user")
    gu = _key_groups(spark, users.user, "user", USERS["key_groups"])
    gr = _key_groups(spark, users.region, "region", REGIONS["key_groups"])
    return Counter((f"users/{gu[u]}", f"regions/{gr[r]}") for u, r in zip(users.user, users.region, strict=True))


def _expected_regions(frames):
    """Per region: how many (batch, user) updates the users stage emitted, and the most clicks of one user."""
    updates: Counter = Counter()
    for f in frames:
        updates.update(f.drop_duplicates("user").region)
    every = pd.concat(frames)
    top = every.groupby("user").size().groupby(every.groupby("user").region.first()).max()
    return {r: (updates[r], int(top[r])) for r in updates}


def _placed_exactly(stage):
    from pyspark.sql import functions as F

    got = stage.state.df.select(KG_COL, F.spark_partition_id().alias("p")).distinct().collect()
    return all(stage.routing.partition_of[int(r[KG_COL])] == int(r["p"]) for r in got)


def _chain(spark, client, job_id, chk, **kw):
    config = ControllerConfig(client, job_id, algorithm="albic", budget={"max_migrations": 4}, window_batches=1,
                              policy={"noise_sigmas": None, "min_gain": 0.0, "cooldown_batches": 0}, auto=False,
                              async_plans=False, **kw)
    return OperatorChain(spark, stages=[USERS, REGIONS], partitions=3, controller=config,
                         durability=DurabilityConfig(str(chk)))


def test_two_operators_share_one_job_communication_is_counted_and_plans_move_both(spark, controller, tmp_path):
    jid = "chain-" + uuid.uuid4().hex[:8]
    rc = RebalancerClient(controller.url, timeout=10, retries=1)
    chain = _chain(spark, rc, jid, tmp_path / "chk")
    assert chain.start()
    job = rc.get_job(jid)
    assert job.key_groups == [*(f"users/{k}" for k in range(12)), *(f"regions/{k}" for k in range(6))]
    assert chain.link.order is not None and chain.link.order.index is not None   # statistics go as arrays
    rng = np.random.default_rng(5)
    frames = []
    for b in range(5):
        frames.append(_batch(rng))
        rep = chain.process(spark.createDataFrame(frames[-1]), b)
        assert rep.controller == "ok", rep
        got = Counter({(e["src"], e["dst"]): int(e["rate"]) for e in rep.communication})
        assert got == _expected_edges(spark, frames[-1])          # the edges posted equal a direct count
        assert [s.epoch for s in rep.stages] == [rep.epoch, rep.epoch]
    # the controller planned with the communication: its proposal sees a collocation factor
    prop = rc.create_proposal(jid, wait_s=10)
    assert prop.plan is not None and prop.plan.metrics.before.collocation_factor is not None
    # plans were executed and applied to the stages at batch boundaries; placement stays exact in both
    moved = {s_i: sum(r.stages[s_i].migrations for r in chain.reports) for s_i in (0, 1)}
    assert moved[0] + moved[1] >= 1, moved
    assert chain.epoch >= 1 and all(_placed_exactly(st) for st in chain.stages)
    job = rc.get_job(jid)
    layout = [*chain.stages[0].routing.partition_of.tolist(), *chain.stages[1].routing.partition_of.tolist()]
    if chain.link.pending is None:
        assert (job.epoch, job.placement) == (chain.epoch, layout)
    regions = chain.stages[1].state_frame().toPandas().set_index("region")
    assert {r: (int(v.updates), int(v.top_clicks)) for r, v in regions.iterrows()} == _expected_regions(frames)
    chain.close()

    # a restart on the same checkpoint: Spark replays batch 4 (committed by both stages: not applied again)
    again = _chain(spark, rc, jid, tmp_path / "chk")
    assert again.start()
    rep = again.process(spark.createDataFrame(frames[-1]), 4)
    assert [s.replayed for s in rep.stages] == [True, True] and rep.controller == "replayed"
    frames.append(_batch(rng))
    rep = again.process(spark.createDataFrame(frames[-1]), 5)
    assert rep.controller == "ok" and not any(s.replayed for s in rep.stages)
    regions = again.stages[1].state_frame().toPandas().set_index("region")
    assert {r: (int(v.updates), int(v.top_clicks)) for r, v in regions.iterrows()} == _expected_regions(frames)
    again.close()


def test_a_crash_between_the_two_stages_commits_is_exactly_once(spark, tmp_path):
    """Stage 1 committed batch 1, stage 2 did not (the driver died in between): the replay applies batch 1 to
    stage 2 only, from stage 1's stored output."""
    rng = np.random.default_rng(8)
    frames = [_batch(rng) for _ in range(3)]
    chain = _chain(spark, None, "crash", tmp_path / "chk")
    chain.start()
    chain.process(spark.createDataFrame(frames[0]), 0)
    chain.stages[0].process(spark.createDataFrame(frames[1]), 1)   # ... and the process dies here
    chain.close()
    again = _chain(spark, None, "crash", tmp_path / "chk")
    again.start()
    rep = again.process(spark.createDataFrame(frames[1]), 1)
    assert [s.replayed for s in rep.stages] == [True, False]
    again.process(spark.createDataFrame(frames[2]), 2)
    regions = again.stages[1].state_frame().toPandas().set_index("region")
    assert {r: (int(v.updates), int(v.top_clicks)) for r, v in regions.iterrows()} == _expected_regions(frames)
    users = again.stages[0].state_frame().toPandas().set_index("user")
    assert users.clicks.to_dict() == pd.concat(frames).groupby("user").size().to_dict()
    again.close()


def test_the_chain_runs_every_batch_with_the_controller_down(spark, tmp_path, unused_port):
    client = RebalancerClient(f"http://127.0.0.1:{unused_port}", timeout=1, connect_timeout=0.5, retries=0)
    chain = _chain(spark, client, "down", tmp_path / "chk", backoff_s=0.01)
    assert chain.start() is False
    rng = np.random.default_rng(2)
    frames = []
    for b in range(3):
        frames.append(_batch(rng))
        rep = chain.process(spark.createDataFrame(frames[-1]), b)
        assert rep.controller in ("down", "skipped")
    regions = chain.stages[1].state_frame().toPandas().set_index("region")
    assert {r: (int(v.updates), int(v.top_clicks)) for r, v in regions.iterrows()} == _expected_regions(frames)
    chain.close()
