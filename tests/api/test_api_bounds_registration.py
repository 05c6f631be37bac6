"""Registered jobs hold memory in proportion to their key groups and window cells: all jobs together are capped
(REBALANCER_MAX_TOTAL_KEY_GROUPS, REBALANCER_MAX_TOTAL_WINDOW_CELLS; 429 naming the setting, 413 for a job that could
never fit), on the small path and on the one that builds big registrations in a solver worker; explicit key
groups are kept as a digest and PUT stays idempotent on them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.server import ServerProcess

CAPS = {"max_total_key_groups": 20_000, "max_total_window_cells": 60_000}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("registration")
    with ServerProcess(f"sqlite:///{d}/db.sqlite", settings=CAPS, log_path=d / "server.log").start() as s:
        yield s


def ops(n: int, window: int = 2) -> dict[str, Any]:
    return {"nodes": ["a", "b"], "operators": [{"id": "op", "key_groups": n}], "window_batches": window,
            "algorithm": "flux"}


def test_the_key_groups_and_window_cells_of_all_jobs_are_capped(srv):
    with srv.client(timeout=120) as c:
        assert c.put("/v1/jobs/a", json=ops(12_000)).status_code == 201  # built in a worker (≥ 10,000)
        r = c.put("/v1/jobs/b", json=ops(9_000))
        assert r.status_code == 429 and "REBALANCER_MAX_TOTAL_KEY_GROUPS" in r.text, r.text[:300]
        r = c.put("/v1/jobs/c", json=ops(25_000))  # could never fit: 413
        assert r.status_code == 413 and "REBALANCER_MAX_TOTAL_KEY_GROUPS" in r.text, r.text[:300]
        r = c.put("/v1/jobs/d", json=ops(5_000, window=8))  # 24,000 + 40,000 cells > 60,000
        assert r.status_code == 429 and "REBALANCER_MAX_TOTAL_WINDOW_CELLS" in r.text, r.text[:300]
        r = c.put("/v1/jobs/a", json=ops(12_000, window=6))  # a bigger window for a: 72,000 cells
        assert r.status_code == 413 and "REBALANCER_MAX_TOTAL_WINDOW_CELLS" in r.text, r.text[:300]
        assert c.put("/v1/jobs/a", json=ops(12_000, window=4)).status_code == 200
        assert c.delete("/v1/jobs/a").status_code == 204
        assert c.put("/v1/jobs/b", json=ops(9_000)).status_code == 201  # room again
        assert c.put("/v1/jobs/d", json=ops(5_000, window=8)).status_code == 201
        assert [j["job_id"] for j in c.get("/v1/jobs").json()] == ["b", "d"]
        for j in ("b", "d"):
            assert c.delete(f"/v1/jobs/{j}").status_code == 204


def test_explicit_key_groups_are_idempotent_and_another_topology_conflicts(srv):
    kgs = [{"id": f"k{i}", "operator": "op", "node": "a" if i % 2 else "b"} for i in range(12_000)]
    spec = {"nodes": ["a", "b"], "key_groups": kgs, "window_batches": 2, "algorithm": "flux"}
    with srv.client(timeout=120) as c:
        r = c.put("/v1/jobs/x", json=spec)
        assert r.status_code == 201 and len(r.json()["key_groups"]) == 12_000, r.text[:300]
        assert c.put("/v1/jobs/x", json={**spec, "window_batches": 3}).status_code == 200
        kgs[5] = {**kgs[5], "node": "b"}
        assert c.put("/v1/jobs/x", json={**spec, "key_groups": kgs}).status_code == 409
        small = {"nodes": ["a"], "key_groups": [{"id": "k", "operator": "op", "node": "a"}], "algorithm": "flux"}
        assert c.put("/v1/jobs/y", json=small).status_code == 201
        assert c.put("/v1/jobs/y", json=small).status_code == 200
        for j in ("x", "y"):
            assert c.delete(f"/v1/jobs/{j}").status_code == 204
