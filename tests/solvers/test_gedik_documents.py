"""A library caller's function documents and specs (decoded JSON handed to ``solvers.gedik``) are held to the
contract's bounds, in the same words as the API's 422 for the same bytes (``controller.edge.parse``)."""

from __future__ import annotations

import json

import pytest

from controller.edge import Invalid, parse
from rebalancer_client import contract as c
from rebalancer_client.wire import read
from solvers.errors import InvalidInput
from solvers.gedik import build_document, route_keys

SPEC = {"channels": 4, "frequencies": {"a": 0.3, "b": 0.1}}


def _api(cls: type, doc: dict) -> tuple[str, str]:
    with pytest.raises(Invalid) as e:
        parse(cls, json.dumps(doc))
    return e.value.items[0].field, e.value.items[0].reason


@pytest.mark.parametrize("patch", [
    {"channels": 0}, {"channels": 5000}, {"sigma": 0}, {"sigma": 1.5}, {"imbalance_tolerance": 1.0},
    {"imbalance_tolerance": {"state": 0.5}}, {"frequencies": {"a": 1.5}}, {"frequencies": {"a": -0.1}},
    {"seed": -1}, {"seed": 2**64}, {"replicas": 0}, {"move_limit": 0}, {"domain_size": 0},
    {"utility": "XYZ"}, {"previous": {"channels": 2, "hash": {"seed": -1}}},
    {"previous": {"channels": 2, "explicit": {"k": -1}}}, {"previous": {"channels": 0}},
])
def test_a_spec_out_of_bounds_is_refused_as_the_api_refuses_it(patch):
    doc = {**SPEC, **patch}
    with pytest.raises(InvalidInput) as e:
        build_document(doc)
    assert (e.value.field, e.value.reason) == _api(c.PartitioningSpec, doc)


@pytest.mark.parametrize("function, field", [
    ({"channels": 0}, "function.channels"),
    ({"channels": 3, "explicit": {"a": -1}}, "function.explicit.a"),  # was routed to channel -1
    ({"channels": 3, "consistent_hash": {"replicas": 0}}, "function.consistent_hash.replicas"),
])
def test_a_function_out_of_bounds_routes_nothing(function, field):
    with pytest.raises(InvalidInput) as e:
        route_keys(function, ["a", "b"])
    assert e.value.field == field
    assert e.value.reason == _api(c.PartitionFunction, function)[1]


def test_answers_are_read_without_bounds_unless_asked():
    """The client reads the server's answers by type only (an answer is the server's, not the caller's input)."""
    doc = {"channels": 0}
    assert read(c.PartitionFunction, doc).channels == 0
    with pytest.raises(Exception, match="must be ≥ 1, got 0"):
        read(c.PartitionFunction, doc, checked=True)
