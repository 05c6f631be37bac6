"""The controller is the judge: every proposal carries the policy's verdict (``decision``) with its reason and
numbers, an execute of a plan judged not worth it is a 409 unless forced, and a driver learns a placement another
client executed from its next statistics answer (``apply``)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.api.api_helpers import dense_stats, named, new_id, proposal, register

M = 24


def steady(batch_id: int, epoch: int = 0, m: int = M, mean: float = 200.0) -> dict:
    """A stationary stream: every key group's load per batch is Poisson(mean), the same distribution throughout."""
    rng = np.random.default_rng(1000 + batch_id)
    return {"batch_id": batch_id, "epoch": epoch, "load": rng.poisson(mean, m).astype(float).tolist(),
            "state_bytes": [1e6] * m}


def hot(batch_id: int, epoch: int = 0, m: int = M) -> dict:
    """The first third of the key groups (the first node's at registration) four times as loaded, no noise."""
    return {"batch_id": batch_id, "epoch": epoch, "load": [400.0 if k < m // 3 else 100.0 for k in range(m)],
            "state_bytes": [1e6] * m}


def fill(client, jid: str, make, n: int, first: int = 1, epoch: int = 0) -> dict:
    ack = None
    for b in range(first, first + n):
        r = client.post(f"/v1/jobs/{jid}/stats", json=make(b, epoch))
        assert r.status_code == 202, r.text
        ack = r.json()
    return ack


def propose(client, jid: str, algorithm: str = "flux") -> dict:
    doc = proposal(client, jid, {"algorithm": algorithm, "time_limit_s": 1})
    assert doc["status"] == "ready", doc
    return doc


def test_a_steady_stream_is_left_alone_and_forced_execute_overrides(client):
    jid = new_id("steady")
    register(client, jid, key_groups=M, window_batches=5)
    ack = fill(client, jid, steady, 5)
    d = ack["decision"]
    assert ack["window"]["ready"] and not d["worth"] and d["reason"] == "noise", d
    assert 0 < d["load_distance"] <= d["noise"] and d["batch_id"] == 5
    p = propose(client, jid, "drain-then-balance")  # a heuristic that moves to shave the noise
    v = p["decision"]
    assert p["plan"]["moves"] and v["planned_load_distance"] < v["load_distance"]
    assert not v["worth"] and v["reason"] == "noise", v
    assert v["load_distance"] == d["load_distance"] and v["migration_bytes"] == p["plan"]["metrics"]["migration_bytes"]
    r = client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute")
    assert r.status_code == 409 and "not worth" in r.json()["detail"] and "force" in r.json()["detail"], r.text
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 0
    r = client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute", json={"force": True})
    assert r.status_code == 200 and r.json()["epoch"] == 1, r.text
    entry = client.get(f"/v1/jobs/{jid}/history").json()["epochs"][1]
    assert entry["kind"] == "execute" and entry["decision"] == v  # the verdict it was executed against
    assert client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute", json={"force": True}).status_code == 409


def test_a_real_imbalance_is_worth_it_and_the_cooldown_holds_the_next_round(client):
    jid = new_id("hot")
    job = register(client, jid, key_groups=M, window_batches=2, policy={"cooldown_batches": 2})
    ack = fill(client, jid, hot, 2)
    assert ack["decision"]["worth"] and ack["decision"]["reason"] == "significant"  # ask for a proposal
    assert ack["decision"]["noise"] == 0  # no variance in the window
    p = propose(client, jid)
    v = p["decision"]
    assert v["worth"] and v["reason"] == "worth" and v["planned_load_distance"] < v["load_distance"], v
    assert v["load_distance"] - v["planned_load_distance"] >= v["min_gain"]
    ex = client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute")
    assert ex.status_code == 200, ex.text
    assert client.get(f"/v1/jobs/{jid}").json()["decision"] == v  # the job's latest verdict
    # the same window again, right after a round: the cooldown
    again = propose(client, jid)
    assert not again["decision"]["worth"] and again["decision"]["reason"] == "cooldown", again["decision"]
    assert client.post(f"/v1/jobs/{jid}/proposals/{again['id']}/execute").status_code == 409
    # statistics on the new placement: the cooldown counts batches
    ack = fill(client, jid, lambda b, e: dense_stats(job, b, e), 1, first=3, epoch=1)
    assert ack["decision"]["reason"] == "cooldown" and "1 of 2 batches" in ack["decision"]["message"]


@pytest.mark.parametrize("policy, reason", [
    ({"load_distance_threshold": 1e6}, "threshold"),
    ({"min_gain": 10.0}, "gain"),
    ({"max_bytes_per_gain": 1.0}, "cost"),  # 1 byte per 1 % of gain: no move of 1 MB pays
], ids=["threshold", "gain", "cost"])
def test_each_rule_answers_not_worth_it_with_its_reason_and_numbers(client, policy, reason):
    jid = new_id(reason)
    register(client, jid, key_groups=M, window_batches=2, policy=policy)
    fill(client, jid, hot, 2)
    p = propose(client, jid)
    v = p["decision"]
    assert not v["worth"] and v["reason"] == reason and v["message"], v
    if reason == "cost":
        assert v["bytes_allowed"] is not None and v["migration_bytes"] > v["bytes_allowed"]
    r = client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute")
    assert r.status_code == 409 and reason in r.json()["detail"]
    assert client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute", json={"force": True}).status_code == 200


def test_a_plan_that_moves_nothing_is_not_worth_it(client):
    jid = new_id("flat")
    register(client, jid, key_groups=M, window_batches=1, policy={"noise_sigmas": None, "min_gain": 0.0})
    fill(client, jid, lambda b, e: {"batch_id": b, "epoch": e, "load": [1.0] * M}, 1)
    p = propose(client, jid)
    assert p["plan"]["moves"] == [] and not p["decision"]["worth"]
    assert p["decision"]["reason"] in ("no_moves", "gain"), p["decision"]


def test_a_driver_learns_another_clients_execute_from_its_next_statistics_answer(server):
    with server.client() as driver, server.client() as operator:
        jid = new_id("apply")
        job = register(operator, jid, key_groups=M, window_batches=2, policy={"cooldown_batches": 0})
        fill(driver, jid, hot, 2)
        p = propose(operator, jid)
        ex = operator.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute").json()
        # the driver still runs epoch 0: its next post is counted and answered with the placement to apply
        ack = driver.post(f"/v1/jobs/{jid}/stats", json=hot(3, epoch=0)).json()
        assert ack["counted"] and ack["epoch"] == 1
        assert ack["apply"] == {"epoch": 1, "placement": ex["placement"], "nodes": ["w0", "w1", "w2"]}
        assert named(ack["apply"]["placement"], ack["apply"]["nodes"], job["key_groups"]) == p["plan"]["assignment"]
        # a duplicate of an old batch is not counted but still says where the job is
        dup = driver.post(f"/v1/jobs/{jid}/stats", json=hot(3, epoch=0)).json()
        assert dup["duplicate"] and dup["apply"] is not None and dup["apply"]["epoch"] == 1
        assert driver.post(f"/v1/jobs/{jid}/stats", json=hot(4, epoch=1)).json()["apply"] is None
        # nodes changed by the operator: the answer names the new node list
        operator.post(f"/v1/jobs/{jid}/nodes", json={"add": ["w9"]})
        ack = driver.post(f"/v1/jobs/{jid}/stats", json=hot(5, epoch=1)).json()
        assert ack["apply"]["epoch"] == 2 and ack["apply"]["nodes"] == ["w0", "w1", "w2", "w9"]
        assert ack["apply"]["placement"] == ex["placement"]  # a new node holds nothing yet
        # a future epoch is refused
        assert driver.post(f"/v1/jobs/{jid}/stats", json=hot(6, epoch=3)).status_code == 409
