"""The full flow through the app (in process, lifespan run: the ``client`` fixture): register -> stats x N ->
proposal -> execute -> stats with the new epoch, plus duplicates, stale executes, concurrent executes (threads on
one event loop, as under uvicorn), scaling, history and the stateless endpoints. The same flow over real HTTP, with
kill -9 and restart: test_api_restart.py and test_api_postgres.py."""

from __future__ import annotations

import pytest

from evaluation.generators import albic_synthetic
from solvers import metrics
from solvers.model import plan_from_dict
from tests.api.api_helpers import (
    assignment,
    execute_all_at_once,
    named,
    new_id,
    proposal,
    register,
    skewed_stats,
    wait_decided,
)


def _fill_window(client, job_id, job, first_batch=1, n=3, epoch=0):
    last = None
    for b in range(first_batch, first_batch + n):
        r = client.post(f"/v1/jobs/{job_id}/stats", json=skewed_stats(job, b, epoch))
        assert r.status_code == 202, r.text
        last = r.json()
    return last


def test_full_flow(client):
    jid = new_id()
    job = register(client, jid, window_batches=3, budget={"max_migrations": 3}, algorithm="flux")
    assert job["epoch"] == 0
    # contiguous ranges like Flink: 12 key groups over 3 nodes -> 4 each, in order
    assert job["key_groups"] == [f"agg/{k}" for k in range(12)]
    assert job["placement"] == [0] * 4 + [1] * 4 + [2] * 4
    state = _fill_window(client, jid, job, n=3)
    assert state["window"]["ready"] and state["window"]["covered_batches"] == 3
    assert state["window"]["key_groups_covered"] == 12

    prop = proposal(client, jid)
    assert prop["base_epoch"] == 0 and prop["status"] == "ready"
    assert prop["decision"]["worth"] and prop["decision"]["reason"] == "worth"
    plan = prop["plan"]
    assert 0 < plan["metrics"]["migrations"] <= 3
    assert plan["metrics"]["after"]["load_distance"] < plan["metrics"]["before"]["load_distance"]
    # dry run: nothing changed
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 0

    # the plan's metrics agree with the foundation's metrics on the windowed loads
    g = client.get(f"/v1/jobs/{jid}").json()
    assert g["metrics"]["load_distance"] == pytest.approx(plan["metrics"]["before"]["load_distance"], rel=1e-6)

    r = client.post(f"/v1/jobs/{jid}/proposals/{prop['id']}/execute")
    assert r.status_code == 200, r.text
    ex = r.json()
    assert ex["epoch"] == 1 and ex["base_epoch"] == 0
    assert named(ex["placement"], ["w0", "w1", "w2"], job["key_groups"]) == plan["assignment"]  # as computed
    after = client.get(f"/v1/jobs/{jid}").json()
    assert after["epoch"] == 1 and assignment(after) == plan["assignment"] and after["placement"] == ex["placement"]
    assert after["metrics"]["load_distance"] == pytest.approx(plan["metrics"]["after"]["load_distance"], rel=1e-6)

    # stats with the new epoch are accepted; a future epoch is refused
    r = client.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, 4, 1))
    assert r.status_code == 202 and r.json()["epoch"] == 1 and r.json()["counted"]
    r = client.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, 5, 7))
    assert r.status_code == 409

    hist = client.get(f"/v1/jobs/{jid}/history").json()
    assert [e["epoch"] for e in hist["epochs"]] == [0, 1]
    assert hist["epochs"][1]["kind"] == "execute" and hist["epochs"][1]["proposal_id"] == prop["id"]
    assert hist["epochs"][1]["moves"] == plan["moves"]


def test_window_mean_and_duplicates(client):
    jid = new_id()
    register(client, jid, window_batches=2, key_groups=3, nodes=["a", "b"])
    post = lambda b, load: client.post(f"/v1/jobs/{jid}/stats", json={  # noqa: E731
        "batch_id": b, "epoch": 0, "key_groups": [{"id": "agg/0", "load": load}]})
    assert post(10, 4.0).json()["counted"]
    dup = post(10, 400.0).json()
    assert dup["duplicate"] and not dup["counted"]
    assert post(11, 8.0).json()["window"]["batches"] == [10, 11]
    # mean over the window: (4 + 8) / 2 = 6 on node a; the duplicate's 400 was not counted
    m = client.get(f"/v1/jobs/{jid}").json()["metrics"]
    assert m["total_load"] == pytest.approx(6.0)
    assert post(12, 2.0).json()["window"]["batches"] == [11, 12]
    assert client.get(f"/v1/jobs/{jid}").json()["metrics"]["total_load"] == pytest.approx(5.0)
    old = post(10, 1000.0).json()  # evicted long ago: not counted again
    assert not old["counted"]
    assert client.get(f"/v1/jobs/{jid}").json()["metrics"]["total_load"] == pytest.approx(5.0)


def test_stale_execute_is_409(client):
    jid = new_id()
    job = register(client, jid, window_batches=2, algorithm="flux")
    _fill_window(client, jid, job, n=2)
    p1 = proposal(client, jid)
    p2 = proposal(client, jid)
    assert client.post(f"/v1/jobs/{jid}/proposals/{p1['id']}/execute").status_code == 200
    r = client.post(f"/v1/jobs/{jid}/proposals/{p2['id']}/execute")
    assert r.status_code == 409 and "epoch" in r.json()["detail"]
    # executing the same proposal again is also refused, and nothing changed
    assert client.post(f"/v1/jobs/{jid}/proposals/{p1['id']}/execute").status_code == 409
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 1


def test_concurrent_executes_exactly_one_wins(server):
    with server.client() as c:
        jid = new_id()
        job = register(c, jid, window_batches=2, algorithm="flux", key_groups=30)
        _fill_window(c, jid, job, n=2)
        props = [proposal(c, jid) for _ in range(6)]
    assert all(p["base_epoch"] == 0 and p["status"] == "ready" for p in props)
    codes = execute_all_at_once(server, jid, [p["id"] for p in props])
    assert sorted(codes) == [200] + [409] * (len(props) - 1)
    with server.client() as c:
        g = c.get(f"/v1/jobs/{jid}").json()
        assert g["epoch"] == 1
        winner = [p for p in props if p["plan"]["assignment"] == assignment(g)]
        assert winner, "the job's assignment is one of the proposals, applied as computed"
        assert len(c.get(f"/v1/jobs/{jid}/history").json()["epochs"]) == 2


def test_scale_in_drains_over_rounds_then_delete(client):
    jid = new_id()
    # no cooldown: the drain rounds follow each other on the same window
    job = register(client, jid, window_batches=1, algorithm="flux", budget={"max_migrations": 2}, key_groups=6,
                   policy={"cooldown_batches": 0})
    _fill_window(client, jid, job, n=1)
    r = client.post(f"/v1/jobs/{jid}/nodes", json={"remove": ["w2"], "add": [{"id": "w3", "capacity": 2.0}]})
    assert r.status_code == 200, r.text
    st = r.json()
    assert st["epoch"] == 1
    assert {n["id"]: n["removing"] for n in st["nodes"]} == {"w0": False, "w1": False, "w2": True, "w3": False}
    assert client.post(f"/v1/jobs/{jid}/nodes", json={"delete": ["w2"]}).status_code == 409  # not empty yet
    rounds = 0
    while any(n["id"] == "w2" and n["key_groups"] for n in client.get(f"/v1/jobs/{jid}").json()["nodes"]):
        p = proposal(client, jid)
        assert p["plan"]["metrics"]["migrations"] <= 2
        # draining a removing node is always worth it (the policy's noise and gain rules do not hold it back)
        assert p["decision"]["worth"] and p["decision"]["reason"] == "drain", p["decision"]
        assert client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute").status_code == 200
        rounds += 1
        assert rounds <= 5
    assert rounds >= 1  # w2 had 2 key groups and a budget of 2 per round
    r = client.post(f"/v1/jobs/{jid}/nodes", json={"delete": ["w2"]})
    assert r.status_code == 200 and "w2" not in [n["id"] for n in r.json()["nodes"]]
    assert client.post(f"/v1/jobs/{jid}/nodes", json={"delete": ["w0"]}).status_code == 409  # not removing


def test_node_change_makes_old_proposals_stale(client):
    jid = new_id()
    job = register(client, jid, window_batches=1, algorithm="flux")
    _fill_window(client, jid, job, n=1)
    p = proposal(client, jid)
    assert client.post(f"/v1/jobs/{jid}/nodes", json={"add": ["w9"]}).status_code == 200
    assert client.post(f"/v1/jobs/{jid}/proposals/{p['id']}/execute").status_code == 409


def test_put_is_idempotent_and_topology_conflicts(client):
    jid = new_id()
    register(client, jid)
    again = client.put(f"/v1/jobs/{jid}", json={"nodes": ["w0", "w1", "w2"],
                                               "operators": [{"id": "agg", "key_groups": 12}], "window_batches": 9})
    assert again.status_code == 200 and again.json()["window_batches"] == 9
    other = client.put(f"/v1/jobs/{jid}", json={"nodes": ["w0"], "operators": [{"id": "agg", "key_groups": 12}]})
    assert other.status_code == 409
    # after a node change, a client restarted on the job's current nodes registers the same job
    assert client.post(f"/v1/jobs/{jid}/nodes", json={"add": ["w3"]}).status_code == 200
    current = client.put(f"/v1/jobs/{jid}", json={"nodes": ["w0", "w1", "w2", "w3"],
                                                 "operators": [{"id": "agg", "key_groups": 12}], "window_batches": 9})
    assert current.status_code == 200 and len(current.json()["nodes"]) == 4, current.text
    assert client.put(f"/v1/jobs/{jid}", json={"nodes": ["w0", "w1", "w3"],
                                               "operators": [{"id": "agg", "key_groups": 12}]}).status_code == 409
    assert client.delete(f"/v1/jobs/{jid}").status_code == 204
    assert client.get(f"/v1/jobs/{jid}").status_code == 404
    assert client.delete(f"/v1/jobs/{jid}").status_code == 404


def test_explicit_key_groups_and_404s(client):
    jid = new_id()
    r = client.put(f"/v1/jobs/{jid}", json={
        "nodes": [{"id": "a", "capacity": 2}, "b"],
        "key_groups": [{"id": "x", "operator": "op", "node": "a", "state_bytes": 10}, {"id": "y", "node": "b"}]})
    assert r.status_code == 201
    assert r.json()["key_groups"] == ["x", "y"] and r.json()["placement"] == [0, 1]
    assert assignment(r.json()) == {"x": "a", "y": "b"}
    assert client.post(f"/v1/jobs/{jid}/proposals", json={}).status_code == 409  # no statistics yet
    assert client.get(f"/v1/jobs/{jid}/proposals/deadbeef").status_code == 404
    assert client.post(f"/v1/jobs/{jid}/proposals/deadbeef/execute").status_code == 404
    assert client.get("/v1/jobs/nope-nope").status_code == 404
    assert client.post("/v1/jobs/nope-nope/stats", json={"batch_id": 1, "epoch": 0}).status_code == 404


def test_slow_solve_returns_202_then_poll(client):
    jid = new_id()
    job = register(client, jid, window_batches=1, algorithm="flux")
    _fill_window(client, jid, job, n=1)
    r = client.post(f"/v1/jobs/{jid}/proposals", json={"wait_s": 0})
    assert r.status_code == 202 and r.json()["status"] == "pending"
    assert r.headers["location"].endswith(r.json()["id"])
    import time

    for _ in range(200):
        g = client.get(r.headers["location"])
        assert g.status_code == 200
        if g.json()["status"] != "pending":
            break
        time.sleep(0.05)
    assert g.json()["status"] == "ready" and g.json()["plan"]["assignment"] and g.json()["decision"]["worth"]
    assert client.post(r.headers["location"] + "/execute").status_code == 200


def _steady(job: dict, batch_id: int, epoch: int, hot: str) -> dict:
    """A noiseless batch: key group ``hot`` carries 100, the others 1 each (the same every batch)."""
    return {"batch_id": batch_id, "epoch": epoch, "load": [100.0 if k == hot else 1.0 for k in job["key_groups"]]}


def test_auto_mode_answers_with_the_placement_on_the_next_post(client):
    jid = new_id()
    job = register(client, jid, window_batches=2, algorithm="flux", auto=True,
                   policy={"load_distance_threshold": 1.0, "cooldown_batches": 3})
    assert job["auto"] is True and job["policy"]["cooldown_batches"] == 3
    r1 = client.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, 1, 0)).json()
    assert r1["apply"] is None and r1["decision"]["reason"] == "window"  # window not full yet
    r2 = client.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, 2, 0)).json()
    # the round is solved in the background: this answer does not wait for it
    assert r2["apply"] is None and r2["epoch"] == 0
    assert r2["decision"]["reason"] == "started" and r2["decision"]["batch_id"] == 2
    g = wait_decided(client, jid)
    assert g["epoch"] == 1 and g["decision"]["worth"] and g["decision"]["reason"] == "worth"
    # the next post (the driver still on epoch 0) carries the new placement
    r3 = client.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, 3, 0)).json()
    ap = r3["apply"]
    assert ap is not None and ap["epoch"] == 1 and r3["epoch"] == 1
    assert ap["placement"] == g["placement"] and ap["nodes"] == ["w0", "w1", "w2"]
    assert ap["placement"] != job["placement"]
    hist = client.get(f"/v1/jobs/{jid}/history").json()["epochs"]
    assert hist[1]["kind"] == "auto" and hist[1]["moves"] and hist[1]["decision"]["reason"] == "worth"
    assert named(ap["placement"], ap["nodes"], job["key_groups"]) == {
        **assignment(job), **{m["key_group"]: m["to"] for m in hist[1]["moves"]}}
    # a driver on the new epoch gets no placement to apply; cooldown: batches 3 and 4 start no round
    r4 = client.post(f"/v1/jobs/{jid}/stats", json=_steady(job, 4, 1, "agg/5")).json()
    assert r4["apply"] is None and r4["decision"]["reason"] == "cooldown"
    # after the cooldown a new imbalance (one hot key group, no noise) starts a round again
    r5 = client.post(f"/v1/jobs/{jid}/stats", json=_steady(job, 5, 1, "agg/5")).json()
    assert r5["decision"]["reason"] == "started", r5["decision"]
    assert wait_decided(client, jid)["epoch"] == 2
    r6 = client.post(f"/v1/jobs/{jid}/stats", json=_steady(job, 6, 1, "agg/5")).json()
    assert r6["apply"] is not None and r6["apply"]["epoch"] == 2
    assert [e["kind"] for e in client.get(f"/v1/jobs/{jid}/history").json()["epochs"]] == ["register", "auto", "auto"]


def test_auto_threshold_not_exceeded_does_nothing(client):
    jid = new_id()
    job = register(client, jid, window_batches=1, algorithm="flux", auto=True,
                   policy={"load_distance_threshold": 1e9, "cooldown_batches": 0})
    for b in range(1, 4):
        r = client.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, b, 0)).json()
        assert r["apply"] is None and r["decision"]["reason"] == "threshold" and not r["decision"]["worth"]
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 0


# ---------------------------------------------------------------------- stateless
def test_plans_endpoint_matches_foundation(client):
    problem = albic_synthetic(6, key_groups_per_node=10, seed=3, max_migrations=5)
    doc = problem.to_dict()
    for algo in ["flux"] + (["albic-milp"] if any(a["name"] == "albic-milp" for a in
                                                  client.get("/v1/algorithms").json()) else []):
        r = client.post("/v1/plans", json={"problem": doc, "algorithm": algo, "time_limit_s": 1})
        assert r.status_code == 200, r.text
        plan = r.json()
        assert plan["algorithm"] == algo
        p = plan_from_dict(problem, plan)  # a valid plan of this problem (moves consistent)
        assert metrics.migrations(problem, p.assignment) == plan["metrics"]["migrations"] <= 5
        assert plan["metrics"]["after"]["load_distance"] == pytest.approx(
            metrics.load_distance(problem, p.assignment), rel=1e-5)
        assert plan["metrics"]["after"]["load_distance"] <= plan["metrics"]["before"]["load_distance"]


def test_evaluate_endpoint(client):
    problem = albic_synthetic(4, key_groups_per_node=5, seed=1)
    doc = problem.to_dict()
    plan = client.post("/v1/plans", json={"problem": doc, "algorithm": "flux"}).json()
    r = client.post("/v1/evaluate", json={"problem": doc, "plan": plan})
    assert r.status_code == 200
    ev = r.json()
    assert ev["after"] == plan["metrics"]["after"] and ev["migrations"] == plan["metrics"]["migrations"]
    assert ev["within_budget"] is True
    bad = dict(plan, assignment={**plan["assignment"], problem.kg_ids[0]: "nowhere"})
    r = client.post("/v1/evaluate", json={"problem": doc, "plan": bad})
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("plan.assignment")


def test_what_if_scaling(client):
    problem = albic_synthetic(4, key_groups_per_node=10, seed=2, max_migrations=4)
    doc = problem.to_dict()
    r = client.post("/v1/what-if/scaling", json={
        "problem": doc, "candidates": [2, 4, 6], "target_load_distance": 5.0, "algorithm": "flux"})
    assert r.status_code == 200, r.text
    out = r.json()
    c = out["candidates"]
    assert [x["nodes"] for x in c] == [2, 4, 6]
    assert len(c[0]["removed"]) == 2 and len(c[2]["added"]) == 2
    for x in c:
        assert x["rounds"] == (0 if x["migrations"] == 0 else -(-x["migrations"] // 4))
        assert x["meets_target"] == (x["load_distance"] <= 5.0 + 1e-9 and x["load_on_removing"] <= 1e-9
                                     and x["max_utilisation"] <= out["max_utilisation"] * (1 + 1e-9))
    # default utilisation limit: the hottest node today, so shrinking to 2 of 4 nodes (mean load x2) cannot qualify
    assert out["max_utilisation"] == pytest.approx(metrics.state_metrics(problem, problem.current)["max_utilisation"])
    assert not c[0]["meets_target"]
    meeting = [i for i, x in enumerate(c) if x["meets_target"]]
    if meeting:
        assert out["recommendation"] in meeting
        assert c[out["recommendation"]]["nodes"] == min(c[i]["nodes"] for i in meeting)
    else:
        assert out["recommendation"] is None
    r = client.post("/v1/what-if/scaling", json={"problem": doc, "candidates": [0]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"].startswith("candidates[0]")  # exact: test_edge


def test_what_if_scaling_explicit_changes(client):
    problem = albic_synthetic(4, key_groups_per_node=10, seed=2, max_migrations=4)
    doc = problem.to_dict()
    r = client.post("/v1/what-if/scaling", json={
        "problem": doc, "candidates": [{"add": ["x1"], "remove": ["w0", "w1"]}], "algorithm": "flux"})
    assert r.status_code == 200, r.text
    (x,) = r.json()["candidates"]
    assert x["nodes"] == 3 and x["added"] == ["x1"] and x["removed"] == ["w0", "w1"] and x["load_on_removing"] == 0
    r = client.post("/v1/what-if/scaling", json={"problem": doc, "candidates": [{"remove": ["zz"]}]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "candidates[0].remove[0]"


def test_partitioning_refuses_a_bad_spec_and_builds_a_document(client):
    r = client.post("/v1/partitioning", json={"nonsense": True})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"]
    r = client.post("/v1/partitioning", json={"algorithm": "readj", "channels": 3,
                                              "frequencies": {"a": 0.5, "b": 0.2, "c": 0.1}})
    assert r.status_code == 200, r.text
    assert r.json()["channels"] == 3


def test_metrics_endpoint(client):
    client.get("/healthz")
    text = client.get("/metrics").text
    assert 'rebalancer_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert "rebalancer_request_seconds_bucket" in text
    assert "rebalancer_jobs " in text


def test_size_caps_413(client):
    jid = new_id()
    r = client.put(f"/v1/jobs/{jid}", json={"nodes": ["a"], "operators": [{"id": "o", "key_groups": 10_000_000}]})
    assert r.status_code == 413


def test_the_default_and_the_cap_of_the_time_limit_are_the_servers_settings(tmp_path):
    """``REBALANCER_DEFAULT_TIME_LIMIT_S`` applies where a job gives none; ``REBALANCER_MAX_TIME_LIMIT_S`` caps."""
    from tests.helpers.server import InProcessServer

    with InProcessServer(database_url=f"sqlite:///{tmp_path}/t.db", default_time_limit_s=0.25,
                         max_time_limit_s=3.0).start() as srv, srv.client() as c:
        spec = {"nodes": ["w0", "w1"], "operators": [{"id": "agg", "key_groups": 4}]}
        assert c.put("/v1/jobs/dflt", json=spec).json()["time_limit_s"] == 0.25
        assert c.put("/v1/jobs/capd", json={**spec, "time_limit_s": 60}).json()["time_limit_s"] == 3.0
        assert c.put("/v1/jobs/own", json={**spec, "time_limit_s": 2}).json()["time_limit_s"] == 2.0
