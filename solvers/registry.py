"""The planner registry: one interface for every algorithm, listed by name (scikit-learn style).

Every planner is a function ``solve(problem, *, time_limit, **params) -> Plan`` registered with
:func:`register`, which declares its parameters (type, default, allowed range). :func:`solve` validates the
parameters (coercing strings from the CLI, rejecting unknown names), runs the planner, times it and checks the
result against the problem (every key group assigned to an existing node, nothing moved onto a removing node,
budget kept) so a bug can never reach a user as a silently wrong plan.

Planner modules are imported lazily by name, so ``rebalancer plan --algorithm flux`` never pays for importing
OR-tools.
"""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.errors import InvalidInput, PlannerError
from solvers.model import Plan, Problem

#: registry name -> module that registers it on import
PLANNER_MODULES: dict[str, str] = {
    "flux": "solvers.baselines.flux",
    "albic-milp": "solvers.albic.milp",
    "albic": "solvers.albic.collocation",
    "cola": "solvers.baselines.cola",
    "drain-then-balance": "solvers.baselines.drain_then_balance",
}

DEFAULT_TIME_LIMIT = 1.0


@dataclass(frozen=True)
class Param:
    """A declared planner parameter."""

    name: str
    type: type
    default: Any
    help: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    nullable: bool = False

    def coerce(self, value: Any) -> Any:
        """Convert ``value`` (possibly a CLI string) to the declared type and check its range."""
        where = f"params.{self.name}"
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null") and self.nullable):
            if self.nullable:
                return None
            raise InvalidInput(where, "must not be null")
        t = self.type
        try:
            if t is bool:
                if isinstance(value, str):
                    low = value.lower()
                    if low not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError
                    value = low in ("true", "1", "yes")
                elif not isinstance(value, bool):
                    raise ValueError
            elif t is int:
                if isinstance(value, bool):
                    raise ValueError
                f = float(value)
                if not f.is_integer():
                    raise ValueError
                value = int(f)
            elif t is float:
                if isinstance(value, bool):
                    raise ValueError
                value = float(value)
                if not math.isfinite(value):
                    raise InvalidInput(where, f"must be finite, got {value}")
            elif t is str:
                if not isinstance(value, str):
                    raise ValueError
        except (TypeError, ValueError):
            raise InvalidInput(where, f"expected {t.__name__}, got {repr(value)[:100]}") from None
        if self.choices is not None and value not in self.choices:
            raise InvalidInput(where, f"must be one of {list(self.choices)}, got {repr(value)[:100]}")
        if self.minimum is not None and value < self.minimum:
            raise InvalidInput(where, f"must be ≥ {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise InvalidInput(where, f"must be ≤ {self.maximum}, got {value}")
        return value

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "type": self.type.__name__, "default": self.default, "help": self.help}
        if self.choices is not None:
            d["choices"] = list(self.choices)
        if self.minimum is not None:
            d["minimum"] = self.minimum
        if self.maximum is not None:
            d["maximum"] = self.maximum
        return d


@dataclass
class Algorithm:
    """A registered planner."""

    name: str
    summary: str
    func: Callable[..., Plan]
    params: dict[str, Param] = field(default_factory=dict)

    def validate(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """Coerce and range-check ``params``; unknown names are rejected; defaults fill the rest."""
        params = dict(params or {})
        out: dict[str, Any] = {}
        if "time_limit" in params:
            raise InvalidInput("params.time_limit", "the time limit is not a planner parameter: give it as "
                               "time_limit_s (API) or --time-limit (CLI)")
        for key in params:
            if key not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise InvalidInput(f"params.{str(key)[:100]}", f"unknown parameter for {self.name!r} (known: {known})")
        for name, spec in self.params.items():
            out[name] = spec.coerce(params[name]) if name in params else spec.default
        return out

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "params": [p.describe() for p in self.params.values()]}


_REGISTRY: dict[str, Algorithm] = {}


def register(name: str, summary: str, params: list[Param] | tuple[Param, ...] = ()
             ) -> Callable[[Callable[..., Plan]], Callable[..., Plan]]:
    """Decorator: register ``func(problem, *, time_limit, **params) -> Plan`` under ``name``."""

    def deco(func: Callable[..., Plan]) -> Callable[..., Plan]:
        _REGISTRY[name] = Algorithm(name=name, summary=summary, func=func, params={p.name: p for p in params})
        return func

    return deco


def names() -> list[str]:
    """Registry names of every planner."""
    return sorted(set(PLANNER_MODULES) | set(_REGISTRY))


def get(name: str) -> Algorithm:
    """The planner registered as ``name`` (its module imported on first use); InvalidInput for unknown names.

    A planner module that fails to import raises its error: a broken installation is never a missing planner.
    """
    if name not in _REGISTRY and name in PLANNER_MODULES:
        importlib.import_module(PLANNER_MODULES[name])
    if name not in _REGISTRY:
        raise InvalidInput("algorithm", f"unknown algorithm {str(name)[:100]!r} (available: {', '.join(names())})")
    return _REGISTRY[name]


def available_names() -> list[str]:
    """Names of every planner, each imported (kept for callers; same as :func:`names`)."""
    for n in names():
        get(n)
    return names()


def solve(name: str, problem: Problem, time_limit: float = DEFAULT_TIME_LIMIT, **params: Any) -> Plan:
    """Validate ``params``, run planner ``name`` on ``problem`` within ``time_limit`` seconds (> 0: checked where it
    came in, the API's contract or the CLI's options) and check its plan.

    Raises:
        InvalidInput: unknown algorithm, unknown or invalid parameter.
        PlannerError: the planner returned a plan that breaks the problem's constraints (a bug, never user input).
    """
    algo = get(name)
    checked = algo.validate(params)
    start = time.perf_counter()
    plan = algo.func(problem, time_limit=time_limit, **checked)
    elapsed = time.perf_counter() - start
    plan.algorithm = name
    if not plan.seconds:
        plan.seconds = elapsed
    check_plan(problem, plan, enforce_budget=plan.details.get("ignores_budget") is not True)
    return plan


def check_plan(problem: Problem, plan: Plan, enforce_budget: bool = True) -> None:
    """Raise :class:`PlannerError` when ``plan`` is not a valid answer to ``problem``."""
    from solvers import metrics

    a = plan.assignment
    if a.shape != (problem.n_key_groups,):
        raise PlannerError(f"{plan.algorithm}: assignment has shape {a.shape}, expected ({problem.n_key_groups},)")
    if a.size and (a.min() < 0 or a.max() >= problem.n_nodes):
        raise PlannerError(f"{plan.algorithm}: assignment names a node index out of range")
    moved = a != problem.current
    if np.any(problem.removing[a[moved]]):
        raise PlannerError(f"{plan.algorithm}: a key group was moved onto a removing node")
    if enforce_budget and not metrics.within_budget(problem, a):
        raise PlannerError(f"{plan.algorithm}: the plan exceeds the migration budget")
