"""One validator per document (issue 11 §2): the OpenAPI models describe exactly what solvers.documents accepts.

The problem document is validated only by ``solvers.documents.problem_from_dict``; ``api.schemas.ProblemDoc`` only
documents it. These tests keep the two from drifting (they had: ``NodeDoc.limits`` accepted negatives, and
``StateMetrics`` lacked ``total_load`` and ``max_utilisation``), and check that ``rebalancer evaluate`` and
``POST /v1/evaluate`` return the same document.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from api import schemas
from cli.main import main as cli_main
from solvers import documents, metrics
from solvers.errors import InvalidInput

sys.path.insert(0, str(Path(__file__).parent))

BASE = {
    "nodes": [{"id": "w0", "capacity": 1, "removing": False, "limits": {"memory": 8}}, {"id": "w1"}, {"id": "w2"}],
    "key_groups": [{"id": "a", "operator": "agg", "node": "w0", "load": 3, "state_bytes": 10,
                    "resources": {"memory": 1.5}},
                   {"id": "b", "node": "w1", "load": 1.0}, {"id": "c", "node": "w1", "load": 0}],
    "communication": [{"src": "a", "dst": "b", "rate": 2}],
    "communication_cost": 0.1,
    "budget": {"max_migrations": 1, "max_migration_bytes": 100},
}
LONG = "x" * (documents.MAX_ID_LENGTH + 1)


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


CASES = [
    # (path, value): field-local variations; ... deletes the field
    *[(p, v) for p in ("nodes.0.capacity", "key_groups.0.load", "key_groups.0.state_bytes",
                       "communication.0.rate", "communication_cost", "budget.max_migration_bytes",
                       "nodes.0.limits.memory", "key_groups.0.resources.memory")
      for v in (0, 2, 2.5, -1, -0.5, True, False, "1", None, [1])],
    *[(p, v) for p in ("budget.max_migrations",) for v in (0, 3, 2.0, 1.5, -1, True, "2", None, 2**63)],
    *[(p, v) for p in ("nodes.0.removing",) for v in (True, False, 0, 1, "true", None)],
    *[(p, v) for p in ("nodes.2.id", "key_groups.2.id", "key_groups.0.operator")  # ids nothing refers to
      for v in ("", "x", "x" * documents.MAX_ID_LENGTH, LONG, 3, None, True)],
    *[(p, ...) for p in ("nodes.0.capacity", "nodes.0.removing", "nodes.0.limits", "key_groups.0.operator",
                         "key_groups.0.state_bytes", "key_groups.0.resources", "key_groups.0.load",
                         "communication", "communication_cost", "budget", "budget.max_migrations")],
    *[(p, None) for p in ("nodes.0.limits", "key_groups.0.resources", "communication", "budget")],
    *[(p, v) for p in ("nodes.0.limits", "key_groups.0.resources") for v in ({"": 1}, {LONG: 1}, [], "x")],
    ("nodes", []), ("nodes", None), ("key_groups", None), ("nodes.0.colour", "red"), ("key_groups.0.weight", 1),
    ("communication.0.via", "x"), ("budget.max_moves", 1), ("extra", 1), ("budget", []), ("communication", {}),
]


def _pydantic_accepts(doc) -> bool:
    try:
        schemas.ProblemDoc.model_validate(doc, strict=True)
        return True
    except ValidationError:
        return False


def _documents_accept(doc) -> bool:
    try:
        documents.problem_from_dict(doc)
        return True
    except InvalidInput:
        return False


@pytest.mark.parametrize("path, value", CASES, ids=[f"{p}={str(v)[:12]}" for p, v in CASES])
def test_problem_model_and_validator_agree(path, value):
    doc = _set(path, value)
    assert _pydantic_accepts(doc) == _documents_accept(doc), (path, value)


def test_base_document_is_valid_for_both():
    assert _pydantic_accepts(BASE) and _documents_accept(BASE)


def test_response_models_name_every_field_the_documents_have():
    p = documents.problem_from_dict(BASE)
    state = metrics.state_metrics(p, p.current)
    assert set(state) == set(schemas.StateMetrics.model_fields)
    plan = documents.plan_from_dict(p, {"assignment": {"a": "w1", "b": "w1", "c": "w1"}})
    ev = documents.evaluation(p, plan)
    assert set(ev) == set(schemas.EvaluateResponse.model_fields)
    assert set(documents.plan_to_dict(p, plan)) <= set(schemas.PlanDoc.model_fields)
    assert set(ev["moves"][0]) == {f.alias or n for n, f in schemas.Move.model_fields.items()}


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
    ({"problem": _set("nodes.2.id", LONG)}, "problem.nodes[2].id"),
    ({"problem": "not a document"}, "problem"),
    ({"problem": BASE, "time_limit_s": False}, "time_limit_s"),
    ({"problem": BASE, "time_limit_s": "1"}, "time_limit_s"),
])
def test_plan_route_refuses_what_the_schema_refuses(client, body, field):
    r = client.post("/v1/plans", json={"algorithm": "flux", **body})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field


def test_plan_route_accepts_nulls_the_schema_allows(client):
    doc = _set("budget", None)
    doc["communication"] = None
    doc["communication_cost"] = None
    doc["key_groups"][0]["operator"] = None
    doc["key_groups"][0]["state_bytes"] = None
    r = client.post("/v1/plans", json={"algorithm": "flux", "problem": doc})
    assert r.status_code == 200, r.text
    assert {"total_load", "max_utilisation"} <= set(r.json()["metrics"]["after"])
