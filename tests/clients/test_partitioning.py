"""``POST /v1/partitioning`` over real HTTP (uvicorn: the ``controller`` fixture): a built
function document goes back as the next spec's ``previous``, as JSON and through ``RebalancerClient.partitioning``
(typed both ways: ``PartitioningSpec`` in, ``PartitionFunction`` out, read by ``wire.read``)."""

from __future__ import annotations

import dataclasses

import pytest

from rebalancer_client import RebalancerClient, ValidationError, contract
from solvers.gedik import route_keys

FREQUENCIES = {f"k{i}": 0.2 / i**1.2 for i in range(1, 60)}  # summing to 0.68
KEYS = [f"k{i}" for i in range(1, 400)]


def test_build_and_rebuild_from_the_previous_over_http(controller):
    spec = {"algorithm": "readj", "channels": 4, "frequencies": FREQUENCIES, "domain_size": 10_000}
    with controller.client(timeout=60) as http:
        first = http.post("/v1/partitioning", json=spec)
        assert first.status_code == 200, first.text
        doc = first.json()
        second = http.post("/v1/partitioning", json={**spec, "channels": 5, "previous": doc})
        assert second.status_code == 200, second.text
        again = second.json()
        bad = http.post("/v1/partitioning", json={**spec, "previous": {**doc, "channels": "4"}})
    assert again["channels"] == 5 and again["metrics"]["m"] is not None
    # the migration the answer reports is that of the keys it names, routed by both documents
    moved = sum(FREQUENCIES[k] for k, a, b in zip(FREQUENCIES, route_keys(doc, list(FREQUENCIES)),
                                                  route_keys(again, list(FREQUENCIES)), strict=True) if a != b)
    assert again["metrics"]["migration"]["tracked_moved"] == pytest.approx(moved)
    assert bad.status_code == 422 and bad.json()["detail"] == [{"field": "previous.channels",
                                                                "reason": "must be an integer, got '4'"}]


def test_the_client_sends_and_reads_the_typed_documents(controller):
    with RebalancerClient(controller.url, timeout=60) as rc:
        first = rc.partitioning({"channels": 4, "frequencies": FREQUENCIES, "domain_size": 10_000})
        assert isinstance(first, contract.PartitionFunction) and isinstance(first.hash, contract.KeyHash)
        assert first.algorithm == "readj" and first.explicit and first.params is not None
        spec = contract.PartitioningSpec(algorithm="redist", channels=6, frequencies=FREQUENCIES,
                                         domain_size=10_000, previous=first)
        second = rc.partitioning(spec)
        assert isinstance(second, contract.PartitionFunction) and second.channels == 6
        assert second.metrics is not None and second.metrics["m"] is not None
        # a typed document routes as its JSON does
        assert route_keys(second, KEYS).tolist() == route_keys(dataclasses.asdict(second), KEYS).tolist()
        with pytest.raises(ValidationError) as e:
            rc.partitioning(dataclasses.replace(spec, channels=0))
        assert "channels" in str(e.value)


def test_the_spark_adapter_loads_each_function_once_per_process():
    """The adapter's pandas UDF looks keys up with a function loaded once per Python worker (by its document's
    digest), not read and its ring built again for every Arrow batch; a changed document is another function."""
    from rebalancer_client.spark import gedik as sg
    from rebalancer_client.wire import dump
    from solvers.gedik import build_document

    docs = [dump(build_document({"algorithm": alg, "channels": n, "frequencies": {"a": 0.4, "b": 0.1}}))
            for alg, n in (("readj", 4), ("redist", 4), ("readj", 5))]
    digests = [sg.document_digest(d) for d in docs]
    assert len(set(digests)) == 3 and sg.document_digest(dict(reversed(list(docs[0].items())))) == digests[0]
    sg._LOADED.clear()
    first = sg.loaded_function(digests[0], docs[0])
    assert sg.loaded_function(digests[0], docs[0]) is first  # loaded once
    keys = [f"k{i}" for i in range(500)] + ["a", "b"]
    for digest, doc in zip(digests, docs, strict=True):
        assert sg.loaded_function(digest, doc).route_keys(keys).tolist() == route_keys(doc, keys).tolist()
    for i in range(sg.LOADED_MAX + 3):  # a bounded cache: the oldest documents go first
        sg.loaded_function(f"other-{i}", docs[1])
    assert len(sg._LOADED) == sg.LOADED_MAX and digests[0] not in sg._LOADED


def test_the_spark_adapter_refuses_a_bad_function_on_the_driver():
    """A hand-written function document with a channel out of range is refused where it is given, naming the field
    (not in a Spark task's traceback, nor routed to channel -1)."""
    from rebalancer_client.spark.gedik import GedikPartitioner
    from solvers.errors import InvalidInput

    with pytest.raises(InvalidInput) as e:
        GedikPartitioner({"channels": 3, "explicit": {"a": -1}})
    assert e.value.field == "function.explicit.a" and e.value.reason == "must be ≥ 0, got -1"
