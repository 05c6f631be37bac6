"""What-if scaling without a server: candidate clusters, rounds under a budget, and the recommendation.

After Cruise Control's rightsizing and Flink's autoscaler report. A candidate is a cluster size (int: nodes are
added with the mean active capacity, or the least utilised active nodes are marked removing) or an explicit change
``{"add": [...], "remove": [...]}``. Each candidate is fully rebalanced (no per-round budget) by a planner; the
report gives the load distance after (ALBIC §4.3.1: the largest deviation of an active node's utilisation from
the target, see :mod:`solvers.metrics`), the migrations and bytes needed, the rounds that takes under the
problem's per-round budget (ALBIC §4.3.1: at most ``max_migrations`` / ``max_migration_bytes`` per round),
and whether the goal is met.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers import metrics
from solvers.errors import InvalidInput
from solvers.model import Problem


@dataclass
class Variant:
    """One candidate cluster: the problem to rebalance, and the nodes it adds and marks removing."""

    problem: Problem
    added: list[str]
    removed: list[str]


def rounds_needed(migrations: int, migration_bytes: float, max_migrations: int | None,
                  max_migration_bytes: float | None) -> int | None:
    """Rounds needed to perform ``migrations`` moves of ``migration_bytes`` bytes when each round may move at most
    ``max_migrations`` key groups and ``max_migration_bytes`` bytes (None = unlimited); None when never."""
    if migrations == 0:
        return 0
    r = 1
    if max_migrations is not None:
        if max_migrations == 0:
            return None
        r = max(r, math.ceil(migrations / max_migrations))
    if max_migration_bytes is not None and migration_bytes > 0:
        if max_migration_bytes == 0:
            return None
        r = max(r, math.ceil(migration_bytes / max_migration_bytes))
    return r


def variant(problem: Problem, j: int, cand: Any) -> Variant:
    """The cluster of candidate ``j`` (a size or ``{"add", "remove"}``), without a per-round budget.

    Raises InvalidInput (field ``candidates[j]…``) for a size < 1, a node that exists already, an unknown node, or a
    cluster whose every node is removing. The caller caps sizes before (a size allocates its nodes).
    """
    where = f"candidates[{j}]"
    ids = list(problem.node_ids)
    cap = problem.capacity.copy()
    rem = problem.removing.copy()
    added: list[str] = []
    removed: list[str] = []
    active = np.flatnonzero(~rem)
    if isinstance(cand, bool) or not isinstance(cand, (int, dict)):
        raise InvalidInput(where, "must be a cluster size or {add, remove}")
    if isinstance(cand, int):
        if cand < 1:
            raise InvalidInput(where, f"cluster size must be ≥ 1, got {cand}")
        if cand >= active.size:
            mean_cap = float(cap[active].mean())
            taken = set(ids)
            i = 0
            while len(added) < cand - active.size:
                nid = f"new-{i}"
                i += 1
                if nid not in taken:
                    added.append(nid)
            ids += added
            cap = np.concatenate([cap, np.full(len(added), mean_cap)])
            rem = np.concatenate([rem, np.zeros(len(added), dtype=bool)])
        else:
            loads = metrics.node_loads(problem, problem.current)
            order = active[np.argsort(loads[active] / cap[active], kind="stable")]
            for i in order[: active.size - cand]:
                rem[i] = True
                removed.append(ids[int(i)])
    else:
        taken = set(ids)
        for i, nd in enumerate(cand.get("add") or []):
            nd = {"id": nd} if isinstance(nd, str) else nd
            if nd["id"] in taken:
                raise InvalidInput(f"{where}.add[{i}].id", f"node {nd['id']!r} already exists")
            taken.add(nd["id"])
            ids.append(nd["id"])
            cap = np.append(cap, float(nd.get("capacity", 1.0)))
            rem = np.append(rem, bool(nd.get("removing", False)))
            added.append(nd["id"])
        index = {nid: i for i, nid in enumerate(ids)}
        for i, nid in enumerate(cand.get("remove") or []):
            if nid not in index:
                raise InvalidInput(f"{where}.remove[{i}]", f"unknown node {nid!r}")
            rem[index[nid]] = True
            removed.append(nid)
    if rem.all():
        raise InvalidInput(where, "every node would be removing; at least one must stay")
    p = dataclasses.replace(problem, node_ids=ids, capacity=cap, removing=rem, max_migrations=None,
                            max_migration_bytes=None)
    if p.resource_limit is not None and len(ids) > problem.n_nodes:
        extra = np.full((len(ids) - problem.n_nodes, p.resource_limit.shape[1]), math.inf)
        p = dataclasses.replace(p, resource_limit=np.vstack([p.resource_limit, extra]))
    return Variant(p, added, removed)


@dataclass(frozen=True)
class Shape:
    """What the report needs of a candidate cluster once its plan is known: its active nodes and capacity, and the
    nodes it adds and marks removing."""

    nodes: int
    capacity: float
    added: list[str]
    removed: list[str]

    @classmethod
    def of(cls, v: Variant) -> Shape:
        active = ~v.problem.removing
        return cls(int(np.count_nonzero(active)), float(v.problem.capacity[active].sum()), v.added, v.removed)


def report(problem: Problem, candidates: Sequence[Any], variants: Sequence[Variant],
           plans: Sequence[Mapping[str, Any]], algorithm: str, target: float | None,
           max_utilisation: float | None) -> dict[str, Any]:
    """The what-if document: per candidate the state after its plan, its rounds under ``problem``'s budget, and
    whether it meets the goal — load distance ≤ ``target`` (default: the current one), no load left on removing
    nodes, no node's utilisation above ``max_utilisation`` (default: the hottest node's today; the load distance
    alone would always favour a single node). ``recommendation`` is the candidate with the fewest active nodes
    (then least capacity, then lowest load distance) that meets the goal, or None."""
    return report_of(metrics.state_metrics(problem, problem.current), (problem.max_migrations,
                     problem.max_migration_bytes), candidates, [Shape.of(v) for v in variants], plans, algorithm,
                     target, max_utilisation)


def report_of(current: Mapping[str, Any], budget: tuple[int | None, float | None], candidates: Sequence[Any],
              shapes: Sequence[Shape], plans: Sequence[Mapping[str, Any]], algorithm: str, target: float | None,
              max_utilisation: float | None) -> dict[str, Any]:
    """:func:`report` from the current state's metrics, the per-round ``budget`` (migrations, bytes) and each
    candidate's :class:`Shape` and plan (its ``metrics`` and ``solver``): no problem needed."""
    goal = current["load_distance"] if target is None else float(target)
    limit = current["max_utilisation"] if max_utilisation is None else float(max_utilisation)
    out: list[dict[str, Any]] = []
    for shape, cand, doc in zip(shapes, candidates, plans, strict=True):
        after = doc["metrics"]["after"]
        mig, byt = doc["metrics"]["migrations"], doc["metrics"]["migration_bytes"]
        out.append({
            "candidate": cand, "nodes": shape.nodes, "added": shape.added, "removed": shape.removed,
            "load_distance": after["load_distance"], "load_on_removing": after["load_on_removing"],
            "max_utilisation": after["max_utilisation"], "migrations": mig, "migration_bytes": byt,
            "rounds": rounds_needed(mig, byt, *budget),
            "meets_target": bool(after["load_distance"] <= goal + 1e-9 and after["load_on_removing"] <= 1e-9
                                 and after["max_utilisation"] <= limit * (1 + 1e-9) + 1e-12),
            "solver": doc["solver"],
        })
    rec = recommend(out, [shape.capacity for shape in shapes])
    return {"current": dict(current), "target_load_distance": goal, "max_utilisation": limit,
            "algorithm": algorithm, "candidates": out, "recommendation": rec,
            "recommended": None if rec is None else out[rec]}


def recommend(candidates: Sequence[Mapping[str, Any]], capacities: Sequence[float]) -> int | None:
    """Index of the smallest candidate meeting the goal: fewest active nodes, then least active capacity, then
    lowest load distance (ties: the first); None when none meets it."""
    meeting = [j for j, c in enumerate(candidates) if c["meets_target"]]
    if not meeting:
        return None
    return min(meeting, key=lambda j: (candidates[j]["nodes"], capacities[j], candidates[j]["load_distance"]))
