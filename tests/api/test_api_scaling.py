"""Scaling a registered job: ``POST /v1/jobs/{id}/scale`` (a new node set and every key group placed on it by load,
as one epoch) and ``POST /v1/jobs/{id}/what-if`` (candidate clusters on the job's own window; nothing changes)."""

from __future__ import annotations

import pytest

from tests.api.api_helpers import assignment, new_id, register

M = 12
# w0 holds agg/0-3 (hot), w1 agg/4-7, w2 agg/8-11 (at registration: Flink's contiguous ranges)
LOADS = [9.0, 8.0, 7.0, 6.0, 2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0]


def job_with_stats(client, loads=LOADS, **extra) -> tuple[str, dict]:
    jid = new_id("scale")
    job = register(client, jid, key_groups=M, algorithm="flux", window_batches=2, **extra)
    for b in (1, 2):
        r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": b, "epoch": 0, "load": loads,
                                                        "state_bytes": [100.0] * M})
        assert r.status_code == 202, r.text
    return jid, job


def test_scale_in_drains_the_nodes_that_go_in_one_epoch(client):
    jid, job = job_with_stats(client)
    r = client.post(f"/v1/jobs/{jid}/scale", json={"nodes": ["w0", "w1"]})
    assert r.status_code == 200, r.text
    s = r.json()
    assert (s["base_epoch"], s["epoch"], s["nodes"]) == (0, 1, ["w0", "w1"])
    assert len(s["placement"]) == M and set(s["placement"]) <= {0, 1}
    moved = {m["key_group"] for m in s["moves"]}
    assert {f"agg/{k}" for k in range(8, 12)} <= moved  # every key group of w2 moved
    assert all(m["to"] in ("w0", "w1") for m in s["moves"]) and s["metrics"]["migrations"] == len(s["moves"])
    assert s["metrics"]["after"]["load_on_removing"] == 0 and s["metrics"]["after"]["total_load"] == sum(LOADS)
    g = client.get(f"/v1/jobs/{jid}").json()
    assert g["epoch"] == 1 and [n["id"] for n in g["nodes"]] == ["w0", "w1"] and g["placement"] == s["placement"]
    hist = client.get(f"/v1/jobs/{jid}/history").json()["epochs"]
    assert [e["kind"] for e in hist] == ["register", "scale"] and hist[1]["moves"] == s["moves"]
    assert [n["id"] for n in hist[1]["nodes"]] == ["w0", "w1"]
    # a driver still on epoch 0 learns the new node set and placement from its next statistics answer
    r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 3, "epoch": 0, "load": LOADS})
    assert r.json()["apply"] == {"epoch": 1, "placement": s["placement"], "nodes": ["w0", "w1"]}
    assert client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 4, "epoch": 1, "load": LOADS}).json()["apply"] \
        is None


def test_key_groups_without_load_leave_the_nodes_that_go_too(client):
    """A planner may leave a key group that costs nothing where it is; the new epoch uses only the new nodes."""
    loads = LOADS[:8] + [0.0] * 4
    jid, _ = job_with_stats(client, loads)
    s = client.post(f"/v1/jobs/{jid}/scale", json={"nodes": ["w0", "w1"]}).json()
    assert set(s["placement"]) <= {0, 1} and s["nodes"] == ["w0", "w1"]
    assert {f"agg/{k}" for k in range(8, 12)} <= {m["key_group"] for m in s["moves"]}


def test_the_budget_bounds_the_moves_and_must_allow_the_mandatory_ones(client):
    jid, job = job_with_stats(client)
    r = client.post(f"/v1/jobs/{jid}/scale", json={"nodes": ["w0", "w1"], "budget": {"max_migrations": 3}})
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["field"] == "budget.max_migrations" and "4" in item["reason"]
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 0  # nothing changed
    r = client.post(f"/v1/jobs/{jid}/scale", json={"nodes": ["w0", "w1"], "budget": {"max_migrations": 4}})
    assert r.status_code == 200, r.text
    s = r.json()
    assert s["metrics"]["migrations"] == 4 and {m["from"] for m in s["moves"]} == {"w2"}  # only the forced moves


def test_scale_out_places_load_on_the_new_node(client):
    jid, job = job_with_stats(client)
    r = client.post(f"/v1/jobs/{jid}/scale", json={"nodes": ["w0", "w1", "w2", {"id": "w3", "capacity": 2.0}]})
    assert r.status_code == 200, r.text
    s = r.json()
    assert s["nodes"] == ["w0", "w1", "w2", "w3"] and 3 in s["placement"]
    assert s["metrics"]["after"]["load_distance"] < s["metrics"]["before"]["load_distance"]
    g = client.get(f"/v1/jobs/{jid}").json()
    assert g["nodes"][3] == {"id": "w3", "capacity": 2.0, "removing": False,
                             "key_groups": s["placement"].count(3)}


def test_scale_refusals(client):
    jid = new_id("scale")
    register(client, jid, key_groups=M)
    r = client.post(f"/v1/jobs/{jid}/scale", json={"nodes": ["w0"]})
    assert r.status_code == 409 and "no statistics" in r.json()["detail"]  # nothing to place by load
    r = client.post(f"/v1/jobs/{jid}/what-if", json={"candidates": [2]})
    assert r.status_code == 409 and "no statistics" in r.json()["detail"]
    assert client.post("/v1/jobs/nope-nope/scale", json={"nodes": ["a"]}).status_code == 404
    assert client.post("/v1/jobs/nope-nope/what-if", json={"candidates": [2]}).status_code == 404
    jid, _ = job_with_stats(client)
    for body, field in (({"nodes": ["w0", "w0"]}, "nodes[1].id"),
                        ({"nodes": [{"id": "w0", "removing": True}]}, "nodes"),
                        ({"nodes": ["w0"], "algorithm": "magic"}, "algorithm"),
                        ({"nodes": ["w0"], "algorithm": "flux", "params": {"zz": 1}}, "params.zz"),
                        ({"nodes": ["w0"], "time_limit_s": 0}, "time_limit_s"),
                        ({"nodes": []}, "nodes")):
        r = client.post(f"/v1/jobs/{jid}/scale", json=body)
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == field, (body, r.text)
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 0


def test_what_if_on_the_job_window_changes_nothing(client):
    jid, job = job_with_stats(client)
    r = client.post(f"/v1/jobs/{jid}/what-if", json={"candidates": [2, 3, 4], "algorithm": "flux"})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert [c["nodes"] for c in rep["candidates"]] == [2, 3, 4]
    assert rep["current"]["total_load"] == pytest.approx(sum(LOADS)) and rep["algorithm"] == "flux"
    two = rep["candidates"][0]
    assert len(two["removed"]) == 1 and two["load_on_removing"] == 0 and len(rep["candidates"][2]["added"]) == 1
    # the job's current metrics are the report's
    g = client.get(f"/v1/jobs/{jid}").json()
    assert g["metrics"]["load_distance"] == pytest.approx(rep["current"]["load_distance"])
    assert g["epoch"] == 0 and assignment(g) == assignment(job)
    r = client.post(f"/v1/jobs/{jid}/what-if", json={"candidates": [0]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("candidates[0]")


def test_what_if_on_the_job_with_explicit_changes(client):
    jid, _ = job_with_stats(client)
    r = client.post(f"/v1/jobs/{jid}/what-if", json={"candidates": [{"remove": ["w2"], "add": ["w9"]}]})
    assert r.status_code == 200, r.text
    (cand,) = r.json()["candidates"]
    assert cand["removed"] == ["w2"] and cand["added"] == ["w9"] and cand["load_on_removing"] == 0
