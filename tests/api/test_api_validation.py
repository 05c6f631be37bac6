"""Every class of invalid body answers 422 naming the field (foundation path style) and the reason; never a 500."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from api_helpers import new_id, register  # noqa: E402

PROBLEM = {"nodes": [{"id": "w0"}, {"id": "w1"}],
           "key_groups": [{"id": "a", "node": "w0", "load": 1.0}, {"id": "b", "node": "w1", "load": 2.0}]}


def _field(r) -> str:
    assert r.status_code == 422, (r.status_code, r.text)
    d = r.json()["detail"]
    assert isinstance(d, list) and d and d[0]["reason"]
    return d[0]["field"]


def _with(**kw):
    doc = {"nodes": [dict(n) for n in PROBLEM["nodes"]], "key_groups": [dict(k) for k in PROBLEM["key_groups"]]}
    doc.update(kw)
    return doc


@pytest.mark.parametrize("problem, field", [
    (_with(key_groups=[{"id": "a", "node": "w0", "load": -1}]), "problem.key_groups[0].load"),
    (_with(key_groups=[{"id": "a", "node": "w0", "load": "x"}]), "problem.key_groups[0].load"),
    (_with(key_groups=[{"id": "a", "node": "w0"}]), "problem.key_groups[0].load"),
    (_with(key_groups=[{"id": "a", "node": "zz", "load": 1}]), "problem.key_groups[0].node"),
    (_with(key_groups=[{"id": "a", "node": "w0", "load": 1}, {"id": "a", "node": "w1", "load": 1}]),
     "problem.key_groups[1].id"),
    (_with(nodes=[{"id": "w0", "capacity": 0}]), "problem.nodes[0].capacity"),
    (_with(nodes=[{"id": "w0"}, {"id": "w0"}]), "problem.nodes[1].id"),
    (_with(nodes=[{"id": "w0", "removing": True}, {"id": "w1", "removing": True}]), "problem.nodes"),
    (_with(nodes=[]), "problem.nodes"),
    (_with(communication=[{"src": "a", "dst": "nope", "rate": 1}]), "problem.communication[0].dst"),
    (_with(communication=[{"src": "a", "dst": "b", "rate": -2}]), "problem.communication[0].rate"),
    (_with(budget={"max_migrations": -1}), "problem.budget.max_migrations"),
    (_with(budget={"max_migrations": 1.5}), "problem.budget.max_migrations"),
    (_with(colour="red"), "problem.colour"),
    (_with(key_groups=[{"id": "a", "node": "w0", "load": 1, "weight": 3}]), "problem.key_groups[0].weight"),
])
def test_plan_bad_problem(client, problem, field):
    assert _field(client.post("/v1/plans", json={"problem": problem, "algorithm": "flux"})) == field


def test_plan_bad_algorithm_params_time_limit(client):
    assert _field(client.post("/v1/plans", json={"problem": PROBLEM, "algorithm": "magic"})) == "algorithm"
    assert _field(client.post("/v1/plans", json={"problem": PROBLEM, "algorithm": "flux",
                                                  "params": {"bogus": 1}})) == "params.bogus"
    assert _field(client.post("/v1/plans", json={"problem": PROBLEM, "time_limit_s": 0})) == "time_limit_s"
    assert _field(client.post("/v1/plans", json={"problem": PROBLEM, "time_limit_s": -1})) == "time_limit_s"
    assert _field(client.post("/v1/plans", json={"algorithm": "flux"})) == "problem"


def test_non_json_and_wrong_types(client):
    r = client.post("/v1/plans", content=b"{not json", headers={"content-type": "application/json"})
    assert _field(r) == "body"
    assert _field(client.post("/v1/plans", json=[1, 2])) == "body"
    assert _field(client.post("/v1/plans", json={"problem": "text"})) == "problem"
    # NaN / Infinity are not numbers here
    raw = b'{"problem": {"nodes": [{"id": "w0"}], "key_groups": [{"id": "a", "node": "w0", "load": NaN}]}}'
    r = client.post("/v1/plans", content=raw, headers={"content-type": "application/json"})
    assert _field(r) == "problem.key_groups[0].load"


def test_job_registration_errors(client):
    jid = new_id()
    put = lambda body: client.put(f"/v1/jobs/{jid}", json=body)  # noqa: E731
    assert _field(put({"nodes": []})) == "nodes"
    assert _field(put({"nodes": ["a"]})) == "key_groups"  # neither key_groups nor operators
    assert _field(put({"nodes": ["a"], "key_groups": [], "operators": []})) == "key_groups"
    assert _field(put({"nodes": ["a"], "key_groups": [{"id": "k", "node": "b"}]})) == "key_groups[0].node"
    assert _field(put({"nodes": ["a", "a"], "operators": [{"id": "o", "key_groups": 2}]})) == "nodes[1].id"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 0}]})) == "operators[0].key_groups"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}, {"id": "o", "key_groups": 1}]})
                  ) == "operators[1].id"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}], "algorithm": "nope"})) == \
        "algorithm"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}], "algorithm": "flux",
                       "params": {"x": 1}})) == "params.x"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}], "window_batches": 0})) == \
        "window_batches"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}],
                       "policy": {"cooldown_batches": -1}})) == "policy.cooldown_batches"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}],
                       "policy": {"min_gain": "0.1"}})) == "policy.min_gain"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}],
                       "policy": {"hysteresis": 2}})) == "policy.hysteresis"
    # the object of earlier releases is refused (auto is a flag; its settings are the policy's)
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}],
                       "auto": {"enabled": True, "cooldown_batches": 1}})) == "auto"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}], "auto": 1})) == "auto"
    assert _field(put({"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}],
                       "budget": {"max_migrations": -3}})) == "budget.max_migrations"
    assert _field(put({"nodes": [{"id": "a", "capacity": -1}], "operators": [{"id": "o", "key_groups": 1}]})) == \
        "nodes[0].capacity"
    assert client.get(f"/v1/jobs/{jid}").status_code == 404  # nothing was registered


def test_stats_errors(client):
    jid = new_id()
    register(client, jid, key_groups=4)
    post = lambda body: client.post(f"/v1/jobs/{jid}/stats", json=body)  # noqa: E731
    ok = {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": 1}]}
    assert _field(post({**ok, "batch_id": -1})) == "batch_id"
    assert _field(post({k: v for k, v in ok.items() if k != "batch_id"})) == "batch_id"
    assert _field(post({**ok, "epoch": "x"})) == "epoch"
    assert _field(post({**ok, "key_groups": [{"id": "agg/0", "load": -5}]})) == "key_groups[0].load"
    assert _field(post({**ok, "key_groups": [{"id": "agg/0"}]})) == "key_groups[0].load"
    assert _field(post({**ok, "key_groups": [{"id": "agg/0", "load": 1}, {"id": "agg/9", "load": 1}]})) == \
        "key_groups[1].id"
    assert _field(post({**ok, "key_groups": [{"id": "agg/1", "load": 1}, {"id": "agg/1", "load": 1}]})) == \
        "key_groups[1].id"
    assert _field(post({**ok, "key_groups": [{"id": "agg/0", "load": 1, "state_bytes": -1}]})) == \
        "key_groups[0].state_bytes"
    assert _field(post({**ok, "communication": [{"src": "agg/0", "dst": "x", "rate": 1}]})) == "communication[0].dst"
    assert _field(post({**ok, "communication": [{"src": "agg/0", "dst": "agg/1", "rate": -1}]})) == \
        "communication[0].rate"
    assert _field(post({**ok, "extra": 1})) == "extra"
    r = client.post(f"/v1/jobs/{jid}/stats", content=b"[", headers={"content-type": "application/json"})
    assert _field(r) == "body"
    # none of the rejected batches was counted
    assert client.get(f"/v1/jobs/{jid}").json()["window"]["covered_batches"] == 0


def test_proposal_and_nodes_errors(client):
    jid = new_id()
    register(client, jid, key_groups=4)
    client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": 1}]})
    assert _field(client.post(f"/v1/jobs/{jid}/proposals", json={"algorithm": "nope"})) == "algorithm"
    assert _field(client.post(f"/v1/jobs/{jid}/proposals", json={"algorithm": "flux", "params": {"q": 1}})) == \
        "params.q"
    assert _field(client.post(f"/v1/jobs/{jid}/proposals", json={"time_limit_s": 0})) == "time_limit_s"
    assert _field(client.post(f"/v1/jobs/{jid}/nodes", json={"remove": ["zz"]})) == "remove[0]"
    assert _field(client.post(f"/v1/jobs/{jid}/nodes", json={"add": [{"id": "w0", "capacity": 5}]})) == "add[0].id"
    # re-adding an identical node (a retried request) changes nothing
    r = client.post(f"/v1/jobs/{jid}/nodes", json={"add": ["w0"]})
    assert r.status_code == 200 and r.json()["epoch"] == 0
    assert _field(client.post(f"/v1/jobs/{jid}/nodes", json={"remove": ["w0", "w1", "w2"]})) == "remove"
    assert _field(client.post(f"/v1/jobs/{jid}/nodes", json={"delete": ["zz"]})) == "delete[0]"
    assert client.get(f"/v1/jobs/{jid}").json()["epoch"] == 0


def test_evaluate_and_scaling_errors(client):
    assert _field(client.post("/v1/evaluate", json={"problem": PROBLEM, "plan": {"assignment": {"a": "w0"}}})) \
        .startswith("plan.assignment")
    assert _field(client.post("/v1/evaluate", json={"problem": PROBLEM, "plan": {}})) == "plan.assignment"
    assert _field(client.post("/v1/what-if/scaling", json={"problem": PROBLEM, "candidates": []})) == "candidates"
    assert _field(client.post("/v1/what-if/scaling", json={"problem": PROBLEM, "candidates": [2],
                                                             "target_load_distance": -1})) == "target_load_distance"


def test_booleans_are_not_numbers_and_ids_have_a_length_limit(client):
    # "epoch": false, "wait_s": false, "max_migration_bytes": false are not 0
    jid = new_id()
    register(client, jid, key_groups=4)
    stats = {"batch_id": 1, "epoch": False, "key_groups": [{"id": "agg/0", "load": 1}]}
    assert _field(client.post(f"/v1/jobs/{jid}/stats", json=stats)) == "epoch"
    stats = {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": 1}]}
    assert client.post(f"/v1/jobs/{jid}/stats", json=stats).status_code == 202
    assert _field(client.post(f"/v1/jobs/{jid}/proposals", json={"wait_s": False})) == "wait_s"
    assert _field(client.put(f"/v1/jobs/{new_id()}", json={"nodes": ["a"], "operators": [{"id": "o", "key_groups": 1}],
                                                         "budget": {"max_migration_bytes": False}})) \
        == "budget.max_migration_bytes"
    assert _field(client.post("/v1/plans", json={"problem": _with(budget={"max_migration_bytes": False})})) == \
        "problem.budget.max_migration_bytes"
    long_id = "n" * 300  # ids have a length limit: never echoed at any length in every response
    assert _field(client.put(f"/v1/jobs/{new_id()}", json={"nodes": [long_id], "operators": [
        {"id": "o", "key_groups": 1}]})) == "nodes[0]"
    assert _field(client.post("/v1/plans", json={"problem": _with(nodes=[{"id": long_id}])})) == "problem.nodes[0].id"


def test_wrong_content_type_is_415(client):
    # every route with a body says 415 (not a misleading 422) for a body that is not JSON
    jid = new_id()
    register(client, jid, key_groups=4)
    stats = b'{"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": 1}]}'
    for path, method in ((f"/v1/jobs/{jid}/stats", "POST"), ("/v1/plans", "POST"), (f"/v1/jobs/{jid}", "PUT"),
                         (f"/v1/jobs/{jid}/proposals", "POST"), ("/v1/evaluate", "POST")):
        r = client.request(method, path, content=stats, headers={"content-type": "text/plain"})
        assert r.status_code == 415, (path, r.status_code, r.text)
        assert "application/json" in r.json()["detail"]
    assert client.get(f"/v1/jobs/{jid}").json()["window"]["covered_batches"] == 0
    r = client.post(f"/v1/jobs/{jid}/stats", content=stats, headers={"content-type": "application/json; charset=utf-8"})
    assert r.status_code == 202, r.text


def test_loads_whose_sums_overflow_are_422_with_the_field(client):
    # two key groups at 1.7e308: each finite, their sum is not (no 500, null metrics or proposal pending forever)
    huge = _with(key_groups=[{"id": "a", "node": "w0", "load": 1.7e308}, {"id": "b", "node": "w1", "load": 1.7e308}])
    for path, extra in (("/v1/plans", {"algorithm": "albic-milp"}), ("/v1/plans", {"algorithm": "flux"}),
                        ("/v1/evaluate", {"plan": {"assignment": {"a": "w0", "b": "w1"}}}),
                        ("/v1/what-if/scaling", {"candidates": [1]})):
        r = client.post(path, json={"problem": huge, **extra})
        assert _field(r) == "problem.key_groups[0].load", (path, r.text)
    jid = new_id()
    register(client, jid, key_groups=4)
    kgs = [{"id": "agg/0", "load": 1.7e308}, {"id": "agg/1", "load": 1.7e308}]
    stats = {"batch_id": 1, "epoch": 0, "key_groups": kgs}
    assert _field(client.post(f"/v1/jobs/{jid}/stats", json=stats)) == "key_groups[0].load"


@pytest.mark.parametrize("spec, status, needle", [
    # a 60-byte body must not run for minutes and take gigabytes; 10**400 is not an OverflowError (500)
    ({"channels": 4096, "replicas": 30000, "frequencies": {"a": 0.5}}, 413, "channels"),
    ({"channels": 1000, "replicas": 30000, "frequencies": {"a": 0.5}}, 413, "REBALANCER_MAX_PARTITION_RING"),
    ({"algorithm": "redist", "channels": 1024, "frequencies": {f"k{i}": 1e-6 for i in range(20000)}}, 413,
     "REBALANCER_MAX_PARTITION_WORK"),
    ({"channels": 4, "frequencies": {"a": 0.5}, "domain_size": 10**400}, 422, "domain_size"),
    ({"channels": 4, "frequencies": {"a": 0.5}, "domain_size": True}, 422, "domain_size"),
    ({"channels": 4, "frequencies": {"a": 0.5},
      "previous": {"channels": 4096, "consistent_hash": {"replicas": 1000, "seed": 0}}}, 413, "previous.channels"),
    # the new ring inherits the previous function's replicas: 1024 × 100,000 points, not 1024 × 1000
    ({"channels": 1024, "frequencies": {"a": 0.5},
      "previous": {"channels": 8, "consistent_hash": {"replicas": 100000}}}, 413, "1024 × 100000"),
])
def test_partitioning_caps(client, spec, status, needle):
    r = client.post("/v1/partitioning", json=spec, timeout=30)
    assert r.status_code == status, r.text
    assert needle in r.text


def test_partitioning_within_the_caps_still_works(client):
    r = client.post("/v1/partitioning", json={"algorithm": "readj", "channels": 8,
                                              "frequencies": {"a": 0.3, "b": 0.2}}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["channels"] == 8


def test_errors_do_not_echo_huge_names(client):
    # a huge id or name does not come back in full in the error
    huge = "p" * 100_000
    r = client.post("/v1/plans", json={"problem": PROBLEM, "algorithm": "flux", "params": {huge: 1}})
    assert r.status_code == 422 and len(r.text) < 2000, len(r.text)
    r = client.post("/v1/plans", json={"problem": PROBLEM, "algorithm": huge})
    assert _field(r) == "algorithm" and len(r.text) < 2000


def test_an_unknown_field_with_a_huge_name_is_not_echoed_in_full(client):
    huge = "p" * 100_000
    r = client.post("/v1/plans", json={"problem": {**PROBLEM, huge: 1}})
    assert _field(r).startswith("problem.p") and len(r.text) < 2000, len(r.text)
    jid = new_id()
    register(client, jid, key_groups=4)
    r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 1, "epoch": 0, "load": [1] * 4, huge: 1})
    assert r.status_code == 422 and len(r.text) < 2000, len(r.text)


def test_time_limit_given_as_a_param_names_the_right_field(client):
    # the API lists time_limit_s; a params.time_limit says where it belongs instead of "unknown"
    r = client.post("/v1/plans", json={"problem": PROBLEM, "algorithm": "flux", "params": {"time_limit": 5}})
    assert _field(r) == "params.time_limit"
    assert "time_limit_s" in r.json()["detail"][0]["reason"]


def test_partitioning_caps_follow_the_settings(tmp_path):
    from tests.helpers.server import InProcessServer

    with InProcessServer(database_url=f"sqlite:///{tmp_path}/db.sqlite", max_partition_channels=8).start() as srv, \
            srv.client() as c:
        r = c.post("/v1/partitioning", json={"channels": 9, "frequencies": {"a": 0.5}})
        assert r.status_code == 413 and "REBALANCER_MAX_PARTITION_CHANNELS" in r.text
        assert c.post("/v1/partitioning", json={"channels": 8, "frequencies": {"a": 0.5}}).status_code == 200
