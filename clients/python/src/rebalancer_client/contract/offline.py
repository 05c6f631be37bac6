"""The offline documents (``docs/design.md``): problems, plans, evaluations, what-if reports, errors.

They name key groups and nodes by id: people and other tools read and write them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from rebalancer_client.contract.common import (
    Amount,
    Id,
    Int64,
    Name,
    Params,
    Positive,
    Ref,
    Status,
    TimeLimit,
)
from rebalancer_client.wire import REQUEST, RESPONSE, Check


@dataclass(kw_only=True, slots=True)
class Node:
    __pydantic_config__ = REQUEST
    id: Id
    capacity: Positive = 1.0
    removing: Annotated[bool, Check("marked for scale-in: its key groups drain to the other nodes")] = False
    limits: Annotated[dict[Id, Amount] | None, Check("per-resource limits (ALBIC §4.3.1)")] = None


@dataclass(kw_only=True, slots=True)
class KeyGroup:
    __pydantic_config__ = REQUEST
    id: Id
    operator: Ref | None = ""
    node: Ref
    load: Amount
    state_bytes: Amount | None = 0
    resources: Annotated[dict[Id, Amount] | None, Check("per-resource loads (ALBIC §4.3.1)")] = None


@dataclass(kw_only=True, slots=True)
class Edge:
    __pydantic_config__ = REQUEST
    src: Ref
    dst: Ref
    rate: Amount


@dataclass(kw_only=True, slots=True)
class Budget:
    """Per round; absent or null fields mean unlimited."""

    __pydantic_config__ = REQUEST
    max_migrations: Int64 | None = None
    max_migration_bytes: Amount | None = None


@dataclass(kw_only=True, slots=True)
class Problem:
    """The problem document (``docs/design.md``); loads, rates and state bytes must each sum to at most 1e150."""

    __pydantic_config__ = REQUEST
    nodes: Annotated[list[Node], Check(min_length=1)]
    key_groups: list[KeyGroup] = field(default_factory=list)
    communication: list[Edge] | None = None
    communication_cost: Annotated[Amount | None, Check("load one unit of rate adds to each end of a cut edge")] = 0.0
    budget: Budget | None = None


@dataclass(kw_only=True, slots=True)
class StateMetrics:
    """Metrics of one assignment (``docs/design.md``)."""

    __pydantic_config__ = RESPONSE
    load_distance: float
    load_on_removing: float
    collocation_factor: float | None = None
    total_load: float
    max_utilisation: float


@dataclass(kw_only=True, slots=True)
class PlanMetrics:
    __pydantic_config__ = RESPONSE
    before: StateMetrics
    after: StateMetrics
    migrations: int
    migration_bytes: float


@dataclass(kw_only=True, slots=True)
class Move:
    __pydantic_config__ = RESPONSE
    key_group: str
    from_: str
    to: str
    state_bytes: float


@dataclass(kw_only=True, slots=True)
class SolverInfo:
    __pydantic_config__ = RESPONSE
    status: Annotated[Status, Check("optimal: proven; feasible: stopped by the time limit; heuristic: no proof")]
    lower_bound: Annotated[float | None, Check("a proven lower bound on the load distance under the budget")] = None
    seconds: float


@dataclass(kw_only=True, slots=True)
class Plan:
    """The plan document (``docs/design.md``): the full assignment, the moves, before/after metrics, the solver."""

    __pydantic_config__ = RESPONSE
    algorithm: str
    assignment: dict[str, str]
    moves: list[Move]
    metrics: PlanMetrics
    solver: SolverInfo
    details: dict[str, Any] | None = None


@dataclass(kw_only=True, slots=True)
class PlanInput:
    """A plan to evaluate: ``assignment`` names every key group of the problem; ``moves``, when given, must list
    exactly the key groups whose node changed. A whole plan document is accepted (its other fields are ignored)."""

    __pydantic_config__ = {**REQUEST, "extra": "ignore"}
    assignment: dict[Ref, Ref]
    moves: list[Move] | None = None


@dataclass(kw_only=True, slots=True)
class PlanRequest:
    __pydantic_config__ = REQUEST
    problem: Problem
    algorithm: Name | None = None
    params: Params = field(default_factory=dict)
    time_limit_s: TimeLimit = None


@dataclass(kw_only=True, slots=True)
class EvaluateRequest:
    __pydantic_config__ = REQUEST
    problem: Problem
    plan: PlanInput


@dataclass(kw_only=True, slots=True)
class Evaluation:
    __pydantic_config__ = RESPONSE
    before: StateMetrics
    after: StateMetrics
    migrations: int
    migration_bytes: float
    moves: list[Move]
    within_budget: bool


@dataclass(kw_only=True, slots=True)
class ScalingChange:
    __pydantic_config__ = REQUEST
    add: list[Node | Id] = field(default_factory=list)
    remove: list[Ref] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class WhatIfQuestion:
    """Candidate clusters (a size: nodes are added or removed; or explicit changes) and the goal; the body of
    ``POST /v1/jobs/{job_id}/what-if``, which answers from the job's window."""

    __pydantic_config__ = REQUEST
    candidates: Annotated[list[Annotated[int, Check(ge=1)] | ScalingChange], Check(min_length=1)]
    target_load_distance: Annotated[Amount | None, Check(
        "the goal a recommended cluster must meet (default: the current load distance)")] = None
    max_utilisation: Annotated[Positive | None, Check(
        "the most load per unit of capacity a node of a recommended cluster may carry (default: the hottest "
        "node's utilisation today)")] = None
    algorithm: Name | None = None
    params: Params = field(default_factory=dict)
    time_limit_s: TimeLimit = None


@dataclass(kw_only=True, slots=True)
class WhatIfRequest(WhatIfQuestion):
    """``POST /v1/what-if/scaling``: a :class:`WhatIfQuestion` about a problem document."""

    __pydantic_config__ = REQUEST
    problem: Problem


@dataclass(kw_only=True, slots=True)
class ScalingCandidate:
    __pydantic_config__ = RESPONSE
    candidate: int | dict[str, Any]
    nodes: Annotated[int, Check("active nodes of the candidate cluster")]
    added: list[str]
    removed: list[str]
    load_distance: Annotated[float, Check("after a full rebalance (no budget)")]
    load_on_removing: float
    max_utilisation: float
    migrations: int
    migration_bytes: float
    rounds: Annotated[int | None, Check("rounds needed under the per-round budget (null: never)")]
    meets_target: bool
    solver: SolverInfo


@dataclass(kw_only=True, slots=True)
class WhatIfReport:
    __pydantic_config__ = RESPONSE
    current: StateMetrics
    target_load_distance: float
    max_utilisation: float
    algorithm: str
    candidates: list[ScalingCandidate]
    recommendation: Annotated[int | None, Check("index of the smallest cluster meeting the target")]
    recommended: ScalingCandidate | None = None


@dataclass(kw_only=True, slots=True)
class AlgorithmParam:
    __pydantic_config__ = RESPONSE
    name: str
    type: str
    default: Any = None
    help: str = ""
    choices: list[Any] | None = None
    minimum: float | None = None
    maximum: float | None = None


@dataclass(kw_only=True, slots=True)
class Algorithm:
    __pydantic_config__ = RESPONSE
    name: str
    summary: str
    params: list[AlgorithmParam]


@dataclass(kw_only=True, slots=True)
class ErrorItem:
    __pydantic_config__ = RESPONSE
    field: str
    reason: str


@dataclass(kw_only=True, slots=True)
class Error:
    """Every error answer: 422 lists ``{"field", "reason"}``; the others carry a message (500/503 with the id of
    the server's log line)."""

    __pydantic_config__ = RESPONSE
    detail: list[ErrorItem] | str
    request_id: str | None = None


@dataclass(kw_only=True, slots=True)
class Health:
    __pydantic_config__ = RESPONSE
    status: str
