"""The edge (:mod:`controller.edge`): every request body is validated once, from its raw bytes, against its contract
document — strict (a boolean is not a number, a string of digits is not a number, 2.0 is not an integer), unknown
fields refused at every level, NaN and infinities refused — and every error is a ``{"field", "reason"}`` item with
the field's path. Over HTTP: tests/api/test_api_validation.py and test_api_documents.py."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.edge import Invalid, encode, error_items, field_path, parse
from rebalancer_client import contract as c
from rebalancer_client.wire import RESPONSE, dump, read

REQUESTS = [c.PlanRequest, c.EvaluateRequest, c.WhatIfRequest, c.JobSpec, c.Stats, c.ProposalRequest,
            c.ExecuteRequest, c.NodesRequest, c.ScaleRequest, c.WhatIfQuestion]
JOB = {"nodes": ["a", {"id": "b", "capacity": 2.0}], "operators": [{"id": "o", "key_groups": 4}]}


def errors(cls, body) -> list[tuple[str, str]]:
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    with pytest.raises(Invalid) as info:
        parse(cls, raw)
    assert str(info.value)  # "field: reason; …"
    return [(i.field, i.reason) for i in info.value.items]


def first(cls, body) -> str:
    return errors(cls, body)[0][0]


def test_a_valid_body_is_the_typed_document():
    spec = parse(c.JobSpec, json.dumps({**JOB, "auto": True, "policy": {"min_gain": 0.1, "noise_sigmas": None}}))
    assert spec.nodes == ["a", c.JobNode(id="b", capacity=2.0)] and spec.operators == [c.Operator(id="o",
                                                                                                   key_groups=4)]
    assert spec.auto is True and spec.policy == c.Policy(min_gain=0.1, noise_sigmas=None)
    assert spec.budget == c.Budget() and spec.time_limit_s is None and spec.window_batches == 5
    stats = parse(c.Stats, b'{"batch_id": 7, "epoch": 1, "load": [1, 2.5], "state_bytes": [null, 3]}')
    assert stats == c.Stats(batch_id=7, epoch=1, load=[1.0, 2.5], state_bytes=[None, 3.0])
    assert parse(c.ExecuteRequest, b"{}") == c.ExecuteRequest(force=False)


@pytest.mark.parametrize("cls", REQUESTS, ids=lambda cls: cls.__name__)
def test_every_request_document_refuses_unknown_fields_and_non_objects(cls):
    assert ("surprise", "unknown field") in errors(cls, {"surprise": 1})
    for body in ([1], "text", 3, None):
        assert errors(cls, body)[0][0] == "body"


@pytest.mark.parametrize("cls, body, field", [
    (c.Stats, {"batch_id": True, "epoch": 0}, "batch_id"),  # a boolean is not a number
    (c.Stats, {"batch_id": "1", "epoch": 0}, "batch_id"),  # nor a string of digits
    (c.Stats, {"batch_id": 2.0, "epoch": 0}, "batch_id"),  # nor a whole float an integer
    (c.Stats, {"batch_id": 2**63, "epoch": 0}, "batch_id"),  # a signed 64-bit column
    (c.Stats, {"batch_id": -1, "epoch": 0}, "batch_id"),
    (c.Stats, {"batch_id": 1, "epoch": 0, "load": [1, "2"]}, "load[1]"),
    (c.Stats, {"batch_id": 1, "epoch": 0, "load": [1, None]}, "load[1]"),  # only state_bytes may be null
    (c.ExecuteRequest, {"force": 1}, "force"),  # a number is not a boolean
    (c.ExecuteRequest, {"force": "true"}, "force"),
    (c.ProposalRequest, {"wait_s": False}, "wait_s"),
    (c.ProposalRequest, {"time_limit_s": 0}, "time_limit_s"),
    (c.ProposalRequest, {"params": [1]}, "params"),
    (c.JobSpec, {**JOB, "window_batches": 0}, "window_batches"),
    (c.JobSpec, {**JOB, "auto": "yes"}, "auto"),
    (c.JobSpec, {**JOB, "auto": {"enabled": True}}, "auto"),  # the object of earlier releases
    (c.JobSpec, {**JOB, "policy": {"cooldown_batches": 1.0}}, "policy.cooldown_batches"),
    (c.JobSpec, {**JOB, "policy": {"min_gain": -0.1}}, "policy.min_gain"),
    (c.JobSpec, {**JOB, "policy": {"noise_sigmas": "3"}}, "policy.noise_sigmas"),
    (c.JobSpec, {**JOB, "policy": {"cooldown": 3}}, "policy.cooldown"),
    (c.JobSpec, {**JOB, "budget": {"max_migrations": True}}, "budget.max_migrations"),
    (c.JobSpec, {**JOB, "operators": [{"id": "o", "key_groups": 0}]}, "operators[0].key_groups"),
    (c.JobSpec, {"operators": [{"id": "o", "key_groups": 1}]}, "nodes"),
    (c.ScaleRequest, {"nodes": []}, "nodes"),
    (c.ScaleRequest, {"nodes": ["a"], "budget": {"max_migrations": -1}}, "budget.max_migrations"),
    (c.WhatIfQuestion, {"candidates": []}, "candidates"),
    (c.PlanRequest, {"problem": {"nodes": [{"id": "a", "capacity": 0}]}}, "problem.nodes[0].capacity"),
    (c.PlanRequest, {"problem": {"nodes": [{"id": "a"}], "key_groups": [{"id": "k", "node": "a", "load": 1,
                                                                          "laod": 2}]}}, "problem.key_groups[0].laod"),
    (c.EvaluateRequest, {"problem": {"nodes": [{"id": "a"}]}, "plan": {"assignment": {"k": 3}}},
     "plan.assignment.k"),
])
def test_strict_types_and_ranges_name_the_field(cls, body, field):
    assert first(cls, body) == field


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_nan_and_infinities_are_not_numbers(token):
    ((field, reason),) = errors(c.Stats, b'{"batch_id": 1, "epoch": 0, "load": [' + token + b"]}")
    assert field == "load[0]" and reason.startswith("must be a finite number, got ")


def test_every_offending_field_is_listed_once():
    items = errors(c.Stats, {"epoch": "x", "key_groups": [{"id": "", "load": -1, "y": 2}, {"id": "b"}], "z": 0})
    fields = [f for f, _ in items]
    assert sorted(fields) == sorted(["batch_id", "epoch", "key_groups[0].id", "key_groups[0].load",
                                     "key_groups[0].y", "key_groups[1].load", "z"])
    assert ("batch_id", "is required") in items and ("z", "unknown field") in items
    assert len(set(items)) == len(items)


@pytest.mark.parametrize("raw", [b"", b"   ", b"{", b"{not json", b"\xff\xfe{}", b"[" * 10_000, b'{"a": 1} x'])
def test_bytes_that_are_not_one_json_document_are_the_body(raw):
    items = errors(c.PlanRequest, raw)
    assert items[0][0] == "body" and items[0][1].startswith("invalid JSON"), items


def test_field_paths():
    assert field_path(("body", "key_groups", 3, "load")) == "key_groups[3].load"
    assert field_path(("nodes", 0)) == "nodes[0]" and field_path(()) == "" and field_path(("body",)) == ""
    assert field_path(("plan", "assignment", "agg/7")) == "plan.assignment.agg/7"
    items = error_items([{"type": "missing", "loc": ("body", "a"), "msg": "x"},
                         {"type": "missing", "loc": ("body", "a"), "msg": "x"},
                         {"type": "json_invalid", "loc": ("body",), "msg": "EOF"}])
    assert items == [c.ErrorItem(field="a", reason="is required"), c.ErrorItem(field="body",
                                                                              reason="invalid JSON: EOF")]


@pytest.mark.parametrize("cls, body, field, reason", [
    (c.JobSpec, {**JOB, "nodes": [""]}, "nodes[0]", "must not be empty"),  # a string: the string's reason
    (c.JobSpec, {**JOB, "nodes": [{"id": "b", "capacity": "2"}]}, "nodes[0].capacity", "must be a number, got '2'"),
    (c.NodesRequest, {"add": [5]}, "add[0]", ""),  # neither member: one item, at the field
    (c.WhatIfRequest, {"problem": {"nodes": [{"id": "a"}]}, "candidates": [0]}, "candidates[0]",
     "must be ≥ 1, got 0"),
], ids=["empty-id", "node-object", "number", "candidate-size"])
def test_a_union_field_is_reported_at_its_own_path_with_the_members_reason(cls, body, field, reason):
    (item,) = errors(cls, body)
    assert item[0] == field and reason in item[1], item


def test_encode_writes_wire_names_and_lists():
    move = c.Move(key_group="k", from_="a", to="b", state_bytes=1.0)
    assert json.loads(encode(move)) == {"key_group": "k", "from": "a", "to": "b", "state_bytes": 1.0} == dump(move)
    summaries = [c.JobSummary(job_id="j", epoch=0, nodes=1, key_groups=2)]
    assert json.loads(encode(summaries, list[c.JobSummary])) == dump(summaries)


def test_what_the_server_encodes_the_client_reads_back():
    """Every response document encoded by the edge reads back (with the client's reader) as the same document."""
    plan = c.Plan(algorithm="flux", assignment={"k": "b"}, moves=[c.Move(key_group="k", from_="a", to="b",
                                                                          state_bytes=3.0)],
                  metrics=c.PlanMetrics(before=c.StateMetrics(load_distance=1.0, load_on_removing=0.0,
                                                              total_load=2.0, max_utilisation=2.0),
                                        after=c.StateMetrics(load_distance=0.0, load_on_removing=0.0,
                                                             collocation_factor=0.5, total_load=2.0,
                                                             max_utilisation=1.0),
                                        migrations=1, migration_bytes=3.0),
                  solver=c.SolverInfo(status="optimal", lower_bound=0.0, seconds=0.1), details={"x": [1]})
    decision = c.Decision(worth=True, reason="worth", message="m", batch_id=3, load_distance=1.0)
    for doc in (plan, decision, c.Error(detail=[c.ErrorItem(field="f", reason="r")]), c.Error(detail="gone"),
                c.Placement(epoch=2, placement=[1, 0], nodes=["a", "b"])):
        assert read(type(doc), json.loads(encode(doc))) == doc
    assert all(getattr(cls, "__pydantic_config__", {}).get("extra") in ("forbid", RESPONSE["extra"])
               for cls in vars(c).values() if isinstance(cls, type) and dataclasses.is_dataclass(cls))


STATS_DOCS = [
    {"batch_id": 3, "epoch": 0, "load": [1.5, 2, 0]},
    {"batch_id": 3, "epoch": 1, "load": [1.5, 2, 0], "state_bytes": [10, None, 5]},
    {"batch_id": 3, "epoch": 0, "load": [1.5], "state_bytes": [None], "communication": []},
    {"batch_id": 3, "epoch": 0, "key_groups": [{"id": "o/0", "load": 1}, {"id": "o/1", "load": 2, "state_bytes": 7}]},
    {"batch_id": 3, "epoch": 0, "load": [1, 2], "communication": [{"src": "o/0", "dst": "o/1", "rate": 2.5}]},
]


@pytest.mark.parametrize("body", STATS_DOCS, ids=range(len(STATS_DOCS)))
def test_the_keys_counted_from_a_documents_fields_are_those_it_serialises(body):
    """:func:`given_keys` counts a flat document (fields of numbers and lists of numbers) from its fields, any
    other by serialising it: both counts agree with the serialised document's keys."""
    from controller.edge import given_keys

    doc = parse(c.Stats, json.dumps(body))
    assert given_keys(doc) == encode(doc, exclude_defaults=True).count(b'":')
    job = parse(c.JobSpec, json.dumps(JOB))
    assert given_keys(job) == encode(job, exclude_defaults=True).count(b'":')


@given(n=st.integers(1, 6), keys=st.permutations(["batch_id", "epoch", "load", "state_bytes"]),
       twice=st.sampled_from([None, "batch_id", "epoch", "load", "state_bytes"]),
       spaces=st.lists(st.sampled_from(["", " ", "\n", "\t", "\r\n  "]), min_size=5, max_size=5))
def test_a_statistics_body_names_each_key_once_or_is_refused(n, keys, twice, spaces):
    """Statistics as arrays, keys in any order, each with any JSON white space before its colon: accepted exactly
    when no key is given twice (the fast count of :func:`given_keys` must not let a repeated key through)."""
    values = {"batch_id": "7", "epoch": "0", "load": "[" + ",".join(["1.5"] * n) + "]",
              "state_bytes": "[" + ",".join(["null"] * (n - 1) + ["4"]) + "]"}
    items = [f'"{k}"{spaces[i]}:{spaces[i]}{values[k]}' for i, k in enumerate(keys)]
    if twice is not None:
        items.insert(1, f'"{twice}"{spaces[4]}:{values[twice]}')
    raw = ("{" + ",".join(items) + "}").encode()
    if twice is None:
        assert parse(c.Stats, raw).load == [1.5] * n
    else:
        with pytest.raises(Invalid, match="given twice"):
            parse(c.Stats, raw)
