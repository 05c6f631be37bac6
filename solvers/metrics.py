"""Metric definitions of docs/design.md — the single implementation every other part of Rebalancer uses.

- node load_i = Σ load of its key groups + communication_cost × (rate of edges with exactly one end on i)
- utilisation u_i = load_i / capacity_i; A = nodes not removing; target t = Σ_i load_i / Σ_{i∈A} capacity_i
- load distance = max_{i∈A} |u_i − t| (ALBIC paper §4.3.1, "load distance", generalised to capacities)
- load_on_removing = Σ load on removing nodes; collocation factor = rate on same-node edges / total rate
  (ALBIC paper §5.3)

All functions are vectorised: O(m + E) for m key groups and E edges. :class:`LoadTracker` keeps node loads up to
date under single moves in O(degree) for planners that move key groups one at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from solvers.model import Problem, comm_matrix

if TYPE_CHECKING:
    import scipy.sparse as sp


def node_loads(problem: Problem, assignment: np.ndarray) -> np.ndarray:
    """(n,) load of each node under ``assignment``, including the communication cost of cut edges."""
    a = np.asarray(assignment, dtype=np.int64)
    loads = np.bincount(a, weights=problem.load, minlength=problem.n_nodes).astype(np.float64)
    if problem.communicates:
        src, dst, rate = problem.edges()
        cut = a[src] != a[dst]
        if cut.any():
            extra = problem.communication_cost * rate[cut]
            loads += np.bincount(a[src[cut]], weights=extra, minlength=problem.n_nodes)
            loads += np.bincount(a[dst[cut]], weights=extra, minlength=problem.n_nodes)
    return loads


def utilisation(problem: Problem, loads: np.ndarray) -> np.ndarray:
    """(n,) u_i = load_i / capacity_i."""
    u: np.ndarray = loads / problem.capacity
    return u


def target(problem: Problem, loads: np.ndarray) -> float:
    """t = Σ_i load_i / Σ_{i∈A} capacity_i (removing nodes' load counts; their capacity does not)."""
    return float(loads.sum() / problem.capacity[problem.active].sum())


def load_distance_of_loads(problem: Problem, loads: np.ndarray) -> float:
    """max over active nodes of |u_i − t| for given node loads."""
    u = loads[problem.active] / problem.capacity[problem.active]
    t = target(problem, loads)
    return float(np.max(np.abs(u - t))) if u.size else 0.0


def load_distance(problem: Problem, assignment: np.ndarray) -> float:
    """The ALBIC load distance of ``assignment`` (see module docstring)."""
    return load_distance_of_loads(problem, node_loads(problem, assignment))


def load_on_removing(problem: Problem, assignment: np.ndarray) -> float:
    """Σ load on nodes marked removing (0 when there are none)."""
    if not problem.removing.any():
        return 0.0
    return float(node_loads(problem, assignment)[problem.removing].sum())


def collocation_factor(problem: Problem, assignment: np.ndarray) -> float | None:
    """Share of the communication rate between key groups on the same node; ``None`` with no communication."""
    src, dst, rate = problem.edges()
    total = float(rate.sum())
    if total <= 0:
        return None
    a = np.asarray(assignment, dtype=np.int64)
    return float(rate[a[src] == a[dst]].sum() / total)


def migrations(problem: Problem, assignment: np.ndarray) -> int:
    """Number of key groups whose node differs from the current assignment."""
    return int(np.count_nonzero(np.asarray(assignment) != problem.current))


def migration_bytes(problem: Problem, assignment: np.ndarray) -> float:
    """State bytes of the key groups that move."""
    moved = np.asarray(assignment) != problem.current
    return float(problem.state_bytes[moved].sum())


def within_budget(problem: Problem, assignment: np.ndarray) -> bool:
    """Whether ``assignment`` respects the problem's migration budget (count and bytes)."""
    if problem.max_migrations is not None and migrations(problem, assignment) > problem.max_migrations:
        return False
    mb = problem.max_migration_bytes
    if mb is not None and migration_bytes(problem, assignment) > mb * (1 + 1e-12):
        return False
    return True


def state_metrics(problem: Problem, assignment: np.ndarray) -> dict[str, Any]:
    """The per-assignment metrics of the plan document: load distance, load on removing, collocation factor."""
    loads = node_loads(problem, assignment)
    cf = collocation_factor(problem, assignment)
    return {
        "load_distance": _r(load_distance_of_loads(problem, loads)),
        "load_on_removing": _r(float(loads[problem.removing].sum()) if problem.removing.any() else 0.0),
        "collocation_factor": None if cf is None else _r(cf),
        "total_load": _r(float(loads.sum())),
        "max_utilisation": _r(float((loads[problem.active] / problem.capacity[problem.active]).max())),
    }


def plan_metrics(problem: Problem, assignment: np.ndarray) -> dict[str, Any]:
    """The ``metrics`` block of the plan document: before, after, migrations and migration bytes."""
    mb = migration_bytes(problem, assignment)
    return {
        "before": state_metrics(problem, problem.current),
        "after": state_metrics(problem, assignment),
        "migrations": migrations(problem, assignment),
        "migration_bytes": int(mb) if float(mb).is_integer() else mb,
    }


def _r(x: float) -> float:
    return float(f"{x:.6g}")


class LoadTracker:
    """Node loads kept current under single moves, for planners that move key groups one by one.

    ``move(k, j)`` updates the loads in O(deg(k)); ``load_distance()`` is O(n). The communication term uses a
    symmetric adjacency (rate of both directions), so an edge's cost is charged to both endpoints when cut, exactly
    as :func:`node_loads` does.
    """

    def __init__(self, problem: Problem, assignment: np.ndarray | None = None):
        self.problem = problem
        self.assignment = np.array(problem.current if assignment is None else assignment, dtype=np.int64)
        self.loads = node_loads(problem, self.assignment)
        self.moves = int(np.count_nonzero(self.assignment != problem.current))
        self.bytes = float(problem.state_bytes[self.assignment != problem.current].sum())
        self._adj: sp.csr_matrix | None = None
        if problem.communicates:
            src, dst, rate = problem.edges()
            self._adj = comm_matrix(np.concatenate([src, dst]), np.concatenate([dst, src]),
                                    np.concatenate([rate, rate]), problem.n_key_groups)
        self._active_cap = problem.capacity[problem.active]

    def delta(self, k: int, j: int) -> np.ndarray:
        """(n,) change of node loads if key group ``k`` moved to node ``j`` (not applied)."""
        p = self.problem
        i = int(self.assignment[k])
        d = np.zeros(p.n_nodes)
        if i == j:
            return d
        d[i] -= p.load[k]
        d[j] += p.load[k]
        if self._adj is not None:
            lo, hi = self._adj.indptr[k], self._adj.indptr[k + 1]
            nb = self._adj.indices[lo:hi]
            r = self._adj.data[lo:hi] * p.communication_cost
            keep = nb != k
            nb, r = nb[keep], r[keep]
            where = self.assignment[nb]
            # before: cut iff where != i ; after: cut iff where != j
            before_cut = where != i
            after_cut = where != j
            # k's own node: lose cost of cut edges at i, gain at j
            d[i] -= r[before_cut].sum()
            d[j] += r[after_cut].sum()
            # neighbours' nodes
            np.add.at(d, where[before_cut & ~after_cut], -r[before_cut & ~after_cut])
            np.add.at(d, where[~before_cut & after_cut], r[~before_cut & after_cut])
        return d

    def move(self, k: int, j: int) -> None:
        """Move key group ``k`` to node ``j`` and update loads and budget usage."""
        if int(self.assignment[k]) == j:
            return
        self.loads += self.delta(k, j)
        self.charge(k, j)

    def charge(self, k: int, j: int) -> None:
        """Move key group ``k`` to node ``j`` in the assignment and the budget usage only (a caller that keeps the
        loads itself): leaving its current node costs one migration and its bytes, coming back home refunds them."""
        p = self.problem
        i, home = int(self.assignment[k]), int(p.current[k])
        if i == home and j != home:
            self.moves += 1
            self.bytes += float(p.state_bytes[k])
        elif j == home and i != home:
            self.moves -= 1
            self.bytes -= float(p.state_bytes[k])
        self.assignment[k] = j

    def charge_many(self, k: np.ndarray, j: np.ndarray) -> None:
        """:meth:`charge` for distinct key groups ``k`` at once."""
        home = self.problem.current[k]
        was, now = self.assignment[k] == home, j == home
        leave, back = was & ~now, now & ~was
        sb = self.problem.state_bytes[k]
        self.moves += int(np.count_nonzero(leave)) - int(np.count_nonzero(back))
        self.bytes += float(sb[leave].sum()) - float(sb[back].sum())
        self.assignment[k] = j

    def utilisation(self) -> np.ndarray:
        u: np.ndarray = self.loads / self.problem.capacity
        return u

    def target(self) -> float:
        return float(self.loads.sum() / self._active_cap.sum())

    def load_distance(self) -> float:
        return load_distance_of_loads(self.problem, self.loads)

    def can_afford(self, k: int, j: int) -> bool:
        """Whether moving ``k`` to ``j`` keeps the budget (moves back home are always affordable)."""
        p = self.problem
        i = int(self.assignment[k])
        if i != p.current[k] or j == p.current[k]:
            return True  # re-moving an already moved key group, or moving it home, costs nothing more
        if p.max_migrations is not None and self.moves + 1 > p.max_migrations:
            return False
        if p.max_migration_bytes is not None and self.bytes + p.state_bytes[k] > p.max_migration_bytes * (1 + 1e-12):
            return False
        return True
