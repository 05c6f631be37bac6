"""Validation of the problem document, one test per bad-input class (``docs/design.md``): on the one path a
document takes into the server — the contract's reader at the edge (shape, types, ranges, unknown fields), then
:func:`solvers.documents.problem_of` (references, uniqueness, the numbers together) — and, for the checks of the
model itself, through :meth:`Problem.from_dict` (decoded JSON, as the library reads it)."""

import copy
import json
import math

import numpy as np
import pytest

from controller.edge import Invalid, parse
from rebalancer_client import contract as c
from solvers import documents
from solvers.errors import InvalidInput
from solvers.model import Plan, Problem, plan_from_dict, plan_to_dict

BASE = {
    "nodes": [{"id": "w0", "capacity": 1.0}, {"id": "w1", "capacity": 2.0, "removing": False}],
    "key_groups": [
        {"id": "agg/0", "operator": "agg", "node": "w0", "load": 10.0, "state_bytes": 100},
        {"id": "agg/1", "operator": "agg", "node": "w0", "load": 5.0},
        {"id": "agg/2", "operator": "agg", "node": "w1", "load": 1.0, "state_bytes": 7},
    ],
    "communication": [{"src": "agg/0", "dst": "agg/2", "rate": 3.0}],
    "communication_cost": 0.5,
    "budget": {"max_migrations": 2, "max_migration_bytes": None},
}


def mutate(fn):
    doc = copy.deepcopy(BASE)
    fn(doc)
    return doc


def read(doc) -> Problem:
    """``doc`` as the server reads a problem document: the edge, then the cross-field checks."""
    try:
        typed = parse(c.Problem, json.dumps(doc))
    except Invalid as exc:
        first = exc.items[0]
        raise InvalidInput(first.field, first.reason) from None
    return documents.problem_of(typed)


def expect_error(doc, field_part, reason_part, reader=read):
    with pytest.raises(InvalidInput) as info:
        reader(doc)
    assert field_part in info.value.field, info.value
    assert reason_part in info.value.reason, info.value
    return info.value


def test_valid_document_builds_arrays():
    p = Problem.from_dict(BASE)
    assert p.node_ids == ["w0", "w1"] and p.kg_ids == ["agg/0", "agg/1", "agg/2"]
    np.testing.assert_array_equal(p.current, [0, 0, 1])
    np.testing.assert_array_equal(p.capacity, [1.0, 2.0])
    np.testing.assert_array_equal(p.state_bytes, [100, 0, 7])
    assert p.comm[0, 2] == 3.0 and p.comm.nnz == 1
    assert p.max_migrations == 2 and p.max_migration_bytes is None


def test_round_trip_to_dict():
    p = Problem.from_dict(BASE)
    q = Problem.from_dict(p.to_dict())
    assert q.kg_ids == p.kg_ids and q.node_ids == p.node_ids
    np.testing.assert_array_equal(q.load, p.load)
    np.testing.assert_array_equal(q.current, p.current)
    assert (q.comm != p.comm).nnz == 0


def test_duplicate_node_id():
    expect_error(mutate(lambda d: d["nodes"].append({"id": "w0"})), "nodes[2].id", "duplicate node id 'w0'")


def test_duplicate_key_group_id():
    doc = mutate(lambda d: d["key_groups"].append({"id": "agg/1", "node": "w1", "load": 1}))
    expect_error(doc, "key_groups[3].id", "duplicate key group id 'agg/1'")


def test_key_group_on_unknown_node():
    doc = mutate(lambda d: d["key_groups"][1].update(node="w9"))
    expect_error(doc, "key_groups[1].node", "unknown node 'w9'")


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "12", None, True])
def test_bad_load(bad):
    doc = mutate(lambda d: d["key_groups"][2].update(load=bad))
    expect_error(doc, "key_groups[2].load", "")


@pytest.mark.parametrize("bad", [-0.5, math.nan, math.inf])
def test_bad_rate(bad):
    doc = mutate(lambda d: d["communication"][0].update(rate=bad))
    expect_error(doc, "communication[0].rate", "")


@pytest.mark.parametrize("bad", [0, -1.0, math.inf])
def test_bad_capacity(bad):
    doc = mutate(lambda d: d["nodes"][1].update(capacity=bad))
    expect_error(doc, "nodes[1].capacity", "")


@pytest.mark.parametrize("where, fix, field, who", [
    ("key_groups", lambda d: d["key_groups"][2].update(load=-1.0), "key_groups[2].load", "agg/2"),
    ("nodes", lambda d: d["nodes"][1].update(capacity=0), "nodes[1].capacity", "w1"),
    ("rate", lambda d: d["communication"][0].update(rate=-0.5), "communication", "agg/0"),
])
def test_the_models_own_check_names_the_offending_id(where, fix, field, who):
    """Decoded JSON read by the library (no edge in front): :meth:`Problem.check` refuses the same ranges and
    names the id."""
    err = expect_error(mutate(fix), field, "", reader=Problem.from_dict)
    assert who in err.reason, err


def test_no_node_left_that_is_not_removing():
    def fn(d):
        for nd in d["nodes"]:
            nd["removing"] = True
    expect_error(mutate(fn), "nodes", "at least one node must stay")


@pytest.mark.parametrize("field,value", [("max_migrations", -1), ("max_migration_bytes", -5.0),
                                         ("max_migrations", 1.5)])
def test_negative_or_fractional_budget(field, value):
    doc = mutate(lambda d: d["budget"].update({field: value}))
    expect_error(doc, f"budget.{field}", "")


@pytest.mark.parametrize("end", ["src", "dst"])
def test_edge_naming_unknown_key_group(end):
    doc = mutate(lambda d: d["communication"][0].update({end: "nope/1"}))
    expect_error(doc, f"communication[0].{end}", "unknown key group 'nope/1'")


def test_negative_state_bytes_and_comm_cost():
    expect_error(mutate(lambda d: d["key_groups"][0].update(state_bytes=-1)), "key_groups[0].state_bytes",
                 "must be ≥ 0, got -1")
    expect_error(mutate(lambda d: d.update(communication_cost=-1)), "communication_cost", "must be ≥ 0, got -1")
    expect_error(mutate(lambda d: d["key_groups"][0].update(state_bytes=-1)), "key_groups[0].state_bytes", "≥ 0",
                 reader=Problem.from_dict)
    expect_error(mutate(lambda d: d.update(communication_cost=-1)), "communication_cost", "≥ 0",
                 reader=Problem.from_dict)


def test_unknown_fields_are_rejected():
    expect_error(mutate(lambda d: d.update(bugdet={})), "bugdet", "unknown field")
    expect_error(mutate(lambda d: d["key_groups"][0].update(laod=3)), "key_groups[0].laod", "unknown field")


def test_empty_key_group_list_gives_a_plan_without_moves():
    p = Problem.from_dict({"nodes": [{"id": "a"}], "key_groups": []})
    doc = plan_to_dict(p, Plan("flux", np.zeros(0, dtype=int)))
    assert doc["assignment"] == {} and doc["moves"] == []
    assert doc["metrics"]["after"]["load_distance"] == 0.0


def test_not_an_object():
    expect_error([1, 2], "body", "object")
    with pytest.raises(InvalidInput):
        Problem.from_dict([1, 2])
    expect_error({"nodes": []}, "nodes", "must not be empty")


def test_plan_from_dict_rejects_foreign_plans():
    p = Problem.from_dict(BASE)
    good = plan_to_dict(p, Plan("x", np.array([1, 0, 1])))
    assert plan_from_dict(p, good).assignment.tolist() == [1, 0, 1]
    missing = copy.deepcopy(good)
    del missing["assignment"]["agg/1"]
    with pytest.raises(InvalidInput, match="missing"):
        plan_from_dict(p, missing)
    extra = copy.deepcopy(good)
    extra["assignment"]["other/9"] = "w0"
    with pytest.raises(InvalidInput, match="not in the problem"):
        plan_from_dict(p, extra)
    stale = copy.deepcopy(good)
    stale["moves"][0]["from"] = "w1"
    with pytest.raises(InvalidInput, match="another assignment"):
        plan_from_dict(p, stale)
    unknown_node = copy.deepcopy(good)
    unknown_node["assignment"]["agg/0"] = "w7"
    with pytest.raises(InvalidInput, match="unknown node"):
        plan_from_dict(p, unknown_node)
