"""A proposal belongs to one registration of its job.

The requests are ordered precisely in process: the test holds the job's lock, queues a DELETE and then a proposal
behind it, and releases the lock — an interleaving that real HTTP hits only now and then.
"""

from __future__ import annotations

import asyncio

import httpx

from controller.service import Controller
from tests.api.inproc import propose, run, stats

KGS = [f"agg/{k}" for k in range(6)]
JOB = {"nodes": ["w0", "w1"], "operators": [{"id": "agg", "key_groups": 6}], "window_batches": 1,
       "algorithm": "flux"}


def test_a_proposal_queued_behind_a_delete_is_refused_and_never_applies_to_the_next_registration(tmp_path):
    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/race", json=JOB)).status_code == 201
        assert (await c.post("/v1/jobs/race/stats", json=stats(1, KGS))).status_code == 202
        lock = ctl.ctx.jobs["race"].lock
        await lock.acquire()
        delete = asyncio.create_task(c.delete("/v1/jobs/race"))
        await asyncio.sleep(0.05)  # the DELETE waits for the lock first
        propose = asyncio.create_task(c.post("/v1/jobs/race/proposals", json={"wait_s": 30}))
        await asyncio.sleep(0.05)
        lock.release()
        assert (await delete).status_code == 204
        r = await propose
        assert r.status_code == 404, r.text  # not a proposal of a job that no longer exists
        # the same id registered again is a new job: nothing of the old one can be executed on it
        assert (await c.put("/v1/jobs/race", json=JOB)).status_code == 201
        if r.status_code in (201, 202):
            pid = r.json()["id"]
            assert (await c.get(f"/v1/jobs/race/proposals/{pid}")).status_code == 404
            assert (await c.post(f"/v1/jobs/race/proposals/{pid}/execute")).status_code == 404
        assert (await c.get("/v1/jobs/race")).json()["epoch"] == 0

    run(tmp_path / "r.db", main)


def test_a_proposal_of_a_deleted_job_is_unknown_after_the_id_is_registered_again(tmp_path):
    """Even a proposal that was acknowledged before the DELETE (and is still in memory or on disk) is not one of
    the new registration: 404 on read and on execute, with any topology, also after a restart."""
    other = {**JOB, "nodes": ["a", "b", "c"], "operators": [{"id": "agg", "key_groups": 9}]}

    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/race", json=JOB)).status_code == 201
        assert (await c.post("/v1/jobs/race/stats", json=stats(1, KGS))).status_code == 202
        p = await propose(c, "race")
        assert p["status"] == "ready", p
        pid = p["id"]
        # an interleaving that leaves the proposal behind: kept in the cache as such a race would
        kept = ctl.ctx.proposals.get(pid)
        assert kept is not None and kept.decision is not None and kept.decision.worth
        assert (await c.delete("/v1/jobs/race")).status_code == 204
        ctl.ctx.proposals.put(kept)
        for body in (JOB, other):
            assert (await c.put("/v1/jobs/race", json=body)).status_code == 201
            assert (await c.get(f"/v1/jobs/race/proposals/{pid}")).status_code == 404
            r = await c.post(f"/v1/jobs/race/proposals/{pid}/execute", json={"force": True})
            assert r.status_code == 404, r.text
            assert (await c.delete("/v1/jobs/race")).status_code == 204

    run(tmp_path / "r.db", main)
