"""A proposal whose background solve fails in any way ends as ``failed`` with the reason, never stays pending
(issue 12 item 4, the controller's side)."""

from __future__ import annotations

from dataclasses import replace

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
            solved = await real(*args, **kw)
            doc = {**solved.doc, "metrics": {**solved.doc["metrics"], "migration_bytes": float("nan")}}
            return replace(solved, doc=doc)

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
            solved = await real(*args, **kw)
            doc = {**solved.doc, "metrics": {**solved.doc["metrics"], "migration_bytes": float("nan")}}
            return replace(solved, doc=doc)

        ctl.planning.solve = nan_plan  # type: ignore[method-assign]
        r = await c.post("/v1/jobs/j/stats", json=stats(1, KGS))
        assert r.status_code == 202 and r.json()["counted"] is True and r.json()["apply"] is None, r.text
        assert (await c.get("/v1/jobs/j")).json()["epoch"] == 0

    run(tmp_path / "r.db", main)


def test_an_automatic_round_commits_the_solved_assignment_in_the_jobs_order(tmp_path):
    """The numeric assignment a solve returns is committed as is: the new epoch's assignment is the old one with
    exactly the plan's moves applied (key groups registered in an order unlike the nodes')."""
    job = {"nodes": ["b", "a", "c"], "key_groups": [{"id": f"kg{k}", "node": "abc"[k % 2]} for k in (5, 1, 4, 0, 3, 2)],
           "window_batches": 1, "algorithm": "flux", "auto": {"enabled": True, "cooldown_batches": 0}}
    ids = [kg["id"] for kg in job["key_groups"]]

    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/j", json=job)).status_code == 201
        before = (await c.get("/v1/jobs/j")).json()["assignment"]
        r = await c.post("/v1/jobs/j/stats", json=stats(1, ids, load=10.0))
        apply = r.json()["apply"]
        assert apply is not None and apply["moves"], r.text
        expected = dict(before)
        for mv in apply["moves"]:
            assert expected[mv["key_group"]] == mv["from"]
            expected[mv["key_group"]] = mv["to"]
        now = (await c.get("/v1/jobs/j")).json()
        assert apply["assignment"] == expected == now["assignment"] and now["epoch"] == 1

    run(tmp_path / "r.db", main)
