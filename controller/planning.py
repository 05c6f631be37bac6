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
from typing import Any

from controller.context import Context
from controller.errors import TooLarge
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
        """Registry name and validated parameters; InvalidInput (422) for unknown names or bad parameters."""
        name = name or self.default_algorithm()
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

    def algorithms(self) -> list[dict[str, Any]]:
        out = []
        for name in registry.names():
            try:
                out.append(registry.get(name).describe())
            except ImportError as exc:
                log.warning("planner %s is not listed: %s", name, exc)
        return out

    async def solve(self, name: str, problem: Problem, time_limit: float, params: Mapping[str, Any],
                    admit: bool = True, kind: Kind = "adhoc") -> dict[str, Any]:
        """A plan document from the pool; ``kind`` "auto" for the automatic rounds of registered jobs (they have
        a reserved share of the solve slots), "adhoc" for everything a request asks for."""
        t0 = time.perf_counter()
        doc: dict[str, Any] = await self.ctx.pool.solve(name, problem, time_limit, dict(params), admit=admit,
                                                        kind=kind)
        self.ctx.telemetry.solve_seconds.observe(time.perf_counter() - t0, name)
        self.ctx.telemetry.plans.inc(name, doc["solver"]["status"])
        return doc

    # ------------------------------------------------------------------ documents
    def check_problem_size(self, doc: Any, where: str = "problem") -> None:
        s = self.ctx.settings
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
            return documents.problem_from_dict(doc)
        except InvalidInput as exc:
            raise prefixed(exc, where) from None

    # ------------------------------------------------------------------ use cases
    async def plan(self, problem_doc: dict[str, Any], algorithm: str | None, params: dict[str, Any],
                   time_limit: float) -> dict[str, Any]:
        problem = self.problem_from_doc(problem_doc)
        name, params = self.check_algorithm(algorithm, params)
        return await self.solve(name, problem, time_limit, params)

    async def evaluate(self, problem_doc: dict[str, Any], plan_doc: dict[str, Any]) -> dict[str, Any]:
        problem = self.problem_from_doc(problem_doc)

        def work() -> dict[str, Any]:  # the evaluation document of `rebalancer evaluate` too
            return documents.evaluation(problem, documents.plan_from_dict(problem, plan_doc))

        return await asyncio.to_thread(work)

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
        plans = await asyncio.gather(*(self.solve(name, v.problem, time_limit, params, admit=False)
                                       for v in variants))
        return scaling.report(problem, candidates, variants, plans, name, target, max_utilisation)
