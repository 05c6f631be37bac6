"""Rounds of a job: statistics posts (the hot path), the policy's verdict at each batch, automatic rounds, and
advancing an epoch.

Lifecycle (``docs/design.md`` "Service shape", after Cruise Control's proposals and Megaphone's epochs): drivers
post statistics per micro-batch; the window keeps the last ``window_batches`` (:mod:`controller.windows`). Once
the window is full, every post asks the policy (:mod:`controller.policy`) whether a round may pay. With ``auto``
the controller then solves in the background — never on the post's path — judges the plan and, when it is worth
it, executes it: the next statistics answer carries the new placement (``apply``), one round trip per batch.
Without ``auto`` the answer's ``decision`` says ``significant`` and the driver asks for a proposal. Every new
placement is an epoch compare-and-set: ``e`` -> ``e + 1`` only if the job is still at ``e``, committed before
memory changes.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np

from controller import history, policy
from controller import repository as repo
from controller.context import Context
from controller.errors import Conflict, QuotaExceeded
from controller.model import Fit, Job, Node, ProposalRecord, new_id
from controller.planning import Planning
from controller.solver_worker import Solved
from controller.stats import batch_of
from controller.windows import Batch
from controller.writer import add_batch, heavy_rows
from rebalancer_client import contract as c
from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.controller")


def balance_of(job: Job, problem: Problem) -> policy.Balance:
    """The policy's view of the job's window (job lock held). Once a whole window of batches has arrived since the
    last plan was executed, its fit bias is measured; it counts at most as the noise level of the window it is
    used on (a plan can only have fitted what the noise let it: more is a real change of the stream)."""
    b = policy.balance(problem, job.window.load_variance(), len(job.window.batches), job.config.policy.noise_sigmas)
    fit = job.fit
    if fit is None:
        return b
    if fit.bias is None:
        if fit.fresh < job.window.size:
            return dataclasses.replace(b, settling=(fit.fresh, job.window.size))
        fit.bias = max(0.0, b.load_distance - fit.claimed)
    return dataclasses.replace(b, bias=min(fit.bias, b.noise or 0.0))


class Rounds:
    def __init__(self, ctx: Context, planning: Planning):
        self.ctx = ctx
        self.planning = planning

    # ------------------------------------------------------------------ statistics (the hot path)
    async def post_stats(self, job_id: str, stats: c.Stats) -> c.StatsAck:
        """Count one micro-batch's statistics and let the policy judge the window; answer with the window, the
        verdict and, when the job's placement is newer than the batch's epoch, the placement to apply."""
        job = self.ctx.job(job_id)
        batch = batch_of(job, stats, self.ctx.settings)
        if batch.epoch > job.epoch:
            raise Conflict(f"batch {batch.batch_id} names epoch {batch.epoch} but job {job_id!r} is at epoch "
                           f"{job.epoch}")
        async with job.lock:
            self.ctx.still_registered(job)
            counted, duplicate, evict = job.window.classify(batch.batch_id)
            if counted:
                self._check_window_bytes(job, batch, evict)
                await self.ctx.writer.run(add_batch(job_id, batch, evict, time.time()))
                before = job.window.nbytes
                job.window.add(batch, evict)
                self.ctx.window_bytes += job.window.nbytes - before
                self.ctx.telemetry.batches.inc("counted")
                if job.fit is not None and job.fit.bias is None:
                    job.fit.fresh += 1
                self._consider(job, batch.batch_id)
            else:
                self.ctx.telemetry.batches.inc("duplicate" if duplicate else "too_old")
            return c.StatsAck(job_id=job_id, batch_id=batch.batch_id, epoch=job.epoch, counted=counted,
                              duplicate=duplicate, window=job.window.state(), decision=job.decision,
                              apply=job.placement() if batch.epoch < job.epoch else None)

    def _check_window_bytes(self, job: Job, batch: Batch, evict: int | None) -> None:
        """The windows of all jobs together hold at most ``max_total_window_bytes`` (429)."""
        cap = self.ctx.settings.max_total_window_bytes
        growth = batch.nbytes - (job.window.batches[evict].nbytes if evict is not None else 0)
        if growth > 0 and self.ctx.window_bytes + growth > cap:
            raise QuotaExceeded(f"the statistics windows of all jobs hold {self.ctx.window_bytes} bytes; this batch "
                                f"({batch.nbytes} bytes) would exceed REBALANCER_MAX_TOTAL_WINDOW_BYTES = {cap}")

    def _consider(self, job: Job, batch_id: int) -> None:
        """The policy's verdict at this batch (job lock held, no await): a full window, no round in flight, then
        :func:`policy.screen`; a round that may pay starts in the background (``auto``) or is reported as
        ``significant`` (proposal mode)."""
        if not job.window.full:
            job.decision = c.Decision(worth=False, reason="window", batch_id=batch_id,
                                      message=f"{len(job.window.batches)} of {job.window.size} batches in the window")
            return
        if job.round is not None:
            return
        try:  # the window's numbers, checked as a problem document's are (e.g. load / capacity overflow)
            problem = job.problem().check()
        except InvalidInput as exc:
            job.decision = c.Decision(worth=False, reason="failed", batch_id=batch_id,
                                      message=f"the window cannot be planned: {exc.field}: {exc.reason}")
            return
        rules = job.config.policy
        bal = balance_of(job, problem)
        verdict = policy.screen(rules, bal, batch_id=batch_id, last_round_batch=job.last_round_batch)
        if verdict is not None:
            job.decision = verdict
        elif not job.config.auto:
            job.decision = policy.pending("significant", "the imbalance exceeds the noise: a plan may pay",
                                          bal, rules, batch_id)
        else:
            job.decision = policy.pending("started", "an automatic round is being solved", bal, rules, batch_id)
            job.round = self.ctx.spawn(self._auto_round(job, problem, bal, batch_id))

    async def _auto_round(self, job: Job, problem: Problem, bal: policy.Balance, batch_id: int) -> None:
        """Solve in the pool (the job's lock is free meanwhile), judge, and execute a plan worth it."""
        cfg, base = job.config, job.epoch
        tl = self.ctx.settings.time_limit(cfg.time_limit_s)
        try:
            try:
                solved = await self.planning.solve(cfg.algorithm, problem, tl, cfg.params, kind="auto",
                                                   owner=job.job_id)
                verdict = policy.judge(cfg.policy, bal, solved.plan, batch_id=batch_id, last_round_batch=None)
            except Exception as exc:  # a task boundary: the round fails with its reason, the job goes on
                log.warning("automatic round of %s failed: %s", job.job_id, exc)
                solved, verdict = None, policy.pending("failed", f"the solve failed: {exc}", bal, cfg.policy,
                                                       batch_id)
            async with job.lock:
                if self.ctx.jobs.get(job.job_id) is not job:
                    return
                try:
                    await self._conclude(job, solved, verdict, base, batch_id, tl)
                except Exception as exc:  # the commit failed: the round ends failed, the job goes on
                    log.exception("automatic round of %s could not be committed", job.job_id)
                    job.last_round_batch = batch_id
                    job.decision = policy.pending("failed", f"the round could not be committed: {exc}", bal,
                                                  cfg.policy, batch_id)
        finally:
            job.round = None

    async def _conclude(self, job: Job, solved: Solved | None, verdict: c.Decision, base: int, batch_id: int,
                        tl: float) -> None:
        """Execute a round's plan when it is worth it and the job is still where it was solved (lock held)."""
        if solved is not None and verdict.worth and job.epoch == base:
            cfg = job.config
            prop = ProposalRecord(id=new_id(), job_id=job.job_id, generation=job.generation, base_epoch=base,
                                  status="executed", algorithm=cfg.algorithm, params=cfg.params, time_limit_s=tl,
                                  window=job.window.state(), plan=solved.plan, decision=verdict, error=None,
                                  executed_epoch=base + 1, created_at=time.time())
            try:
                await self.advance(job, solved.assignment, kind="auto", plan=solved.plan, proposal=prop,
                                   last_round_batch=batch_id, decision=verdict)
                job.decision = verdict
                return
            except Conflict as exc:
                log.warning("automatic round of %s not executed: %s", job.job_id, exc)
        if solved is not None and verdict.worth:
            verdict = dataclasses.replace(verdict, worth=False, reason="failed",
                                          message=f"the job moved to epoch {job.epoch} while the round was solved")
        await self.ctx.writer.run(repo.set_last_round(job.job_id, batch_id))
        job.last_round_batch = batch_id
        job.decision = verdict

    # ------------------------------------------------------------------ epochs
    async def advance(self, job: Job, assignment: np.ndarray, kind: str, plan: c.Plan | None = None,
                      proposal: ProposalRecord | None = None, proposal_id: str | None = None,
                      last_round_batch: int | None = None, nodes: list[Node] | None = None,
                      decision: c.Decision | None = None) -> None:
        """Epoch compare-and-set (job lock held): commit ``assignment`` (node index per key group, in the order
        of ``nodes``, default the job's) as epoch + 1; 409 when the job is no longer at its epoch or the
        assignment does not fit its topology."""
        new_nodes = job.nodes if nodes is None else nodes
        if assignment.shape != (len(job.kg_ids),) or (len(assignment) and not 0 <= assignment.min() <=
                                                       assignment.max() < len(new_nodes)):
            raise Conflict(f"the plan does not fit job {job.job_id!r}; request a new proposal")
        a = assignment.astype(np.int64, copy=True)
        base = job.epoch
        now = time.time()
        erow = history.epoch_row(job, base + 1, kind, proposal_id or (proposal.id if proposal else None), new_nodes,
                                 a, plan, now, history.snapshot_every(self.ctx.settings), decision)
        compaction = None
        if history.is_snapshot(erow["assignment"]):
            compaction = history.compact(job.job_id, base + 1, history.retention(self.ctx.settings))
        ok = await self.ctx.writer.run(repo.advance_epoch(
            job.job_id, base, history.job_values(erow, now), erow, proposal_id=proposal_id, proposal=proposal,
            last_round_batch=last_round_batch, then=compaction, plan=plan if proposal_id else None),
            heavy_rows(erow))
        if not ok:
            raise Conflict(f"job {job.job_id!r} is no longer at epoch {base}")
        job.epoch = base + 1
        job.assignment = a
        job.nodes = new_nodes
        job.updated_at = now
        if last_round_batch is not None:
            job.last_round_batch = last_round_batch
        job.fit = Fit(plan.metrics.after.load_distance) if plan is not None and kind in ("auto", "execute") else None
        if proposal is not None:
            proposal.plan = repo.executed_plan(proposal.plan)  # its assignment is this epoch's
            self.ctx.proposals.put(proposal)
        self.ctx.telemetry.record_epoch(job.job_id, kind, plan.metrics.migrations if plan is not None else 0)
