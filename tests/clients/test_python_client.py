"""RebalancerClient against a real controller over HTTP (and httpx transports for the retry policy)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from rebalancer_client import (
    ConflictError,
    ControllerUnavailable,
    NotFoundError,
    RebalancerClient,
    ServerError,
    ValidationError,
    contract,
)


def _job_id() -> str:
    return "t-" + uuid.uuid4().hex[:10]


def _stats(loads):
    return [{"id": f"agg/{k}", "load": float(v), "state_bytes": 64.0} for k, v in enumerate(loads)]


def test_full_flow_and_typed_errors(controller):
    jid = _job_id()
    with RebalancerClient(controller.url, timeout=10) as rc:
        job = rc.put_job(jid, nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 8}], algorithm="flux",
                         budget={"max_migrations": 2}, window_batches=2)
        assert isinstance(job, contract.JobState) and job.epoch == 0
        assert job.key_groups == [f"agg/{k}" for k in range(8)] and job.placement == [0] * 4 + [1] * 4
        assert job.assignment == {f"agg/{k}": "p0" if k < 4 else "p1" for k in range(8)}
        assert not job.auto and job.policy == contract.Policy()
        loads = [50, 40, 30, 20, 1, 1, 1, 1]  # contiguous ranges put the heavy half on p0
        first = rc.post_stats(jid, batch_id=0, epoch=0, load=loads, state_bytes=[64.0] * 8)
        assert first.counted and not first.duplicate and not first.window.ready
        assert first.decision is not None and first.decision.reason == "window" and first.apply is None
        second = rc.post_stats(jid, batch_id=1, epoch=0, key_groups=_stats(loads))  # the same batch, by id
        assert second.window.ready and second.decision.reason == "significant" and second.decision.worth
        dup = rc.post_stats(jid, batch_id=1, epoch=0, load=loads)
        assert dup.duplicate and not dup.counted

        a = rc.create_proposal(jid)
        b = rc.create_proposal(jid)
        assert a.status == "ready" and a.base_epoch == 0 and 1 <= a.plan.metrics.migrations <= 2
        assert a.decision.worth and a.decision.reason == "worth"
        assert a.decision.planned_load_distance == a.plan.metrics.after.load_distance
        ex = rc.execute_proposal(jid, a.id)
        assert ex.epoch == 1 and ex.base_epoch == 0 and ex.moves == a.plan.moves
        assert {k: ["p0", "p1"][i] for k, i in zip(job.key_groups, ex.placement, strict=True)} == a.plan.assignment
        with pytest.raises(ConflictError) as conflict:  # b was computed at epoch 0: stale
            rc.execute_proposal(jid, b.id, force=True)
        assert conflict.value.status_code == 409
        assert rc.get_job(jid).epoch == 1
        assert [e.kind for e in rc.history(jid).epochs] == ["register", "execute"]

        with pytest.raises(ConflictError):  # a batch naming a future epoch
            rc.post_stats(jid, batch_id=2, epoch=5, key_groups=_stats(loads))
        old = rc.post_stats(jid, batch_id=3, epoch=0, load=loads)  # older epoch accepted, the newer placement
        assert old.epoch == 1 and old.apply is not None and old.apply.placement == ex.placement
        assert old.apply.epoch == 1 and old.apply.nodes == ["p0", "p1"]
        with pytest.raises(ValidationError) as bad:
            rc.post_stats(jid, batch_id=4, epoch=1, key_groups=[{"id": "agg/0", "load": -1}])
        assert any("load" in f for f in bad.value.fields)
        with pytest.raises(ValidationError) as bad:
            rc.post_stats(jid, batch_id=4, epoch=1, load=[1.0] * 7)
        assert bad.value.fields == ["load"]
        with pytest.raises(NotFoundError):
            rc.get_job(jid + "-missing")
        rc.delete_job(jid)
        with pytest.raises(NotFoundError):
            rc.get_job(jid)


def test_stateless_plan(controller):
    problem = {"nodes": [{"id": "a"}, {"id": "b"}],
               "key_groups": [{"id": "k0", "node": "a", "load": 10}, {"id": "k1", "node": "a", "load": 10}]}
    with RebalancerClient(controller.url, timeout=10) as rc:
        plan = rc.plan(problem, "flux")
        ev = rc.evaluate(problem, plan)
    assert isinstance(plan, contract.Plan)
    assert plan.algorithm == "flux" and set(plan.assignment.values()) == {"a", "b"} and plan.metrics.migrations == 1
    assert ev.after == plan.metrics.after and ev.moves == plan.moves and ev.within_budget


def test_unreachable_controller_raises_unavailable_quickly(unused_port):
    rc = RebalancerClient(f"http://127.0.0.1:{unused_port}", retries=2, backoff=0.01, timeout=1)
    t0 = time.monotonic()
    with pytest.raises(ControllerUnavailable):
        rc.get_job("x")
    assert time.monotonic() - t0 < 5
    assert rc.is_healthy() is False


def _counting_transport(statuses):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method + " " + request.url.path)
        status = statuses[min(len(calls) - 1, len(statuses) - 1)]
        body = {"detail": "busy"} if status >= 400 else {  # a stats ack as the server sends it
            "job_id": "j", "batch_id": 1, "epoch": 0, "counted": True, "duplicate": False,
            "window": {"size": 2, "batches": [1], "covered_batches": 1, "coverage": 0.5, "key_groups_covered": 0,
                       "key_groups": 0, "ready": False}, "apply": None}
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handler), calls


def test_idempotent_calls_are_retried_with_backoff():
    transport, calls = _counting_transport([503, 502, 202])
    rc = RebalancerClient("http://ctl", transport=transport, retries=3, backoff=0.001)
    ack = rc.post_stats("j", batch_id=1, epoch=0, key_groups=[])
    assert ack.counted and len(calls) == 3


def test_retries_are_bounded():
    transport, calls = _counting_transport([503])
    rc = RebalancerClient("http://ctl", transport=transport, retries=2, backoff=0.001)
    with pytest.raises(ServerError) as err:
        rc.get_job("j")
    assert err.value.status_code == 503 and len(calls) == 3


def test_execute_is_never_retried_after_reaching_the_server():
    transport, calls = _counting_transport([503, 200])
    rc = RebalancerClient("http://ctl", transport=transport, retries=3, backoff=0.001)
    with pytest.raises(ServerError):
        rc.execute_proposal("j", "p1")
    assert calls == ["POST /v1/jobs/j/proposals/p1/execute"]
