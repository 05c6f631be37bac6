"""Proposals: dry-run plans on a job's window (Cruise Control's proposals), judged by the policy, executed later
as computed.

``propose`` solves in the pool on a snapshot of the window: a proposal with ``base_epoch`` = the job's epoch and
the job's ``generation`` (its registration), and the policy's verdict on its plan (:func:`controller.policy.judge`).
``execute`` applies it with an epoch compare-and-set, only for the same registration of the job (a proposal of a
deleted job is unknown, 404, even after the id is registered again), and only when the verdict says it is worth it
unless the caller forces it. Both checks run under the job's lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

import numpy as np

from controller import policy
from controller import repository as repo
from controller.context import Context
from controller.errors import Conflict, NotFound
from controller.model import Job, ProposalRecord, new_id
from controller.planning import Planning
from controller.pool_admission import Ticket
from controller.rounds import Rounds, balance_of
from rebalancer_client import contract as c
from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.controller")


class Proposals:
    def __init__(self, ctx: Context, planning: Planning, rounds: Rounds):
        self.ctx = ctx
        self.planning = planning
        self.rounds = rounds

    async def propose(self, job_id: str, req: c.ProposalRequest) -> tuple[bool, c.Proposal]:
        """A dry-run plan on the current window. Returns ``(finished, proposal)``: finished within the wait (201)
        or still solving (202, poll ``GET …/proposals/{id}``)."""
        ctx = self.ctx
        job = ctx.job(job_id)
        cfg = job.config
        same = req.algorithm is None and req.params is None
        name, params = self.planning.check_algorithm(cfg.algorithm if same else req.algorithm,
                                                     cfg.params if same else req.params)
        tl = ctx.settings.time_limit(req.time_limit_s if req.time_limit_s is not None else cfg.time_limit_s)
        ticket = ctx.pool.admit(1, owner=job_id)  # before any await: the slot is this request's
        try:
            prop, problem, bal, newest = await self._record(job, name, params, tl)
        except BaseException:
            ticket.release()
            raise
        task = ctx.spawn(self._run(job, prop, problem, bal, newest, ticket))
        limit = ctx.settings.request_wait_s
        wait = limit if req.wait_s is None else min(req.wait_s, limit)
        done, _ = await asyncio.wait({task}, timeout=wait)
        return bool(done), prop.doc()

    async def _record(self, job: Job, name: str, params: dict[str, Any],
                      tl: float) -> tuple[ProposalRecord, Problem, policy.Balance, int]:
        """The pending proposal, stored, with the window's problem and the policy's view of it."""
        ctx, job_id = self.ctx, job.job_id
        async with job.lock:
            ctx.still_registered(job)
            if not job.window.batches:
                raise Conflict(f"job {job_id!r} has no statistics yet (0 of {job.window.size} batches in the window)")
            try:  # the window's numbers, checked as a problem document's are (e.g. load / capacity overflow)
                problem = job.problem().check()
            except InvalidInput as exc:
                raise Conflict(f"job {job_id!r} cannot be planned from its window: {exc.field}: {exc.reason}") from exc
            bal = balance_of(job, problem)
            prop = ProposalRecord(id=new_id(), job_id=job_id, generation=job.generation, base_epoch=job.epoch,
                                  status="pending", algorithm=name, params=params, time_limit_s=tl,
                                  window=job.window.state(), plan=None, decision=None, error=None,
                                  executed_epoch=None, created_at=time.time())
            await ctx.writer.run(repo.insert_proposal(prop))
            ctx.proposals.put(prop)
            return prop, problem, bal, next(reversed(job.window.batches))

    async def _run(self, job: Job, prop: ProposalRecord, problem: Problem, bal: policy.Balance, newest: int,
                   ticket: Ticket) -> None:
        try:
            with ticket:
                plan = (await self.planning.solve(prop.algorithm, problem, prop.time_limit_s, prop.params,
                                                  ticket=ticket)).plan
            verdict = policy.judge(job.config.policy, bal, plan, batch_id=newest,
                                   last_round_batch=job.last_round_batch)
            status, error = "ready", None
            op = repo.finish_proposal(prop.id, status, plan, verdict, error)  # a plan that is not JSON fails here
        except Exception as exc:  # a task boundary: whatever fails, the proposal ends as failed with the reason
            status, plan, verdict, error = "failed", None, None, f"{type(exc).__name__}: {exc}"
            log.warning("proposal %s failed: %s", prop.id, error)
            op = repo.finish_proposal(prop.id, status, None, None, error)
        try:
            await self.ctx.writer.run(op)
        except Exception:  # the database refused: the proposal is failed in memory (and at the next start)
            log.exception("proposal %s: its result could not be stored", prop.id)
            status, plan, verdict, error = "failed", None, None, "the result could not be stored"
        if prop.status == "pending":
            prop.status, prop.plan, prop.decision, prop.error = status, plan, verdict, error
        if verdict is not None and not verdict.worth and verdict.reason != "cooldown":
            await self._cool_down(job, newest)

    async def _cool_down(self, job: Job, newest: int) -> None:
        """A plan solved and judged not worth it starts the cooldown, as an automatic round does: the same window
        would give the same answer."""
        async with job.lock:
            if self.ctx.jobs.get(job.job_id) is not job:
                return
            try:
                await self.ctx.writer.run(repo.set_last_round(job.job_id, newest))
            except Exception:  # the verdict stands; only the pacing is lost
                log.exception("proposal of %s: the cooldown could not be stored", job.job_id)
                return
            job.last_round_batch = newest

    async def get(self, job_id: str, pid: str) -> c.Proposal:
        job = self.ctx.job(job_id)
        prop = await self._proposal(job_id, job.generation, pid)
        doc = prop.doc()
        if doc.plan is not None and not doc.plan.assignment and prop.executed_epoch is not None:
            assignment = await asyncio.to_thread(repo.assignment_at, self.ctx.engine, job_id, prop.executed_epoch)
            doc.plan = dataclasses.replace(doc.plan, assignment=assignment or {})
        return doc

    async def _proposal(self, job_id: str, generation: str, pid: str) -> ProposalRecord:
        prop = self.ctx.proposals.get(pid)
        if prop is None:
            prop = await asyncio.to_thread(repo.get_proposal, self.ctx.engine, job_id, pid)
            if prop is not None:
                self.ctx.proposals.put(prop)
        if prop is None or prop.job_id != job_id or prop.generation != generation:
            raise NotFound(f"unknown proposal {pid!r} of job {job_id!r}")
        return prop

    async def execute(self, job_id: str, pid: str, force: bool = False) -> c.Execution:
        """Apply a ready proposal as computed (never recomputed); 409 unless the job is still at its base epoch
        and the policy judged the plan worth it (or ``force``)."""
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
            if plan is None or not plan.assignment:
                raise Conflict(f"proposal {pid} has no plan to execute; request a new proposal")
            if prop.decision is not None and not prop.decision.worth and not force:
                raise Conflict(f"proposal {pid} is not worth executing ({prop.decision.reason}: "
                               f"{prop.decision.message}); execute it with {{\"force\": true}} to override")
            assignment = _indices(job, plan)
            await self.rounds.advance(job, assignment, kind="execute", plan=plan, proposal_id=pid,
                                      last_round_batch=next(reversed(job.window.batches), None),
                                      decision=prop.decision)
            prop.status = "executed"
            prop.executed_epoch = job.epoch
            prop.plan = repo.executed_plan(plan)  # its assignment is the epoch's now (history)
            job.decision = prop.decision
        return c.Execution(job_id=job_id, proposal_id=pid, base_epoch=job.epoch - 1, epoch=job.epoch,
                           placement=job.assignment.tolist(), moves=plan.moves)


def _indices(job: Job, plan: c.Plan) -> np.ndarray:
    """A stored plan's assignment (ids) as node indices of the job; 409 when it does not fit the job."""
    node_index = {nd.id: i for i, nd in enumerate(job.nodes)}
    try:
        return np.array([node_index[plan.assignment[k]] for k in job.kg_ids], dtype=np.int64)
    except KeyError as exc:
        raise Conflict(f"the plan does not fit job {job.job_id!r} (no {exc.args[0]!r}); request a new "
                       f"proposal") from None
