"""``POST /v1/partitioning`` speaks the contract's documents (:mod:`rebalancer_client.contract.partitioning`): its
body is a ``PartitioningSpec``, validated from the bytes in a solver worker (422 naming each offending field, 413
beyond the caps, never a 500), its answer a ``PartitionFunction``, and both are in the OpenAPI schema (in process:
the ``client`` fixture; the same over real HTTP and through the Python client: tests/clients/test_partitioning.py)."""

from __future__ import annotations

import dataclasses

import pytest

from rebalancer_client import contract as c
from rebalancer_client.wire import wire_name

SPEC = {"algorithm": "readj", "channels": 4, "frequencies": {"k0": 0.3, "k1": 0.2, "k2": 0.05}}


def _fields(cls) -> set[str]:
    return {wire_name(f.name) for f in dataclasses.fields(cls)}


def _refused(r) -> list[tuple[str, str]]:
    assert r.status_code == 422, r.text
    return [(e["field"], e["reason"]) for e in r.json()["detail"]]


def test_the_openapi_schema_of_partitioning_is_the_contracts(client):
    openapi = client.get("/openapi.json").json()
    comps, op = openapi["components"]["schemas"], openapi["paths"]["/v1/partitioning"]["post"]
    assert op["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PartitioningSpec"}
    assert op["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/PartitionFunction"}
    for cls in (c.PartitioningSpec, c.PartitionFunction, c.KeyHash, c.HashRing, c.PartitionParams,
                c.ResourceFunctions, c.Tolerances):
        schema = comps[cls.__name__]
        assert set(schema["properties"]) == _fields(cls), cls.__name__
        assert schema.get("additionalProperties") is False, cls.__name__
    spec = comps["PartitioningSpec"]["properties"]
    assert spec["channels"]["minimum"] == 1 and spec["channels"]["maximum"] == 4096
    assert spec["algorithm"]["enum"] == list(c.PARTITIONING_ALGORITHMS) and spec["algorithm"]["default"] == "readj"
    assert spec["seed"]["anyOf"][0]["exclusiveMaximum"] == 2**64
    assert spec["previous"]["anyOf"][0] == {"$ref": "#/components/schemas/PartitionFunction"}
    assert comps["PartitionFunction"]["required"] == ["channels"]


@pytest.mark.parametrize("patch, field, reason", [
    ({"bogus": 1}, "bogus", "unknown field"),
    ({"channels": True}, "channels", "must be an integer, got True"),
    ({"previous": {"channels": "4", "consistent_hash": {}}}, "previous.channels", "must be an integer, got '4'"),
    ({"frequencies": {"k0": 1.5}}, "frequencies.k0", "must be ≤ 1, got 1.5"),
    ({"seed": 2**64}, "seed", f"must be < {2**64}, got {2**64}"),
    ({"imbalance_tolerance": {"state": 1.0}}, "imbalance_tolerance.state", "must be > 1, got 1.0"),
    ({"previous": {"channels": 4, "hash": {"seed": -1}}}, "previous.hash.seed", "must be ≥ 0, got -1"),
])
def test_a_field_that_breaks_the_contract_is_a_422_naming_it(client, patch, field, reason):
    assert _refused(client.post("/v1/partitioning", json={**SPEC, **patch})) == [(field, reason)]


@pytest.mark.parametrize("patch, field", [
    ({"frequencies": {"a": 0.7, "b": 0.6}}, "frequencies"),
    ({"domain_size": 2}, "domain_size"),
    ({"previous": {"channels": 2, "explicit": {"k0": 3}, "consistent_hash": {}}}, "previous.explicit.k0"),
])
def test_fields_that_break_a_rule_together_are_a_422_naming_one(client, patch, field):
    assert [f for f, _ in _refused(client.post("/v1/partitioning", json={**SPEC, **patch}))] == [field]


@pytest.mark.parametrize("body", [b"[]", b"null", b'{"channels": 4, "channels": 5}', b'{"channels": 1e999}',
                                  b'{"channels": 4, "utility": "u^nope"}', b'{"channels": 4, "previous": 7}'])
def test_hostile_bodies_are_422_never_500(client, body):
    r = client.post("/v1/partitioning", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text


def test_the_answer_is_the_contracts_document_and_is_accepted_as_previous(client):
    r = client.post("/v1/partitioning", json=SPEC)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert set(doc) == _fields(c.PartitionFunction) and doc["format"] == "rebalancer.gedik-function/1"
    assert doc["params"]["utility"] == "APM" and doc["params"]["imbalance_tolerance"]["state"] == 1.2
    r = client.post("/v1/partitioning", json={**SPEC, "channels": 5, "utility": "u^aplm", "previous": doc})
    assert r.status_code == 200, r.text
    assert r.json()["metrics"]["m"] is not None and r.json()["params"]["utility"] == "APLM"


def test_a_previous_without_a_consistent_hash_is_the_default_ring(client):
    """A hand-written ``previous`` may leave the ring out: it is the builder's default (1000 replicas, the hash's
    seed), so the answer equals the one against the consistent-hash function built with the defaults."""
    full = client.post("/v1/partitioning", json={"algorithm": "consistent", "channels": 4}).json()
    assert full["consistent_hash"]["replicas"] == 1000 and full["hash"]["seed"] == 0
    answers = [client.post("/v1/partitioning", json={**SPEC, "channels": 5, "previous": prev})
               for prev in ({"channels": 4}, {"channels": 4, "consistent_hash": None}, full)]
    assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
    docs = [r.json() for r in answers]
    for doc in docs[:2]:
        assert doc["explicit"] == docs[2]["explicit"]
        assert doc["metrics"]["migration"] == docs[2]["metrics"]["migration"]
        assert doc["metrics"]["m"] == docs[2]["metrics"]["m"] is not None
