"""One contract: every wire document is defined once (:mod:`rebalancer_client.contract`). The API validates bodies
against it, derives its OpenAPI schema from it and answers with it; ``rebalancer evaluate`` and
``POST /v1/evaluate`` return the same document."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from cli.main import main as cli_main
from rebalancer_client import contract as c
from rebalancer_client.wire import wire_name

BASE = {
    "nodes": [{"id": "w0", "capacity": 1, "removing": False, "limits": {"memory": 8}}, {"id": "w1"}, {"id": "w2"}],
    "key_groups": [{"id": "a", "operator": "agg", "node": "w0", "load": 3, "state_bytes": 10,
                    "resources": {"memory": 1.5}},
                   {"id": "b", "node": "w1", "load": 1.0}, {"id": "c", "node": "w1", "load": 0}],
    "communication": [{"src": "a", "dst": "b", "rate": 2}],
    "communication_cost": 0.1,
    "budget": {"max_migrations": 1, "max_migration_bytes": 100},
}
LONG = "x" * (c.MAX_ID_LENGTH + 1)


def _set(path: str, value):
    """A copy of BASE with the value at a dotted path (``nodes.0.capacity``) replaced (``...`` deletes it)."""
    doc = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    target = doc
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    key = int(last) if last.isdigit() else last
    if value is ...:
        del target[key]
    else:
        target[key] = value
    return doc


def _fields(cls) -> set[str]:
    return {wire_name(f.name) for f in dataclasses.fields(cls)}


@pytest.fixture(scope="module")
def openapi(client) -> dict:
    return client.get("/openapi.json").json()


def test_the_openapi_schema_is_the_contracts(openapi):
    comps = openapi["components"]["schemas"]
    body = openapi["paths"]["/v1/plans"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/PlanRequest"}
    for name in ("PlanRequest", "Problem", "Node", "KeyGroup", "Edge", "Budget", "JobSpec", "Policy", "Stats",
                 "ProposalRequest", "ExecuteRequest", "NodesRequest", "ScaleRequest", "WhatIfQuestion"):
        cls = getattr(c, name)
        assert set(comps[name]["properties"]) == _fields(cls), name
        assert comps[name].get("additionalProperties") is False, f"{name}: unknown fields are refused"
    # the Check markers are the schema's constraints
    kg, node = comps["KeyGroup"]["properties"], comps["Node"]["properties"]
    assert kg["load"]["minimum"] == 0 and kg["id"]["maxLength"] == c.MAX_ID_LENGTH
    assert node["capacity"]["exclusiveMinimum"] == 0 and comps["Problem"]["properties"]["nodes"]["minItems"] == 1
    # the answers too (response_model), and the one error shape for every 422
    ok = openapi["paths"]["/v1/plans"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/Plan"} and set(comps["Plan"]["properties"]) == _fields(c.Plan)
    assert comps["HTTPValidationError"] == {"$ref": "#/components/schemas/Error"}


def _integer_bounds(node, path=""):
    """(path, keyword, bound) of every bound of an integer schema in ``node``."""
    if isinstance(node, dict):
        if node.get("type") == "integer":
            yield from ((path, k, node[k]) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
                        if k in node)
        for k, v in node.items():
            yield from _integer_bounds(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _integer_bounds(v, f"{path}[{i}]")


def test_integer_bounds_are_the_contracts_exactly(openapi):
    """A sub-document that is also part of an answer (Budget, Policy) has the contract's schema, not FastAPI's
    rendering, whose OpenAPI model holds bounds as floats: 2^63 - 1 became 9.223372036854776e+18, i.e. 2^63, which a
    client validating against the schema would send and the server refuse."""
    bounds = list(_integer_bounds(openapi))
    assert bounds and not [b for b in bounds if not isinstance(b[2], int)], bounds
    budget = openapi["components"]["schemas"]["Budget"]["properties"]["max_migrations"]["anyOf"][0]
    assert budget["maximum"] == c.MAX_INT64 and budget["minimum"] == 0


def test_an_integer_over_its_bound_is_refused_naming_the_bound_exactly(client):
    r = client.post("/v1/plans", json={"algorithm": "flux", "problem": _set("budget.max_migrations", c.MAX_INT64 + 1)})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == [{"field": "problem.budget.max_migrations",
                                   "reason": f"must be ≤ {c.MAX_INT64}, got {c.MAX_INT64 + 1}"}]


def test_every_operation_a_standby_refuses_documents_the_421(openapi):
    """A replica that is not the leader answers 421 naming the leader (tests/ops/test_ha_postgres.py) on every
    operation but the probes, the metrics and the documentation."""
    from api.middleware import OPEN_PATHS

    for path, ops in openapi["paths"].items():
        for method, op in ops.items():
            documented = "421" in op["responses"]
            assert documented == (path not in OPEN_PATHS and path != "/metrics"), (method, path)
            if documented:
                assert set(op["responses"]["421"]["headers"]) == {"Rebalancer-Leader", "Rebalancer-Role"}


def test_answers_are_the_contracts_documents(client):
    plan = client.post("/v1/plans", json={"problem": BASE, "algorithm": "flux"}).json()
    assert set(plan) == _fields(c.Plan) - ({"details"} if "details" not in plan else set())
    assert set(plan["metrics"]) == _fields(c.PlanMetrics)
    assert set(plan["metrics"]["after"]) == _fields(c.StateMetrics)
    assert set(plan["solver"]) <= _fields(c.SolverInfo)
    ev = client.post("/v1/evaluate", json={"problem": BASE, "plan": plan}).json()
    assert set(ev) == _fields(c.Evaluation)
    assert all(set(m) == {"key_group", "from", "to", "state_bytes"} for m in ev["moves"])


def test_cli_evaluate_and_api_evaluate_return_the_same_document(client, tmp_path, capsys):
    plan = {"assignment": {"a": "w1", "b": "w1", "c": "w1"}}
    (tmp_path / "p.json").write_text(json.dumps(BASE))
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert cli_main(["evaluate", "--input", str(tmp_path / "p.json"), "--plan", str(tmp_path / "plan.json")]) == 0
    from_cli = json.loads(capsys.readouterr().out)
    r = client.post("/v1/evaluate", json={"problem": BASE, "plan": plan})
    assert r.status_code == 200, r.text
    assert r.json() == from_cli
    assert from_cli["moves"] == [{"key_group": "a", "from": "w0", "to": "w1", "state_bytes": 10}]


@pytest.mark.parametrize("body, field", [
    ({"problem": _set("nodes.0.limits.memory", -1)}, "problem.nodes[0].limits.memory"),
    ({"problem": _set("key_groups.0.state_bytes", False)}, "problem.key_groups[0].state_bytes"),
    ({"problem": _set("key_groups.0.load", "3")}, "problem.key_groups[0].load"),
    ({"problem": _set("nodes.0.removing", 1)}, "problem.nodes[0].removing"),
    ({"problem": _set("budget.max_migrations", 2.0)}, "problem.budget.max_migrations"),
    ({"problem": _set("nodes.2.id", LONG)}, "problem.nodes[2].id"),
    ({"problem": _set("nodes.0.colour", "red")}, "problem.nodes[0].colour"),
    ({"problem": _set("key_groups.0.load", ...)}, "problem.key_groups[0].load"),
    ({"problem": "not a document"}, "problem"),
    ({"problem": BASE, "time_limit_s": False}, "time_limit_s"),
    ({"problem": BASE, "time_limit_s": "1"}, "time_limit_s"),
    ({"problem": BASE, "params": []}, "params"),
])
def test_plan_route_refuses_what_the_contract_refuses(client, body, field):
    r = client.post("/v1/plans", json={"algorithm": "flux", **body})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field


def test_plan_route_accepts_nulls_the_contract_allows(client):
    doc = _set("budget", None)
    doc["communication"] = None
    doc["communication_cost"] = None
    doc["key_groups"][0]["operator"] = None
    doc["key_groups"][0]["state_bytes"] = None
    r = client.post("/v1/plans", json={"algorithm": "flux", "problem": doc, "time_limit_s": None})
    assert r.status_code == 200, r.text
    assert {"total_load", "max_utilisation"} <= set(r.json()["metrics"]["after"])
