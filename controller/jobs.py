"""Registered jobs: registration (idempotent on the topology), configuration updates, node changes, deletion,
the job document and its history.

A job is registered with explicit ``key_groups`` (id, operator, node) or with ``operators`` (key group counts)
whose key groups ``<op>/<k>`` are spread over the active nodes in Flink's contiguous ranges. Each registration
gets a new ``generation``: proposals carry it, so a proposal never outlives the incarnation of the job it was
computed for (DELETE and PUT of the same id make a new job).
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller import history as hist
from controller import repository as repo
from controller.context import Context
from controller.edge import encode, in_worker, parse, unwrap
from controller.errors import Conflict, QuotaExceeded, TooLarge
from controller.model import Job, JobConfig, Node, new_generation
from controller.planning import Planning, check_algorithm
from controller.rounds import Rounds
from controller.settings import Settings
from controller.windows import Window
from controller.writer import heavy_rows
from rebalancer_client import contract as c
from rebalancer_client.wire import dump, read
from solvers import documents
from solvers.errors import InvalidInput
from solvers.model import Problem


def flink_ranges(n_keygroups: int, n_nodes: int) -> np.ndarray:
    """Node index of each key group when ``n_keygroups`` key groups are spread over ``n_nodes`` subtasks the way
    Flink's ``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup`` does: key group k -> k·P / K (contiguous
    ranges, sizes differing by at most one)."""
    k = np.arange(n_keygroups, dtype=np.int64)
    return (k * n_nodes) // n_keygroups


@dataclass
class Topology:
    """A registration request turned into numbers: nodes, key groups and their initial placement."""

    nodes: list[Node]
    registration: dict[str, Any]
    problem: Problem


def topology(spec: c.JobSpec, s: Settings) -> Topology:
    """Nodes and key groups of a ``PUT /v1/jobs/{id}`` body, with the size caps of ``s`` (413) and 422s naming
    the field. Key groups given by ``operators`` are placed in Flink's contiguous ranges (:func:`flink_ranges`)."""
    nodes = [Node.of(nd) for nd in spec.nodes]
    if len(nodes) > s.max_nodes:
        raise TooLarge(f"nodes: more than {s.max_nodes} nodes")
    if (spec.key_groups is None) == (spec.operators is None):
        raise InvalidInput("key_groups", "give either key_groups (explicit placement) or operators (key group "
                                         "counts), not both or neither")
    if spec.window_batches > s.max_window_batches:
        raise InvalidInput("window_batches", f"must be ≤ {s.max_window_batches}")
    node_docs = [nd.doc() for nd in nodes]
    if spec.key_groups is not None:
        m = len(spec.key_groups)
        if m > s.max_key_groups:
            raise TooLarge(f"key_groups: more than {s.max_key_groups} key groups")
        _check_cells(m, spec.window_batches, s)
        kgs = [c.KeyGroup(id=k.id, operator=k.operator, node=k.node, load=0.0, state_bytes=k.state_bytes)
               for k in spec.key_groups]
        registration = {"nodes": dump(node_docs), "key_groups": digest([
            {"id": k.id, "operator": k.operator, "node": k.node, "state_bytes": k.state_bytes}
            for k in spec.key_groups])}
    else:
        ops = spec.operators or []
        m = sum(o.key_groups for o in ops)
        if m > s.max_key_groups:
            raise TooLarge(f"operators: more than {s.max_key_groups} key groups in total")
        _check_cells(m, spec.window_batches, s)
        seen: set[str] = set()
        for i, o in enumerate(ops):
            if o.id in seen:
                raise InvalidInput(f"operators[{i}].id", f"duplicate operator id {o.id!r}")
            seen.add(o.id)
        active = [nd.id for nd in nodes if not nd.removing]
        if not active:
            raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")
        kgs = []
        for o in ops:
            where = flink_ranges(o.key_groups, len(active)).tolist()
            kgs += [c.KeyGroup(id=f"{o.id}/{k}", operator=o.id, node=active[where[k]], load=0.0)
                    for k in range(o.key_groups)]
        registration = {"nodes": dump(node_docs), "operators": [{"id": o.id, "key_groups": o.key_groups}
                                                                for o in ops]}
    doc = c.Problem(nodes=[c.Node(id=nd.id, capacity=nd.capacity, removing=nd.removing) for nd in nodes],
                    key_groups=kgs)
    try:
        problem = documents.problem_of(doc)
    except InvalidInput as exc:
        if spec.key_groups is None and exc.field.startswith("key_groups"):
            raise InvalidInput("operators", exc.reason) from None
        raise
    return Topology(nodes, registration, problem)


def same_topology(job: Job, registration: dict[str, Any]) -> bool:
    """Whether a registration names the job's topology: the one it was registered with, or, for a job registered
    by operators, its operators on the nodes it has now (after a scale or node change a restarted client
    registers with the current nodes)."""
    if compact(job.registration) == registration:
        return True
    current = {**job.registration, "nodes": dump([nd.doc() for nd in job.nodes])}
    return "operators" in registration and current == registration


def digest(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What a registration keeps of its explicit key groups: their count and a SHA-256 of their canonical JSON
    (enough to tell the same topology again; the list itself would hold hundreds of bytes per key group)."""
    text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {"count": len(items), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def compact(registration: dict[str, Any]) -> dict[str, Any]:
    """A registration in the form :func:`topology` gives: explicit key groups read as a list (from a database row
    written with the list) become their :func:`digest`."""
    kgs = registration.get("key_groups")
    return {**registration, "key_groups": digest(kgs)} if isinstance(kgs, list) else registration


def _check_cells(m: int, window: int, s: Settings) -> None:
    """A job's window holds at most ``max_window_cells`` (key group, batch) statistics."""
    cap = s.max_window_cells
    if m * window > cap:
        raise TooLarge(f"window_batches: {m} key groups × {window} batches = {m * window} statistics per window, "
                       f"more than the {cap} allowed per job (REBALANCER_MAX_WINDOW_CELLS)")


#: registrations of at least this many key groups are built in a solver worker (200,000 took 0.4-2.4 s of topology
#: and 0.3-1.9 s of rows on a 2-core machine at load 2-25)
OFFLOAD_KEY_GROUPS = 10_000


def key_group_count(spec: c.JobSpec) -> int:
    return len(spec.key_groups) if spec.key_groups is not None else sum(o.key_groups for o in spec.operators or [])


def new_job(job_id: str, topo: Topology, config: JobConfig, generation: str, now: float,
            kg_index: dict[str, int] | None = None) -> Job:
    """The job a registration makes: epoch 0, its placement, an empty window (``kg_index``: the key groups'
    positions, when the caller built them already)."""
    problem = topo.problem
    return Job(job_id=job_id, generation=generation, config=config, registration=topo.registration,
               kg_ids=list(problem.kg_ids), operators=list(problem.operator), reg_state=problem.state_bytes.copy(),
               nodes=topo.nodes, assignment=problem.current.copy(), epoch=0,
               window=Window(config.window_batches, problem.n_key_groups), created_at=now, updated_at=now,
               kg_index=kg_index or {})


async def positions(ids: list[str], chunk: int = 10_000) -> dict[str, int]:
    """``{id: position}``, built on the event loop in slices with other requests served between them: 200,000 ids
    take ~50 ms in all (a thread would hold the GIL as long and make every request wait for it)."""
    out: dict[str, int] = {}
    for lo in range(0, len(ids), chunk):
        out.update(zip(ids[lo:lo + chunk], range(lo, lo + chunk), strict=False))  # (the last slice is shorter)
        await asyncio.sleep(0)
    return out


def registered(job: Job, now: float) -> dict[str, Any]:
    """The history row of a registration."""
    return hist.epoch_row(job, 0, "register", None, job.nodes, job.assignment, None, now, 1)


@dataclass
class Built:
    """A registration made in a solver worker (:func:`build`): what the event loop needs to add the job."""

    topology: Topology
    config: JobConfig
    generation: str
    now: float
    rows: tuple[dict[str, Any], dict[str, Any]]  # the job's row and its registration's history row
    state: bytes  # the job document


def build(job_id: str, raw: bytes, s: Settings, default_algorithm: str) -> Built:
    """``PUT /v1/jobs/{job_id}`` from its raw body to its rows and document (in a solver worker)."""
    spec = parse(c.JobSpec, raw)
    topo = topology(spec, s)
    name, params = check_algorithm(spec.algorithm or default_algorithm, spec.params)
    config = JobConfig.of(spec, name, params)
    now, generation = time.time(), new_generation()
    job = new_job(job_id, topo, config, generation, now)
    return Built(topo, config, generation, now, (repo.job_row(job), registered(job, now)),
                 encode(job.state(s.time_limit(config.time_limit_s))))


class Jobs:
    """Registration, configuration, nodes, deletion and the documents of registered jobs."""

    def __init__(self, ctx: Context, planning: Planning, rounds: Rounds):
        self.ctx = ctx
        self.planning = planning
        self.rounds = rounds

    def state(self, job: Job) -> c.JobState:
        return job.state(self.ctx.settings.time_limit(job.config.time_limit_s))

    async def get(self, job_id: str) -> c.JobState:
        return self.state(self.ctx.job(job_id))

    def summaries(self) -> list[c.JobSummary]:
        return [c.JobSummary(job_id=j.job_id, epoch=j.epoch, nodes=len(j.nodes), key_groups=len(j.kg_ids))
                for j in self.ctx.jobs.values()]

    async def put(self, job_id: str, spec: c.JobSpec) -> tuple[bool, c.JobState]:
        """Register a job (``True``, state) or, when it exists with the same topology, update its configuration
        (``False``, state). A different topology for an existing job is a 409 (DELETE it first)."""
        topo = topology(spec, self.ctx.settings)
        name, params = self.planning.check_algorithm(spec.algorithm, spec.params)
        config = JobConfig.of(spec, name, params)
        existing = self.ctx.jobs.get(job_id)
        if existing is not None:
            return False, await self._update(existing, topo.registration, config)
        self._check_quota(topo.problem.n_key_groups, config.window_batches)
        now = time.time()
        job = new_job(job_id, topo, config, new_generation(), now)
        await self._insert(job, repo.job_row(job), registered(job, now))
        return True, self.state(job)

    async def put_body(self, job_id: str, raw: bytes) -> tuple[bool, bytes]:
        """:meth:`put` from the raw body, answering the job document as JSON. A body of ``offload_min_bytes`` or
        more, or one of at least :data:`OFFLOAD_KEY_GROUPS` key groups (a few bytes of ``operators`` can name
        200,000), is read and built in a solver worker (:func:`build`): the event loop only makes the job of it."""
        s = self.ctx.settings
        if len(raw) < s.offload_min_bytes:
            spec = parse(c.JobSpec, raw)
            if key_group_count(spec) < OFFLOAD_KEY_GROUPS:
                created, state = await self.put(job_id, spec)
                return created, encode(state)
        budget = s.max_time_limit_s + s.offload_seconds_per_mb * len(raw) / 1e6
        built: Built = unwrap(await self.ctx.pool.submit(in_worker, build, job_id, raw, s,
                                                         self.planning.default_algorithm(), raw=True,
                                                         time_limit=budget, owner=job_id))
        m, window = built.topology.problem.n_key_groups, built.config.window_batches
        index = await positions(built.topology.problem.kg_ids)
        job = new_job(job_id, built.topology, built.config, built.generation, built.now, index)
        existing = self.ctx.jobs.get(job_id)  # (a PUT of the same id may have come first meanwhile)
        if existing is not None:
            return False, encode(await self._update(existing, built.topology.registration, built.config))
        self._check_quota(m, window)
        await self._insert(job, *built.rows)
        return True, built.state

    async def _insert(self, job: Job, job_row: dict[str, Any], epoch_row: dict[str, Any]) -> None:
        self.ctx.jobs[job.job_id] = job  # reserve the id before the await (a concurrent PUT sees it and compares)
        try:
            async with job.lock:
                await self.ctx.writer.run(repo.insert_job(job_row, epoch_row), heavy_rows(job_row, epoch_row))
        except BaseException:
            self.ctx.jobs.pop(job.job_id, None)
            raise
        self.ctx.telemetry.record_epoch(job.job_id, "register", 0)

    def _check_quota(self, m: int, window: int, job: Job | None = None) -> None:
        """A new job (or ``job`` with a new window) fits: at most ``max_jobs`` jobs, ``max_total_key_groups`` key
        groups and ``max_total_window_cells`` window cells (key groups × window batches) in all jobs. 429 when
        deleting jobs would make room, 413 when it never could."""
        s, others = self.ctx.settings, [j for j in self.ctx.jobs.values() if j is not job]
        if job is None and len(others) >= s.max_jobs:
            raise QuotaExceeded(f"{len(others)} jobs are registered, the most this server keeps "
                                f"(REBALANCER_MAX_JOBS = {s.max_jobs}); delete one first")
        for what, held, need, cap, name in (
                ("key groups", sum(len(j.kg_ids) for j in others), m, s.max_total_key_groups,
                 "REBALANCER_MAX_TOTAL_KEY_GROUPS"),
                ("window cells (key groups × window_batches)", sum(len(j.kg_ids) * j.window.size for j in others),
                 m * window, s.max_total_window_cells, "REBALANCER_MAX_TOTAL_WINDOW_CELLS")):
            if need > cap:
                raise TooLarge(f"{need} {what}: more than all jobs together may hold ({name} = {cap})")
            if held + need > cap:
                raise QuotaExceeded(f"the registered jobs hold {held} {what}; this job's {need} would exceed "
                                    f"{name} = {cap}; delete a job first")

    async def _update(self, job: Job, registration: dict[str, Any], config: JobConfig) -> c.JobState:
        async with job.lock:
            if self.ctx.jobs.get(job.job_id) is not job:
                raise Conflict(f"job {job.job_id!r} changed concurrently; retry")
            if not same_topology(job, registration):
                raise Conflict(f"job {job.job_id!r} exists with another topology (nodes/key groups); DELETE it "
                               f"first or use POST /v1/jobs/{job.job_id}/nodes to scale")
            if job.config != config:
                if job.window.size != config.window_batches:
                    self._check_quota(len(job.kg_ids), config.window_batches, job)
                now = time.time()
                drop = [] if job.window.size == config.window_batches else job.window.dropped_by(config.window_batches)
                await self.ctx.writer.run(repo.update_job_config(job.job_id, config, now, drop))
                job.config = config
                job.updated_at = now
                if job.window.size != config.window_batches:
                    before = job.window.nbytes
                    job.window.resize(config.window_batches)
                    self.ctx.window_bytes += job.window.nbytes - before
            return self.state(job)

    async def delete(self, job_id: str) -> None:
        job = self.ctx.job(job_id)
        async with job.lock:
            self.ctx.still_registered(job)
            await self.ctx.writer.run(repo.delete_job(job_id))
            self.ctx.jobs.pop(job_id, None)
            self.ctx.window_bytes -= job.window.nbytes
            self.ctx.proposals.drop_job(job_id)
            self.ctx.telemetry.forget_job(job_id)
            self.ctx.pool.cancel(job_id, "the job was deleted")
        del job
        await asyncio.to_thread(release_memory)

    async def change_nodes(self, job_id: str, req: c.NodesRequest) -> c.JobState:
        """Add nodes, mark nodes removing (they drain over the next rounds), delete empty removing nodes.

        A change creates a new epoch (proposals computed for the old node set can no longer be executed).
        """
        job = self.ctx.job(job_id)
        async with job.lock:
            self.ctx.still_registered(job)
            nodes = _changed_nodes(job, req)
            if len(nodes) > self.ctx.settings.max_nodes:
                raise TooLarge(f"nodes: more than {self.ctx.settings.max_nodes} nodes")
            if nodes != job.nodes:
                index = {nd.id: i for i, nd in enumerate(nodes)}
                old = job.node_ids
                assignment = np.array([index[old[i]] for i in job.assignment.tolist()], dtype=np.int64)
                await self.rounds.advance(job, assignment, kind="nodes", nodes=nodes)
            return self.state(job)

    async def history(self, job_id: str, limit: int | None = None) -> c.History:
        job = self.ctx.job(job_id)
        rows = await asyncio.to_thread(hist.read, self.ctx.engine, job_id, limit)
        out = []
        for r in rows:
            plan = repo.loads(r["plan"]) or {}
            out.append(read(c.HistoryEntry, {
                "epoch": r["epoch"], "kind": r["kind"], "created_at": r["created_at"],
                "proposal_id": r["proposal_id"], "nodes": repo.loads(r["nodes"]), **plan}))
        return c.History(job_id=job_id, epoch=job.epoch, epochs=out)


def release_memory() -> None:
    """Give the memory a deleted job held back to the system: glibc keeps freed heap memory for the process
    (``malloc_trim``; ctypes lets go of the GIL while it runs). Nothing where there is no glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _changed_nodes(job: Job, req: c.NodesRequest) -> list[Node]:
    """The job's nodes after ``req`` (422/409 naming the first change that cannot be made)."""
    nodes = list(job.nodes)
    index = {nd.id: i for i, nd in enumerate(nodes)}
    for i, raw in enumerate(req.add):
        nd = Node.of(raw)
        if nd.id in index:
            if nodes[index[nd.id]] == nd:
                continue  # a retried add: nothing to do
            raise InvalidInput(f"add[{i}].id", f"node {nd.id!r} already exists (with another capacity or state)")
        index[nd.id] = len(nodes)
        nodes.append(nd)
    for i, nid in enumerate(req.remove):
        if nid not in index:
            raise InvalidInput(f"remove[{i}]", f"unknown node {nid!r}")
        nodes[index[nid]] = Node(nid, nodes[index[nid]].capacity, True)
    counts = np.bincount(job.assignment, minlength=len(job.nodes))
    doomed = set()
    for i, nid in enumerate(req.delete):
        if nid not in index:
            raise InvalidInput(f"delete[{i}]", f"unknown node {nid!r}")
        if not nodes[index[nid]].removing:
            raise Conflict(f"node {nid!r} is not marked removing; remove it first and let it drain")
        if index[nid] < len(counts) and counts[index[nid]]:
            raise Conflict(f"node {nid!r} still holds {int(counts[index[nid]])} key groups; execute drain rounds "
                           f"first")
        doomed.add(nid)
    nodes = [nd for nd in nodes if nd.id not in doomed]
    if all(nd.removing for nd in nodes):
        raise InvalidInput("remove", "every node would be removing; at least one node must stay")
    return nodes
