"""The wire contract of the Rebalancer API: every document the controller and its clients exchange, defined once.

The controller builds these documents and answers with them; the API validates every request against them and
derives its OpenAPI schema from them; the Python client reads every answer into them with
:func:`clients.python.wire.read`. Standard library only. Field constraints are :class:`~clients.python.wire.Check`
markers; request documents refuse unknown fields and are strict (a boolean is not a number, a string of digits is
not a number).

Two kinds of document:

- **Offline documents** (``Problem``, ``Plan``, ``Evaluation``, the what-if report) name key groups and nodes by id,
  as in ``docs/design.md``: they are read and written by people and by other tools.
- **Job documents** (``JobState``, ``Stats``, ``StatsAck``, ``Placement``, ``Execution``) speak of a registered job,
  whose key groups and nodes both sides know in order (``JobState.key_groups``, ``JobState.nodes``). Their numbers
  travel as arrays in that order: a batch's loads as ``Stats.load[k]`` for key group ``k``, a placement as
  ``placement[k]`` = the index of key group ``k``'s node. Statistics may also name key groups by id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from clients.python.wire import REQUEST, RESPONSE, Check

MAX_INT64 = 2**63 - 1
#: the longest id (job, node, key group, operator, resource) in characters
MAX_ID_LENGTH = 256
#: job ids are one URL path segment
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"

Id = Annotated[str, Check(min_length=1, max_length=MAX_ID_LENGTH)]
Ref = Annotated[str, Check(max_length=MAX_ID_LENGTH)]
Name = Annotated[str, Check("a planner name (GET /v1/algorithms)", min_length=1, max_length=100)]
Amount = Annotated[float, Check(ge=0, finite=True)]
Positive = Annotated[float, Check(gt=0, finite=True)]
Int64 = Annotated[int, Check(ge=0, le=MAX_INT64)]
TimeLimit = Annotated[float | None, Check("seconds the planner may take (default and maximum: the server's "
                                          "settings)", gt=0, finite=True)]
Params = Annotated[dict[str, Any], Check("planner parameters (GET /v1/algorithms lists them)")]
Status = Literal["optimal", "feasible", "heuristic"]


# ============================================================================ offline documents (docs/design.md)
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
class WhatIfRequest:
    """Candidate clusters: a size (nodes are added or removed) or explicit changes."""

    __pydantic_config__ = REQUEST
    problem: Problem
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


# ============================================================================ jobs
@dataclass(kw_only=True, slots=True)
class JobNode:
    __pydantic_config__ = REQUEST
    id: Id
    capacity: Positive = 1.0
    removing: bool = False


@dataclass(kw_only=True, slots=True)
class JobKeyGroup:
    __pydantic_config__ = REQUEST
    id: Id
    operator: Ref | None = ""
    node: Ref
    state_bytes: Amount | None = 0


@dataclass(kw_only=True, slots=True)
class Operator:
    __pydantic_config__ = REQUEST
    id: Id
    key_groups: Annotated[int, Check("number of key groups, named '<id>/0' … '<id>/<n-1>'", ge=1)]


@dataclass(kw_only=True, slots=True)
class Policy:
    """When moving state is worth it. The controller applies it to every plan it would execute or propose.

    A plan is executed only when the load distance of the current placement is larger than the statistics' noise
    explains, the plan takes at least ``min_gain`` of the mean utilisation off it, it moves no more bytes than
    the gain pays for, and ``cooldown_batches`` have passed since the last round. Load on nodes being removed is
    always worth draining (cooldown and budget still apply).
    """

    __pydantic_config__ = REQUEST
    noise_sigmas: Annotated[Amount | None, Check(
        "leave alone an imbalance within this many standard errors of the window's own noise (per-key-group "
        "variance over the window, family-wise over the nodes); null disables the guard")] = 3.0
    min_gain: Annotated[Amount, Check(
        "the least load-distance reduction worth a round, as a share of the mean utilisation")] = 0.02
    cooldown_batches: Annotated[int, Check("batches between two rounds", ge=0)] = 3
    load_distance_threshold: Annotated[Amount | None, Check(
        "no round while the load distance is at or below it (null: no threshold)")] = None
    max_bytes_per_gain: Annotated[Amount | None, Check(
        "the most state bytes a plan may move per 1 % of mean utilisation it takes off the load distance "
        "(null: moving state costs nothing)")] = None


@dataclass(kw_only=True, slots=True)
class JobSpec:
    """``PUT /v1/jobs/{job_id}``: ``key_groups`` (explicit placement) or ``operators`` (contiguous ranges of key
    groups over the active nodes, as Flink assigns key groups to subtasks)."""

    __pydantic_config__ = REQUEST
    nodes: Annotated[list[JobNode | Id], Check(min_length=1)]
    key_groups: list[JobKeyGroup] | None = None
    operators: list[Operator] | None = None
    algorithm: Name | None = None
    params: Params = field(default_factory=dict)
    budget: Budget = field(default_factory=Budget)
    window_batches: Annotated[int, Check("batches in the statistics window", ge=1)] = 5
    communication_cost: Amount = 0.0
    time_limit_s: TimeLimit = None
    auto: Annotated[bool, Check("the controller executes the rounds its policy accepts; the next statistics "
                                "answer carries the new placement")] = False
    policy: Policy = field(default_factory=Policy)


@dataclass(kw_only=True, slots=True)
class WindowState:
    __pydantic_config__ = RESPONSE
    size: Annotated[int, Check("window_batches of the job")]
    batches: Annotated[list[int], Check("batch ids in the window, oldest first")]
    covered_batches: int
    coverage: float
    key_groups_covered: int
    key_groups: int
    ready: Annotated[bool, Check("the window is full: rounds are considered only then")]


@dataclass(kw_only=True, slots=True)
class NodeState:
    __pydantic_config__ = RESPONSE
    id: str
    capacity: float
    removing: bool
    key_groups: int


Reason = Literal["worth", "drain", "noise", "gain", "threshold", "cost", "cooldown", "no_moves", "window",
                 "significant", "started", "failed"]


@dataclass(kw_only=True, slots=True)
class Decision:
    """The controller's verdict on a round: whether the plan (or, before any solve, any plan) is worth moving
    state, why, and the numbers behind it."""

    __pydantic_config__ = RESPONSE
    worth: bool
    reason: Annotated[Reason, Check(
        "worth, drain: the plan is worth executing; noise, gain, threshold, cost, cooldown, no_moves: not worth "
        "it; window: the window is not full; significant: the imbalance exceeds the noise, a plan may pay (ask "
        "for a proposal); started: an automatic round is being solved; failed: its solve failed")]
    message: str
    batch_id: Annotated[int | None, Check("the newest batch of the window the verdict was made on")] = None
    load_distance: Annotated[float | None, Check("of the current placement over the window")] = None
    planned_load_distance: float | None = None
    noise: Annotated[float | None, Check("the load distance the window's noise alone explains")] = None
    min_gain: Annotated[float | None, Check("the least reduction worth a round, in load-distance units")] = None
    load_on_removing: float | None = None
    fit_bias: Annotated[float | None, Check("how much higher the last executed plan's load distance proved on "
                                            "fresh batches than the plan claimed; taken off the gain")] = None
    migration_bytes: float | None = None
    bytes_allowed: Annotated[float | None, Check("the most bytes the gain pays for (max_bytes_per_gain)")] = None


@dataclass(kw_only=True, slots=True)
class Placement:
    """The job's placement at ``epoch`` (newer than the epoch the statistics were posted with): apply it at the
    next batch boundary and post the following batches with this epoch."""

    __pydantic_config__ = RESPONSE
    epoch: int
    placement: Annotated[list[int], Check("node index (in the job's nodes) of each key group, in order")]
    nodes: list[str]


@dataclass(kw_only=True, slots=True)
class JobState:
    """A registered job: its nodes and key groups in order, the placement, the configuration, the window."""

    __pydantic_config__ = RESPONSE
    job_id: str
    epoch: int
    nodes: list[NodeState]
    key_groups: list[str]
    placement: Annotated[list[int], Check("node index of each key group, in the order of key_groups")]
    algorithm: str
    params: dict[str, Any]
    budget: Budget
    window_batches: int
    communication_cost: float
    time_limit_s: float
    auto: bool
    policy: Policy
    window: WindowState
    metrics: Annotated[StateMetrics | None, Check("of the current placement under the window (null before any "
                                                  "statistics)")] = None
    decision: Annotated[Decision | None, Check("the latest verdict of the policy")] = None
    created_at: float
    updated_at: float

    @property
    def assignment(self) -> dict[str, str]:
        """Key group id -> node id."""
        ids = [nd.id for nd in self.nodes]
        return {k: ids[i] for k, i in zip(self.key_groups, self.placement, strict=True)}


@dataclass(kw_only=True, slots=True)
class JobSummary:
    __pydantic_config__ = RESPONSE
    job_id: str
    epoch: int
    nodes: int
    key_groups: int


@dataclass(kw_only=True, slots=True)
class KeyGroupStats:
    __pydantic_config__ = REQUEST
    id: Id
    load: Amount
    state_bytes: Amount | None = None


Loads = Annotated[list[Amount] | None, Check("one number per key group of the job, in the job's order")]
OptionalLoads = Annotated[list[Amount | None] | None, Check("one per key group of the job, in order; null where "
                                                            "not measured")]


@dataclass(kw_only=True, slots=True)
class Stats:
    """One micro-batch's statistics: by key group id (``key_groups``) or as arrays in the job's key-group order
    (``load`` and optionally ``state_bytes``), not both. The loads, rates and state bytes of a batch must each sum
    to at most 1e150."""

    __pydantic_config__ = REQUEST
    batch_id: Int64
    epoch: Annotated[Int64, Check("the epoch the driver ran this batch with")]
    key_groups: list[KeyGroupStats] | None = None
    load: Loads = None
    state_bytes: OptionalLoads = None
    communication: list[Edge] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class StatsAck:
    __pydantic_config__ = RESPONSE
    job_id: str
    batch_id: int
    epoch: Annotated[int, Check("the job's current epoch")]
    counted: Annotated[bool, Check("false for a duplicate batch id or a batch older than the window")]
    duplicate: bool
    window: WindowState
    decision: Annotated[Decision | None, Check("the policy's verdict on a round at this batch, when one was "
                                               "considered")] = None
    apply: Annotated[Placement | None, Check("the job's placement when it is newer than the batch's epoch")] = None


@dataclass(kw_only=True, slots=True)
class ProposalRequest:
    __pydantic_config__ = REQUEST
    algorithm: Name | None = None
    params: Params | None = None
    time_limit_s: TimeLimit = None
    wait_s: Annotated[Amount | None, Check("how long to wait for the solve before answering 202 (capped by the "
                                           "server)")] = None


@dataclass(kw_only=True, slots=True)
class Proposal:
    __pydantic_config__ = RESPONSE
    id: str
    job_id: str
    base_epoch: int
    status: Literal["pending", "ready", "failed", "executed"]
    algorithm: str
    params: dict[str, Any]
    time_limit_s: float
    window: WindowState | None = None
    plan: Plan | None = None
    decision: Annotated[Decision | None, Check("the policy's verdict on the plan")] = None
    error: str | None = None
    executed_epoch: int | None = None
    created_at: float


@dataclass(kw_only=True, slots=True)
class ExecuteRequest:
    __pydantic_config__ = REQUEST
    force: Annotated[bool, Check("execute a plan the policy judged not worth it")] = False


@dataclass(kw_only=True, slots=True)
class Execution:
    __pydantic_config__ = RESPONSE
    job_id: str
    proposal_id: str
    base_epoch: int
    epoch: int
    placement: list[int]
    moves: list[Move]


@dataclass(kw_only=True, slots=True)
class NodesRequest:
    """Scale out (``add``), mark nodes for scale-in (``remove``: they drain over the next rounds) and delete empty
    removing nodes (``delete``)."""

    __pydantic_config__ = REQUEST
    add: list[JobNode | Id] = field(default_factory=list)
    remove: list[Ref] = field(default_factory=list)
    delete: list[Ref] = field(default_factory=list)


@dataclass(kw_only=True, slots=True)
class ScaleRequest:
    """``POST /v1/jobs/{job_id}/scale``: the job's new node set, and its key groups placed on it in one step (a
    Spark query restarted with another partition count). Key groups on nodes that go always move; ``budget``
    bounds the moves in all (it must allow those), null rebalances fully."""

    __pydantic_config__ = REQUEST
    nodes: Annotated[list[JobNode | Id], Check("the nodes after the change, in order", min_length=1)]
    budget: Budget | None = None
    algorithm: Name | None = None
    params: Params | None = None
    time_limit_s: TimeLimit = None


@dataclass(kw_only=True, slots=True)
class Scaled:
    """A scale executed: the new epoch, its nodes and placement, the moves and the plan's metrics."""

    __pydantic_config__ = RESPONSE
    job_id: str
    base_epoch: int
    epoch: int
    nodes: list[str]
    placement: list[int]
    moves: list[Move]
    metrics: PlanMetrics
    solver: SolverInfo


@dataclass(kw_only=True, slots=True)
class JobWhatIfRequest:
    """``POST /v1/jobs/{job_id}/what-if``: :class:`WhatIfRequest` on the job's own window."""

    __pydantic_config__ = REQUEST
    candidates: Annotated[list[Annotated[int, Check(ge=1)] | ScalingChange], Check(min_length=1)]
    target_load_distance: Amount | None = None
    max_utilisation: Positive | None = None
    algorithm: Name | None = None
    params: Params = field(default_factory=dict)
    time_limit_s: TimeLimit = None


@dataclass(kw_only=True, slots=True)
class HistoryEntry:
    __pydantic_config__ = RESPONSE
    epoch: int
    kind: str
    created_at: float
    proposal_id: str | None = None
    nodes: list[JobNode]
    moves: list[Move] | None = None
    metrics: PlanMetrics | None = None
    solver: SolverInfo | None = None
    algorithm: str | None = None
    decision: Decision | None = None


@dataclass(kw_only=True, slots=True)
class History:
    __pydantic_config__ = RESPONSE
    job_id: str
    epoch: int
    epochs: list[HistoryEntry]


# ============================================================================ errors and probes
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
