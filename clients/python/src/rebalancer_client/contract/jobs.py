"""The documents of registered jobs: registration, statistics, the policy's verdicts, placements, proposals,
scaling, history. Their numbers travel as arrays in the job's key-group and node order (``JobState.key_groups``,
``JobState.nodes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from rebalancer_client.contract.common import Amount, Id, Int64, Name, Params, Positive, Ref, TimeLimit
from rebalancer_client.contract.offline import Budget, Edge, Move, Plan, PlanMetrics, SolverInfo, StateMetrics
from rebalancer_client.wire import REQUEST, RESPONSE, Check


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
