"""Small builders shared by the API tests."""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np


def new_id(prefix: str = "job") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def register(client, job_id: str, nodes=("w0", "w1", "w2"), key_groups: int = 12, **extra) -> dict:
    body = {"nodes": list(nodes), "operators": [{"id": "agg", "key_groups": key_groups}], **extra}
    r = client.put(f"/v1/jobs/{job_id}", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def assignment(job: dict) -> dict[str, str]:
    """Key group id -> node id of a job document (``key_groups``, ``placement``: node indices, ``nodes``)."""
    ids = [nd["id"] for nd in job["nodes"]]
    return {k: ids[i] for k, i in zip(job["key_groups"], job["placement"], strict=True)}


def named(placement: list[int], nodes: list[str], key_groups: list[str]) -> dict[str, str]:
    """A placement (node index per key group) of an execute or ``apply`` answer as key group id -> node id."""
    return {k: nodes[i] for k, i in zip(key_groups, placement, strict=True)}


def skewed_loads(job: dict, batch_id: int, seed: int = 0, hot: float = 10.0) -> list[float]:
    """One batch's loads in the job's key-group order, making the first node of the registration hot (the key
    groups it held at registration; ``job`` is the registration's document)."""
    rng = np.random.default_rng(seed + batch_id)
    first = job["nodes"][0]["id"]
    return [float(rng.uniform(1.0, 2.0)) * (hot if node == first else 1.0) for node in assignment(job).values()]


def skewed_stats(job: dict, batch_id: int, epoch: int, seed: int = 0, hot: float = 10.0) -> dict:
    """The statistics of :func:`skewed_loads` by key group id."""
    loads = skewed_loads(job, batch_id, seed, hot)
    kgs = [{"id": kg, "load": x, "state_bytes": 1000} for kg, x in zip(job["key_groups"], loads, strict=True)]
    return {"batch_id": batch_id, "epoch": epoch, "key_groups": kgs}


def dense_stats(job: dict, batch_id: int, epoch: int, seed: int = 0, hot: float = 10.0) -> dict:
    """The statistics of :func:`skewed_loads` as arrays in the job's order (what the Python client sends)."""
    loads = skewed_loads(job, batch_id, seed, hot)
    return {"batch_id": batch_id, "epoch": epoch, "load": loads, "state_bytes": [1000.0] * len(loads)}


def wait_decided(client, job_id: str, timeout: float = 120.0) -> dict:
    """The job document once no automatic round is being solved (``decision.reason`` is not ``started``): the
    next statistics answer carries what the round decided. ``timeout`` only bounds a hang."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if (job.get("decision") or {}).get("reason") != "started":
            return job
        assert time.monotonic() < deadline, f"the automatic round of {job_id} was still running after {timeout} s"
        time.sleep(0.02)


def execute_all_at_once(server, job_id: str, proposal_ids: list[str], body: Any = None) -> list[int]:
    """POST every proposal's execute at the same moment (one thread and client each, released by a barrier); the
    status codes. ``server``: a :mod:`tests.helpers.server` server, in process or a real process."""
    import threading

    codes: list[int] = []
    barrier = threading.Barrier(len(proposal_ids))

    def go(pid: str) -> None:
        with server.client(timeout=30) as c:
            barrier.wait()
            codes.append(c.post(f"/v1/jobs/{job_id}/proposals/{pid}/execute", json=body).status_code)

    threads = [threading.Thread(target=go, args=(pid,)) for pid in proposal_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes


def proposal(client, job_id: str, body: dict | None = None, timeout: float = 300.0) -> dict:
    """A proposal of ``job_id`` once decided: the POST waits ``request_wait_s``, then a 202's proposal is polled.
    On the shared test server a solve may queue behind other tests' solves (schemathesis leaves some running); how
    long it waits is the machine's speed, not the behaviour under test."""
    r = client.post(f"/v1/jobs/{job_id}/proposals", json=body or {})
    assert r.status_code in (201, 202), r.text
    doc: dict = r.json()
    deadline = time.monotonic() + timeout
    while doc["status"] == "pending":
        assert time.monotonic() < deadline, f"proposal still pending after {timeout} s: {doc}"
        time.sleep(0.05)
        doc = client.get(f"/v1/jobs/{job_id}/proposals/{doc['id']}").json()
    return doc
