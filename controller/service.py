"""The controller: one :class:`Controller` per server process, the facade the API calls.

Job state lives in memory (so a statistics post costs a few numpy operations) and in the database (so nothing
acknowledged is lost): every mutation is committed through the group-commit writer (:mod:`controller.writer`)
*before* the in-memory state changes and the request is answered. At startup the in-memory state is rebuilt from
the database. The controller holds an asyncio lock per job, so one process serialises a job's mutations; the
compare-and-set in the database keeps executes atomic even across processes.

The use cases live in their own modules: :mod:`controller.planning` (plans, evaluation, partitioning, what-if),
:mod:`controller.rounds` (statistics, automatic rounds, epochs), :mod:`controller.proposals` (propose, execute);
this module registers, rescales and deletes jobs and wires the rest.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import time
from typing import Any

import numpy as np

from controller import history as hist
from controller import repository as repo
from controller.context import Context
from controller.errors import Conflict, QuotaExceeded, TooLarge
from controller.jobs import Job, JobConfig, Node, config_from_spec, new_generation, topology
from controller.planning import Planning
from controller.proposals import Proposal, ProposalCache, Proposals
from controller.rounds import Rounds
from controller.settings import Settings
from controller.solving import SolverPool
from controller.stats import ParsedStats
from controller.telemetry import Telemetry
from controller.windows import Window
from controller.writer import InlineWriter, Writer
from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.controller")


class Controller:
    """The service's brain; the API is a thin layer over these coroutines."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.ctx = Context(settings, ProposalCache())
        self.planning = Planning(self.ctx)
        self.rounds = Rounds(self.ctx, self.planning)
        self._proposals = Proposals(self.ctx, self.planning, self.rounds)
        t = self.telemetry
        t.gauge("rebalancer_jobs", "registered jobs", lambda: len(self.jobs))
        t.gauge("rebalancer_solves_in_flight", "solves running or queued",
                lambda: self.ctx.pool.in_flight if self.ctx.started else 0)
        t.gauge("rebalancer_db_commits", "group commits of the writer (counter)",
                lambda: self.ctx.writer.commits if self.ctx.started else 0)
        t.gauge("rebalancer_db_writes", "write operations committed (counter)",
                lambda: self.ctx.writer.ops if self.ctx.started else 0)
        t.gauge("rebalancer_db_writer_cpu_seconds", "CPU time of the writer thread (counter)",
                lambda: self.ctx.writer.cpu_seconds if self.ctx.started else 0)
        t.gauge("rebalancer_window_bytes", "bytes of statistics held by the windows of all jobs",
                lambda: self.ctx.window_bytes)

    # ------------------------------------------------------------------ shared state
    @property
    def telemetry(self) -> Telemetry:
        return self.ctx.telemetry

    @property
    def jobs(self) -> dict[str, Job]:
        return self.ctx.jobs

    @property
    def proposals(self) -> dict[str, Proposal]:
        return self.ctx.proposals.items

    @property
    def pool(self) -> SolverPool | None:
        """The solver pool (None before :meth:`start`)."""
        return self.ctx.pool if self.ctx.started else None

    @property
    def writer(self) -> Writer | InlineWriter | None:
        """The group-commit writer (None before :meth:`start`)."""
        return self.ctx.writer if self.ctx.started else None

    @property
    def engine(self) -> Any:
        return self.ctx.engine

    @property
    def url(self) -> str:
        return self.ctx.url

    @property
    def started_at(self) -> float:
        return self.ctx.started_at

    # ------------------------------------------------------------------ lifecycle
    async def start(self, warm: bool = True) -> None:
        await asyncio.to_thread(self._load)
        self.ctx.open()
        if warm:
            self.ctx.spawn(self.ctx.pool.warm())
            self.ctx.spawn(asyncio.to_thread(self._warm_imports))
        _tune_gc()

    def _warm_imports(self) -> None:
        """Import the planners (OR-tools…) and Gedik in the server process too, off the request path."""
        self.default_algorithm()
        self.algorithms()
        try:
            importlib.import_module("solvers.gedik")
        except ImportError as exc:
            log.warning("partitioning unavailable: %s", exc)
        _tune_gc()  # freeze what the imports created too

    def _load(self) -> None:
        log.info("database schema at revision %s (controller/migrations)", repo.create_schema(self.ctx.engine))
        failed = repo.fail_pending_proposals(self.ctx.engine)
        if failed:
            log.warning("%d proposals were pending at the last stop; marked failed", failed)
        for job in repo.load_all(self.ctx.engine):
            self.ctx.jobs[job.job_id] = job
            self.ctx.window_bytes += job.window.nbytes
        log.info("loaded %d jobs from %s", len(self.ctx.jobs), repo.database_kind(self.ctx.url))

    async def close(self) -> None:
        await self.ctx.close()

    # ------------------------------------------------------------------ planning (stateless)
    def default_algorithm(self) -> str:
        return self.planning.default_algorithm()

    def check_algorithm(self, name: str | None, params: dict[str, Any] | None,
                        where: str = "") -> tuple[str, dict[str, Any]]:
        return self.planning.check_algorithm(name, params, where)

    def algorithms(self) -> list[dict[str, Any]]:
        return self.planning.algorithms()

    def check_problem_size(self, doc: Any, where: str = "problem") -> None:
        self.planning.check_problem_size(doc, where)

    def problem_from_doc(self, doc: dict[str, Any], where: str = "problem") -> Problem:
        return self.planning.problem_from_doc(doc, where)

    async def plan(self, problem_doc: dict[str, Any], algorithm: str | None, params: dict[str, Any],
                   time_limit: float) -> dict[str, Any]:
        return await self.planning.plan(problem_doc, algorithm, params, time_limit)

    async def evaluate(self, problem_doc: dict[str, Any], plan_doc: dict[str, Any]) -> dict[str, Any]:
        return await self.planning.evaluate(problem_doc, plan_doc)

    async def partitioning(self, spec: dict[str, Any]) -> Any:
        return await self.planning.partitioning(spec)

    async def what_if(self, problem_doc: dict[str, Any], candidates: list[Any], target: float | None,
                      algorithm: str | None, params: dict[str, Any], time_limit: float,
                      max_utilisation: float | None = None) -> dict[str, Any]:
        return await self.planning.what_if(problem_doc, candidates, target, algorithm, params, time_limit,
                                           max_utilisation)

    # ------------------------------------------------------------------ rounds and proposals
    async def post_stats(self, job_id: str, stats: ParsedStats) -> dict[str, Any]:
        return await self.rounds.post_stats(job_id, stats)

    async def propose(self, job_id: str, algorithm: str | None, params: dict[str, Any] | None,
                      time_limit: float | None, wait_s: float | None) -> tuple[bool, dict[str, Any]]:
        return await self._proposals.propose(job_id, algorithm, params, time_limit, wait_s)

    async def get_proposal(self, job_id: str, pid: str) -> dict[str, Any]:
        return await self._proposals.get(job_id, pid)

    async def execute(self, job_id: str, pid: str) -> dict[str, Any]:
        return await self._proposals.execute(job_id, pid)

    # ------------------------------------------------------------------ jobs
    def job_state(self, job: Job, with_metrics: bool = True) -> dict[str, Any]:
        return job.state(with_metrics)

    async def get_job(self, job_id: str) -> dict[str, Any]:
        return self.ctx.job(job_id).state()

    async def put_job(self, job_id: str, spec: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Register a job (``True``, state) or, when it exists with the same topology, update its configuration
        (``False``, state). A different topology for an existing job is a 409 (DELETE it first)."""
        topo = topology(spec, self.settings)
        name, params = self.check_algorithm(spec.get("algorithm"), spec.get("params"))
        config = config_from_spec(spec, name, params)
        existing = self.ctx.jobs.get(job_id)
        if existing is not None:
            return False, await self._update_job(existing, topo.registration, config)
        self._check_job_count()
        problem = topo.problem
        now = time.time()
        job = Job(job_id=job_id, generation=new_generation(), config=config, registration=topo.registration,
                  kg_ids=list(problem.kg_ids), operators=list(problem.operator),
                  reg_state=problem.state_bytes.copy(), nodes=topo.nodes, assignment=problem.current.copy(),
                  epoch=0, window=Window(config.window_batches, problem.n_key_groups), created_at=now,
                  updated_at=now)
        self.ctx.jobs[job_id] = job  # reserve the id before the await (a concurrent PUT sees it and compares)
        try:
            async with job.lock:
                erow = hist.epoch_row(job, 0, "register", None, job.nodes, job.assignment, None, now, 1)
                await self.ctx.writer.run(repo.insert_job(repo.job_row(job), erow))
        except BaseException:
            self.ctx.jobs.pop(job_id, None)
            raise
        self.telemetry.record_epoch(job_id, "register", 0)
        return True, job.state()

    def _check_job_count(self) -> None:
        """Issue 12 item 10: at most ``max_jobs`` registered jobs (429 beyond; DELETE one first)."""
        cap = self.settings.max_jobs
        if len(self.ctx.jobs) >= cap:
            raise QuotaExceeded(f"{len(self.ctx.jobs)} jobs are registered, the most this server keeps "
                           f"(REBALANCER_MAX_JOBS = {cap}); delete one first")

    async def _update_job(self, job: Job, registration: dict[str, Any], config: JobConfig) -> dict[str, Any]:
        async with job.lock:
            if self.ctx.jobs.get(job.job_id) is not job:
                raise Conflict(f"job {job.job_id!r} changed concurrently; retry")
            if job.registration != registration:
                raise Conflict(f"job {job.job_id!r} exists with another topology (nodes/key groups); DELETE it "
                               f"first or use POST /v1/jobs/{job.job_id}/nodes to scale")
            if job.config != config:
                now = time.time()
                drop = [] if job.window.size == config.window_batches else job.window.dropped_by(config.window_batches)
                await self.ctx.writer.run(repo.update_job_config(job.job_id, config, now, drop))
                job.config = config
                job.updated_at = now
                if job.window.size != config.window_batches:
                    before = job.window.nbytes
                    job.window.resize(config.window_batches)
                    self.ctx.window_bytes += job.window.nbytes - before
            return job.state()

    async def delete_job(self, job_id: str) -> None:
        job = self.ctx.job(job_id)
        async with job.lock:
            self.ctx.still_registered(job)
            await self.ctx.writer.run(repo.delete_job(job_id))
            self.ctx.jobs.pop(job_id, None)
            self.ctx.window_bytes -= job.window.nbytes
            self.ctx.proposals.drop_job(job_id)
            self.telemetry.forget_job(job_id)

    async def change_nodes(self, job_id: str, add: list[Any], remove: list[str], delete_: list[str]) -> dict[str, Any]:
        """Add nodes, mark nodes removing (they drain over the next rounds), delete empty removing nodes.

        A change creates a new epoch (proposals computed for the old node set can no longer be executed).
        """
        job = self.ctx.job(job_id)
        async with job.lock:
            self.ctx.still_registered(job)
            nodes = list(job.nodes)
            index = {nd.id: i for i, nd in enumerate(nodes)}
            for i, raw in enumerate(add):
                nd = Node.parse(raw)
                if nd.id in index:
                    if nodes[index[nd.id]] == nd:
                        continue  # a retried add: nothing to do
                    raise InvalidInput(f"add[{i}].id", f"node {nd.id!r} already exists (with another capacity or "
                                                       f"state)")
                index[nd.id] = len(nodes)
                nodes.append(nd)
            for i, nid in enumerate(remove):
                if nid not in index:
                    raise InvalidInput(f"remove[{i}]", f"unknown node {nid!r}")
                nodes[index[nid]] = Node(nid, nodes[index[nid]].capacity, True)
            counts = np.bincount(job.assignment, minlength=len(nodes))
            doomed = set()
            for i, nid in enumerate(delete_):
                if nid not in index:
                    raise InvalidInput(f"delete[{i}]", f"unknown node {nid!r}")
                if not nodes[index[nid]].removing:
                    raise Conflict(f"node {nid!r} is not marked removing; remove it first and let it drain")
                if counts[index[nid]]:
                    raise Conflict(f"node {nid!r} still holds {int(counts[index[nid]])} key groups; execute drain "
                                   f"rounds first")
                doomed.add(nid)
            nodes = [nd for nd in nodes if nd.id not in doomed]
            if len(nodes) > self.settings.max_nodes:
                raise TooLarge(f"nodes: more than {self.settings.max_nodes} nodes")
            if all(nd.removing for nd in nodes):
                raise InvalidInput("remove", "every node would be removing; at least one node must stay")
            if nodes != job.nodes:
                await self.rounds.advance(job, job.assignment_doc(), kind="nodes", nodes=nodes)
            return job.state()

    async def history(self, job_id: str, limit: int | None = None) -> dict[str, Any]:
        job = self.ctx.job(job_id)
        rows = await asyncio.to_thread(hist.read, self.ctx.engine, job_id, limit)
        out = []
        for r in rows:
            plan = repo.loads(r["plan"]) or {}
            out.append({"epoch": r["epoch"], "kind": r["kind"], "created_at": r["created_at"],
                        "proposal_id": r["proposal_id"], "nodes": repo.loads(r["nodes"]),
                        "moves": plan.get("moves"), "metrics": plan.get("metrics"), "solver": plan.get("solver"),
                        "algorithm": plan.get("algorithm")})
        return {"job_id": job_id, "epoch": job.epoch, "epochs": out}


def _tune_gc() -> None:
    """Fewer, cheaper garbage collections on the hot path.

    A statistics post allocates ~1,000 short-lived dicts (freed by reference counting, never cyclic) which would
    trigger a generation-0 collection on almost every request with the default threshold of 700; and a full
    collection walks every object of the process (OR-tools, numpy, FastAPI…). The long-lived startup objects are
    frozen out of the collector and the young-generation threshold is raised; cyclic garbage is still collected.
    """
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 50_000), max(gen1, 20), max(gen2, 20))
