"""Candidate plans of the ALBIC MILP planner (§4.3.1): feasibility, the exact comparison key and the pool.

Every plan the phases of :func:`solvers.albic.milp.solve_grouped` produce (starts, local search, restarts, MILP
solutions) is *offered* to a :class:`Pool`; it enters only if it keeps the real budget, the real resource limits
(``max(limit, usage now)``, see :mod:`solvers.albic.milp.units`) and never moves a unit onto a removing node
(Lemma 1). The pool keeps the best by :func:`exact_key`, which evaluates the plan with the exact metric of
:mod:`solvers.metrics` (communication costs included), so the planner never returns anything worse than a plan it
has seen — in particular the current assignment and Flux's plan.
"""

from __future__ import annotations

import numpy as np

from solvers import metrics
from solvers.albic.milp.units import Units, split_units
from solvers.errors import InvalidInput
from solvers.model import Problem

Key = tuple[float, float, float, float]


def exact_key(problem: Problem, assignment: np.ndarray, floor: float = 0.0) -> Key:
    """(max(d, drain floor), load on removing nodes, d, utilisation range) with the exact metric."""
    loads = metrics.node_loads(problem, assignment)
    d = metrics.load_distance_of_loads(problem, loads)
    u = loads[problem.active] / problem.capacity[problem.active]
    on_b = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
    return round(max(d, floor), 12), round(on_b, 9), round(d, 12), round(float(u.max() - u.min()), 12)


def placement_ok(units: Units, place: np.ndarray) -> bool:
    """Every unit on an allowed node, nothing moved onto a removing node, the budget and resource limits kept."""
    p = units.problem
    if place.min() < 0:
        return False
    onto_removing = p.removing[place] & (units.home != place)
    if onto_removing.any():
        return False
    for u, al in units.allowed.items():
        if place[u] not in al:
            return False
    c, b = units.placement_cost(place)
    if p.max_migrations is not None and c > p.max_migrations:
        return False
    if p.max_migration_bytes is not None and b > p.max_migration_bytes * (1 + 1e-12):
        return False
    if units.res_load is not None and units.res_limit is not None:
        usage = np.zeros_like(units.res_limit)
        np.add.at(usage, place, units.res_load)
        if np.any(usage > units.res_limit + 1e-9):
            return False
    return True


class Pool:
    """The feasible candidate plans seen so far (unit placements), best by :func:`exact_key`."""

    def __init__(self, units: Units, floor: float):
        self.units = units
        self.floor = floor
        self.best: tuple[Key, np.ndarray, str] | None = None
        self.offers = 0

    def offer(self, place: np.ndarray, origin: str) -> bool:
        """Add ``place`` if it is feasible; True if it is the new best."""
        self.offers += 1
        if not placement_ok(self.units, place):
            return False
        key = exact_key(self.units.problem, self.units.assignment(place), self.floor)
        if self.best is None or key < self.best[0]:
            self.best = (key, place.copy(), origin)
            return True
        return False


def hint_place(units: Units, hint: np.ndarray) -> np.ndarray:
    """Unit placement from a key-group assignment: each unit on the node most of its members have in the hint."""
    p = units.problem
    hint = np.asarray(hint, dtype=np.int64)
    if hint.shape != (p.n_key_groups,):
        raise InvalidInput("hint", f"must have one node index per key group ({p.n_key_groups}), got shape {hint.shape}")
    if hint.size and (hint.min() < 0 or hint.max() >= p.n_nodes):
        raise InvalidInput("hint", "names a node index out of range")
    if np.array_equal(units.of, np.arange(p.n_key_groups)):
        return hint.copy()
    place = np.full(units.n_units, -1, dtype=np.int64)
    counts: dict[tuple[int, int], int] = {}
    for k in range(p.n_key_groups):
        key = (int(units.of[k]), int(hint[k]))
        counts[key] = counts.get(key, 0) + 1
    best: dict[int, tuple[int, int]] = {}
    for (u, j), c in counts.items():
        if u not in best or c > best[u][0]:
            best[u] = (c, j)
    for u, (_, j) in best.items():
        place[u] = j
    return place


def cheapest_feasible_units(problem: Problem, units: Units, unit_of: np.ndarray | None,
                            allowed: dict[int, np.ndarray] | None) -> tuple[Units, np.ndarray]:
    """Place every unit on its cheapest allowed node; if that exceeds the budget, break the most expensive
    units apart (their key groups then stay where they are) — all at once, most expensive first."""
    p = problem
    for _ in range(3):
        if units.mixed or units.allowed:
            place = np.array([units.cheapest_node(u) for u in range(units.n_units)], dtype=np.int64)
        else:
            place = units.home.copy()
        bad = np.flatnonzero(place < 0).tolist()
        safe = np.where(place < 0, 0, place)
        cc = units.cost_count_to(np.arange(units.n_units), safe)
        cb = units.cost_bytes_to(np.arange(units.n_units), safe)
        cc[bad] = 0
        cb[bad] = 0.0
        order = np.argsort(-cc, kind="stable")
        split: list[int] = list(bad)
        tot_c, tot_b = float(cc.sum()), float(cb.sum())
        for u in order.tolist():
            over = (p.max_migrations is not None and tot_c > p.max_migrations) or (
                p.max_migration_bytes is not None and tot_b > p.max_migration_bytes * (1 + 1e-12))
            if not over or cc[u] == 0 and cb[u] == 0:
                break
            split.append(u)
            tot_c -= cc[u]
            tot_b -= cb[u]
        if not split:
            return units, place
        units = split_units(units, split, unit_of, allowed)
    place = np.array([units.cheapest_node(u) for u in range(units.n_units)], dtype=np.int64)
    return units, place
