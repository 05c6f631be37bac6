"""A proposal whose background solve fails in any way ends as ``failed`` with the reason, never stays pending
(issue 12 item 4, the controller's side)."""

from __future__ import annotations

import httpx

from controller.service import Controller
from tests.api.inproc import run, stats

JOB = {"nodes": ["a", "b"], "operators": [{"id": "agg", "key_groups": 4}], "window_batches": 1, "algorithm": "flux"}
KGS = [f"agg/{k}" for k in range(4)]


def test_a_plan_that_cannot_be_stored_fails_the_proposal_with_the_reason(tmp_path):
    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/j", json=JOB)).status_code == 201
        assert (await c.post("/v1/jobs/j/stats", json=stats(1, KGS))).status_code == 202
        real = ctl.planning.solve

        async def nan_plan(*args, **kw):  # a planner bug: a number JSON cannot carry
            doc = await real(*args, **kw)
            return {**doc, "metrics": {**doc["metrics"], "migration_bytes": float("nan")}}

        ctl.planning.solve = nan_plan  # type: ignore[method-assign]
        r = await c.post("/v1/jobs/j/proposals", json={"wait_s": 30})
        assert r.status_code == 201, r.text
        p = r.json()
        assert p["status"] == "failed" and "JSON" in p["error"], p
        got = (await c.get(f"/v1/jobs/j/proposals/{p['id']}")).json()
        assert got["status"] == "failed"

    run(tmp_path / "r.db", main)


def test_an_automatic_round_that_cannot_be_committed_leaves_the_post_counted(tmp_path):
    auto = {**JOB, "auto": {"enabled": True, "cooldown_batches": 0}}

    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/j", json=auto)).status_code == 201
        real = ctl.planning.solve

        async def nan_plan(*args, **kw):
            doc = await real(*args, **kw)
            return {**doc, "metrics": {**doc["metrics"], "migration_bytes": float("nan")}}

        ctl.planning.solve = nan_plan  # type: ignore[method-assign]
        r = await c.post("/v1/jobs/j/stats", json=stats(1, KGS))
        assert r.status_code == 202 and r.json()["counted"] is True and r.json()["apply"] is None, r.text
        assert (await c.get("/v1/jobs/j")).json()["epoch"] == 0

    run(tmp_path / "r.db", main)
