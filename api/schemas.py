"""Request and response schemas of the /v1 API (pydantic v2).

The problem and plan documents follow DESIGN.md ("The problem and plan contract") field for field; the job,
statistics, proposal and execution documents are the controller's own (issue 7). Request models forbid unknown
fields so that a typo is a 422 naming the field, never silently ignored, and are strict: a boolean is not a number,
a string of digits is not a number, ids are at most ``MAX_ID_LENGTH`` characters.

One validator per document: the problem and plan documents inside a request (``problem``, ``plan``) are validated
only by :mod:`solvers.documents` (the same code as the CLI); their models here (``ProblemDoc``, ``PlanInput``) are
``SkipValidation`` and describe them in OpenAPI. ``tests/api/test_api_documents.py`` checks that the two agree.
The statistics body is parsed by :mod:`api.stats_parser`; ``StatsRequest`` describes it and is its slow path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, SkipValidation

from solvers.documents import MAX_ID_LENGTH, MAX_INT64

Id = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)]
Ref = Annotated[str, Field(max_length=MAX_ID_LENGTH)]
Name = Annotated[str, Field(min_length=1, max_length=100)]  # planner names
Amounts = dict[Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH)],
               Annotated[NonNegativeFloat, Field(allow_inf_nan=False)]]


class _Req(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Resp(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------- problem document (DESIGN.md)
class NodeDoc(_Req):
    id: Id
    capacity: float = Field(1.0, gt=0, allow_inf_nan=False)
    removing: bool = False
    limits: Amounts | None = Field(None, description="per-resource limits (multi-dimensional load, ALBIC §4.3.1)")


class KeyGroupDoc(_Req):
    id: Id
    operator: Ref | None = ""
    node: Ref
    load: float = Field(ge=0, allow_inf_nan=False)
    state_bytes: float | None = Field(0, ge=0, allow_inf_nan=False)
    resources: Amounts | None = Field(None, description="per-resource loads (multi-dimensional load)")


class EdgeDoc(_Req):
    src: Ref
    dst: Ref
    rate: float = Field(ge=0, allow_inf_nan=False)


class BudgetDoc(_Req):
    max_migrations: int | None = Field(None, ge=0, le=MAX_INT64)
    max_migration_bytes: float | None = Field(None, ge=0, allow_inf_nan=False)


class ProblemDoc(_Req):
    """The problem document of DESIGN.md (validated by ``solvers.documents.problem_from_dict``; the sums of loads,
    rates and state bytes, and total load / capacity, must stay below 1e150)."""

    nodes: list[NodeDoc] = Field(min_length=1)
    key_groups: list[KeyGroupDoc] = []
    communication: list[EdgeDoc] | None = None
    communication_cost: float | None = Field(0.0, ge=0, allow_inf_nan=False)
    budget: BudgetDoc | None = None


# ---------------------------------------------------------------- plan document (DESIGN.md)
class StateMetrics(_Resp):
    load_distance: float
    load_on_removing: float
    collocation_factor: float | None = None
    total_load: float
    max_utilisation: float


class PlanMetrics(_Resp):
    before: StateMetrics
    after: StateMetrics
    migrations: int
    migration_bytes: int | float


class Move(_Resp):
    key_group: str
    from_: str = Field(alias="from")
    to: str
    state_bytes: int | float


class SolverInfo(_Resp):
    status: Literal["optimal", "feasible", "heuristic"]
    lower_bound: float | None = None
    seconds: float


class PlanDoc(_Resp):
    """The plan document of DESIGN.md: the full assignment, the moves, before/after metrics, solver status."""

    algorithm: str
    assignment: dict[str, str]
    moves: list[Move]
    metrics: PlanMetrics
    solver: SolverInfo
    details: dict[str, Any] | None = None


class PlanInput(BaseModel):
    """A plan document as input to ``/v1/evaluate`` (only ``assignment`` is required; ``moves`` are checked;
    validated by ``solvers.documents.plan_from_dict``)."""

    model_config = ConfigDict(extra="allow")
    assignment: dict[str, str]
    moves: list[dict[str, Any]] | None = None
    algorithm: str | None = None
    solver: dict[str, Any] | None = None


# ---------------------------------------------------------------- stateless endpoints
class PlanRequest(_Req):
    problem: SkipValidation[ProblemDoc]
    algorithm: Name | None = Field(None, description="planner name (default: the server's default planner)")
    params: dict[str, Any] = {}
    time_limit_s: float = Field(1.0, gt=0, allow_inf_nan=False, description="capped by the server's maximum")


class EvaluateRequest(_Req):
    problem: SkipValidation[ProblemDoc]
    plan: SkipValidation[PlanInput]


class EvaluateResponse(_Resp):
    before: StateMetrics
    after: StateMetrics
    migrations: int
    migration_bytes: int | float
    moves: list[Move]
    within_budget: bool


class ScalingChange(_Req):
    add: list[NodeDoc | Id] = []
    remove: list[Ref] = []


class ScalingRequest(_Req):
    problem: SkipValidation[ProblemDoc]
    candidates: list[int | ScalingChange] = Field(min_length=1)
    target_load_distance: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="the goal a recommended cluster must meet (default: the current load distance)")
    max_utilisation: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="the most load per unit of capacity a node of a recommended cluster may carry (default: the "
                    "hottest node's utilisation today, so a smaller cluster is only recommended if no node gets "
                    "hotter than the hottest one now)")
    algorithm: Name | None = None
    params: dict[str, Any] = {}
    time_limit_s: float = Field(1.0, gt=0, allow_inf_nan=False)


class ScalingCandidate(_Resp):
    candidate: int | dict[str, Any]
    nodes: int = Field(description="active nodes of the candidate cluster")
    added: list[str]
    removed: list[str]
    load_distance: float = Field(description="after a full rebalance (no budget)")
    load_on_removing: float
    max_utilisation: float
    migrations: int
    migration_bytes: int | float
    rounds: int | None = Field(description="rounds needed under the problem's per-round budget (null: never, the "
                                           "budget is 0)")
    meets_target: bool
    solver: SolverInfo


class ScalingResponse(_Resp):
    current: StateMetrics
    target_load_distance: float
    max_utilisation: float
    algorithm: str
    candidates: list[ScalingCandidate]
    recommendation: int | None = Field(description="index in candidates of the smallest cluster meeting the "
                                                      "target, or null when none does")
    recommended: ScalingCandidate | None = None


# ---------------------------------------------------------------- jobs
class JobNode(_Req):
    id: Id
    capacity: float = Field(1.0, gt=0, allow_inf_nan=False)
    removing: bool = False


class JobKeyGroup(_Req):
    id: Id
    operator: str | None = ""
    node: Ref
    state_bytes: float | None = Field(0, ge=0, allow_inf_nan=False)


class OperatorSpec(_Req):
    id: Id
    key_groups: int = Field(ge=1, description="number of key groups, named '<id>/0' … '<id>/<n-1>'")


class AutoSpec(_Req):
    enabled: bool = False
    load_distance_threshold: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="fire when the windowed load distance exceeds it (null: whenever a plan improves it)")
    cooldown_batches: int = Field(3, ge=0, description="batches between two automatic rounds")
    time_limit_s: float | None = Field(None, gt=0, allow_inf_nan=False)


class JobSpec(_Req):
    """``PUT /v1/jobs/{job_id}``: either ``key_groups`` (explicit placement) or ``operators`` (contiguous ranges
    of key groups per node, as Flink assigns key groups to subtasks)."""

    nodes: list[JobNode | Id] = Field(min_length=1)
    key_groups: list[JobKeyGroup] | None = None
    operators: list[OperatorSpec] | None = None
    algorithm: Name | None = None
    params: dict[str, Any] = {}
    budget: BudgetDoc = Field(default_factory=lambda: BudgetDoc.model_validate({}))
    window_batches: int = Field(5, ge=1)
    communication_cost: float = Field(0.0, ge=0, allow_inf_nan=False)
    time_limit_s: float = Field(1.0, gt=0, allow_inf_nan=False, description="default time limit of proposals")
    auto: AutoSpec = Field(default_factory=lambda: AutoSpec.model_validate({}))


class WindowState(_Resp):
    size: int = Field(description="window_batches of the job")
    batches: list[int] = Field(description="batch ids in the window, oldest first")
    covered_batches: int
    coverage: float = Field(description="covered_batches / size")
    key_groups_covered: int = Field(description="key groups with at least one statistic in the window")
    key_groups: int
    ready: bool = Field(description="the window is full (auto triggers only fire then)")


class JobState(_Resp):
    job_id: str
    epoch: int
    nodes: list[dict[str, Any]]
    assignment: dict[str, str]
    algorithm: str
    params: dict[str, Any]
    budget: dict[str, Any]
    window_batches: int
    communication_cost: float
    time_limit_s: float
    auto: dict[str, Any]
    window: WindowState
    metrics: dict[str, Any] | None = Field(None, description="metrics of the current assignment under the "
                                                                "windowed statistics (null before any)")
    created_at: float
    updated_at: float


class StatKeyGroup(_Req):
    id: Id
    load: float = Field(ge=0, allow_inf_nan=False)
    state_bytes: float | None = Field(None, ge=0, allow_inf_nan=False)
    bytes: float | None = Field(None, ge=0, allow_inf_nan=False,
                                description="bytes of the records of this key group in the batch (optional)")


class StatsRequest(_Req):
    """One micro-batch's statistics; the loads (rates, state bytes, record bytes) of a batch must each sum to at
    most 1e150."""

    batch_id: int = Field(ge=0, le=MAX_INT64)
    epoch: int = Field(ge=0, le=MAX_INT64, description="the epoch the driver ran this batch with")
    key_groups: list[StatKeyGroup] = []
    communication: list[EdgeDoc] = []


class ApplyDoc(_Resp):
    """A plan the controller executed on its own (auto mode): apply it at the next batch boundary."""

    proposal_id: str
    base_epoch: int
    epoch: int
    assignment: dict[str, str]
    moves: list[Move]
    metrics: PlanMetrics
    solver: SolverInfo


class StatsResponse(_Resp):
    job_id: str
    batch_id: int
    epoch: int = Field(description="the job's current epoch (may be newer than the batch's)")
    counted: bool = Field(description="false for a duplicate batch id or a batch older than the window")
    duplicate: bool
    window: WindowState
    apply: ApplyDoc | None = Field(None, description="auto mode: the plan executed now (new epoch); apply it at "
                                                        "the next batch boundary")


class ProposalRequest(_Req):
    algorithm: Name | None = None
    params: dict[str, Any] | None = None
    time_limit_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    wait_s: float | None = Field(None, ge=0, allow_inf_nan=False,
                                    description="how long to wait for the solve before answering 202 "
                                                "(capped by the server's request_wait_s)")


class ProposalDoc(_Resp):
    id: str
    job_id: str
    base_epoch: int
    status: Literal["pending", "ready", "failed", "executed"]
    algorithm: str
    params: dict[str, Any]
    time_limit_s: float
    window: dict[str, Any] | None = None
    plan: PlanDoc | None = None
    error: str | None = None
    executed_epoch: int | None = None
    created_at: float


class ExecuteResponse(_Resp):
    job_id: str
    proposal_id: str
    base_epoch: int
    epoch: int
    assignment: dict[str, str]
    moves: list[Move]


class NodesRequest(_Req):
    """Scale out (``add``), mark for scale-in (``remove``: the nodes drain over the next rounds), and delete
    empty removing nodes (``delete``)."""

    add: list[JobNode | Id] = []
    remove: list[Ref] = []
    delete: list[Ref] = []


class HistoryEntry(_Resp):
    epoch: int
    kind: str
    created_at: float
    proposal_id: str | None = None
    nodes: list[dict[str, Any]]
    moves: list[Move] | None = None
    metrics: dict[str, Any] | None = None
    solver: dict[str, Any] | None = None
    algorithm: str | None = None


class HistoryResponse(_Resp):
    job_id: str
    epoch: int
    epochs: list[HistoryEntry]


class ErrorItem(_Resp):
    field: str
    reason: str


class ErrorDoc(_Resp):
    detail: list[ErrorItem] | str
    request_id: str | None = Field(None, description="500 only: the id of the server's log line with the traceback")


class HealthDoc(_Resp):
    status: str
