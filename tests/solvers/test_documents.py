"""solvers.documents: the typed documents of the contract <-> the numeric model (problem, plan, evaluation), and
the readers of decoded JSON the library and the CLI use."""

import ast
import copy
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from controller.edge import Invalid, parse
from rebalancer_client import contract as c
from rebalancer_client.wire import dump
from solvers import documents, registry
from solvers.errors import InvalidInput
from solvers.model import MAX_MAGNITUDE, Problem

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "nodes": [{"id": "w0", "capacity": 1.0, "limits": {"memory": 8}}, {"id": "w1", "capacity": 2.0}],
    "key_groups": [
        {"id": "a", "operator": "agg", "node": "w0", "load": 10.0, "state_bytes": 100, "resources": {"memory": 2}},
        {"id": "b", "operator": "agg", "node": "w0", "load": 5.0},
        {"id": "c", "operator": None, "node": "w1", "load": 1.0, "state_bytes": None},
    ],
    "communication": [{"src": "a", "dst": "c", "rate": 3.0}],
    "communication_cost": 0.5,
    "budget": {"max_migrations": 2, "max_migration_bytes": None},
}


def with_(fn):
    doc = copy.deepcopy(BASE)
    fn(doc)
    return doc


def error(doc) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        documents.problem_from_dict(doc)
    return info.value


def edge_read(doc) -> Problem:
    """``doc`` as the server reads it: the contract at the edge (types, ranges, lengths, unknown fields), then
    :func:`documents.problem_of`; the first error as an InvalidInput."""
    try:
        typed = parse(c.Problem, json.dumps(doc))
    except Invalid as exc:
        raise InvalidInput(exc.items[0].field, exc.items[0].reason) from None
    return documents.problem_of(typed)


def edge_error(doc) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        edge_read(doc)
    return info.value


def test_round_trip_and_the_compatibility_names_agree():
    p = documents.problem_from_dict(BASE)
    q = documents.problem_from_dict(documents.problem_to_dict(p))
    assert q.kg_ids == p.kg_ids and q.node_ids == p.node_ids and q.operator == ["agg", "agg", ""]
    np.testing.assert_array_equal(q.load, p.load)
    np.testing.assert_array_equal(q.resource_load, p.resource_load)
    assert documents.problem_to_dict(Problem.from_dict(BASE)) == Problem.from_dict(BASE).to_dict()


@pytest.mark.parametrize("kw, field", [({"removing": [False]}, "removing"), ({"operator": ["a"]}, "operator"),
                                        ({"state_bytes": [1.0, 2.0, 3.0]}, "state_bytes"),
                                        ({"kg_ids": ["a", "a"]}, "key_groups")])
def test_from_arrays_refuses_mismatched_lengths(kw, field):
    with pytest.raises(InvalidInput) as info:
        Problem.from_arrays([3.0, 1.0], [0, 1], [1.0, 1.0], **kw)
    assert info.value.field == field


def test_from_arrays_builds_what_the_document_builds():
    doc = {"nodes": [{"id": "w0"}, {"id": "w1", "removing": True}],
           "key_groups": [{"id": "kg0", "node": "w0", "load": 3.0}, {"id": "kg1", "node": "w1", "load": 1.0}]}
    a = Problem.from_arrays([3.0, 1.0], [0, 1], [1.0, 1.0], removing=[False, True])
    assert documents.problem_to_dict(a) == documents.problem_to_dict(documents.problem_from_dict(doc))


@pytest.mark.parametrize("mutation, field", [
    (lambda d: d["nodes"][0].update(capacity=True), "nodes[0].capacity"),
    (lambda d: d["key_groups"][0].update(state_bytes=False), "key_groups[0].state_bytes"),  # was read as 0
    (lambda d: d.update(communication_cost=False), "communication_cost"),  # was read as 0
    (lambda d: d["budget"].update(max_migration_bytes=False), "budget.max_migration_bytes"),
    (lambda d: d["budget"].update(max_migrations=True), "budget.max_migrations"),
    (lambda d: d["nodes"][0].update(limits={"memory": -1}), "nodes[0].limits.memory"),
    (lambda d: d["key_groups"][0].update(resources={"memory": -2}), "key_groups[0].resources.memory"),
    (lambda d: d["key_groups"][1].update(load=10**400), "key_groups[1].load"),  # an int beyond a float
    (lambda d: d["nodes"][1].update(id="w" * 257), "nodes[1].id"),
    (lambda d: d["key_groups"][1].update(operator="o" * 257), "key_groups[1].operator"),
    (lambda d: d.update(budget=[]), "budget"),
    (lambda d: d["key_groups"][1].update(laod=3), "key_groups[1].laod"),  # a typo is not ignored
])
def test_strict_types_and_lengths(mutation, field):
    assert edge_error(with_(mutation)).field == field


@pytest.mark.parametrize("mutation, field", [
    (lambda d: d["nodes"][0].update(capacity=True), "nodes[0].capacity"),
    (lambda d: d["key_groups"][0].update(state_bytes=False), "key_groups[0].state_bytes"),
    (lambda d: d["budget"].update(max_migrations=True), "budget.max_migrations"),
    (lambda d: d["key_groups"][0].update(load="3"), "key_groups[0].load"),
    (lambda d: d["nodes"][0].update(limits={"memory": -1}), "nodes[0].limits.memory"),
    (lambda d: d.update(budget=[]), "budget"),
])
def test_the_dict_reader_refuses_wrong_types_and_ranges(mutation, field):
    """:func:`documents.problem_from_dict` (decoded JSON, the library's reader) checks the types; the model's
    check the ranges."""
    assert error(with_(mutation)).field == field


def test_the_dict_reader_refuses_an_int_beyond_a_float():
    assert error(with_(lambda d: d["key_groups"][1].update(load=10**400))).field == "key_groups[1].load"


def test_ids_of_the_maximum_length_are_fine():
    doc = with_(lambda d: d["nodes"][1].update(id="w" * documents.MAX_ID_LENGTH))
    doc["key_groups"][2]["node"] = "w" * documents.MAX_ID_LENGTH
    assert documents.problem_from_dict(doc).node_ids[1] == "w" * 256
    assert edge_read(doc).node_ids[1] == "w" * 256


def test_huge_finite_loads_are_refused_with_the_field_not_turned_into_nan():
    # two key groups at 1.7e308 sum to inf: every metric and solver would produce NaN
    doc = {"nodes": [{"id": "w0"}, {"id": "w1"}],
           "key_groups": [{"id": "x", "node": "w0", "load": 1.7e308}, {"id": "y", "node": "w1", "load": 1.7e308}]}
    err = error(doc)
    assert err.field == "key_groups[0].load" and "scale them down" in err.reason and "'x'" in err.reason
    with pytest.raises(InvalidInput):
        Problem.from_arrays([1.7e308, 1.7e308], [0, 1], [1.0, 1.0])


@pytest.mark.parametrize("mutation, field", [
    (lambda d: d["nodes"][0].update(capacity=1e-150), "nodes[0].capacity"),  # load / capacity overflows
    (lambda d: d.update(communication_cost=1e149, communication=[{"src": "a", "dst": "c", "rate": 10.0}]),
     "communication_cost"),
    (lambda d: d["key_groups"][0].update(state_bytes=1.7e308) or d["key_groups"][1].update(state_bytes=1.7e308),
     "key_groups[0].state_bytes"),
    (lambda d: d["key_groups"][0].update(resources={"memory": 1.7e308})
     or d["key_groups"][1].update(resources={"memory": 1.7e308}), "key_groups[0].resources.memory"),
])
def test_other_sums_that_overflow(mutation, field):
    assert error(with_(mutation)).field == field


@pytest.mark.filterwarnings("error::RuntimeWarning")  # an overflow inside a planner fails the test
def test_large_loads_below_the_bound_give_finite_metrics_with_every_planner():
    big = MAX_MAGNITUDE / 10
    p = Problem.from_arrays([big / 4, big / 4, big / 8, 0.0], [0, 0, 0, 1], [1.0, 1.0], max_migrations=2)
    for name in ("flux", "albic-milp", "drain-then-balance"):
        doc = documents.plan_to_dict(p, registry.solve(name, p, time_limit=1.0))
        for side in ("before", "after"):
            values = [v for v in doc["metrics"][side].values() if v is not None]
            assert all(np.isfinite(values)), (name, doc["metrics"])


def test_evaluation_document():
    p = documents.problem_from_dict(BASE)
    plan = documents.plan_from_dict(p, {"assignment": {"a": "w1", "b": "w0", "c": "w1"}})
    ev = dump(documents.evaluation(p, plan))
    assert list(ev) == ["before", "after", "migrations", "migration_bytes", "moves", "within_budget"]
    assert ev["moves"] == [{"key_group": "a", "from": "w0", "to": "w1", "state_bytes": 100}]
    assert ev["migrations"] == 1 and ev["within_budget"] is True
    assert {"total_load", "max_utilisation"} <= set(ev["after"])


def test_plan_from_dict_ignores_a_malformed_solver_block():
    p = documents.problem_from_dict(BASE)
    plan = documents.plan_from_dict(p, {"assignment": {"a": "w0", "b": "w0", "c": "w1"}, "algorithm": 7,
                                        "solver": {"status": "great", "lower_bound": True}})
    assert (plan.algorithm, plan.status, plan.lower_bound) == ("unknown", "heuristic", None)


def _top_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module}


def test_imports_go_one_way_documents_metrics_model():
    assert "solvers.metrics" not in _top_level_imports(ROOT / "solvers/model.py")
    assert "solvers.documents" not in _top_level_imports(ROOT / "solvers/model.py")
    assert "solvers.documents" not in _top_level_imports(ROOT / "solvers/metrics.py")
    model_src = (ROOT / "solvers/model.py").read_text()
    assert "from solvers import metrics" not in model_src  # the old lazy import that closed the circle




# ---------------------------------------------------------------------- the one path, on any document
value = st.one_of(st.integers(-3, 10**6), st.floats(width=64, allow_nan=False, allow_infinity=False), st.booleans(),
                  st.none(), st.text(max_size=3), st.just("x" * 257))
name = st.one_of(st.sampled_from(["a", "b", "c", "w0", "w1", "", "x" * 257]), st.integers(0, 2), st.none())
kg = st.one_of(
    st.fixed_dictionaries({"id": name, "node": name, "load": value},
                          optional={"operator": st.one_of(name, value), "state_bytes": value,
                                    "resources": st.just({"m": 1})}),
    st.dictionaries(st.sampled_from(["id", "node", "load", "extra"]), value, max_size=3),
    st.integers(), st.lists(st.integers(), max_size=1))
edge = st.one_of(st.fixed_dictionaries({"src": name, "dst": name, "rate": value}),
                 st.dictionaries(st.sampled_from(["src", "dst", "rate", "via"]), name, max_size=4))
node = st.one_of(st.fixed_dictionaries({"id": name}, optional={"capacity": value, "removing": value}), name)
amount = st.one_of(st.integers(0, 10**6), st.floats(0, 1e12), st.floats(0, 1e300))
ids = st.sampled_from(["a", "b", "c", "w0", "w1"])
# documents that are mostly right: a wrong value here and there
good_node = st.fixed_dictionaries({"id": st.sampled_from(["w0", "w1", "w2"])},
                                  optional={"capacity": st.one_of(*[st.floats(1e-3, 1e6)] * 4, value),
                                            "removing": st.booleans()})
good_kg = st.fixed_dictionaries({"id": ids, "node": st.sampled_from(["w0", "w0", "w1", "x"]), "load": amount},
                                optional={"operator": st.one_of(ids, st.none()), "state_bytes": amount,
                                          "resources": st.dictionaries(ids, amount, max_size=2)})
good_edge = st.fixed_dictionaries({"src": ids, "dst": ids, "rate": amount})
good_document = st.fixed_dictionaries(
    {"nodes": st.lists(good_node, min_size=2, max_size=3, unique_by=lambda n: n["id"]),
     "key_groups": st.lists(good_kg, max_size=5, unique_by=lambda k: k["id"])},
    optional={"communication": st.lists(good_edge, max_size=3), "communication_cost": amount,
              "budget": st.fixed_dictionaries({}, optional={"max_migrations": st.integers(0, 5),
                                                            "max_migration_bytes": amount})})
document = st.one_of(
    st.fixed_dictionaries({"nodes": st.lists(node, max_size=3), "key_groups": st.lists(kg, max_size=4),
                           "communication": st.lists(edge, max_size=3), "communication_cost": value}),
    good_document, good_document)


@settings(max_examples=300, deadline=None)
@given(doc=document)
def test_any_document_is_refused_with_a_field_or_read_and_written_back_unchanged(doc):
    """Whatever JSON arrives, the server's path answers an InvalidInput naming a field (a 422), never another
    exception; a document it accepts is written back (:func:`documents.problem_document`) as one it reads to
    the same problem."""
    try:
        p = edge_read(doc)
    except InvalidInput as exc:
        assert exc.field and exc.reason
        event("refused")
        return
    event("accepted")
    again = edge_read(dump(documents.problem_document(p)))
    assert again.kg_ids == p.kg_ids and again.node_ids == p.node_ids and again.operator == p.operator
    for a, b in ((again.load, p.load), (again.state_bytes, p.state_bytes), (again.current, p.current),
                 (again.capacity, p.capacity), (again.removing, p.removing)):
        np.testing.assert_array_equal(a, b)
    # a key group's edge to itself is never cut (it costs nothing): the document leaves it out
    edges = [sorted(zip(*(x.tolist() for x in q.edges()), strict=True)) for q in (again, p)]
    assert edges[0] == edges[1] and again.communication_cost == p.communication_cost
    assert (again.max_migrations, again.max_migration_bytes) == (p.max_migrations, p.max_migration_bytes)
    assert again.resource_names == p.resource_names
    if p.resource_load is not None:
        np.testing.assert_array_equal(again.resource_load, p.resource_load)
