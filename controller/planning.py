"""Stateless use cases: plans, offline evaluation, Gedik partitioning, what-if scaling — and the planner choice
and solve wrapper the stateful ones share.

Every solve runs in the process pool (:mod:`controller.solving`) under its admission cap; the pure what-if logic
is :mod:`solvers.scaling`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.context import Context
from controller.errors import TooLarge
from controller.solver_worker import Solved
from controller.solving import Kind
from solvers import documents, registry, scaling
from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.controller")

PREFERRED_ALGORITHMS = ("albic-milp", "albic", "flux")


def prefixed(exc: InvalidInput, prefix: str) -> InvalidInput:
    """The same error with its field path under ``prefix`` (``problem`` + ``nodes[0].id``)."""
    field_ = f"{prefix}.{exc.field}" if exc.field else prefix
    return InvalidInput(field_, exc.reason)


@dataclass(frozen=True)
class Caps:
    """The request-size caps a problem document is checked against (settings ``max_key_groups`` …)."""

    max_key_groups: int
    max_edges: int
    max_nodes: int


def check_problem_size(doc: Any, caps: Caps, where: str = "problem") -> None:
    """TooLarge (413) when a problem document has more key groups, edges or nodes than the caps — counted on the
    decoded JSON, before any model is built."""
    if isinstance(doc, dict):
        for key, cap, what in (("key_groups", caps.max_key_groups, "key groups"),
                               ("communication", caps.max_edges, "edges"), ("nodes", caps.max_nodes, "nodes")):
            items = doc.get(key)
            if isinstance(items, list) and len(items) > cap:
                raise TooLarge(f"{where}.{key}: more than {cap} {what}")


def problem_from_doc(doc: Any, caps: Caps, where: str = "problem") -> Problem:
    """The numeric problem of a problem document: size caps first (413), then :mod:`solvers.documents` (422 with
    the field path under ``where``)."""
    check_problem_size(doc, caps, where)
    try:
        return documents.problem_from_dict(doc)
    except InvalidInput as exc:
        raise prefixed(exc, where) from None


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


def evaluation(problem: Problem, plan_doc: Any) -> dict[str, Any]:
    """The evaluation document of a plan document for ``problem`` (the one of ``rebalancer evaluate`` too)."""
    return documents.evaluation(problem, documents.plan_from_dict(problem, plan_doc))


class Planning:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self._default_algorithm: str | None = None

    # ------------------------------------------------------------------ planners
    def default_algorithm(self) -> str:
        s = self.ctx.settings
        if s.default_algorithm:
            return s.default_algorithm
        if self._default_algorithm is None:
            self._default_algorithm = next((n for n in PREFERRED_ALGORITHMS if self._available(n)), "flux")
        return self._default_algorithm

    @staticmethod
    def _available(name: str) -> bool:
        try:
            registry.get(name)
        except (InvalidInput, ImportError) as exc:
            log.info("planner %s is not available: %s", name, exc)
            return False
        return True

    def check_algorithm(self, name: str | None, params: Mapping[str, Any] | None,
                        where: str = "") -> tuple[str, dict[str, Any]]:
        """:func:`check_algorithm` with the server's default planner when ``name`` is None."""
        return check_algorithm(name or self.default_algorithm(), params, where)

    def algorithms(self) -> list[dict[str, Any]]:
        out = []
        for name in registry.names():
            try:
                out.append(registry.get(name).describe())
            except ImportError as exc:
                log.warning("planner %s is not listed: %s", name, exc)
        return out

    async def solve(self, name: str, problem: Problem, time_limit: float, params: Mapping[str, Any],
                    admit: bool = True, kind: Kind = "adhoc") -> Solved:
        """The plan (document and numeric assignment) from the pool; ``kind`` "auto" for the automatic rounds of
        registered jobs (they have a reserved share of the solve slots), "adhoc" for everything a request asks
        for."""
        t0 = time.perf_counter()
        solved = await self.ctx.pool.solve(name, problem, time_limit, dict(params), admit=admit, kind=kind)
        self.ctx.telemetry.solve_seconds.observe(time.perf_counter() - t0, name)
        self.ctx.telemetry.plans.inc(name, solved.doc["solver"]["status"])
        return solved

    # ------------------------------------------------------------------ documents
    @property
    def caps(self) -> Caps:
        s = self.ctx.settings
        return Caps(s.max_key_groups, s.max_edges, s.max_nodes)

    def check_problem_size(self, doc: Any, where: str = "problem") -> None:
        check_problem_size(doc, self.caps, where)

    def problem_from_doc(self, doc: dict[str, Any], where: str = "problem") -> Problem:
        return problem_from_doc(doc, self.caps, where)

    # ------------------------------------------------------------------ use cases
    async def plan(self, problem_doc: dict[str, Any], algorithm: str | None, params: dict[str, Any],
                   time_limit: float) -> dict[str, Any]:
        problem = self.problem_from_doc(problem_doc)
        name, params = self.check_algorithm(algorithm, params)
        return (await self.solve(name, problem, time_limit, params)).doc

    async def evaluate(self, problem_doc: dict[str, Any], plan_doc: dict[str, Any]) -> dict[str, Any]:
        problem = self.problem_from_doc(problem_doc)

        return await asyncio.to_thread(evaluation, problem, plan_doc)

    async def partitioning(self, spec: dict[str, Any]) -> Any:
        """The Gedik partitioning-function document (``solvers.gedik.build_document``), solved in the pool."""
        t0 = time.perf_counter()
        doc = await self.ctx.pool.call("solvers.gedik", "build_document", spec)
        self.ctx.telemetry.solve_seconds.observe(time.perf_counter() - t0, "gedik")
        return doc

    async def what_if(self, problem_doc: dict[str, Any], candidates: list[Any], target: float | None,
                      algorithm: str | None, params: dict[str, Any], time_limit: float,
                      max_utilisation: float | None = None) -> dict[str, Any]:
        """What-if scaling (:mod:`solvers.scaling`): every candidate is rebalanced in the pool, and holds one
        solve slot (admitted together, or 429/413 before any solve)."""
        s = self.ctx.settings
        problem = self.problem_from_doc(problem_doc)
        name, params = self.check_algorithm(algorithm, params)
        if len(candidates) > s.max_candidates:
            raise TooLarge(f"candidates: more than {s.max_candidates}")
        variants = []
        for j, c in enumerate(candidates):
            if isinstance(c, int) and not isinstance(c, bool) and c > s.max_nodes:
                raise TooLarge(f"candidates[{j}]: more than {s.max_nodes} nodes")
            v = scaling.variant(problem, j, c)
            if v.problem.n_nodes > s.max_nodes:
                raise TooLarge(f"candidates[{j}]: more than {s.max_nodes} nodes")
            variants.append(v)
        self.ctx.pool.check_admission(len(variants))
        solved = await asyncio.gather(*(self.solve(name, v.problem, time_limit, params, admit=False)
                                        for v in variants))
        plans = [s.doc for s in solved]
        return scaling.report(problem, candidates, variants, plans, name, target, max_utilisation)
