"""A solve whose worker dies (killed, out of memory) answers 503 with ``Retry-After`` and a request id, and the next
request is served by the replacement worker: a plan (its body is read in the worker) and a proposal's solve."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from evaluation.generators import albic_synthetic
from solvers.documents import problem_to_dict
from tests.helpers.server import InProcessServer

# kills a solver worker and waits for its replacement to start
pytestmark = [pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"), pytest.mark.slow]


def _kill_worker_during(srv: InProcessServer, body: dict[str, Any]) -> Any:
    """POST /v1/plans with ``body`` and SIGKILL the (only) solver worker once the solve runs."""
    result: dict[str, Any] = {}
    with srv.client(timeout=60) as c:  # the pool warms up in the background: wait until it is ready
        deadline = time.monotonic() + 120
        while c.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
    pool = srv.controller.ctx.pool
    pids = pool.pids()
    assert len(pids) == 1, pids

    def post() -> None:
        with srv.client(timeout=120) as c:
            result["r"] = c.post("/v1/plans", json=body)

    t = threading.Thread(target=post)
    t.start()
    deadline = time.monotonic() + 30
    while pool.in_flight == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # the worker is inside the solve (a 5 s limit)
    os.kill(pids[0], signal.SIGKILL)
    t.join(120)
    return result["r"]


def test_a_worker_killed_during_a_solve_is_a_503_and_the_next_solve_works(tmp_path):
    # the grid's 40x800/40/0.3/0: its lower bound (0.26) is below its best known plan (0.28), so the planner cannot
    # prove a plan optimal and stop early; it searches until its deadline, whatever the machine's speed
    problem = problem_to_dict(albic_synthetic(40, varies=0.3, seed=0, max_migrations=40))
    body = {"problem": problem, "algorithm": "albic-milp", "time_limit_s": 5}
    settings: dict[str, Any] = {"solver_workers": 1, "max_time_limit_s": 10.0}
    with InProcessServer(database_url=f"sqlite:///{tmp_path}/r.db", **settings) as srv:
        r = _kill_worker_during(srv, body)
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "1"
        doc = r.json()
        assert "solver unavailable" in doc["detail"] and "died" in doc["detail"] and doc["request_id"], doc
        deadline = time.monotonic() + 60
        while len(srv.controller.ctx.pool.pids()) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        with srv.client(timeout=120) as c:
            ok = c.post("/v1/plans", json={**body, "algorithm": "flux", "time_limit_s": 1})
        assert ok.status_code == 200, ok.text
