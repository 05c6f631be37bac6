"""Typed results of the Rebalancer HTTP client, read strictly from the controller's documents.

Each model reads exactly the keys the controller sends (``api/schemas.py``: ``JobState``, ``StatsResponse``,
``ProposalDoc``, ``ExecuteResponse``, ``PlanDoc``, ``EvaluateResponse``, ``ScalingResponse``, ``HistoryResponse``,
the job list and the algorithm list); ``tests/clients/test_python_client_models.py`` parses every one of them from
the real server's responses. A missing key, a null where a value belongs or a wrong type raises
:class:`~clients.python.errors.MalformedResponse`. Every result keeps the decoded JSON in ``raw``, so fields added
by newer controllers are never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clients.python._parse import Doc


@dataclass
class StateMetrics:
    """Metrics of one assignment (DESIGN.md): load distance, load on removing nodes, collocation factor, total load,
    maximal utilisation (the last two in percent of the mean node load, as the load distance)."""

    load_distance: float
    load_on_removing: float
    collocation_factor: float | None = None
    total_load: float | None = None
    max_utilisation: float | None = None

    @classmethod
    def parse(cls, d: Doc) -> StateMetrics:
        return cls(d.number("load_distance"), d.number("load_on_removing"), d.number("collocation_factor", True),
                   d.number("total_load", True), d.number("max_utilisation", True))


def _plan_metrics(d: Doc) -> tuple[StateMetrics, StateMetrics]:
    d.integer("migrations"), d.number("migration_bytes")
    return StateMetrics.parse(d.obj("before")), StateMetrics.parse(d.obj("after"))


@dataclass
class PlanResult:
    """A plan document (DESIGN.md): the full assignment, the moves, before/after metrics, solver status."""

    algorithm: str
    assignment: dict[str, str]
    moves: list[dict[str, Any]]
    metrics: dict[str, Any]
    solver: dict[str, Any]
    before: StateMetrics | None = None
    after: StateMetrics | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any, where: str = "plan") -> PlanResult:
        d = Doc(doc, where)
        metrics = d.obj("metrics")
        before, after = _plan_metrics(metrics)
        solver = d.obj("solver")
        solver.text("status"), solver.number("lower_bound", True), solver.number("seconds")
        return cls(d.text("algorithm"), d.text_map("assignment"), d.moves(), dict(metrics.d), dict(solver.d),
                   before, after, dict(d.d))

    @property
    def migrations(self) -> int:
        return len(self.moves)

    @property
    def migration_bytes(self) -> float:
        return float(sum(float(m["state_bytes"]) for m in self.moves))


@dataclass
class Job:
    """A stateful job on the controller: its nodes, the assignment of key groups to nodes and its epoch."""

    job_id: str
    epoch: int
    nodes: list[str]
    assignment: dict[str, str]
    window: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    removing: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    capacity: dict[str, float] = field(default_factory=dict)   # node → capacity (1.0 unless set)
    communication_cost: float = 0.0

    @classmethod
    def from_json(cls, doc: Any) -> Job:
        d = Doc(doc, "job")
        nodes = d.docs("nodes")
        ids = [n.text("id", nonempty=True) for n in nodes]
        removing = [i for i, n in zip(ids, nodes, strict=True) if n.flag("removing")]
        capacity = {i: 1.0 if (c := n.number("capacity", True)) is None else c for i, n in zip(ids, nodes, strict=True)}
        comm = d.number("communication_cost", True)
        return cls(d.text("job_id", nonempty=True), d.integer("epoch"), ids, d.text_map("assignment"),
                   _window(d.obj("window")), d.mapping("metrics", True), removing, dict(d.d), capacity,
                   0.0 if comm is None else comm)


def _window(w: Doc) -> dict[str, Any]:
    w.integer("size"), w.items("batches"), w.integer("covered_batches"), w.flag("ready")
    return dict(w.d)


@dataclass
class JobSummary:
    """One entry of ``GET /v1/jobs``."""

    job_id: str
    epoch: int
    nodes: int
    key_groups: int

    @classmethod
    def from_json(cls, doc: Any, where: str = "jobs[]") -> JobSummary:
        d = Doc(doc, where)
        return cls(d.text("job_id", nonempty=True), d.integer("epoch"), d.integer("nodes"), d.integer("key_groups"))


@dataclass
class ApplyPlan:
    """A plan the controller executed itself (``auto`` mode): apply ``assignment`` from the next batch on, under
    the new ``epoch``."""

    proposal_id: str
    base_epoch: int
    epoch: int
    assignment: dict[str, str]
    moves: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def parse(cls, d: Doc) -> ApplyPlan:
        return cls(d.text("proposal_id", nonempty=True), d.integer("base_epoch"), d.integer("epoch"),
                   d.text_map("assignment"), d.moves(), dict(d.d))


@dataclass
class StatsAck:
    """The controller's answer to a statistics post (202).

    Attributes:
        epoch: the job's *current* epoch (newer than the batch's when another driver or an operator executed a
            plan meanwhile: the driver should then fetch the job and adopt its assignment).
        counted: False for a duplicate batch id or a batch older than the window.
        duplicate: the batch id had been posted before.
        window: the window state (``size``, ``batches``, ``covered_batches``, ``coverage``, ``ready``, ...).
        apply: in ``auto`` mode, the plan the controller executed now; apply it at the next batch boundary.
    """

    batch_id: int
    epoch: int
    counted: bool
    duplicate: bool
    window: dict[str, Any]
    apply: ApplyPlan | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any) -> StatsAck:
        d = Doc(doc, "stats")
        ap = d.obj("apply", True)
        return cls(d.integer("batch_id"), d.integer("epoch"), d.flag("counted"), d.flag("duplicate"),
                   _window(d.obj("window")), None if ap is None else ApplyPlan.parse(ap), dict(d.d))

    @property
    def window_ready(self) -> bool:
        return bool(self.window["ready"])


PROPOSAL_STATUSES = ("pending", "ready", "failed", "executed")


@dataclass
class Proposal:
    """A dry-run proposal computed from the job's window (``status``: pending | ready | failed | executed);
    ``plan`` is ``None`` while a long solve is pending (and when it failed: see ``error``)."""

    id: str
    base_epoch: int
    status: str
    plan: PlanResult | None
    error: str | None = None
    executed_epoch: int | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any) -> Proposal:
        d = Doc(doc, "proposal")
        pid = d.text("id", nonempty=True)
        if not pid.isalnum():  # the server's ids are hex; anything else must not become a path
            raise d.bad("id", "an alphanumeric id", pid)
        status = d.text("status")
        if status not in PROPOSAL_STATUSES:
            raise d.bad("status", "one of " + "/".join(PROPOSAL_STATUSES), status)
        plan_doc = d.raw("plan", True)
        plan = None if plan_doc is None else PlanResult.from_json(plan_doc, "proposal.plan")
        return cls(pid, d.integer("base_epoch"), status, plan, d.text("error", True),
                   d.integer("executed_epoch", True), dict(d.d))

    @property
    def ready(self) -> bool:
        return self.plan is not None


@dataclass
class Execution:
    """The result of executing a proposal: the job's new epoch, its assignment and the moves applied."""

    epoch: int
    assignment: dict[str, str]
    moves: list[dict[str, Any]] = field(default_factory=list)
    proposal_id: str = ""
    base_epoch: int = -1
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any) -> Execution:
        d = Doc(doc, "execution")
        return cls(d.integer("epoch"), d.text_map("assignment"), d.moves(), d.text("proposal_id", nonempty=True),
                   d.integer("base_epoch"), dict(d.d))


@dataclass
class Evaluation:
    """``POST /v1/evaluate``: metrics before and after a plan, its migrations and whether it keeps the budget."""

    before: StateMetrics
    after: StateMetrics
    migrations: int
    migration_bytes: float
    moves: list[dict[str, Any]]
    within_budget: bool
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any) -> Evaluation:
        d = Doc(doc, "evaluation")
        before, after = _plan_metrics(d)
        return cls(before, after, d.integer("migrations"), d.number("migration_bytes"), d.moves(),
                   d.flag("within_budget"), dict(d.d))


@dataclass
class ScalingCandidate:
    """One candidate cluster of a what-if: its metrics after a full rebalance and the rounds under the budget
    (``rounds`` None: never, the per-round budget is 0)."""

    candidate: int | dict[str, Any]
    nodes: int
    added: list[str]
    removed: list[str]
    load_distance: float
    load_on_removing: float
    max_utilisation: float
    migrations: int
    migration_bytes: float
    rounds: int | None
    meets_target: bool
    solver: dict[str, Any]

    @classmethod
    def parse(cls, d: Doc) -> ScalingCandidate:
        c = d.raw("candidate")
        if isinstance(c, dict):
            c = dict(c)
        elif isinstance(c, bool) or not isinstance(c, int):
            raise d.bad("candidate", "an integer or an object", c)
        return cls(c, d.integer("nodes"), d.texts("added"), d.texts("removed"), d.number("load_distance"),
                   d.number("load_on_removing"), d.number("max_utilisation"), d.integer("migrations"),
                   d.number("migration_bytes"), d.integer("rounds", True), d.flag("meets_target"),
                   d.mapping("solver"))


@dataclass
class ScalingReport:
    """``POST /v1/what-if/scaling``: the current metrics, every candidate, and ``recommendation`` — the index in
    ``candidates`` of the smallest cluster meeting the goal (None: none does)."""

    current: StateMetrics
    target_load_distance: float
    max_utilisation: float
    algorithm: str
    candidates: list[ScalingCandidate]
    recommendation: int | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any) -> ScalingReport:
        d = Doc(doc, "what_if")
        cands = [ScalingCandidate.parse(c) for c in d.docs("candidates")]
        rec = d.integer("recommendation", True)
        if rec is not None and not 0 <= rec < len(cands):
            raise d.bad("recommendation", f"an index below {len(cands)}", rec)
        return cls(StateMetrics.parse(d.obj("current")), d.number("target_load_distance"),
                   d.number("max_utilisation"), d.text("algorithm"), cands, rec, dict(d.d))

    @property
    def recommended(self) -> ScalingCandidate | None:
        return None if self.recommendation is None else self.candidates[self.recommendation]


@dataclass
class HistoryEntry:
    """One epoch of a job: its ``kind`` (register, execute, auto, nodes), the nodes then, and the plan's moves,
    metrics and solver for the epochs a plan made."""

    epoch: int
    kind: str
    created_at: float
    nodes: list[dict[str, Any]]
    proposal_id: str | None = None
    moves: list[dict[str, Any]] | None = None
    metrics: dict[str, Any] | None = None
    solver: dict[str, Any] | None = None
    algorithm: str | None = None

    @classmethod
    def parse(cls, d: Doc) -> HistoryEntry:
        nodes = d.docs("nodes")
        for n in nodes:
            n.text("id", nonempty=True)
        return cls(d.integer("epoch"), d.text("kind"), d.number("created_at"), [dict(n.d) for n in nodes],
                   d.text("proposal_id", True), d.moves("moves", True), d.mapping("metrics", True),
                   d.mapping("solver", True), d.text("algorithm", True))


@dataclass
class History:
    """``GET /v1/jobs/{id}/history``: the job's current epoch and its epochs, oldest first."""

    job_id: str
    epoch: int
    epochs: list[HistoryEntry]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any) -> History:
        d = Doc(doc, "history")
        return cls(d.text("job_id", nonempty=True), d.integer("epoch"),
                   [HistoryEntry.parse(e) for e in d.docs("epochs")], dict(d.d))


@dataclass
class AlgorithmInfo:
    """A planner the server can run: ``params`` as the server describes them (name, type, default, help, and
    choices/minimum/maximum when set)."""

    name: str
    summary: str
    params: list[dict[str, Any]]

    @classmethod
    def from_json(cls, doc: Any, where: str = "algorithms[]") -> AlgorithmInfo:
        d = Doc(doc, where)
        params = d.docs("params")
        for p in params:
            p.text("name", nonempty=True), p.text("type")
        return cls(d.text("name", nonempty=True), d.text("summary"), [dict(p.d) for p in params])
