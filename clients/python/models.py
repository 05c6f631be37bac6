"""Typed results of the Rebalancer HTTP client.

Every result keeps the decoded JSON in ``raw`` so that fields added by newer controllers are never lost; the
typed attributes are the ones a driver needs (issue 7's contract: jobs with an ``epoch`` and an ``assignment``,
proposals with ``id``/``base_epoch``/``plan``, executions with the new ``epoch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _node_ids(nodes: Any) -> list[str]:
    out: list[str] = []
    for nd in nodes or []:
        if isinstance(nd, Mapping):
            out.append(str(nd.get("id")))
        else:
            out.append(str(nd))
    return out


@dataclass
class PlanResult:
    """A plan document (DESIGN.md): the full assignment, the moves, before/after metrics, solver status."""

    algorithm: str
    assignment: dict[str, str]
    moves: list[dict[str, Any]]
    metrics: dict[str, Any]
    solver: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PlanResult:
        return cls(
            algorithm=str(doc.get("algorithm", "")),
            assignment={str(k): str(v) for k, v in (doc.get("assignment") or {}).items()},
            moves=list(doc.get("moves") or []),
            metrics=dict(doc.get("metrics") or {}),
            solver=dict(doc.get("solver") or {}),
            raw=dict(doc),
        )

    @property
    def migrations(self) -> int:
        return len(self.moves)

    @property
    def migration_bytes(self) -> float:
        return float(sum(float(m.get("state_bytes") or 0) for m in self.moves))


@dataclass
class Job:
    """A stateful job on the controller: its nodes, the assignment of key groups to nodes and its epoch."""

    job_id: str
    epoch: int
    nodes: list[str]
    assignment: dict[str, str]
    window: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], job_id: str = "") -> Job:
        return cls(
            job_id=str(doc.get("job_id", doc.get("id", job_id))),
            epoch=int(doc.get("epoch", 0)),
            nodes=_node_ids(doc.get("nodes")),
            assignment={str(k): str(v) for k, v in (doc.get("assignment") or {}).items()},
            window=dict(doc.get("window") or {}),
            metrics=doc.get("metrics"),
            raw=dict(doc),
        )


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
    def from_json(cls, doc: Mapping[str, Any]) -> ApplyPlan:
        return cls(
            proposal_id=str(doc.get("proposal_id", "")),
            base_epoch=int(doc.get("base_epoch", -1)),
            epoch=int(doc["epoch"]),
            assignment={str(k): str(v) for k, v in (doc.get("assignment") or {}).items()},
            moves=list(doc.get("moves") or []),
            raw=dict(doc),
        )


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
    def from_json(cls, doc: Mapping[str, Any]) -> StatsAck:
        ap = doc.get("apply")
        return cls(
            batch_id=int(doc.get("batch_id", -1)),
            epoch=int(doc.get("epoch", -1)),
            counted=bool(doc.get("counted", True)),
            duplicate=bool(doc.get("duplicate", False)),
            window=dict(doc.get("window") or {}),
            apply=ApplyPlan.from_json(ap) if isinstance(ap, Mapping) else None,
            raw=dict(doc),
        )

    @property
    def window_ready(self) -> bool:
        return bool(self.window.get("ready", False))


@dataclass
class Proposal:
    """A dry-run proposal computed from the job's window (``status``: pending | ready | failed | executed);
    ``plan`` is ``None`` while a long solve is pending."""

    id: str
    base_epoch: int | None
    status: str
    plan: PlanResult | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Proposal:
        plan_doc = doc.get("plan")
        status = doc.get("status")
        if status is None:
            status = "ready" if isinstance(plan_doc, Mapping) else "pending"
        base = doc.get("base_epoch")
        return cls(
            id=str(doc.get("id", doc.get("proposal_id", ""))),
            base_epoch=None if base is None else int(base),
            status=str(status),
            plan=PlanResult.from_json(plan_doc) if isinstance(plan_doc, Mapping) else None,
            raw=dict(doc),
        )

    @property
    def ready(self) -> bool:
        return self.plan is not None


@dataclass
class Execution:
    """The result of executing a proposal: the job's new epoch (and assignment when the controller sends it)."""

    epoch: int
    assignment: dict[str, str] | None
    moves: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Execution:
        a = doc.get("assignment")
        if a is None and isinstance(doc.get("job"), Mapping):
            a = doc["job"].get("assignment")
        return cls(
            epoch=int(doc.get("epoch", doc.get("new_epoch", -1))),
            assignment={str(k): str(v) for k, v in a.items()} if isinstance(a, Mapping) else None,
            moves=list(doc.get("moves") or []),
            raw=dict(doc),
        )
