"""Rounds of a job: statistics posts (the hot path), the automatic trigger, and advancing an epoch.

Lifecycle (DESIGN.md "Service shape", after Cruise Control's proposals and Megaphone's epochs): drivers post
statistics per micro-batch; the window keeps the last ``window_batches`` (:mod:`controller.windows`); with
``auto.enabled`` the trigger (windowed load distance above a threshold or load on removing nodes, window full,
cooldown passed, the driver on the current epoch) solves and executes inside the statistics post and returns the
plan to apply. Every new assignment is an epoch compare-and-set: ``e`` -> ``e + 1`` only if the job is still at
``e``, committed before memory changes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from itertools import repeat
from typing import Any

import numpy as np

from controller import history
from controller import repository as repo
from controller.context import Context
from controller.errors import Busy, Conflict, QuotaExceeded, TooLarge
from controller.jobs import Job, Node
from controller.planning import Planning
from controller.proposals import Proposal
from controller.stats import MAX_INT64, ParsedStats
from controller.windows import Batch
from controller.writer import add_batch
from solvers import metrics
from solvers.errors import InvalidInput

log = logging.getLogger("rebalancer.controller")


class Rounds:
    def __init__(self, ctx: Context, planning: Planning):
        self.ctx = ctx
        self.planning = planning

    # ------------------------------------------------------------------ statistics (the hot path)
    def _batch(self, job: Job, stats: ParsedStats) -> Batch:
        """The batch in key group indices; 413 beyond the caps, 422 naming the first bad field."""
        s = self.ctx.settings
        ids = stats.ids
        if not 0 <= stats.batch_id <= MAX_INT64:
            raise InvalidInput("batch_id", f"must be between 0 and 2^63 - 1 (a signed 64-bit integer), got "
                                           f"{stats.batch_id}")
        if not 0 <= stats.epoch <= MAX_INT64:
            raise InvalidInput("epoch", f"must be between 0 and 2^63 - 1, got {stats.epoch}")
        if len(ids) > s.max_key_groups:
            raise TooLarge(f"key_groups: more than {s.max_key_groups} key groups")
        if len(stats.src) > s.max_edges:
            raise TooLarge(f"communication: more than {s.max_edges} edges")
        index = job.kg_index
        n = len(ids)
        if ids == job.kg_ids:  # every key group in registration order (what a driver usually posts): no lookups
            idx = np.arange(n, dtype=np.int64)
        else:
            idx = np.fromiter(map(index.get, ids, repeat(-1, n)), dtype=np.int64, count=n)
            if n and idx.min() < 0:
                i = int(np.flatnonzero(idx < 0)[0])
                raise InvalidInput(f"key_groups[{i}].id", f"unknown key group {ids[i]!r} of job {job.job_id!r}")
            if n > 1 and len(set(ids)) != n:
                seen: set[int] = set()
                for i, k in enumerate(idx.tolist()):
                    if k in seen:
                        raise InvalidInput(f"key_groups[{i}].id", f"duplicate key group {ids[i]!r}")
                    seen.add(k)
        src = dst = None
        if stats.src:
            e = len(stats.src)
            src = np.fromiter(map(index.get, stats.src, repeat(-1, e)), dtype=np.int64, count=e)
            dst = np.fromiter(map(index.get, stats.dst, repeat(-1, e)), dtype=np.int64, count=e)
            for name, arr, names in (("src", src, stats.src), ("dst", dst, stats.dst)):
                if arr.min() < 0:
                    i = int(np.flatnonzero(arr < 0)[0])
                    raise InvalidInput(f"communication[{i}].{name}",
                                       f"unknown key group {names[i]!r} of job {job.job_id!r}")
        return Batch(stats.batch_id, stats.epoch, idx.astype(np.int32), stats.load, stats.state,
                     None if src is None else src.astype(np.int32), None if dst is None else dst.astype(np.int32),
                     stats.rate if src is not None else None)

    async def post_stats(self, job_id: str, stats: ParsedStats) -> dict[str, Any]:
        """Count one micro-batch's statistics and, in auto mode, maybe run a round. Returns the window state,
        ``counted``/``duplicate`` and, when an automatic round executed a plan, ``apply``."""
        job = self.ctx.job(job_id)
        batch = self._batch(job, stats)
        if batch.epoch > job.epoch:
            raise Conflict(f"batch {batch.batch_id} names epoch {batch.epoch} but job {job_id!r} is at epoch "
                           f"{job.epoch}")
        apply = None
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
                if job.config.auto.enabled and batch.epoch == job.epoch:
                    apply = await self._auto_round(job, batch.batch_id)
            else:
                self.ctx.telemetry.batches.inc("duplicate" if duplicate else "too_old")
            window = job.window.state()
            cur = job.epoch
        return {"job_id": job_id, "batch_id": batch.batch_id, "epoch": cur, "counted": counted,
                "duplicate": duplicate, "window": window, "apply": apply}

    def _check_window_bytes(self, job: Job, batch: Batch, evict: int | None) -> None:
        """Issue 12 item 10: the windows of all jobs together hold at most ``max_total_window_bytes`` (429)."""
        cap = self.ctx.settings.max_total_window_bytes
        growth = batch.nbytes - (job.window.batches[evict].nbytes if evict is not None else 0)
        if growth > 0 and self.ctx.window_bytes + growth > cap:
            raise QuotaExceeded(f"the statistics windows of all jobs hold {self.ctx.window_bytes} bytes; this batch "
                       f"({batch.nbytes} bytes) would exceed REBALANCER_MAX_TOTAL_WINDOW_BYTES = {cap}")

    async def _auto_round(self, job: Job, batch_id: int) -> dict[str, Any] | None:
        """The trigger (called with the job's lock held): window full, cooldown passed, windowed load distance
        above the threshold (or any load on removing nodes) -> solve, and execute if the plan improves."""
        auto = job.config.auto
        if len(job.window.batches) < job.window.size:
            return None
        last = job.last_round_batch
        if last is not None and 0 <= batch_id - last < auto.cooldown_batches:  # ids going back: a new count
            return None
        try:  # the window's numbers, checked as a problem document's are (e.g. load / capacity overflow)
            problem = job.problem().check()
        except InvalidInput as exc:
            log.warning("auto round of %s skipped: %s: %s", job.job_id, exc.field, exc.reason)
            return None
        loads = metrics.node_loads(problem, problem.current)
        ld = metrics.load_distance_of_loads(problem, loads)
        on_removing = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
        threshold = auto.load_distance_threshold
        if threshold is not None and ld <= threshold and on_removing <= 0:
            return None
        tl = auto.time_limit_s or job.config.time_limit_s
        try:
            solved = await self.planning.solve(job.config.algorithm, problem, tl, job.config.params, kind="auto")
        except (Busy, RuntimeError, InvalidInput) as exc:
            log.warning("auto round of %s skipped: %s", job.job_id, exc)
            return None
        doc = solved.doc
        before, after = doc["metrics"]["before"], doc["metrics"]["after"]
        improves = doc["moves"] and (after["load_distance"] < before["load_distance"] - 1e-9
                                     or after["load_on_removing"] < before["load_on_removing"] - 1e-9)
        if not improves:
            await self.ctx.writer.run(repo.set_last_round(job.job_id, batch_id))
            job.last_round_batch = batch_id
            return None
        prop = Proposal(id=uuid.uuid4().hex, job_id=job.job_id, generation=job.generation, base_epoch=job.epoch,
                        status="executed", algorithm=job.config.algorithm, params=job.config.params,
                        time_limit_s=float(tl), window=job.window.state(), plan=doc, error=None,
                        executed_epoch=job.epoch + 1, created_at=time.time())
        try:  # the batch is counted already: a round that cannot be committed is skipped, not a failed post
            res = await self.advance(job, solved.assignment, kind="auto", plan=doc, proposal=prop,
                                     last_round_batch=batch_id)
        except (Conflict, ValueError) as exc:
            log.warning("auto round of %s not executed: %s", job.job_id, exc)
            return None
        return {"proposal_id": prop.id, "base_epoch": res["base_epoch"], "epoch": res["epoch"],
                "assignment": res["assignment"], "moves": doc["moves"], "metrics": doc["metrics"],
                "solver": doc["solver"], "algorithm": doc["algorithm"]}

    # ------------------------------------------------------------------ epochs
    async def advance(self, job: Job, assignment: Mapping[str, str] | np.ndarray, kind: str,
                      plan: Mapping[str, Any] | None = None, proposal: Proposal | None = None,
                      proposal_id: str | None = None, last_round_batch: int | None = None,
                      nodes: list[Node] | None = None) -> dict[str, Any]:
        """Epoch compare-and-set (job lock held): commit ``assignment`` (key group id -> node id, and ``nodes``)
        as epoch + 1; 409 when the job is no longer at its epoch or the plan does not fit its topology.
        ``assignment`` as a solve returned it (node indices in the job's order: committed as is) or as a plan
        document has it (ids: a stored proposal's)."""
        new_nodes = job.nodes if nodes is None else nodes
        if isinstance(assignment, np.ndarray):
            if assignment.shape != (len(job.kg_ids),) or (len(assignment) and not 0 <= assignment.min() <=
                                                           assignment.max() < len(new_nodes)):
                raise Conflict(f"the plan does not fit job {job.job_id!r}; request a new proposal")
            a = assignment.astype(np.int64, copy=True)
        else:
            node_index = {nd.id: i for i, nd in enumerate(new_nodes)}
            try:
                a = np.array([node_index[assignment[k]] for k in job.kg_ids], dtype=np.int64)
            except KeyError as exc:
                raise Conflict(f"the plan does not fit job {job.job_id!r} (no {exc.args[0]!r}); request a new "
                               f"proposal") from None
        base = job.epoch
        now = time.time()
        erow = history.epoch_row(job, base + 1, kind, proposal_id or (proposal.id if proposal else None), new_nodes,
                                 a, plan, now, history.snapshot_every(self.ctx.settings))
        compaction = None
        if history.is_snapshot(erow["assignment"]):
            compaction = history.compact(job.job_id, base + 1, history.retention(self.ctx.settings))
        ok = await self.ctx.writer.run(repo.advance_epoch(
            job.job_id, base, history.job_values(erow, now), erow, proposal_id=proposal_id, proposal=proposal,
            last_round_batch=last_round_batch, then=compaction, plan=plan if proposal_id else None))
        if not ok:
            raise Conflict(f"job {job.job_id!r} is no longer at epoch {base}")
        job.epoch = base + 1
        job.assignment = a
        job.nodes = new_nodes
        job.updated_at = now
        if last_round_batch is not None:
            job.last_round_batch = last_round_batch
        if proposal is not None:
            proposal.plan = repo.executed_plan(proposal.plan)  # its assignment is this epoch's
            self.ctx.proposals.put(proposal)
        moved = int((plan or {}).get("metrics", {}).get("migrations", 0)) if kind != "nodes" else 0
        self.ctx.telemetry.record_epoch(job.job_id, kind, moved)
        return {"job_id": job.job_id, "base_epoch": base, "epoch": base + 1, "assignment": job.assignment_doc()}
