"""Planning without a job: plans, offline evaluation, what-if scaling, Gedik partitioning — and the planner choice
and solve wrapper that the rounds of registered jobs share.

A ``POST /v1/plans``, ``/v1/evaluate``, ``/v1/what-if/scaling`` or ``/v1/partitioning`` body goes to a solver
worker as raw bytes, whatever its size: the worker validates it against the contract (:func:`controller.edge.parse`),
counts it against the size caps before building any model (413), builds the problem, solves and serialises the
answer (:func:`plan_task`, :func:`evaluate_task`, :func:`partitioning_task`); the event loop only moves bytes. A
what-if is parsed in a worker (:func:`what_if_task`) and its candidates are then solved in parallel, one solve slot
each. The CLI runs the same functions in its own process.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.context import Context
from controller.edge import Invalid, encode, parse
from controller.errors import TooLarge
from controller.pool_admission import Ticket
from controller.settings import Settings
from controller.solver_worker import Solved, solve_plan
from controller.solving import Kind
from rebalancer_client import contract as c
from rebalancer_client.contract.partitioning import DEFAULT_REPLICAS
from rebalancer_client.wire import dump, read
from solvers import documents, metrics, registry, scaling
from solvers.errors import InvalidInput
from solvers.model import Problem

PREFERRED_ALGORITHMS = ("albic-milp", "albic", "flux")


@dataclass(frozen=True)
class Limits:
    """What a worker needs of the settings to answer a request on its own."""

    max_key_groups: int
    max_edges: int
    max_nodes: int
    max_candidates: int
    default_algorithm: str
    default_time_limit_s: float
    max_time_limit_s: float
    max_partition_channels: int
    max_partition_ring: int
    max_partition_keys: int
    max_partition_work: int

    @classmethod
    def of(cls, s: Settings, default_algorithm: str) -> Limits:
        return cls(s.max_key_groups, s.max_edges, s.max_nodes, s.max_candidates, default_algorithm,
                   s.default_time_limit_s, s.max_time_limit_s, s.max_partition_channels, s.max_partition_ring,
                   s.max_partition_keys, s.max_partition_work)

    def time_limit(self, requested: float | None) -> float:
        """:meth:`Settings.time_limit` in a worker."""
        return min(self.default_time_limit_s if requested is None else float(requested), self.max_time_limit_s)


def check_size(doc: c.Problem, limits: Limits, where: str = "problem") -> None:
    """TooLarge (413) when a problem has more key groups, edges or nodes than the caps."""
    for key, items, cap, what in (("key_groups", doc.key_groups, limits.max_key_groups, "key groups"),
                                  ("communication", doc.communication or [], limits.max_edges, "edges"),
                                  ("nodes", doc.nodes, limits.max_nodes, "nodes")):
        if len(items) > cap:
            raise TooLarge(f"{where}.{key}: more than {cap} {what}")


def problem_of(doc: c.Problem, limits: Limits, where: str = "problem") -> Problem:
    """The numeric problem of a validated problem document: the size caps first, then its cross-field checks
    (422 with the field path under ``where``)."""
    check_size(doc, limits, where)
    try:
        return documents.problem_of(doc)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}.{exc.field}" if exc.field else where, exc.reason) from None


def check_algorithm(name: str, params: Mapping[str, Any] | None, where: str = "") -> tuple[str, dict[str, Any]]:
    """Registry name and validated parameters; InvalidInput (422) for unknown names or bad parameters."""
    pre = f"{where}." if where else ""
    try:
        algo = registry.get(name)
    except InvalidInput as exc:
        raise InvalidInput(f"{pre}algorithm", exc.reason) from None
    except ImportError as exc:  # a planner module that does not import
        raise InvalidInput(f"{pre}algorithm", f"planner {name!r} is not available: {type(exc).__name__}") from None
    try:
        algo.validate(dict(params or {}))
    except InvalidInput as exc:
        raise InvalidInput(f"{pre}{exc.field}", exc.reason) from None
    return name, dict(params or {})


# ---------------------------------------------------------------------- in a worker (and in the CLI)
Answer = tuple[int, bytes, str | None, str | None]  # status, body, planner, solver status


def _client_error(exc: Exception) -> Answer:
    """The status and body of a request's error (the API's mapping, in a worker)."""
    if isinstance(exc, TooLarge):
        return 413, encode(c.Error(detail=f"request too large: {exc}")), None, None
    if isinstance(exc, Invalid):
        return 422, encode(c.Error(detail=exc.items)), None, None
    assert isinstance(exc, InvalidInput)
    return 422, encode(c.Error(detail=[c.ErrorItem(field=exc.field or "body", reason=exc.reason)])), None, None


def plan_task(raw: bytes, limits: Limits) -> Answer:
    """``POST /v1/plans`` from its raw body to its answer."""
    try:
        req = parse(c.PlanRequest, raw)
        problem = problem_of(req.problem, limits)
        name, params = check_algorithm(req.algorithm or limits.default_algorithm, req.params)
    except (Invalid, InvalidInput, TooLarge) as exc:
        return _client_error(exc)
    plan = solve_plan(name, problem, limits.time_limit(req.time_limit_s), params).plan
    return 200, encode(plan), name, plan.solver.status


def evaluate_task(raw: bytes, limits: Limits) -> Answer:
    """``POST /v1/evaluate`` from its raw body to its answer."""
    try:
        req = parse(c.EvaluateRequest, raw)
        problem = problem_of(req.problem, limits)
        return 200, encode(documents.evaluation(problem, documents.plan_of(problem, req.plan))), None, None
    except (Invalid, InvalidInput, TooLarge) as exc:
        return _client_error(exc)


@dataclass(frozen=True)
class WhatIf:
    """A what-if request ready to solve, small enough for the event loop: each candidate's problem travels as
    pickled bytes the server only passes on to a worker (:func:`solve_summary_task`), with what the report needs
    of it (:class:`solvers.scaling.Shape`) and of the current state."""

    candidates: list[Any]
    target: float | None
    max_utilisation: float | None
    current: dict[str, Any]
    budget: tuple[int | None, float | None]
    shapes: list[scaling.Shape]
    problems: list[bytes]
    algorithm: str
    params: dict[str, Any]
    time_limit: float

    @classmethod
    def of(cls, question: c.WhatIfQuestion, problem: Problem, variants: list[scaling.Variant], algorithm: str,
           params: dict[str, Any], time_limit: float) -> WhatIf:
        return cls([cand if isinstance(cand, int) else dump(cand) for cand in question.candidates],
                   question.target_load_distance, question.max_utilisation,
                   metrics.state_metrics(problem, problem.current),
                   (problem.max_migrations, problem.max_migration_bytes), [scaling.Shape.of(v) for v in variants],
                   [pickle.dumps(v.problem, protocol=pickle.HIGHEST_PROTOCOL) for v in variants], algorithm,
                   params, time_limit)

    def report(self, plans: list[dict[str, Any]]) -> c.WhatIfReport:
        """The report once every candidate's plan (:func:`solve_summary_task`) is known."""
        return read(c.WhatIfReport, scaling.report_of(self.current, self.budget, self.candidates, self.shapes, plans,
                                                      self.algorithm, self.target, self.max_utilisation))


def variants_of(problem: Problem, candidates: list[Any], limits: Limits) -> list[scaling.Variant]:
    """The candidate clusters of a what-if (413 beyond the caps, 422 for a candidate that cannot be)."""
    if len(candidates) > limits.max_candidates:
        raise TooLarge(f"candidates: more than {limits.max_candidates}")
    variants = []
    for j, cand in enumerate(candidates):
        if isinstance(cand, int) and cand > limits.max_nodes:
            raise TooLarge(f"candidates[{j}]: more than {limits.max_nodes} nodes")
        v = scaling.variant(problem, j, cand if isinstance(cand, int) else dump(cand))
        if v.problem.n_nodes > limits.max_nodes:
            raise TooLarge(f"candidates[{j}]: more than {limits.max_nodes} nodes")
        variants.append(v)
    return variants


def what_if_task(raw: bytes, limits: Limits) -> WhatIf | Answer:
    """``POST /v1/what-if/scaling``'s body parsed into its candidate problems, or the error answer."""
    try:
        req = parse(c.WhatIfRequest, raw)
        problem = problem_of(req.problem, limits)
        name, params = check_algorithm(req.algorithm or limits.default_algorithm, req.params)
        variants = variants_of(problem, req.candidates, limits)
    except (Invalid, InvalidInput, TooLarge) as exc:
        return _client_error(exc)
    return WhatIf.of(req, problem, variants, name, params, limits.time_limit(req.time_limit_s))


def check_partitioning_size(spec: c.PartitioningSpec, limits: Limits) -> None:
    """TooLarge (413) for a partitioning spec, or its previous function, whose size would stall a worker: the
    settings ``max_partition_*``. Measured (build_document, one process, a loaded 2-core machine): readj with 4096
    channels × 1000 replicas took 24 s and 1 GB; scan with 1024 channels and 20,000 keys 4.2 s and 0.28 GB; readj
    with 64 channels × 30,000 replicas 6.4 s and 0.5 GB."""
    prev = spec.previous
    prev_replicas = DEFAULT_REPLICAS if prev is None or prev.consistent_hash is None else prev.consistent_hash.replicas
    # the new function's ring has the spec's replicas, else the previous function's (as the builder takes them)
    functions = [("", spec.channels, spec.replicas or prev_replicas, len(spec.frequencies or {}))]
    if prev is not None:
        functions.append(("previous.", prev.channels, prev_replicas, len(prev.explicit)))
    for where, n, r, k in functions:
        if n > limits.max_partition_channels:
            raise TooLarge(f"{where}channels: {n} > {limits.max_partition_channels} "
                           "(REBALANCER_MAX_PARTITION_CHANNELS)")
        if n * r > limits.max_partition_ring:
            raise TooLarge(f"{where}channels × replicas: {n} × {r} = {n * r} consistent-hash points > "
                           f"{limits.max_partition_ring} (REBALANCER_MAX_PARTITION_RING)")
        if k > limits.max_partition_keys:
            raise TooLarge(f"{where}{'frequencies' if not where else 'explicit'}: {k} keys > "
                           f"{limits.max_partition_keys} (REBALANCER_MAX_PARTITION_KEYS)")
        if n * k > limits.max_partition_work:
            raise TooLarge(f"{where}channels × keys: {n} × {k} = {n * k} > {limits.max_partition_work} "
                           "(REBALANCER_MAX_PARTITION_WORK)")


def partitioning_task(raw: bytes, limits: Limits) -> Answer:
    """``POST /v1/partitioning`` from its raw body to its answer: the spec parsed, its size capped, the function
    built (:func:`solvers.gedik.build_document`: scan, redist or readj, Gedik §4.2) and serialised."""
    from solvers.gedik import build_document

    try:
        spec = parse(c.PartitioningSpec, raw)
        check_partitioning_size(spec, limits)
        return 200, encode(build_document(spec)), None, None
    except (Invalid, InvalidInput, TooLarge) as exc:
        return _client_error(exc)


def solve_summary_task(name: str, problem: bytes, time_limit: float, params: dict[str, Any]) -> tuple[Any, ...]:
    """A what-if candidate solved in a worker: only the plan's metrics and solver come back (not its assignment)."""
    try:
        plan = solve_plan(name, pickle.loads(problem), time_limit, params).plan
    except InvalidInput as exc:
        return ("invalid", exc.field, exc.reason)
    except Exception as exc:  # a planner bug: reported, never crashes the worker
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("ok", {"metrics": dump(plan.metrics), "solver": dump(plan.solver)})


def answer_task(task: Any, raw: bytes, limits: Limits) -> tuple[Any, ...]:
    """A worker's call of ``task(raw, limits)``; a bug in it comes back as an error (a 500), never a crash."""
    try:
        return ("ok", task(raw, limits))
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


# ---------------------------------------------------------------------- in the server
class Planning:
    """The planner choice and the solves of the server (in its worker pool)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._default_algorithm: str | None = None

    def default_algorithm(self) -> str:
        s = self.ctx.settings
        if s.default_algorithm:
            return s.default_algorithm
        if self._default_algorithm is None:
            self._default_algorithm = next((n for n in PREFERRED_ALGORITHMS if _available(n)), "flux")
        return self._default_algorithm

    def check_algorithm(self, name: str | None, params: Mapping[str, Any] | None,
                        where: str = "") -> tuple[str, dict[str, Any]]:
        """:func:`check_algorithm` with the server's default planner when ``name`` is None."""
        return check_algorithm(name or self.default_algorithm(), params, where)

    @property
    def limits(self) -> Limits:
        return Limits.of(self.ctx.settings, self.default_algorithm())

    def algorithms(self) -> list[c.Algorithm]:
        out = []
        for name in registry.names():
            try:
                out.append(read(c.Algorithm, registry.get(name).describe()))
            except ImportError:
                continue
        return out

    async def solve(self, name: str, problem: Problem, time_limit: float, params: Mapping[str, Any],
                    kind: Kind = "adhoc", *, ticket: Ticket | None = None, owner: str | None = None) -> Solved:
        """The plan (document and numeric assignment) from the pool; ``kind`` "auto" for the automatic rounds of
        registered jobs (they have a reserved share of the solve slots), "adhoc" for what a request asks for;
        ``ticket``: slots the request took at once (:meth:`SolverPool.admit`); ``owner``: the job whose solves
        these are (cancelled with it)."""
        t0 = time.perf_counter()
        solved = await self.ctx.pool.solve(name, problem, time_limit, dict(params), kind=kind, ticket=ticket,
                                           owner=owner)
        self.observe(name, solved.plan.solver.status, time.perf_counter() - t0)
        return solved

    def observe(self, name: str, status: str, seconds: float) -> None:
        self.ctx.telemetry.solve_seconds.observe(seconds, name)
        self.ctx.telemetry.plans.inc(name, status)


def _available(name: str) -> bool:
    try:
        registry.get(name)
    except (InvalidInput, ImportError):
        return False
    return True
