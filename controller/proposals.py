"""Proposals: dry-run plans on a job's window (Cruise Control's proposals), executed later as computed.

``propose`` solves in the pool on a snapshot of the window: a proposal with ``base_epoch`` = the job's epoch and
the job's ``generation`` (its registration). ``execute`` applies it with an epoch compare-and-set, and only for the
same registration of the job: a proposal of a deleted job is unknown (404) even after the id is registered
again. Both checks run under the job's lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from controller import repository as repo
from controller.errors import Conflict, NotFound
from solvers.errors import InvalidInput
from solvers.model import Problem

if TYPE_CHECKING:
    from controller.context import Context
    from controller.planning import Planning
    from controller.rounds import Rounds

log = logging.getLogger("rebalancer.controller")

PROPOSAL_CACHE = 2000


@dataclass
class Proposal:
    id: str
    job_id: str
    generation: str          # the registration of the job it belongs to (not part of the document)
    base_epoch: int
    status: str              # pending | ready | failed | executed
    algorithm: str
    params: dict[str, Any]
    time_limit_s: float
    window: dict[str, Any]
    plan: dict[str, Any] | None
    error: str | None
    executed_epoch: int | None
    created_at: float

    def doc(self) -> dict[str, Any]:
        """The proposal document of the API."""
        out = dataclasses.asdict(self)
        del out["generation"]
        return out


class ProposalCache:
    """The most recent proposals in memory (pending ones are never dropped); older ones are read back from the
    database."""

    def __init__(self, size: int = PROPOSAL_CACHE):
        self.size = size
        self.items: dict[str, Proposal] = {}

    def get(self, pid: str) -> Proposal | None:
        return self.items.get(pid)

    def put(self, prop: Proposal) -> None:
        self.items[prop.id] = prop
        while len(self.items) > self.size:
            oldest = next(iter(self.items))
            if self.items[oldest].status == "pending":
                self.items[oldest] = self.items.pop(oldest)  # move to the end
                if all(p.status == "pending" for p in self.items.values()):
                    break
                continue
            self.items.pop(oldest)

    def drop_job(self, job_id: str) -> None:
        for pid in [p for p, d in self.items.items() if d.job_id == job_id]:
            self.items.pop(pid, None)


class Proposals:
    def __init__(self, ctx: Context, planning: Planning, rounds: Rounds):
        self.ctx = ctx
        self.planning = planning
        self.rounds = rounds

    async def propose(self, job_id: str, algorithm: str | None, params: dict[str, Any] | None,
                      time_limit: float | None, wait_s: float | None) -> tuple[bool, dict[str, Any]]:
        """A dry-run plan on the current window. Returns ``(finished, proposal)``: finished within the wait (201)
        or still solving (202, poll ``GET …/proposals/{id}``)."""
        ctx = self.ctx
        job = ctx.job(job_id)
        name = algorithm or job.config.algorithm
        params = job.config.params if (params is None and algorithm is None) else (params or {})
        name, params = self.planning.check_algorithm(name, params)
        tl = float(time_limit if time_limit is not None else job.config.time_limit_s)
        ctx.pool.check_admission(1)
        async with job.lock:
            ctx.still_registered(job)
            if not job.window.batches:
                raise Conflict(f"job {job_id!r} has no statistics yet (0 of {job.window.size} batches in the window)")
            try:  # the window's numbers, checked as a problem document's are (e.g. load / capacity overflow)
                problem = job.problem().check()
            except InvalidInput as exc:
                raise Conflict(f"job {job_id!r} cannot be planned from its window: {exc.field}: {exc.reason}") from exc
            prop = Proposal(id=uuid.uuid4().hex, job_id=job_id, generation=job.generation, base_epoch=job.epoch,
                            status="pending", algorithm=name, params=params, time_limit_s=ctx.pool.cap(tl),
                            window=job.window.state(), plan=None, error=None, executed_epoch=None,
                            created_at=time.time())
            await ctx.writer.run(repo.insert_proposal(prop))
            ctx.proposals.put(prop)
        task = ctx.spawn(self._run(prop, problem))
        limit = ctx.settings.request_wait_s
        wait = limit if wait_s is None else min(wait_s, limit)
        done, _ = await asyncio.wait({task}, timeout=wait)
        return bool(done), prop.doc()

    async def _run(self, prop: Proposal, problem: Problem) -> None:
        try:
            doc = (await self.planning.solve(prop.algorithm, problem, prop.time_limit_s, prop.params,
                                             admit=False)).doc
            status, plan, error = "ready", doc, None
            op = repo.finish_proposal(prop.id, status, plan, error)  # a plan that is not JSON fails here too
        except Exception as exc:  # a task boundary: whatever fails, the proposal ends as failed with the reason
            status, plan, error = "failed", None, f"{type(exc).__name__}: {exc}"
            log.warning("proposal %s failed: %s", prop.id, error)
            op = repo.finish_proposal(prop.id, status, plan, error)
        try:
            await self.ctx.writer.run(op)
        except Exception:  # the database refused: the proposal is failed in memory (and at the next start)
            log.exception("proposal %s: its result could not be stored", prop.id)
            status, plan, error = "failed", None, "the result could not be stored"
        if prop.status == "pending":
            prop.status, prop.plan, prop.error = status, plan, error

    async def get(self, job_id: str, pid: str) -> dict[str, Any]:
        job = self.ctx.job(job_id)
        prop = await self._proposal(job_id, job.generation, pid)
        doc = prop.doc()
        plan, epoch = doc["plan"], prop.executed_epoch
        if plan is not None and "assignment" not in plan and epoch is not None:  # executed: its epoch's assignment
            assignment = await asyncio.to_thread(repo.assignment_at, self.ctx.engine, job_id, epoch)
            doc["plan"] = {**plan, "assignment": assignment if assignment is not None else {}}
        return doc

    async def _proposal(self, job_id: str, generation: str, pid: str) -> Proposal:
        prop = self.ctx.proposals.get(pid)
        if prop is None:
            prop = await asyncio.to_thread(repo.get_proposal, self.ctx.engine, job_id, pid)
            if prop is not None:
                self.ctx.proposals.put(prop)
        if prop is None or prop.job_id != job_id or prop.generation != generation:
            raise NotFound(f"unknown proposal {pid!r} of job {job_id!r}")
        return prop

    async def execute(self, job_id: str, pid: str) -> dict[str, Any]:
        """Apply a ready proposal as computed (never recomputed); 409 unless the job is still at its base epoch."""
        job = self.ctx.job(job_id)
        async with job.lock:
            self.ctx.still_registered(job)
            prop = await self._proposal(job_id, job.generation, pid)
            if prop.status == "pending":
                raise Conflict(f"proposal {pid} is still being computed; poll GET /v1/jobs/{job_id}/proposals/{pid}")
            if prop.status == "failed":
                raise Conflict(f"proposal {pid} failed: {prop.error}")
            if prop.status == "executed":
                raise Conflict(f"proposal {pid} was already executed (epoch {prop.executed_epoch})")
            if prop.base_epoch != job.epoch:
                raise Conflict(f"proposal {pid} was computed at epoch {prop.base_epoch} but job {job_id!r} is at "
                               f"epoch {job.epoch}; request a new proposal")
            plan = prop.plan
            if plan is None or "assignment" not in plan:
                raise Conflict(f"proposal {pid} has no plan to execute; request a new proposal")
            res = await self.rounds.advance(job, plan["assignment"], kind="execute", plan=plan, proposal_id=pid)
            prop.status = "executed"
            prop.executed_epoch = res["epoch"]
            prop.plan = repo.executed_plan(plan)  # its assignment is the epoch's now (history)
        return {**res, "proposal_id": pid, "moves": plan["moves"]}
