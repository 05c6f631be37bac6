"""The controller: one :class:`Controller` per server process, the composition of the use cases the API calls.

Job state lives in memory (so a statistics post costs a few numpy operations) and in the database (so nothing
acknowledged is lost): every mutation is committed through the group-commit writer (:mod:`controller.writer`)
*before* the in-memory state changes and the request is answered. At startup the in-memory state is rebuilt from
the database. Each job has an asyncio lock, so one process serialises a job's mutations; the compare-and-set in
the database keeps executes atomic even across processes.

The layers, bottom up: records (:mod:`controller.model`, :mod:`controller.windows`), the policy
(:mod:`controller.policy`), storage (:mod:`controller.repository`, :mod:`controller.history`), the shared context
(:mod:`controller.context`), then the use cases — :mod:`controller.planning` (plans, evaluation, what-if),
:mod:`controller.rounds` (statistics, automatic rounds, epochs), :mod:`controller.proposals` (propose, execute),
:mod:`controller.jobs` (registration, nodes, history) and :mod:`controller.scaling` (what-if on a job, scale).
The API calls the use cases directly.

Replicas on one PostgreSQL database (:mod:`controller.leadership`): every replica starts its writer and warms its
solver pool, but only the leader holds the jobs. A replica that takes the lease over fails the proposals whose solve
the previous leader had not finished (a fenced write of its term) and loads the jobs — windows, epochs, the cooldown
of automatic rounds — as at a restart; an automatic round in flight is started again by the policy at the next
statistics batch. A replica that loses the lease forgets its jobs and stands by.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import logging

from sqlalchemy import update
from sqlalchemy.engine import Connection

from controller import edge
from controller import repository as repo
from controller.context import Context
from controller.jobs import Jobs
from controller.leadership import Fenced, ReplicaLeadership, request_term
from controller.planning import Planning
from controller.proposals import Proposals
from controller.rounds import Rounds
from controller.scaling import Scaling
from controller.settings import Settings
from controller.stalls import StallWatch
from controller.telemetry import watch_loop
from rebalancer_client import contract

log = logging.getLogger("rebalancer.controller")


class Controller:
    """The service's use cases over one shared :class:`Context`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.ctx = Context(settings)
        self.planning = Planning(self.ctx)
        self.rounds = Rounds(self.ctx, self.planning)
        self.proposals = Proposals(self.ctx, self.planning, self.rounds)
        self.jobs = Jobs(self.ctx, self.planning, self.rounds)
        self.scaling = Scaling(self.ctx, self.planning, self.rounds)
        self._transition = asyncio.Lock()
        self._stalls: StallWatch | None = None
        ctx, t = self.ctx, self.ctx.telemetry
        t.gauge("rebalancer_jobs", "registered jobs", lambda: len(ctx.jobs))
        t.gauge("rebalancer_solves_in_flight", "solves running or queued",
                lambda: ctx.pool.in_flight if ctx.started else 0)
        t.gauge("rebalancer_db_commits", "group commits of the writer (counter)",
                lambda: ctx.writer.commits if ctx.started else 0)
        t.gauge("rebalancer_db_writes", "write operations committed (counter)",
                lambda: ctx.writer.ops if ctx.started else 0)
        t.gauge("rebalancer_db_writer_cpu_seconds", "CPU time of the writer thread (counter)",
                lambda: ctx.writer.cpu_seconds if ctx.started else 0)
        t.gauge("rebalancer_window_bytes", "bytes of statistics held by the windows of all jobs",
                lambda: ctx.window_bytes)

    async def start(self, warm: bool = True) -> None:
        self.ctx.spawn(watch_loop(self.ctx.telemetry.loop_lag))
        if self.ctx.settings.loop_stall_ms > 0:
            self._stalls = StallWatch(asyncio.get_running_loop(), self.ctx.settings.loop_stall_ms / 1000)
            self._stalls.start()
        lead = self.ctx.leadership
        if isinstance(lead, ReplicaLeadership):
            await self._start_replica(lead, warm)
        else:
            await asyncio.to_thread(self._load)
            self.ctx.open()
            if warm:
                self.ctx.spawn(self.ctx.pool.warm())
                self.ctx.spawn(asyncio.to_thread(self._warm_imports))
        _tune_gc()

    def _warm_imports(self) -> None:
        """Import the planners (OR-tools…) and Gedik in the server process too, off the request path."""
        self.planning.default_algorithm()
        self.planning.algorithms()
        try:
            importlib.import_module("solvers.gedik")
        except ImportError as exc:
            log.warning("partitioning unavailable: %s", exc)
        _tune_gc()  # freeze what the imports created too

    def _load(self) -> None:
        ctx = self.ctx
        log.info("database schema at revision %s (controller/migrations)", repo.create_schema(ctx.engine))
        failed = repo.fail_pending_proposals(ctx.engine)
        if failed:
            log.warning("%d proposals were pending when the server stopped; marked failed", failed)
        self._load_jobs()

    def _load_jobs(self) -> None:
        ctx = self.ctx
        for job in repo.load_all(ctx.engine):
            ctx.jobs[job.job_id] = job
            ctx.window_bytes += job.window.nbytes
        log.info("loaded %d jobs from %s", len(ctx.jobs), repo.database_kind(ctx.url))

    # ------------------------------------------------------------------ replicas (PostgreSQL)
    async def _start_replica(self, lead: ReplicaLeadership, warm: bool) -> None:
        """Migrate (one replica at a time), open the writer and the pool, import the planners, make a first attempt
        at the lease (a lone replica serves as soon as it has started), then watch the lease on its thread.

        The imports come before the lease: they hold the interpreter lock for seconds at a time, which would keep
        a leader's thread from renewing its lease; so do the validators of the contract's documents, which a new
        leader would otherwise build on its first requests (about a second)."""
        revision = await asyncio.to_thread(lead.migrate, lambda: repo.create_schema(self.ctx.engine))
        log.info("database schema at revision %s (controller/migrations)", revision)
        self.ctx.open()
        if warm:
            self.ctx.spawn(self.ctx.pool.warm())
            await asyncio.to_thread(self._warm_imports)
            await asyncio.to_thread(_warm_documents)
        await asyncio.to_thread(lead.step)
        await self._follow_lease()
        loop = asyncio.get_running_loop()

        def changed() -> None:  # on the lease's thread
            loop.call_soon_threadsafe(self._lease_changed)

        lead.start(changed)

    def _lease_changed(self) -> None:
        self.ctx.spawn(self._follow_lease())

    async def _follow_lease(self) -> None:
        """Bring the jobs in memory to the lease's term: load them after a takeover, forget them once deposed."""
        lead = self.ctx.leadership
        assert isinstance(lead, ReplicaLeadership)
        async with self._transition:
            term = lead.term
            if term is None and lead.loaded_term is not None:
                lead.unloaded()
                self.ctx.forget_jobs()
            elif term is not None and lead.loaded_term != term:
                lead.unloaded()
                self.ctx.forget_jobs()
                try:
                    await self._take_over(term)
                except Fenced as exc:  # deposed meanwhile: the next change of term is followed in turn
                    log.warning("takeover of lease term %d abandoned: %s", term, exc)
                    self.ctx.forget_jobs()
                    return
                lead.loaded(term)

    async def _take_over(self, term: int) -> None:
        ctx = self.ctx
        token = request_term.set(term)
        try:
            failed = await ctx.writer.run(_fail_interrupted)
        finally:
            request_term.reset(token)
        if failed:
            log.warning("%d proposals were being solved by the previous leader; marked failed", failed)
        await asyncio.to_thread(self._load_jobs)

    async def close(self) -> None:
        """Stop following the lease, write what is queued, then hand the lease over."""
        lead = self.ctx.leadership
        if self._stalls is not None:
            self._stalls.stop()
        await asyncio.to_thread(lead.halt)
        await self.ctx.close()
        await asyncio.to_thread(lead.stop)


def _warm_documents() -> None:
    """Build the validators and serialisers of every contract document (built on first use otherwise)."""
    for name in dir(contract):
        doc = getattr(contract, name)
        if isinstance(doc, type) and dataclasses.is_dataclass(doc) and doc.__module__.startswith(contract.__name__):
            edge.adapter(doc)


def _fail_interrupted(conn: Connection) -> int:
    """Proposals whose solve an earlier leader had not finished are failed (a takeover, in its term)."""
    return int(conn.execute(update(repo.proposals).where(repo.proposals.c.status == "pending").values(
        status="failed", error="interrupted: the leader changed during the solve; ask for a new proposal")).rowcount)


def _tune_gc() -> None:
    """Fewer, cheaper garbage collections on the hot path.

    A statistics post allocates many short-lived objects (freed by reference counting, never cyclic) which would
    trigger a generation-0 collection on almost every request with the default threshold of 700; and a full
    collection walks every object of the process (OR-tools, numpy, FastAPI…). The long-lived startup objects are
    frozen out of the collector and the young-generation threshold is raised; cyclic garbage is still collected.
    """
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 50_000), max(gen1, 20), max(gen2, 20))
