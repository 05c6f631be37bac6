"""A proposal or automatic round whose background solve fails in any way ends as ``failed`` with the reason, never
stays pending; an automatic round commits the assignment it solved, in the job's order."""

from __future__ import annotations

import math
from dataclasses import replace

import httpx

from controller.service import Controller
from tests.api.inproc import propose, run, settle, stats

JOB = {"nodes": ["a", "b"], "operators": [{"id": "agg", "key_groups": 4}], "window_batches": 1, "algorithm": "flux",
       "policy": {"cooldown_batches": 0}}
KGS = [f"agg/{k}" for k in range(4)]


def _nan_plans(ctl: Controller) -> None:
    """A planner bug: plans carrying a number JSON cannot carry."""
    real = ctl.planning.solve

    async def nan_plan(*args, **kw):
        solved = await real(*args, **kw)
        return replace(solved, plan=replace(solved.plan, metrics=replace(solved.plan.metrics,
                                                                         migration_bytes=math.nan)))

    ctl.planning.solve = nan_plan  # type: ignore[method-assign]


def test_a_plan_that_cannot_be_stored_fails_the_proposal_with_the_reason(tmp_path):
    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/j", json=JOB)).status_code == 201
        assert (await c.post("/v1/jobs/j/stats", json=stats(1, KGS))).status_code == 202
        _nan_plans(ctl)
        p = await propose(c, "j")
        assert p["status"] == "failed" and "JSON" in p["error"] and p["decision"] is None, p
        got = (await c.get(f"/v1/jobs/j/proposals/{p['id']}")).json()
        assert got["status"] == "failed"
        assert (await c.post(f"/v1/jobs/j/proposals/{p['id']}/execute", json={"force": True})).status_code == 409

    run(tmp_path / "r.db", main)


def test_an_automatic_round_that_cannot_be_committed_ends_failed_and_leaves_the_post_counted(tmp_path):
    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/j", json={**JOB, "auto": True})).status_code == 201
        _nan_plans(ctl)
        r = await c.post("/v1/jobs/j/stats", json=stats(1, KGS))
        assert r.status_code == 202 and r.json()["counted"] is True and r.json()["apply"] is None, r.text
        assert r.json()["decision"]["reason"] == "started"
        await settle(ctl, "j")
        g = (await c.get("/v1/jobs/j")).json()
        assert g["epoch"] == 0 and g["window"]["batches"] == [1]
        assert g["decision"]["reason"] == "failed" and not g["decision"]["worth"], g["decision"]

    run(tmp_path / "r.db", main)


def test_an_automatic_round_commits_the_solved_assignment_in_the_jobs_order(tmp_path):
    """The numeric assignment a solve returns is committed as is: the new epoch's placement is the old one with
    exactly the plan's moves applied (key groups registered in an order unlike the nodes')."""
    job = {"nodes": ["b", "a", "c"], "key_groups": [{"id": f"kg{k}", "node": "abc"[k % 2]} for k in (5, 1, 4, 0, 3, 2)],
           "window_batches": 1, "algorithm": "flux", "auto": True, "policy": {"cooldown_batches": 0}}
    ids = [kg["id"] for kg in job["key_groups"]]

    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        reg = (await c.put("/v1/jobs/j", json=job)).json()
        assert reg["key_groups"] == ids and [n["id"] for n in reg["nodes"]] == ["b", "a", "c"]
        assert reg["placement"] == [0 if k % 2 else 1 for k in (5, 1, 4, 0, 3, 2)]  # b = 0, a = 1
        r = await c.post("/v1/jobs/j/stats", json=stats(1, ids, load=10.0))
        assert r.json()["decision"]["reason"] == "started", r.text
        await settle(ctl, "j")
        r = await c.post("/v1/jobs/j/stats", json=stats(2, ids, load=10.0))  # the driver still on epoch 0
        apply = r.json()["apply"]
        assert apply is not None and apply["nodes"] == ["b", "a", "c"], r.text
        moves = (await c.get("/v1/jobs/j/history")).json()["epochs"][1]["moves"]
        assert moves
        expected = {k: "bac"[i] for k, i in zip(ids, reg["placement"], strict=True)}
        for mv in moves:
            assert expected[mv["key_group"]] == mv["from"]
            expected[mv["key_group"]] = mv["to"]
        now = (await c.get("/v1/jobs/j")).json()
        assert [expected[k] for k in ids] == ["bac"[i] for i in apply["placement"]]
        assert now["placement"] == apply["placement"] and now["epoch"] == apply["epoch"] == 1

    run(tmp_path / "r.db", main)
