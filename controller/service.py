"""The controller: jobs, statistics windows, triggers, proposals, epochs, what-if scaling.

One :class:`Controller` per server process. Job state lives in memory (so a statistics post costs a few numpy
operations) and in the database (so nothing acknowledged is lost): every mutation is committed through the
group-commit writer of :mod:`controller.repository` *before* the in-memory state changes and the request is
answered. At startup the in-memory state is rebuilt from the database.

Lifecycle of a round (DESIGN.md "Service shape", after Cruise Control's proposals and Megaphone's epochs):

1. drivers post statistics per micro-batch (``post_stats``); the window keeps the last ``window_batches``;
2. ``propose`` solves a dry run on the window in the process pool: a proposal with ``base_epoch`` = the job's epoch;
3. ``execute`` applies the proposal as computed, with an epoch compare-and-set: epoch ``e`` -> ``e + 1`` only if the
   job is still at ``base_epoch`` (otherwise 409);
4. with ``auto.enabled`` the trigger (windowed load distance above a threshold, window full, cooldown passed, the
   driver on the current epoch) runs steps 2–3 inside the statistics post and returns the plan to apply.

The controller holds an asyncio lock per job, so one process serialises a job's mutations; the compare-and-set in
the database keeps executes atomic even across processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import importlib
import logging
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import scipy.sparse as sp

from controller import repository as repo
from controller.errors import Busy, Conflict, NotFound, TooLarge, Unavailable
from controller.settings import Settings
from controller.solving import SolverPool
from controller.telemetry import Telemetry
from controller.windows import Batch, Window
from solvers import metrics
from solvers.errors import InvalidInput
from solvers.model import Problem, plan_from_dict

log = logging.getLogger("rebalancer.controller")

PREFERRED_ALGORITHMS = ("albic-milp", "albic", "flux")
PROPOSAL_CACHE = 2000


def prefixed(exc: InvalidInput, prefix: str) -> InvalidInput:
    """The same error with its field path under ``prefix`` (``problem`` + ``nodes[0].id``)."""
    field_ = f"{prefix}.{exc.field}" if exc.field else prefix
    return InvalidInput(field_, exc.reason)


def flink_ranges(n_keygroups: int, n_nodes: int) -> np.ndarray:
    """Node index of each key group when ``n_keygroups`` key groups are spread over ``n_nodes`` subtasks the way
    Flink's ``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup`` does: key group k -> k·P / K (contiguous
    ranges, sizes differing by at most one)."""
    k = np.arange(n_keygroups, dtype=np.int64)
    return (k * n_nodes) // n_keygroups


@dataclass
class Job:
    job_id: str
    config: dict[str, Any]
    registration: dict[str, Any]
    kg_ids: list[str]
    operators: list[str]
    reg_state: np.ndarray
    nodes: list[dict[str, Any]]
    assignment: np.ndarray
    epoch: int
    window: Window
    created_at: float
    updated_at: float
    last_round_batch: int | None = None
    kg_index: dict[str, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        if not self.kg_index:
            self.kg_index = {k: i for i, k in enumerate(self.kg_ids)}

    @property
    def node_ids(self) -> list[str]:
        return [nd["id"] for nd in self.nodes]

    def assignment_doc(self, assignment: np.ndarray | None = None) -> dict[str, str]:
        a = self.assignment if assignment is None else assignment
        ids = self.node_ids
        return {kid: ids[int(i)] for kid, i in zip(self.kg_ids, a.tolist())}

    def problem(self) -> Problem:
        """The numeric problem of the job now: current assignment, windowed loads, latest state sizes."""
        m = len(self.kg_ids)
        src, dst, rate = self.window.mean_comm()
        comm = sp.csr_matrix((rate, (src, dst)), shape=(m, m))
        comm.sum_duplicates()
        budget = self.config["budget"]
        return Problem(
            node_ids=self.node_ids,
            capacity=np.array([nd["capacity"] for nd in self.nodes], dtype=np.float64),
            removing=np.array([nd["removing"] for nd in self.nodes], dtype=bool),
            kg_ids=list(self.kg_ids), operator=list(self.operators),
            load=self.window.mean_load(), state_bytes=self.window.latest_state(self.reg_state),
            current=self.assignment.copy(), comm=comm,
            communication_cost=float(self.config["communication_cost"]),
            max_migrations=budget.get("max_migrations"), max_migration_bytes=budget.get("max_migration_bytes"),
        )


class Controller:
    """The service's brain; the API is a thin layer over these coroutines."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.url = settings.sqlalchemy_url()
        self.engine = repo.make_engine(self.url, settings.sqlite_synchronous)
        self.writer: repo.Writer | repo.InlineWriter | None = None
        self.pool: SolverPool | None = None
        self.telemetry = Telemetry()
        self.jobs: dict[str, Job] = {}
        self.proposals: dict[str, dict[str, Any]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._default_algorithm: str | None = None
        self.started_at = time.time()
        self.telemetry.gauge("rebalancer_jobs", "registered jobs", lambda: len(self.jobs))
        self.telemetry.gauge("rebalancer_solves_in_flight", "solves running or queued",
                             lambda: self.pool.in_flight if self.pool else 0)
        self.telemetry.gauge("rebalancer_db_commits", "group commits of the writer (counter)",
                             lambda: self.writer.commits if self.writer else 0)
        self.telemetry.gauge("rebalancer_db_writes", "write operations committed (counter)",
                             lambda: self.writer.ops if self.writer else 0)
        self.telemetry.gauge("rebalancer_db_writer_cpu_seconds", "CPU time of the writer thread (counter)",
                             lambda: self.writer.cpu_seconds if self.writer else 0)

    # ------------------------------------------------------------------ lifecycle
    async def start(self, warm: bool = True) -> None:
        await asyncio.to_thread(self._load)
        self.writer = repo.make_writer(self.engine, self.url, self.settings.sqlite_synchronous,
                                       self.settings.commit_batch)
        s = self.settings
        self.pool = SolverPool(s.solver_workers, s.max_concurrent_solves, s.max_time_limit_s)
        if warm:
            self._spawn(self.pool.warm())
            self._spawn(asyncio.to_thread(self._warm_imports))
        _tune_gc()

    def _warm_imports(self) -> None:
        """Import the planners (OR-tools…) and Gedik in the server process too, off the request path."""
        try:
            self.default_algorithm()
            self.algorithms()
            importlib.import_module("solvers.gedik")
        except Exception:
            pass
        _tune_gc()  # freeze what the imports created too

    def _load(self) -> None:
        repo.create_schema(self.engine)
        failed = repo.fail_pending_proposals(self.engine)
        if failed:
            log.warning("%d proposals were pending at the last stop; marked failed", failed)
        job_rows, batches = repo.load_all(self.engine)
        for row in job_rows:
            kgs = repo.loads(row["kgs"])
            nodes = repo.loads(row["nodes"])
            config = repo.loads(row["spec"])
            node_index = {nd["id"]: i for i, nd in enumerate(nodes)}
            assignment = np.array([node_index[n] for n in repo.loads(row["assignment"])], dtype=np.int64)
            window = Window(size=int(config["window_batches"]), m=len(kgs["ids"]))
            for brow in batches.get(row["job_id"], []):
                b = Batch.from_row(brow)
                counted, _dup, evict = window.classify(b.batch_id)
                if counted:
                    window.add(b, evict)
            self.jobs[row["job_id"]] = Job(
                job_id=row["job_id"], config=config, registration=repo.loads(row["registration"]),
                kg_ids=kgs["ids"], operators=kgs["operators"], reg_state=np.array(kgs["state_bytes"], dtype=float),
                nodes=nodes, assignment=assignment, epoch=int(row["epoch"]), window=window,
                created_at=row["created_at"], updated_at=row["updated_at"], last_round_batch=row["last_round_batch"])
        log.info("loaded %d jobs from %s", len(self.jobs), repo.database_kind(self.url))

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if isinstance(self.writer, repo.InlineWriter):
            self.writer.close()
        elif self.writer is not None:
            await asyncio.to_thread(self.writer.close)
        if self.pool is not None:
            self.pool.shutdown()
        self.engine.dispose()

    def _spawn(self, coro) -> asyncio.Task:  # noqa: ANN001
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ algorithms
    def default_algorithm(self) -> str:
        if self.settings.default_algorithm:
            return self.settings.default_algorithm
        if self._default_algorithm is None:
            from solvers import registry

            for name in PREFERRED_ALGORITHMS:
                try:
                    registry.get(name)
                    self._default_algorithm = name
                    break
                except Exception:
                    continue
            else:
                self._default_algorithm = "flux"
        return self._default_algorithm

    def check_algorithm(self, name: str | None, params: dict[str, Any] | None, where: str = "") -> tuple[str, dict]:
        """Registry name and validated parameters; InvalidInput (422) for unknown names or bad parameters."""
        from solvers import registry

        name = name or self.default_algorithm()
        pre = f"{where}." if where else ""
        try:
            algo = registry.get(name)
        except InvalidInput as exc:
            raise InvalidInput(f"{pre}algorithm", exc.reason) from None
        except Exception as exc:  # a planner module that does not import (yet)
            raise InvalidInput(f"{pre}algorithm", f"planner {name!r} is not available: {type(exc).__name__}") from None
        try:
            algo.validate(params or {})
        except InvalidInput as exc:
            raise InvalidInput(f"{pre}{exc.field}", exc.reason) from None
        return name, dict(params or {})

    def algorithms(self) -> list[dict[str, Any]]:
        from solvers import registry

        out = []
        for name in registry.names():
            try:
                out.append(registry.get(name).describe())
            except Exception:
                continue
        return out

    async def _solve(self, name: str, problem: Problem, time_limit: float, params: dict, admit: bool = True) -> dict:
        assert self.pool is not None
        t0 = time.perf_counter()
        doc = await self.pool.solve(name, problem, time_limit, params, admit=admit)
        self.telemetry.solve_seconds.observe(time.perf_counter() - t0, name)
        self.telemetry.plans.inc(name, doc["solver"]["status"])
        return doc

    # ------------------------------------------------------------------ size caps
    def check_problem_size(self, doc: Any, where: str = "problem") -> None:
        s = self.settings
        if isinstance(doc, dict):
            if len(doc.get("key_groups") or []) > s.max_key_groups:
                raise TooLarge(f"{where}.key_groups: more than {s.max_key_groups} key groups")
            if len(doc.get("communication") or []) > s.max_edges:
                raise TooLarge(f"{where}.communication: more than {s.max_edges} edges")
            if len(doc.get("nodes") or []) > s.max_nodes:
                raise TooLarge(f"{where}.nodes: more than {s.max_nodes} nodes")

    def problem_from_doc(self, doc: dict[str, Any], where: str = "problem") -> Problem:
        self.check_problem_size(doc, where)
        try:
            return Problem.from_dict(doc)
        except InvalidInput as exc:
            raise prefixed(exc, where) from None

    # ------------------------------------------------------------------ stateless
    async def plan(self, problem_doc: dict, algorithm: str | None, params: dict, time_limit: float) -> dict:
        problem = self.problem_from_doc(problem_doc)
        name, params = self.check_algorithm(algorithm, params)
        return await self._solve(name, problem, time_limit, params)

    async def evaluate(self, problem_doc: dict, plan_doc: dict) -> dict:
        problem = self.problem_from_doc(problem_doc)

        def work() -> dict:
            plan = plan_from_dict(problem, plan_doc)
            out = metrics.plan_metrics(problem, plan.assignment)
            moved = np.flatnonzero(plan.assignment != problem.current)
            out["moves"] = [{"key_group": problem.kg_ids[int(k)], "from": problem.node_ids[int(problem.current[k])],
                             "to": problem.node_ids[int(plan.assignment[k])],
                             "state_bytes": _num(problem.state_bytes[k])} for k in moved]
            out["within_budget"] = metrics.within_budget(problem, plan.assignment)
            return out

        return await asyncio.to_thread(work)

    async def partitioning(self, spec: dict) -> dict:
        """The Gedik partitioning-function document (``solvers.gedik.build_document``), solved in the pool."""
        try:
            mod = importlib.import_module("solvers.gedik")
        except ModuleNotFoundError as exc:
            if exc.name in ("solvers.gedik",):
                raise Unavailable("partitioning is not available in this build: solvers.gedik is not installed "
                                  "yet") from None
            raise Unavailable(f"partitioning is not available: cannot import solvers.gedik ({exc})") from None
        except Exception as exc:  # partially written module
            raise Unavailable(f"partitioning is not available: cannot import solvers.gedik ({type(exc).__name__})") \
                from None
        if not hasattr(mod, "build_document"):
            raise Unavailable("partitioning is not available in this build: solvers.gedik.build_document is missing")
        assert self.pool is not None
        t0 = time.perf_counter()
        doc = await self.pool.call("solvers.gedik", "build_document", spec)
        self.telemetry.solve_seconds.observe(time.perf_counter() - t0, "gedik")
        return doc

    async def what_if(self, problem_doc: dict, candidates: list[Any], target: float | None,
                      algorithm: str | None, params: dict, time_limit: float,
                      max_utilisation: float | None = None) -> dict:
        """What-if scaling (after Cruise Control's rightsizing and Flink's autoscaler report).

        Each candidate is a cluster size (int: nodes are added with the mean active capacity, or the least loaded
        active nodes are marked removing) or an explicit change ``{"add": [...], "remove": [...]}``. Every candidate
        is fully rebalanced (no budget) with ``algorithm``; the report gives the load distance after, the
        migrations and bytes needed, the rounds that takes under the problem's per-round budget, and whether the
        goal is met: load distance ≤ the target (default: the current one), no load left on removing nodes, and no
        node's utilisation (load / capacity) above ``max_utilisation`` (default: the hottest node's today — the load
        distance alone would always favour a single node). The recommendation is the candidate with the fewest
        active nodes (then least capacity, then lowest load distance) that meets the goal.
        """
        problem = self.problem_from_doc(problem_doc)
        name, params = self.check_algorithm(algorithm, params)
        if len(candidates) > self.settings.max_candidates:
            raise TooLarge(f"candidates: more than {self.settings.max_candidates}")
        current = metrics.state_metrics(problem, problem.current)
        goal = current["load_distance"] if target is None else float(target)
        limit = current["max_utilisation"] if max_utilisation is None else float(max_utilisation)
        variants = [self._candidate(problem, j, c) for j, c in enumerate(candidates)]
        assert self.pool is not None
        self.pool.check_admission(1)
        sem = asyncio.Semaphore(self.settings.solver_workers)

        async def run(p: Problem) -> dict:
            async with sem:
                return await self._solve(name, p, time_limit, params, admit=False)

        plans = await asyncio.gather(*(run(v[0]) for v in variants))
        out = []
        mm, mb = problem.max_migrations, problem.max_migration_bytes
        for (p, added, removed), cand, doc in zip(variants, candidates, plans):
            after = doc["metrics"]["after"]
            mig, byt = doc["metrics"]["migrations"], doc["metrics"]["migration_bytes"]
            rounds = _rounds(mig, byt, mm, mb)
            out.append({
                "candidate": cand, "nodes": int(np.count_nonzero(~p.removing)), "added": added, "removed": removed,
                "load_distance": after["load_distance"], "load_on_removing": after["load_on_removing"],
                "max_utilisation": after["max_utilisation"], "migrations": mig, "migration_bytes": byt,
                "rounds": rounds,
                "meets_target": bool(after["load_distance"] <= goal + 1e-9 and after["load_on_removing"] <= 1e-9
                                     and after["max_utilisation"] <= limit * (1 + 1e-9) + 1e-12),
                "solver": doc["solver"], "_cap": float(p.capacity[~p.removing].sum()),
            })
        meeting = [j for j, c in enumerate(out) if c["meets_target"]]
        rec = min(meeting, key=lambda j: (out[j]["nodes"], out[j]["_cap"], out[j]["load_distance"])) if meeting else None
        for c in out:
            c.pop("_cap")
        return {"current": current, "target_load_distance": goal, "max_utilisation": limit, "algorithm": name,
                "candidates": out,
                "recommendation": rec, "recommended": None if rec is None else out[rec]}

    def _candidate(self, problem: Problem, j: int, cand: Any) -> tuple[Problem, list[str], list[str]]:
        where = f"candidates[{j}]"
        ids = list(problem.node_ids)
        cap = problem.capacity.copy()
        rem = problem.removing.copy()
        added: list[str] = []
        removed: list[str] = []
        active = np.flatnonzero(~rem)
        if isinstance(cand, bool) or not isinstance(cand, (int, dict)):
            raise InvalidInput(where, "must be a cluster size or {add, remove}")
        if isinstance(cand, int):
            if cand < 1:
                raise InvalidInput(where, f"cluster size must be ≥ 1, got {cand}")
            if cand > self.settings.max_nodes:
                raise TooLarge(f"{where}: more than {self.settings.max_nodes} nodes")
            if cand >= active.size:
                mean_cap = float(cap[active].mean())
                taken = set(ids)
                i = 0
                while len(added) < cand - active.size:
                    nid = f"new-{i}"
                    i += 1
                    if nid not in taken:
                        added.append(nid)
                ids += added
                cap = np.concatenate([cap, np.full(len(added), mean_cap)])
                rem = np.concatenate([rem, np.zeros(len(added), dtype=bool)])
            else:
                loads = metrics.node_loads(problem, problem.current)
                order = active[np.argsort(loads[active] / cap[active], kind="stable")]
                for i in order[: active.size - cand]:
                    rem[i] = True
                    removed.append(ids[int(i)])
        else:
            taken = set(ids)
            for i, nd in enumerate(cand.get("add") or []):
                nd = {"id": nd} if isinstance(nd, str) else nd
                if nd["id"] in taken:
                    raise InvalidInput(f"{where}.add[{i}].id", f"node {nd['id']!r} already exists")
                taken.add(nd["id"])
                ids.append(nd["id"])
                cap = np.append(cap, float(nd.get("capacity", 1.0)))
                rem = np.append(rem, bool(nd.get("removing", False)))
                added.append(nd["id"])
            index = {nid: i for i, nid in enumerate(ids)}
            for i, nid in enumerate(cand.get("remove") or []):
                if nid not in index:
                    raise InvalidInput(f"{where}.remove[{i}]", f"unknown node {nid!r}")
                rem[index[nid]] = True
                removed.append(nid)
            if len(ids) > self.settings.max_nodes:
                raise TooLarge(f"{where}: more than {self.settings.max_nodes} nodes")
        if rem.all():
            raise InvalidInput(where, "every node would be removing; at least one must stay")
        p = dataclasses.replace(problem, node_ids=ids, capacity=cap, removing=rem, max_migrations=None,
                                max_migration_bytes=None)
        if p.resource_limit is not None and len(ids) > problem.n_nodes:
            extra = np.full((len(ids) - problem.n_nodes, p.resource_limit.shape[1]), math.inf)
            p = dataclasses.replace(p, resource_limit=np.vstack([p.resource_limit, extra]))
        return p, added, removed

    # ------------------------------------------------------------------ jobs
    def _job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"unknown job {job_id!r}")
        return job

    async def put_job(self, job_id: str, spec: dict[str, Any]) -> tuple[bool, dict]:
        """Register a job (``True``, state) or, when it exists with the same topology, update its configuration
        (``False``, state). A different topology for an existing job is a 409 (DELETE it first)."""
        s = self.settings
        nodes = [_node(nd) for nd in spec["nodes"]]
        if len(nodes) > s.max_nodes:
            raise TooLarge(f"nodes: more than {s.max_nodes} nodes")
        kgs, ops = spec.get("key_groups"), spec.get("operators")
        if (kgs is None) == (ops is None):
            raise InvalidInput("key_groups", "give either key_groups (explicit placement) or operators (key group "
                                             "counts), not both or neither")
        if spec["window_batches"] > s.max_window_batches:
            raise InvalidInput("window_batches", f"must be ≤ {s.max_window_batches}")
        if kgs is not None:
            if len(kgs) > s.max_key_groups:
                raise TooLarge(f"key_groups: more than {s.max_key_groups} key groups")
            kg_docs = [{"id": k["id"], "operator": k.get("operator") or "", "node": k["node"], "load": 0.0,
                        "state_bytes": k.get("state_bytes") or 0} for k in kgs]
            registration = {"nodes": nodes, "key_groups": [{kk: k.get(kk) for kk in ("id", "operator", "node",
                                                                                      "state_bytes")} for k in kgs]}
        else:
            total = sum(int(o["key_groups"]) for o in ops)
            if total > s.max_key_groups:
                raise TooLarge(f"operators: more than {s.max_key_groups} key groups in total")
            seen: set[str] = set()
            for i, o in enumerate(ops):
                if o["id"] in seen:
                    raise InvalidInput(f"operators[{i}].id", f"duplicate operator id {o['id']!r}")
                seen.add(o["id"])
            active = [nd["id"] for nd in nodes if not nd["removing"]]
            if not active:
                raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")
            kg_docs = []
            for o in ops:
                where = flink_ranges(int(o["key_groups"]), len(active))
                kg_docs += [{"id": f"{o['id']}/{k}", "operator": o["id"], "node": active[int(where[k])], "load": 0.0,
                             "state_bytes": 0} for k in range(int(o["key_groups"]))]
            registration = {"nodes": nodes, "operators": [{"id": o["id"], "key_groups": int(o["key_groups"])}
                                                          for o in ops]}
        try:
            problem = Problem.from_dict({"nodes": nodes, "key_groups": kg_docs})
        except InvalidInput as exc:
            if kgs is None and exc.field.startswith("key_groups"):
                raise InvalidInput("operators", exc.reason) from None
            raise
        name, params = self.check_algorithm(spec.get("algorithm"), spec.get("params"))
        config = {
            "algorithm": name, "params": params, "budget": dict(spec.get("budget") or {}),
            "window_batches": int(spec["window_batches"]), "communication_cost": float(spec["communication_cost"]),
            "time_limit_s": float(spec["time_limit_s"]), "auto": dict(spec["auto"]),
        }
        config["budget"].setdefault("max_migrations", None)
        config["budget"].setdefault("max_migration_bytes", None)
        now = time.time()
        existing = self.jobs.get(job_id)
        if existing is not None:
            async with existing.lock:
                if self.jobs.get(job_id) is not existing:
                    raise Conflict(f"job {job_id!r} changed concurrently; retry")
                if existing.registration != registration:
                    raise Conflict(f"job {job_id!r} exists with another topology (nodes/key groups); DELETE it "
                                   f"first or use POST /v1/jobs/{job_id}/nodes to scale")
                if existing.config != config:
                    await self.writer.run(repo.update_job_config(job_id, repo.dumps(config), now))
                    existing.config = config
                    existing.updated_at = now
                    if existing.window.size != config["window_batches"]:
                        existing.window = self._resized(existing.window, config["window_batches"])
                return False, self.job_state(existing)
        job = Job(job_id=job_id, config=config, registration=registration, kg_ids=list(problem.kg_ids),
                  operators=list(problem.operator), reg_state=problem.state_bytes.copy(), nodes=nodes,
                  assignment=problem.current.copy(), epoch=0, window=Window(config["window_batches"],
                                                                            problem.n_key_groups),
                  created_at=now, updated_at=now)
        self.jobs[job_id] = job  # reserve the id before the await (a concurrent PUT sees it and compares)
        try:
            async with job.lock:
                row = {"job_id": job_id, "spec": repo.dumps(config), "registration": repo.dumps(registration),
                       "kgs": repo.dumps({"ids": job.kg_ids, "operators": job.operators,
                                          "state_bytes": [_num(x) for x in job.reg_state]}),
                       "nodes": repo.dumps(nodes), "assignment": repo.dumps([nodes[i]["id"] for i in
                                                                            job.assignment.tolist()]),
                       "epoch": 0, "last_round_batch": None, "created_at": now, "updated_at": now}
                erow = {"job_id": job_id, "epoch": 0, "kind": "register", "proposal_id": None,
                        "nodes": row["nodes"], "assignment": row["assignment"], "plan": None, "created_at": now}
                await self.writer.run(repo.insert_job(row, erow))
        except BaseException:
            self.jobs.pop(job_id, None)
            raise
        self.telemetry.epochs.inc("register")
        return True, self.job_state(job)

    def _resized(self, window: Window, size: int) -> Window:
        new = Window(size=size, m=window.m)
        for bid in sorted(window.batches)[-size:]:
            new.add(window.batches[bid], None)
        return new  # rows beyond the window stay in the database and are dropped again at the next load

    def job_state(self, job: Job, with_metrics: bool = True) -> dict:
        counts = np.bincount(job.assignment, minlength=len(job.nodes))
        doc: dict[str, Any] = {
            "job_id": job.job_id, "epoch": job.epoch,
            "nodes": [dict(nd, key_groups=int(c)) for nd, c in zip(job.nodes, counts.tolist())],
            "assignment": job.assignment_doc(),
            **{k: job.config[k] for k in ("algorithm", "params", "budget", "window_batches", "communication_cost",
                                          "time_limit_s", "auto")},
            "window": job.window.state(), "metrics": None,
            "created_at": job.created_at, "updated_at": job.updated_at,
        }
        if with_metrics and job.window.batches:
            doc["metrics"] = metrics.state_metrics(job.problem(), job.assignment)
        return doc

    async def get_job(self, job_id: str) -> dict:
        return self.job_state(self._job(job_id))

    async def delete_job(self, job_id: str) -> None:
        job = self._job(job_id)
        async with job.lock:
            await self.writer.run(repo.delete_job(job_id))
            self.jobs.pop(job_id, None)
            for pid in [p for p, d in self.proposals.items() if d["job_id"] == job_id]:
                self.proposals.pop(pid, None)

    # ------------------------------------------------------------------ statistics (the hot path)
    async def post_stats(self, job_id: str, stats: Any) -> dict:
        """Count one micro-batch's statistics (see :mod:`controller.windows`) and, in auto mode, maybe run a round.

        ``stats`` carries ``batch_id``, ``epoch``, ``ids`` (key group ids), ``load`` (array), ``state`` (array with
        NaN where not reported, or None) and ``src``/``dst``/``rate`` (communication). Returns the window state,
        ``counted``/``duplicate`` and, when an automatic round executed a plan, ``apply``.
        """
        job = self._job(job_id)
        s = self.settings
        batch_id, epoch, ids = stats.batch_id, stats.epoch, stats.ids
        if len(ids) > s.max_key_groups:
            raise TooLarge(f"key_groups: more than {s.max_key_groups} key groups")
        if len(stats.src) > s.max_edges:
            raise TooLarge(f"communication: more than {s.max_edges} edges")
        if epoch > job.epoch:
            raise Conflict(f"batch {batch_id} names epoch {epoch} but job {job_id!r} is at epoch {job.epoch}")
        index = job.kg_index
        n = len(ids)
        if ids == job.kg_ids:  # every key group in registration order (what a driver usually posts): no lookups
            idx = np.arange(n, dtype=np.int64)
        else:
            idx = np.fromiter(map(index.get, ids, repeat(-1, n)), dtype=np.int64, count=n)
            if n and idx.min() < 0:
                i = int(np.flatnonzero(idx < 0)[0])
                raise InvalidInput(f"key_groups[{i}].id", f"unknown key group {ids[i]!r} of job {job_id!r}")
            if n > 1 and len(set(ids)) != n:
                seen: set[int] = set()
                for i, k in enumerate(idx.tolist()):
                    if k in seen:
                        raise InvalidInput(f"key_groups[{i}].id", f"duplicate key group {ids[i]!r}")
                    seen.add(k)
        load, state = stats.load, stats.state
        src = dst = rate = None
        if stats.src:
            e = len(stats.src)
            src = np.fromiter(map(index.get, stats.src, repeat(-1, e)), dtype=np.int64, count=e)
            dst = np.fromiter(map(index.get, stats.dst, repeat(-1, e)), dtype=np.int64, count=e)
            for name, arr, names in (("src", src, stats.src), ("dst", dst, stats.dst)):
                if arr.min() < 0:
                    i = int(np.flatnonzero(arr < 0)[0])
                    raise InvalidInput(f"communication[{i}].{name}", f"unknown key group {names[i]!r} of job {job_id!r}")
            rate = stats.rate
        batch = Batch(batch_id, epoch, idx.astype(np.int32), load, state,
                      None if src is None else src.astype(np.int32), None if dst is None else dst.astype(np.int32),
                      rate)
        apply = None
        async with job.lock:
            if self.jobs.get(job_id) is not job:
                raise NotFound(f"unknown job {job_id!r}")
            counted, duplicate, evict = job.window.classify(batch_id)
            if counted:
                await self.writer.run(repo.add_batch(batch.to_row(job_id, time.time()), evict))
                job.window.add(batch, evict)
                self.telemetry.batches.inc("counted")
                if job.config["auto"].get("enabled") and epoch == job.epoch:
                    apply = await self._auto_round(job, batch_id)
            else:
                self.telemetry.batches.inc("duplicate" if duplicate else "too_old")
            window = job.window.state()
            cur = job.epoch
        return {"job_id": job_id, "batch_id": batch_id, "epoch": cur, "counted": counted, "duplicate": duplicate,
                "window": window, "apply": apply}

    async def _auto_round(self, job: Job, batch_id: int) -> dict | None:
        """The trigger (called with the job's lock held): window full, cooldown passed, windowed load distance
        above the threshold (or any load on removing nodes) -> solve, and execute if the plan improves."""
        auto = job.config["auto"]
        if len(job.window.batches) < job.window.size:
            return None
        if job.last_round_batch is not None and batch_id - job.last_round_batch < int(auto.get("cooldown_batches", 0)):
            return None
        problem = job.problem()
        loads = metrics.node_loads(problem, problem.current)
        ld = metrics.load_distance_of_loads(problem, loads)
        on_removing = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
        threshold = auto.get("load_distance_threshold")
        if threshold is not None and ld <= threshold and on_removing <= 0:
            return None
        tl = auto.get("time_limit_s") or job.config["time_limit_s"]
        try:
            doc = await self._solve(job.config["algorithm"], problem, tl, job.config["params"])
        except (Busy, RuntimeError, InvalidInput) as exc:
            log.warning("auto round of %s skipped: %s", job.job_id, exc)
            return None
        before, after = doc["metrics"]["before"], doc["metrics"]["after"]
        improves = doc["moves"] and (after["load_distance"] < before["load_distance"] - 1e-9
                                     or after["load_on_removing"] < before["load_on_removing"] - 1e-9)
        if not improves:
            await self.writer.run(repo.set_last_round(job.job_id, batch_id))
            job.last_round_batch = batch_id
            return None
        pid = uuid.uuid4().hex
        now = time.time()
        prop = {"id": pid, "job_id": job.job_id, "base_epoch": job.epoch, "status": "executed",
                "algorithm": job.config["algorithm"], "params": job.config["params"], "time_limit_s": float(tl),
                "window": job.window.state(), "plan": doc, "error": None, "executed_epoch": job.epoch + 1,
                "created_at": now}
        res = await self._advance(job, doc, kind="auto", proposal=prop, last_round_batch=batch_id)
        return {"proposal_id": pid, "base_epoch": res["base_epoch"], "epoch": res["epoch"],
                "assignment": res["assignment"], "moves": doc["moves"], "metrics": doc["metrics"],
                "solver": doc["solver"], "algorithm": doc["algorithm"]}

    async def _advance(self, job: Job, plan: dict, kind: str, proposal: dict | None = None,
                       proposal_id: str | None = None, last_round_batch: int | None = None,
                       nodes: list[dict] | None = None) -> dict:
        """Epoch compare-and-set (job lock held): commit the new assignment (and nodes) as epoch + 1."""
        new_nodes = job.nodes if nodes is None else nodes
        node_index = {nd["id"]: i for i, nd in enumerate(new_nodes)}
        a_doc = plan["assignment"]
        assignment = np.array([node_index[a_doc[k]] for k in job.kg_ids], dtype=np.int64)
        base = job.epoch
        now = time.time()
        nodes_json = repo.dumps(new_nodes)
        a_json = repo.dumps([a_doc[k] for k in job.kg_ids])
        history_plan = None
        if plan.get("metrics") is not None:
            history_plan = repo.dumps({k: plan.get(k) for k in ("algorithm", "moves", "metrics", "solver")})
        erow = {"job_id": job.job_id, "epoch": base + 1, "kind": kind, "proposal_id": proposal_id or (
            proposal["id"] if proposal else None), "nodes": nodes_json, "assignment": a_json, "plan": history_plan,
            "created_at": now}
        prow = None
        if proposal is not None:
            prow = {**proposal, "params": repo.dumps(proposal["params"]), "window": repo.dumps(proposal["window"]),
                    "plan": repo.dumps(proposal["plan"])}
        ok = await self.writer.run(repo.advance_epoch(
            job.job_id, base, {"assignment": a_json, "nodes": nodes_json, "updated_at": now}, erow,
            proposal_id=proposal_id, proposal_row=prow, last_round_batch=last_round_batch))
        if not ok:
            raise Conflict(f"job {job.job_id!r} is no longer at epoch {base}")
        job.epoch = base + 1
        job.assignment = assignment
        job.nodes = new_nodes
        job.updated_at = now
        if last_round_batch is not None:
            job.last_round_batch = last_round_batch
        if proposal is not None:
            self._cache(proposal)
        self.telemetry.epochs.inc(kind)
        return {"job_id": job.job_id, "base_epoch": base, "epoch": base + 1, "assignment": job.assignment_doc()}

    # ------------------------------------------------------------------ proposals
    def _cache(self, prop: dict) -> None:
        self.proposals[prop["id"]] = prop
        while len(self.proposals) > PROPOSAL_CACHE:
            oldest = next(iter(self.proposals))
            if self.proposals[oldest]["status"] == "pending":
                self.proposals[oldest] = self.proposals.pop(oldest)  # move to the end
                if all(p["status"] == "pending" for p in self.proposals.values()):
                    break
                continue
            self.proposals.pop(oldest)

    async def propose(self, job_id: str, algorithm: str | None, params: dict | None, time_limit: float | None,
                      wait_s: float | None) -> tuple[bool, dict]:
        """A dry-run plan on the current window. Returns ``(finished, proposal)``: finished within the wait (201)
        or still solving (202, poll ``GET …/proposals/{id}``)."""
        job = self._job(job_id)
        name = algorithm or job.config["algorithm"]
        params = job.config["params"] if (params is None and algorithm is None) else (params or {})
        name, params = self.check_algorithm(name, params)
        tl = float(time_limit if time_limit is not None else job.config["time_limit_s"])
        assert self.pool is not None
        self.pool.check_admission(1)
        async with job.lock:
            if not job.window.batches:
                raise Conflict(f"job {job_id!r} has no statistics yet (0 of {job.window.size} batches in the window)")
            problem = job.problem()
            base = job.epoch
            window = job.window.state()
            pid = uuid.uuid4().hex
            prop = {"id": pid, "job_id": job_id, "base_epoch": base, "status": "pending", "algorithm": name,
                    "params": params, "time_limit_s": self.pool.cap(tl), "window": window, "plan": None,
                    "error": None, "executed_epoch": None, "created_at": time.time()}
            await self.writer.run(repo.insert_proposal({**prop, "params": repo.dumps(params),
                                                        "window": repo.dumps(window)}))
            self._cache(prop)
        task = self._spawn(self._run_proposal(prop, problem))
        wait = self.settings.request_wait_s if wait_s is None else min(wait_s, self.settings.request_wait_s)
        done, _ = await asyncio.wait({task}, timeout=wait)
        return bool(done), self._public(prop)

    async def _run_proposal(self, prop: dict, problem: Problem) -> None:
        try:
            doc = await self._solve(prop["algorithm"], problem, prop["time_limit_s"], prop["params"], admit=False)
            status, plan, error = "ready", doc, None
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            status, plan, error = "failed", None, f"{type(exc).__name__}: {exc}"
            log.warning("proposal %s failed: %s", prop["id"], error)
        await self.writer.run(repo.finish_proposal(prop["id"], status, None if plan is None else repo.dumps(plan),
                                                   error))
        if prop["status"] == "pending":
            prop.update(status=status, plan=plan, error=error)

    @staticmethod
    def _public(prop: dict) -> dict:
        return dict(prop)

    async def get_proposal(self, job_id: str, pid: str) -> dict:
        self._job(job_id)
        prop = await self._proposal(job_id, pid)
        return self._public(prop)

    async def _proposal(self, job_id: str, pid: str) -> dict:
        prop = self.proposals.get(pid)
        if prop is not None and prop["job_id"] == job_id:
            return prop
        row = await asyncio.to_thread(repo.get_proposal, self.engine, job_id, pid)
        if row is None:
            raise NotFound(f"unknown proposal {pid!r} of job {job_id!r}")
        prop = {**row, "params": repo.loads(row["params"]), "window": repo.loads(row["window"]),
                "plan": repo.loads(row["plan"])}
        self._cache(prop)
        return prop

    async def execute(self, job_id: str, pid: str) -> dict:
        """Apply a ready proposal as computed (never recomputed); 409 unless the job is still at its base epoch."""
        job = self._job(job_id)
        async with job.lock:
            if self.jobs.get(job_id) is not job:
                raise NotFound(f"unknown job {job_id!r}")
            prop = await self._proposal(job_id, pid)
            if prop["status"] == "pending":
                raise Conflict(f"proposal {pid} is still being computed; poll GET /v1/jobs/{job_id}/proposals/{pid}")
            if prop["status"] == "failed":
                raise Conflict(f"proposal {pid} failed: {prop['error']}")
            if prop["status"] == "executed":
                raise Conflict(f"proposal {pid} was already executed (epoch {prop['executed_epoch']})")
            if prop["base_epoch"] != job.epoch:
                raise Conflict(f"proposal {pid} was computed at epoch {prop['base_epoch']} but job {job_id!r} is at "
                               f"epoch {job.epoch}; request a new proposal")
            res = await self._advance(job, prop["plan"], kind="execute", proposal_id=pid)
            prop["status"] = "executed"
            prop["executed_epoch"] = res["epoch"]
        return {**res, "proposal_id": pid, "moves": prop["plan"]["moves"]}

    # ------------------------------------------------------------------ nodes (scale out / in)
    async def change_nodes(self, job_id: str, add: list, remove: list[str], delete_: list[str]) -> dict:
        """Add nodes, mark nodes removing (they drain over the next rounds), delete empty removing nodes.

        A change creates a new epoch (proposals computed for the old node set can no longer be executed).
        """
        job = self._job(job_id)
        async with job.lock:
            if self.jobs.get(job_id) is not job:
                raise NotFound(f"unknown job {job_id!r}")
            nodes = [dict(nd) for nd in job.nodes]
            index = {nd["id"]: i for i, nd in enumerate(nodes)}
            for i, nd in enumerate(add):
                nd = _node(nd)
                if nd["id"] in index:
                    if nodes[index[nd["id"]]] == nd:
                        continue  # a retried add: nothing to do
                    raise InvalidInput(f"add[{i}].id", f"node {nd['id']!r} already exists (with another capacity or "
                                                       f"state)")
                index[nd["id"]] = len(nodes)
                nodes.append(nd)
            for i, nid in enumerate(remove):
                if nid not in index:
                    raise InvalidInput(f"remove[{i}]", f"unknown node {nid!r}")
                nodes[index[nid]]["removing"] = True
            counts = np.bincount(job.assignment, minlength=len(nodes))
            doomed = set()
            for i, nid in enumerate(delete_):
                if nid not in index:
                    raise InvalidInput(f"delete[{i}]", f"unknown node {nid!r}")
                if not nodes[index[nid]]["removing"]:
                    raise Conflict(f"node {nid!r} is not marked removing; remove it first and let it drain")
                if counts[index[nid]]:
                    raise Conflict(f"node {nid!r} still holds {int(counts[index[nid]])} key groups; execute drain "
                                   f"rounds first")
                doomed.add(nid)
            nodes = [nd for nd in nodes if nd["id"] not in doomed]
            if len(nodes) > self.settings.max_nodes:
                raise TooLarge(f"nodes: more than {self.settings.max_nodes} nodes")
            if all(nd["removing"] for nd in nodes):
                raise InvalidInput("remove", "every node would be removing; at least one node must stay")
            if nodes != job.nodes:
                await self._advance(job, {"assignment": job.assignment_doc()}, kind="nodes", nodes=nodes)
            return self.job_state(job)

    async def history(self, job_id: str, limit: int | None = None) -> dict:
        job = self._job(job_id)
        rows = await asyncio.to_thread(repo.get_history, self.engine, job_id, limit)
        out = []
        for r in rows:
            plan = repo.loads(r["plan"]) or {}
            out.append({"epoch": r["epoch"], "kind": r["kind"], "created_at": r["created_at"],
                        "proposal_id": r["proposal_id"], "nodes": repo.loads(r["nodes"]),
                        "moves": plan.get("moves"), "metrics": plan.get("metrics"), "solver": plan.get("solver"),
                        "algorithm": plan.get("algorithm")})
        return {"job_id": job_id, "epoch": job.epoch, "epochs": out}


# ---------------------------------------------------------------------- helpers
def _node(nd: Any) -> dict[str, Any]:
    if isinstance(nd, str):
        return {"id": nd, "capacity": 1.0, "removing": False}
    return {"id": nd["id"], "capacity": float(nd.get("capacity", 1.0)), "removing": bool(nd.get("removing", False))}


def _num(x: float) -> int | float:
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def _rounds(mig: int, byt: float, mm: int | None, mb: float | None) -> int | None:
    """Rounds needed to perform ``mig`` migrations of ``byt`` bytes under a per-round budget (None = never)."""
    if mig == 0:
        return 0
    r = 1
    if mm is not None:
        if mm == 0:
            return None
        r = max(r, math.ceil(mig / mm))
    if mb is not None and byt > 0:
        if mb == 0:
            return None
        r = max(r, math.ceil(byt / mb))
    return r


def _ids(items: Iterable[Any]) -> list[str]:
    return [i if isinstance(i, str) else i["id"] for i in items]


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
