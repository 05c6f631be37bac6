"""Statistics posts, the hot path: one reader (the contract at the edge, then :func:`controller.stats.batch_of`
for what needs the job) for both forms — by key group id and as arrays in the job's order."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from controller.edge import Invalid, parse
from controller.errors import TooLarge
from controller.stats import batch_of
from rebalancer_client.contract import Stats
from solvers.errors import InvalidInput
from tests.api.api_helpers import new_id, proposal, register

M = 4
IDS = [f"agg/{k}" for k in range(M)]

number = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.just(-0.0), st.just(1.7e308), st.booleans(), st.text(max_size=3), st.none())
kg_id = st.one_of(st.sampled_from(IDS + ["agg/9", "", "x" * 257]), st.integers(0, 3))
kg = st.one_of(
    st.fixed_dictionaries({"id": kg_id, "load": number}, optional={"state_bytes": number}),
    st.dictionaries(st.sampled_from(["id", "load", "state_bytes", "bytes"]), number, max_size=3),
    st.integers(), st.text(max_size=2))
edge = st.one_of(st.fixed_dictionaries({"src": kg_id, "dst": kg_id, "rate": number}),
                 st.dictionaries(st.sampled_from(["src", "dst", "rate", "via"]), number, max_size=3))
amount = st.one_of(st.integers(0, 10**6), st.floats(0, 1e300))
random_body = st.fixed_dictionaries(
    {"batch_id": st.one_of(st.integers(-2, 10**9), st.integers(2**63 - 2, 2**63 + 1), st.floats(allow_nan=False),
                           st.text(max_size=2)),
     "epoch": st.one_of(st.integers(-1, 5), st.booleans())},
    optional={"key_groups": st.one_of(st.lists(kg, max_size=6), st.lists(
                  st.fixed_dictionaries({"id": st.sampled_from(IDS), "load": amount}), max_size=M)),
              "load": st.one_of(st.lists(number, max_size=6), st.lists(amount, min_size=M, max_size=M)),
              "state_bytes": st.one_of(st.lists(st.one_of(number, st.none()), max_size=6),
                                       st.lists(st.one_of(amount, st.none()), min_size=M, max_size=M)),
              "communication": st.lists(edge, max_size=3), "other": st.integers()})
ids = st.integers(0, 2**63 - 1)
good_edge = st.fixed_dictionaries({"src": st.sampled_from(IDS), "dst": st.sampled_from(IDS), "rate": amount})
# bodies that are mostly right
dense_body = st.fixed_dictionaries(
    {"batch_id": ids, "epoch": st.integers(0, 5), "load": st.lists(amount, min_size=M, max_size=M)},
    optional={"state_bytes": st.lists(st.one_of(amount, st.none()), min_size=M, max_size=M),
              "communication": st.lists(good_edge, max_size=3)})
by_id_body = st.fixed_dictionaries(
    {"batch_id": ids, "epoch": st.integers(0, 5),
     "key_groups": st.lists(st.fixed_dictionaries({"id": st.sampled_from(IDS), "load": amount},
                                                  optional={"state_bytes": st.one_of(amount, st.none())}),
                            max_size=M, unique_by=lambda k: k["id"])},
    optional={"communication": st.lists(good_edge, max_size=3)})
body = st.one_of(random_body, dense_body, by_id_body)


@pytest.fixture(scope="module")
def job(server, client):
    """A registered job of 4 key groups (the record, to call ``batch_of`` on it as the route does)."""
    jid = new_id()
    register(client, jid, key_groups=M)
    return server.controller.ctx.jobs[jid]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=body)
def test_any_body_is_a_batch_of_the_job_or_an_error_naming_a_field(job, doc):
    """Whatever arrives, the route's reader either refuses it naming a field (422, or 413 beyond a cap) or makes
    a batch whose numbers are the body's, in the job's key-group order; never another exception."""
    from controller.settings import Settings

    try:
        stats = parse(Stats, json.dumps(doc))
        batch = batch_of(job, stats, Settings())
    except Invalid as exc:
        assert exc.items and all(i.field and i.reason for i in exc.items)
        event("refused at the edge")
        return
    except InvalidInput as exc:
        assert exc.field and exc.reason
        event("refused by the job")
        return
    except TooLarge:
        event("too large")
        return
    event("dense" if doc.get("load") is not None else "by id")
    assert (batch.batch_id, batch.epoch) == (doc["batch_id"], doc["epoch"])
    assert not isinstance(doc["epoch"], bool) and 0 <= doc["batch_id"] < 2**63
    if doc.get("load") is not None:
        assert batch.idx.tolist() == list(range(M)) and batch.load.tolist() == [float(x) for x in doc["load"]]
        sb = doc.get("state_bytes")
        if sb is None or all(v is None for v in sb):
            assert batch.state is None
        else:
            assert [None if math.isnan(v) else v for v in batch.state.tolist()] == sb
    else:
        kgs = doc.get("key_groups") or []
        assert [IDS[i] for i in batch.idx.tolist()] == [k["id"] for k in kgs]
        assert batch.load.tolist() == [float(k["load"]) for k in kgs]
    assert float(np.sum(batch.load)) <= 1e150


@pytest.mark.parametrize("body, field", [
    ({"batch_id": 2**63, "epoch": 0}, "batch_id"),  # beyond a signed 64-bit database column
    ({"batch_id": 1, "epoch": False}, "epoch"),  # booleans are not numbers
    ({"batch_id": True, "epoch": 0}, "batch_id"),
    ({"batch_id": "1", "epoch": 0}, "batch_id"),  # nor strings of digits
    ({"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": True}]}, "key_groups[0].load"),
    ({"batch_id": 1, "epoch": 0, "key_groups": [{"id": "a" * 257, "load": 1}]}, "key_groups[0].id"),
    ({"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": 1, "bytes": 1}]}, "key_groups[0].bytes"),
    ({"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/0", "load": "1"}]}, "key_groups[0].load"),
    ({"batch_id": 1, "epoch": 0, "load": [1, 2, True, 4]}, "load[2]"),
    ({"batch_id": 1, "epoch": 0, "load": [1, 2, -3, 4]}, "load[2]"),
    ({"batch_id": 1, "epoch": 0, "load": [1, 2, 3, 4], "state_bytes": [1, 2, -1, 4]}, "state_bytes[2]"),
    ({"batch_id": 1, "epoch": 0, "load": "1,2,3,4"}, "load"),
    # what needs the job: its length, its ids, one form at a time
    ({"batch_id": 1, "epoch": 0, "load": [1, 2, 3]}, "load"),
    ({"batch_id": 1, "epoch": 0, "load": [1, 2, 3, 4], "state_bytes": [1]}, "state_bytes"),
    ({"batch_id": 1, "epoch": 0, "load": [1, 2, 3, 4], "key_groups": [{"id": "agg/0", "load": 1}]}, "key_groups"),
    ({"batch_id": 1, "epoch": 0, "state_bytes": [1, 2, 3, 4]}, "state_bytes"),
    ({"batch_id": 1, "epoch": 0, "key_groups": [{"id": "agg/7", "load": 1}]}, "key_groups[0].id"),
])
def test_strict_and_bounded(client, body, field):
    jid = new_id()
    register(client, jid, key_groups=M)
    r = client.post(f"/v1/jobs/{jid}/stats", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["field"] == field, r.json()
    assert client.get(f"/v1/jobs/{jid}").json()["window"]["covered_batches"] == 0


def test_the_dense_form_of_the_wrong_length_names_load_and_the_job(client):
    jid = new_id()
    register(client, jid, key_groups=M)
    r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 1, "epoch": 0, "load": [1.0] * (M + 1)})
    assert r.status_code == 422
    (item,) = r.json()["detail"]
    assert item["field"] == "load" and f"{M} key groups" in item["reason"] and "5 numbers" in item["reason"]


def test_both_forms_count_the_same(client):
    """A batch posted as arrays is the batch posted by id: the same window mean, state sizes and metrics."""
    loads, state = [5.0, 1.0, 2.5, 0.0], [100.0, None, 7.0, None]
    jobs = []
    for dense in (True, False):
        jid = new_id()
        register(client, jid, key_groups=M, nodes=["a", "b"])
        if dense:
            body = {"batch_id": 1, "epoch": 0, "load": loads, "state_bytes": state}
        else:
            body = {"batch_id": 1, "epoch": 0, "key_groups": [
                {"id": k, "load": x, **({} if s is None else {"state_bytes": s})}
                for k, x, s in zip(IDS, loads, state, strict=True)][::-1]}  # any order
        r = client.post(f"/v1/jobs/{jid}/stats", json=body)
        assert r.status_code == 202 and r.json()["counted"], r.text
        jobs.append(client.get(f"/v1/jobs/{jid}").json())
        p = proposal(client, jid, {"algorithm": "flux"})
        jobs[-1]["moves"] = p["plan"]["moves"]
    a, b = jobs
    assert a["metrics"] == b["metrics"] and a["metrics"]["total_load"] == sum(loads)
    assert a["moves"] == b["moves"]
    assert {m["key_group"]: m["state_bytes"] for m in a["moves"]}.get("agg/0", 100) == 100


def test_batch_sums_that_overflow_are_refused_naming_the_largest_value(client):
    # two key groups at 1.7e308: each finite, their sum is not (every windowed metric would be inf or NaN)
    jid = new_id()
    register(client, jid, key_groups=M)
    kgs = [{"id": "agg/0", "load": 1.0}, {"id": "agg/1", "load": 1.7e308}, {"id": "agg/2", "load": 1.7e308}]
    r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 1, "epoch": 0, "key_groups": kgs})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "key_groups[1].load"
    assert "scale them down" in r.json()["detail"][0]["reason"]
    r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 1, "epoch": 0, "load": [1.0, 1.7e308, 1.7e308, 0]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "load[1]"
    r = client.post(f"/v1/jobs/{jid}/stats", json={"batch_id": 1, "epoch": 0, "load": [1.0] * M,
                                                    "state_bytes": [1e151, 0, 0, 0]})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "state_bytes[0]"
