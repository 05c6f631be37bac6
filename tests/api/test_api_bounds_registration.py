"""Registered jobs hold memory in proportion to their key groups and window cells: all jobs together are capped
(REBALANCER_MAX_TOTAL_KEY_GROUPS, REBALANCER_MAX_TOTAL_WINDOW_CELLS; 429 naming the setting, 413 for a job that could
never fit), on the small path and on the one that builds big registrations in a solver worker; explicit key
groups are kept as a digest and PUT stays idempotent on them. Statistics bodies of ``offload_min_bytes`` or more,
read in a worker, count exactly as small ones and refuse the same way."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.server import ThreadServer

CAPS = {"max_total_key_groups": 20_000, "max_total_window_cells": 60_000, "offload_min_bytes": 2048}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("registration")
    with ThreadServer(f"sqlite:///{d}/db.sqlite", settings=CAPS).start() as s:
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


def test_statistics_read_in_a_worker_count_as_those_read_inline(srv):
    n, loads = 60, [float(1 + (k * 7) % 13) for k in range(60)]
    by_id = [{"id": f"op/{k}", "load": loads[k], "state_bytes": 1000 + k} for k in range(n)]
    with srv.client(timeout=120) as c:
        for j in ("inline", "worker"):
            assert c.put(f"/v1/jobs/{j}", json=ops(n, window=3)).status_code == 201
        dense = {"load": loads, "state_bytes": [1000 + k for k in range(n)]}  # ~700 bytes: read inline
        assert c.post("/v1/jobs/inline/stats", json={"batch_id": 1, "epoch": 0, **dense}).status_code == 202
        assert c.post("/v1/jobs/inline/stats", json={"batch_id": 2, "epoch": 0, **dense}).status_code == 202
        for b, kgs in ((1, by_id), (2, by_id[::-1])):  # ~3.5 KB: in the job's order (arrays), then reversed
            r = c.post("/v1/jobs/worker/stats", json={"batch_id": b, "epoch": 0, "key_groups": kgs})
            assert r.status_code == 202 and r.json()["counted"], r.text[:300]
        inline, worker = (c.get(f"/v1/jobs/{j}").json() for j in ("inline", "worker"))
        assert worker["window"] == inline["window"] and worker["metrics"] == inline["metrics"]
        bad = [dict(k) for k in by_id]
        bad[7]["id"] = "nope"
        r = c.post("/v1/jobs/worker/stats", json={"batch_id": 3, "epoch": 0, "key_groups": bad})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "key_groups[7].id", r.text[:300]
        bad[7] = {"id": "op/7", "load": "x"}
        r = c.post("/v1/jobs/worker/stats", json={"batch_id": 3, "epoch": 0, "key_groups": bad})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "key_groups[7].load", r.text[:300]
        for j in ("inline", "worker"):
            assert c.delete(f"/v1/jobs/{j}").status_code == 204
