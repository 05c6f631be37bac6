"""Small builders shared by the API tests."""

from __future__ import annotations

import uuid

import numpy as np


def new_id(prefix: str = "job") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def register(client, job_id: str, nodes=("w0", "w1", "w2"), key_groups: int = 12, **extra) -> dict:
    body = {"nodes": list(nodes), "operators": [{"id": "agg", "key_groups": key_groups}], **extra}
    r = client.put(f"/v1/jobs/{job_id}", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def skewed_stats(job: dict, batch_id: int, epoch: int, seed: int = 0, hot: float = 10.0) -> dict:
    """Loads that make the first node of the registration hot."""
    rng = np.random.default_rng(seed + batch_id)
    first = job["nodes"][0]["id"]
    kgs = []
    for kg, node in job["assignment"].items():
        base = float(rng.uniform(1.0, 2.0))
        kgs.append({"id": kg, "load": base * (hot if node == first else 1.0), "state_bytes": 1000})
    return {"batch_id": batch_id, "epoch": epoch, "key_groups": kgs}


def execute_all_at_once(server, job_id: str, proposal_ids: list[str]) -> list[int]:
    """POST every proposal's execute at the same moment (one thread and client each, released by a barrier); the
    status codes. ``server``: a :mod:`tests.helpers.server` server, in process or a real process."""
    import threading

    codes: list[int] = []
    barrier = threading.Barrier(len(proposal_ids))

    def go(pid: str) -> None:
        with server.client(timeout=30) as c:
            barrier.wait()
            codes.append(c.post(f"/v1/jobs/{job_id}/proposals/{pid}/execute").status_code)

    threads = [threading.Thread(target=go, args=(pid,)) for pid in proposal_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes
