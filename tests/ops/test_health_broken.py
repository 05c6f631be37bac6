"""Liveness fails when the solver pool cannot recover, so an orchestrator restarts the server; while it can (a
worker start retried with back-off), liveness holds and readiness says what is missing."""

from __future__ import annotations

import time

from tests.helpers.server import InProcessServer


def test_healthz_is_503_once_the_pool_is_broken_and_solves_answer_503(tmp_path) -> None:
    # a 1 MB data segment, below what a worker holds at its start: every start fails (2 starts with back-off)
    settings = {"solver_memory_limit_mb": 1, "solver_start_failures": 2, "solver_start_backoff_s": 0.01}
    with InProcessServer(database_url=f"sqlite:///{tmp_path / 'db.sqlite'}", **settings).start() as srv, \
            srv.client() as client:
        deadline = time.monotonic() + 120
        while (h := client.get("/healthz")).status_code == 200:
            assert time.monotonic() < deadline, "the pool never broke"
            assert client.get("/readyz").status_code == 503  # not ready while no worker is
            time.sleep(0.2)
        assert h.status_code == 503 and h.json()["status"] == "broken" and h.json()["solver_pool"]
        problem = {"nodes": [{"id": "a"}], "key_groups": [{"id": "k", "node": "a", "load": 1}]}
        r = client.post("/v1/plans", json={"problem": problem, "algorithm": "flux"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
