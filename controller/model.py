"""The controller's records: a registered job, its configuration and nodes, and a proposal.

Records sit below storage (:mod:`controller.repository` reads and writes them) and below the use cases
(:mod:`controller.rounds`, :mod:`controller.proposals`, :mod:`controller.jobs`), which change them under the job's
lock. A job is numeric inside: key groups are indices into ``kg_ids``, nodes indices into ``nodes``; its
documents (:mod:`rebalancer_client.contract`) are built here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.windows import Window
from rebalancer_client import contract as c
from rebalancer_client.wire import dump
from solvers import metrics
from solvers.model import Problem, comm_matrix


def new_id() -> str:
    """A proposal id (32 hex digits)."""
    return uuid.uuid4().hex


def new_generation() -> str:
    """The identity of one registration of a job id (16 hex digits)."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Node:
    id: str
    capacity: float = 1.0
    removing: bool = False

    @classmethod
    def of(cls, spec: c.JobNode | c.Node | str) -> Node:
        """A node from its id or a node document."""
        if isinstance(spec, str):
            return cls(spec)
        return cls(spec.id, float(spec.capacity), bool(spec.removing))

    def doc(self) -> c.JobNode:
        return c.JobNode(id=self.id, capacity=self.capacity, removing=self.removing)


@dataclass(frozen=True)
class JobConfig:
    """What ``PUT /v1/jobs/{id}`` may change without a new registration. ``time_limit_s`` is the job's own
    (``None``: the server's default, read at each solve)."""

    algorithm: str
    params: dict[str, Any]
    budget: c.Budget
    window_batches: int
    communication_cost: float
    time_limit_s: float | None
    auto: bool
    policy: c.Policy

    @classmethod
    def of(cls, spec: c.JobSpec, algorithm: str, params: dict[str, Any]) -> JobConfig:
        return cls(algorithm, params, spec.budget, spec.window_batches, spec.communication_cost, spec.time_limit_s,
                   spec.auto, spec.policy)

    def as_dict(self) -> dict[str, Any]:
        """The stored form (the ``jobs.spec`` column)."""
        return {"algorithm": self.algorithm, "params": dict(self.params), "budget": dump(self.budget),
                "window_batches": self.window_batches, "communication_cost": self.communication_cost,
                "time_limit_s": self.time_limit_s, "auto": self.auto, "policy": dump(self.policy)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobConfig:
        """The stored form back; rows of the first releases (``auto`` an object with the enabled flag, the
        threshold and the cooldown) are read into today's policy."""
        b = d.get("budget") or {}
        auto, policy = d.get("auto", False), dict(d.get("policy") or {})
        if isinstance(auto, Mapping):
            policy.setdefault("cooldown_batches", int(auto.get("cooldown_batches", 3)))
            policy.setdefault("load_distance_threshold", auto.get("load_distance_threshold"))
            auto = bool(auto.get("enabled", False))
        return cls(str(d["algorithm"]), dict(d.get("params") or {}),
                   c.Budget(max_migrations=b.get("max_migrations"), max_migration_bytes=b.get("max_migration_bytes")),
                   int(d["window_batches"]), float(d.get("communication_cost", 0.0)),
                   None if d.get("time_limit_s") is None else float(d["time_limit_s"]), bool(auto),
                   c.Policy(**policy))


@dataclass
class Fit:
    """The last executed plan against what its placement showed afterwards: a plan is fitted to a noisy window, so
    its own load distance is optimistic; once a whole window of batches has arrived since it was executed, the
    difference (``bias``) says by how much, and the policy counts it against the next plan's gain."""

    claimed: float              # the plan's load distance on the window it was fitted to
    fresh: int = 0              # batches counted since the plan was executed
    bias: float | None = None   # measured on the first window of fresh batches


@dataclass
class Job:
    job_id: str
    generation: str
    config: JobConfig
    registration: dict[str, Any]   # the topology as registered (PUT is idempotent on it)
    kg_ids: list[str]
    operators: list[str]
    reg_state: np.ndarray
    nodes: list[Node]
    assignment: np.ndarray         # node index per key group
    epoch: int
    window: Window
    created_at: float
    updated_at: float
    last_round_batch: int | None = None
    decision: c.Decision | None = None        # the policy's latest verdict
    fit: Fit | None = None                    # how the last executed plan held up
    round: asyncio.Task[None] | None = None   # an automatic round being solved
    kg_index: dict[str, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        if not self.kg_index:
            self.kg_index = {k: i for i, k in enumerate(self.kg_ids)}

    @property
    def node_ids(self) -> list[str]:
        return [nd.id for nd in self.nodes]

    def problem(self) -> Problem:
        """The numeric problem of the job now: current placement, windowed loads, latest state sizes."""
        m = len(self.kg_ids)
        comm = comm_matrix(*self.window.mean_comm(), m)
        return Problem(
            node_ids=self.node_ids,
            capacity=np.array([nd.capacity for nd in self.nodes], dtype=np.float64),
            removing=np.array([nd.removing for nd in self.nodes], dtype=bool),
            kg_ids=list(self.kg_ids), operator=list(self.operators),
            load=self.window.mean_load(), state_bytes=self.window.latest_state(self.reg_state),
            current=self.assignment.copy(), comm=comm,
            communication_cost=self.config.communication_cost,
            max_migrations=self.config.budget.max_migrations,
            max_migration_bytes=self.config.budget.max_migration_bytes,
        )

    def placement(self) -> c.Placement:
        return c.Placement(epoch=self.epoch, placement=self.assignment.tolist(), nodes=self.node_ids)

    def state(self, time_limit_s: float, with_metrics: bool = True) -> c.JobState:
        """The job document of ``GET /v1/jobs/{id}`` (``time_limit_s``: the effective limit of its solves)."""
        counts = np.bincount(self.assignment, minlength=len(self.nodes)).tolist()
        cfg = self.config
        state_metrics = None
        if with_metrics and self.window.batches:
            state_metrics = c.StateMetrics(**metrics.state_metrics(self.problem(), self.assignment))
        return c.JobState(
            job_id=self.job_id, epoch=self.epoch,
            nodes=[c.NodeState(id=nd.id, capacity=nd.capacity, removing=nd.removing, key_groups=int(n))
                   for nd, n in zip(self.nodes, counts, strict=True)],
            key_groups=list(self.kg_ids), placement=self.assignment.tolist(), algorithm=cfg.algorithm,
            params=dict(cfg.params), budget=cfg.budget, window_batches=cfg.window_batches,
            communication_cost=cfg.communication_cost, time_limit_s=time_limit_s, auto=cfg.auto, policy=cfg.policy,
            window=self.window.state(), metrics=state_metrics, decision=self.decision, created_at=self.created_at,
            updated_at=self.updated_at)


@dataclass
class ProposalRecord:
    """A proposal as the controller keeps it (its document is :class:`rebalancer_client.contract.Proposal`)."""

    id: str
    job_id: str
    generation: str          # the registration of the job it belongs to (not part of the document)
    base_epoch: int
    status: str              # pending | ready | failed | executed
    algorithm: str
    params: dict[str, Any]
    time_limit_s: float
    window: c.WindowState | None
    plan: c.Plan | None
    decision: c.Decision | None
    error: str | None
    executed_epoch: int | None
    created_at: float

    def doc(self) -> c.Proposal:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "generation"}
        return c.Proposal(**fields)
