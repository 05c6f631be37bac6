"""A registered job: its configuration, its nodes, its topology and the numeric problem it is now.

A job is registered with explicit ``key_groups`` (id, operator, node) or with ``operators`` (key group counts)
whose key groups ``<op>/<k>`` are spread over the active nodes in Flink's contiguous ranges. Each registration
gets a new ``generation``: proposals carry it, so a proposal never outlives the incarnation of the job it was
computed for (DELETE and PUT of the same id make a new job).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from controller.errors import TooLarge
from controller.settings import Settings
from controller.windows import Window
from solvers import documents, metrics
from solvers.errors import InvalidInput
from solvers.model import Problem


def flink_ranges(n_keygroups: int, n_nodes: int) -> np.ndarray:
    """Node index of each key group when ``n_keygroups`` key groups are spread over ``n_nodes`` subtasks the way
    Flink's ``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup`` does: key group k -> k·P / K (contiguous
    ranges, sizes differing by at most one)."""
    k = np.arange(n_keygroups, dtype=np.int64)
    return (k * n_nodes) // n_keygroups


def new_generation() -> str:
    """The identity of one registration of a job id (16 hex digits)."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Node:
    id: str
    capacity: float = 1.0
    removing: bool = False

    @classmethod
    def parse(cls, nd: str | Mapping[str, Any]) -> Node:
        """A node from its id or from ``{"id", "capacity"?, "removing"?}``."""
        if isinstance(nd, str):
            return cls(nd)
        return cls(str(nd["id"]), float(nd.get("capacity", 1.0)), bool(nd.get("removing", False)))

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "capacity": self.capacity, "removing": self.removing}


@dataclass(frozen=True)
class Budget:
    max_migrations: int | None = None
    max_migration_bytes: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"max_migrations": self.max_migrations, "max_migration_bytes": self.max_migration_bytes}


@dataclass(frozen=True)
class AutoConfig:
    """Automatic rounds (DESIGN.md "Service shape"): fire when the window is full, the cooldown has passed and the
    windowed load distance exceeds the threshold (None: whenever a plan improves it)."""

    enabled: bool = False
    load_distance_threshold: float | None = None
    cooldown_batches: int = 3
    time_limit_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "load_distance_threshold": self.load_distance_threshold,
                "cooldown_batches": self.cooldown_batches, "time_limit_s": self.time_limit_s}


@dataclass(frozen=True)
class JobConfig:
    """What ``PUT /v1/jobs/{id}`` may change without a new registration."""

    algorithm: str
    params: dict[str, Any]
    budget: Budget
    window_batches: int
    communication_cost: float
    time_limit_s: float
    auto: AutoConfig

    def as_dict(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm, "params": dict(self.params), "budget": self.budget.as_dict(),
                "window_batches": self.window_batches, "communication_cost": self.communication_cost,
                "time_limit_s": self.time_limit_s, "auto": self.auto.as_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobConfig:
        b = d.get("budget") or {}
        a = d.get("auto") or {}
        threshold, auto_tl = a.get("load_distance_threshold"), a.get("time_limit_s")
        return cls(
            algorithm=str(d["algorithm"]), params=dict(d.get("params") or {}),
            budget=Budget(b.get("max_migrations"), b.get("max_migration_bytes")),
            window_batches=int(d["window_batches"]), communication_cost=float(d.get("communication_cost", 0.0)),
            time_limit_s=float(d["time_limit_s"]),
            auto=AutoConfig(bool(a.get("enabled", False)), None if threshold is None else float(threshold),
                            int(a.get("cooldown_batches", 3)), None if auto_tl is None else float(auto_tl)))


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
    assignment: np.ndarray
    epoch: int
    window: Window
    created_at: float
    updated_at: float
    last_round_batch: int | None = None
    kg_index: dict[str, int] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        if not self.kg_index:
            self.kg_index = {k: i for i, k in enumerate(self.kg_ids)}

    @property
    def node_ids(self) -> list[str]:
        return [nd.id for nd in self.nodes]

    def assignment_doc(self, assignment: np.ndarray | None = None) -> dict[str, str]:
        a = self.assignment if assignment is None else assignment
        ids = self.node_ids
        return {kid: ids[int(i)] for kid, i in zip(self.kg_ids, a.tolist(), strict=True)}

    def problem(self) -> Problem:
        """The numeric problem of the job now: current assignment, windowed loads, latest state sizes."""
        m = len(self.kg_ids)
        src, dst, rate = self.window.mean_comm()
        comm = sp.csr_matrix((rate, (src, dst)), shape=(m, m))
        comm.sum_duplicates()
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

    def state(self, with_metrics: bool = True) -> dict[str, Any]:
        """The job document of ``GET /v1/jobs/{id}``."""
        counts = np.bincount(self.assignment, minlength=len(self.nodes))
        doc: dict[str, Any] = {
            "job_id": self.job_id, "epoch": self.epoch,
            "nodes": [dict(nd.as_dict(), key_groups=int(c)) for nd, c in zip(self.nodes, counts.tolist(), strict=True)],
            "assignment": self.assignment_doc(), **self.config.as_dict(),
            "window": self.window.state(), "metrics": None,
            "created_at": self.created_at, "updated_at": self.updated_at,
        }
        if with_metrics and self.window.batches:
            doc["metrics"] = metrics.state_metrics(self.problem(), self.assignment)
        return doc


@dataclass
class Topology:
    """A registration request turned into numbers: nodes, key groups and their initial placement."""

    nodes: list[Node]
    registration: dict[str, Any]
    problem: Problem


def topology(spec: Mapping[str, Any], s: Settings) -> Topology:
    """Nodes and key groups of a ``PUT /v1/jobs/{id}`` body, with the size caps of ``s`` (413) and 422s naming
    the field. Key groups given by ``operators`` are placed in Flink's contiguous ranges (:func:`flink_ranges`)."""
    nodes = [Node.parse(nd) for nd in spec["nodes"]]
    if len(nodes) > s.max_nodes:
        raise TooLarge(f"nodes: more than {s.max_nodes} nodes")
    kgs: list[dict[str, Any]] | None = spec.get("key_groups")
    ops: list[dict[str, Any]] = spec.get("operators") or []
    if (kgs is None) == (spec.get("operators") is None):
        raise InvalidInput("key_groups", "give either key_groups (explicit placement) or operators (key group "
                                         "counts), not both or neither")
    window = int(spec["window_batches"])
    if window > s.max_window_batches:
        raise InvalidInput("window_batches", f"must be ≤ {s.max_window_batches}")
    node_docs = [nd.as_dict() for nd in nodes]
    if kgs is not None:
        m = len(kgs)
        if m > s.max_key_groups:
            raise TooLarge(f"key_groups: more than {s.max_key_groups} key groups")
        _check_cells(m, window, s)
        kg_docs = [{"id": k["id"], "operator": k.get("operator") or "", "node": k["node"], "load": 0.0,
                    "state_bytes": k.get("state_bytes") or 0} for k in kgs]
        registration = {"nodes": node_docs, "key_groups": [{kk: k.get(kk) for kk in ("id", "operator", "node",
                                                                                      "state_bytes")} for k in kgs]}
    else:
        m = sum(int(o["key_groups"]) for o in ops)
        if m > s.max_key_groups:
            raise TooLarge(f"operators: more than {s.max_key_groups} key groups in total")
        _check_cells(m, window, s)
        seen: set[str] = set()
        for i, o in enumerate(ops):
            if o["id"] in seen:
                raise InvalidInput(f"operators[{i}].id", f"duplicate operator id {o['id']!r}")
            seen.add(o["id"])
        active = [nd.id for nd in nodes if not nd.removing]
        if not active:
            raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")
        kg_docs = []
        for o in ops:
            where = flink_ranges(int(o["key_groups"]), len(active))
            kg_docs += [{"id": f"{o['id']}/{k}", "operator": o["id"], "node": active[int(where[k])], "load": 0.0,
                         "state_bytes": 0} for k in range(int(o["key_groups"]))]
        registration = {"nodes": node_docs, "operators": [{"id": o["id"], "key_groups": int(o["key_groups"])}
                                                          for o in ops]}
    try:
        problem = documents.problem_from_dict({"nodes": node_docs, "key_groups": kg_docs})
    except InvalidInput as exc:
        if kgs is None and exc.field.startswith("key_groups"):
            raise InvalidInput("operators", exc.reason) from None
        raise
    return Topology(nodes, registration, problem)


def _check_cells(m: int, window: int, s: Settings) -> None:
    """Issue 12 item 10: a job's window holds at most ``max_window_cells`` (key group, batch) statistics."""
    cap = s.max_window_cells
    if m * window > cap:
        raise TooLarge(f"window_batches: {m} key groups × {window} batches = {m * window} statistics per window, "
                       f"more than the {cap} allowed per job (REBALANCER_MAX_WINDOW_CELLS)")


def config_from_spec(spec: Mapping[str, Any], algorithm: str, params: dict[str, Any]) -> JobConfig:
    """The configuration part of a ``PUT /v1/jobs/{id}`` body (algorithm and params already validated)."""
    return JobConfig.from_dict({**spec, "algorithm": algorithm, "params": params})
