"""The incumbent and the candidate plans of the ALBIC MILP planner (§4.3.1).

:class:`State` is a unit placement with its linear-model node loads and budget use (what the search and the
sub-models work on); :func:`drain_floor` is the distance below which draining removing nodes comes first.

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


def drain_floor(units: Units, place: np.ndarray) -> float:
    """The load distance below which draining removing nodes takes priority over balancing further.

    Lemma 2 of §4.3.1 (the optimum empties B) holds for divisible load; with key groups of finite size the last
    ones on B can only move by pushing a node up by their load, so a pure min-d model may keep them on B for
    ever. Draining a unit ``u`` raises some node by at least ``load_u / max capacity``; the planner therefore
    treats distances below ``max over units on B of load_u / max active capacity`` as balanced enough and then
    prefers less load on B (0 when nothing is on B: the paper's model unchanged).
    """
    p = units.problem
    if not units.drain or not p.removing.any():
        return 0.0
    on_b = p.removing[place]
    if not on_b.any():
        return 0.0
    return float(units.load[on_b].max() / p.capacity[p.active].max())


class State:
    """A unit placement with its linear-model node loads and budget usage."""

    def __init__(self, units: Units, place: np.ndarray, t: float):
        p = units.problem
        self.units = units
        self.place = np.asarray(place, dtype=np.int64).copy()
        self.n = p.n_nodes
        self.cap = p.capacity
        self.act = p.active
        self.t = t
        self.L = np.bincount(self.place, weights=units.load, minlength=self.n).astype(np.float64)
        self.used_c, self.used_b = units.placement_cost(self.place)
        self.max_c = float("inf") if p.max_migrations is None else float(p.max_migrations)
        self.max_b = float("inf") if p.max_migration_bytes is None else float(p.max_migration_bytes) * (1 + 1e-12)
        self.floor = drain_floor(units, self.place)
        self.res = None
        if units.res_load is not None:
            self.res = np.zeros((self.n, units.res_load.shape[1]))
            np.add.at(self.res, self.place, units.res_load)

    def copy(self) -> State:
        s = State.__new__(State)
        s.__dict__.update(self.__dict__)
        s.place = self.place.copy()
        s.L = self.L.copy()
        s.res = None if self.res is None else self.res.copy()
        return s

    # ------------------------------------------------------------------ objective
    def util(self) -> np.ndarray:
        out: np.ndarray = self.L / self.cap
        return out

    def devs(self) -> np.ndarray:
        return np.where(self.act, np.abs(self.util() - self.t), -1.0)

    def key(self) -> tuple[float, float, float, float]:
        """(max(d, drain floor), load on removing nodes, d, utilisation range) of the linear model (see
        :func:`drain_floor`)."""
        u = self.util()[self.act]
        d = float(np.max(np.abs(u - self.t)))
        on_b = float(self.L[~self.act].sum()) if not self.act.all() else 0.0
        return max(d, self.floor), round(on_b, 9), d, float(u.max() - u.min())

    def feasible_budget(self) -> bool:
        return self.used_c <= self.max_c + 1e-9 and self.used_b <= self.max_b

    # ------------------------------------------------------------------ moves
    def move(self, u: int, j: int) -> None:
        i = int(self.place[u])
        if i == j:
            return
        U = self.units
        w = U.load[u]
        self.L[i] -= w
        self.L[j] += w
        self.used_c += int(U.cost_count_to(np.array([u]), j)[0] - U.cost_count_to(np.array([u]), i)[0])
        self.used_b += float(U.cost_bytes_to(np.array([u]), j)[0] - U.cost_bytes_to(np.array([u]), i)[0])
        if self.res is not None:
            assert U.res_load is not None
            self.res[i] -= U.res_load[u]
            self.res[j] += U.res_load[u]
        self.place[u] = j

    def set_place(self, place: np.ndarray) -> None:
        fresh = State(self.units, place, self.t)
        self.__dict__.update(fresh.__dict__)


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


def keep_better(state: State, pool: Pool | None, place: np.ndarray | None, origin: str) -> State:
    """Offer a model's plan ``place`` to ``pool`` (when given) if it keeps the real budget, resource limits and
    Lemma 1; the better of ``state`` and that plan."""
    if place is None or not placement_ok(state.units, place):
        return state
    if pool is not None:
        pool.offer(place, origin)
    new = state.copy()
    new.set_place(place)
    return new if new.key() <= state.key() else state


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


def _over_budget(p: Problem, count: float, byts: float) -> bool:
    return (p.max_migrations is not None and count > p.max_migrations) or (
        p.max_migration_bytes is not None and byts > p.max_migration_bytes * (1 + 1e-12))


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
        split: list[int] = list(bad)
        tot_c, tot_b = float(cc.sum()), float(cb.sum())
        # the sort (O(m log m), 5 ms at 100,000 units) only when the placement breaks the budget
        for u in np.argsort(-cc, kind="stable").tolist() if _over_budget(p, tot_c, tot_b) else []:
            if not _over_budget(p, tot_c, tot_b) or cc[u] == 0 and cb[u] == 0:
                break
            split.append(u)
            tot_c -= cc[u]
            tot_b -= cb[u]
        if not split:
            return units, place
        units = split_units(units, split, unit_of, allowed)
    place = np.array([units.cheapest_node(u) for u in range(units.n_units)], dtype=np.int64)
    return units, place
