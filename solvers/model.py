"""The numeric problem and plan of docs/design.md ("The problem and plan contract").

A :class:`Problem` is what every planner takes: numpy arrays, so that 100,000 key groups stay cheap. A planner
returns a :class:`Plan`: the new node index of every key group plus the solver's status and bound.
:meth:`Problem.check` is the one numeric validation (ranges, finiteness, sums that must fit a float), shared by the
document reader and by :meth:`Problem.from_arrays`.

Documents (JSON) are not this module's business: :mod:`solvers.documents` reads and writes the problem, plan and
evaluation documents. ``Problem.from_dict``, ``Problem.to_dict``, ``plan_to_dict`` and ``plan_from_dict`` below are
thin delegates kept for callers not yet moved to :mod:`solvers.documents`.

Indices, not ids, are used inside: ``node_ids[i]`` is node ``i``, ``kg_ids[k]`` is key group ``k``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from solvers.errors import InvalidInput

if TYPE_CHECKING:  # scipy.sparse is imported where a problem has communication edges (0.2 s in a fresh process)
    import scipy.sparse as sp

#: plan statuses of docs/design.md
STATUSES = ("optimal", "feasible", "heuristic")

#: Every sum the metrics and planners form (total load, load / capacity, state bytes moved) must stay below this.
#: The square root of a 64-bit float's range (≈ 1.3e154), with margin: the planners' searches compare sums of
#: squared deviations (capacity × (u − t)², at most total load × utilisation), which must not overflow into inf or NaN.
MAX_MAGNITUDE = 1e150


@dataclass(eq=False)
class Problem:
    """A rebalancing instance.

    Attributes:
        node_ids: node ids, index ``i`` is node ``i``.
        capacity: (n,) float > 0, relative capacity of each node.
        removing: (n,) bool, nodes marked for scale-in (set B of the ALBIC paper, §4.3.1).
        kg_ids: key group ids, index ``k`` is key group ``k``.
        operator: (m,) operator name of each key group ("" when not given).
        load: (m,) float ≥ 0, load of each key group in the bottleneck resource.
        state_bytes: (m,) float ≥ 0, migration cost of each key group.
        current: (m,) int, index of the node each key group sits on now.
        comm: (m, m) scipy CSR matrix, directed rates ``comm[src, dst]`` (duplicates summed, no self loops kept
            in the load model since an edge inside one key group never crosses nodes); ``None`` when there are no
            edges (see :func:`comm_matrix`). Read it through :meth:`edges` and :attr:`communicates`.
        communication_cost: load added to each endpoint's node per unit of rate of a cut edge.
        max_migrations / max_migration_bytes: per-round budget, ``None`` = unlimited.
        resource_names: names of extra resources (multi-dimensional load, ALBIC §4.3.1); may be empty.
        resource_load: (m, R) per key group load of each extra resource.
        resource_limit: (n, R) per node limit of each extra resource (``inf`` = none).
    """

    node_ids: list[str]
    capacity: np.ndarray
    removing: np.ndarray
    kg_ids: list[str]
    operator: list[str]
    load: np.ndarray
    state_bytes: np.ndarray
    current: np.ndarray
    comm: sp.csr_matrix | None
    communication_cost: float = 0.0
    max_migrations: int | None = None
    max_migration_bytes: float | None = None
    resource_names: list[str] = field(default_factory=list)
    resource_load: np.ndarray | None = None
    resource_limit: np.ndarray | None = None

    # ------------------------------------------------------------------ sizes and views
    @property
    def n_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def n_key_groups(self) -> int:
        return len(self.kg_ids)

    @property
    def active(self) -> np.ndarray:
        """(n,) bool: nodes not marked for removal (set A)."""
        return ~self.removing

    @property
    def comm_nnz(self) -> int:
        """The entries of ``comm`` (edges, self loops included); 0 without edges."""
        return 0 if self.comm is None else int(self.comm.nnz)

    @property
    def communicates(self) -> bool:
        """Whether cut edges add load: a communication cost > 0 and at least one edge (the planners' test)."""
        return self.communication_cost > 0 and self.comm_nnz > 0

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The communication edges as COO arrays ``(src, dst, rate)``, self loops dropped."""
        src, dst, rate = self._coo()
        keep = src != dst
        return src[keep], dst[keep], rate[keep]

    def _coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every entry of ``comm`` (self loops included) as COO arrays; empty ones when there is none."""
        if self.comm is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        coo = self.comm.tocoo()
        return coo.row, coo.col, coo.data

    def with_budget(self, max_migrations: int | None, max_migration_bytes: float | None) -> Problem:
        """A copy of this problem with another budget (arrays are shared, not copied)."""
        return dataclasses.replace(self, max_migrations=max_migrations, max_migration_bytes=max_migration_bytes)

    def with_current(self, current: np.ndarray) -> Problem:
        """A copy of this problem whose current assignment is ``current`` (used for multi-round simulations)."""
        return dataclasses.replace(self, current=np.asarray(current, dtype=np.int64))

    # ------------------------------------------------------------------ validation
    def check(self) -> Problem:
        """Check the numbers of this problem and return it; vectorised, O(m + n + E).

        The field paths are those of the problem document (``key_groups[3].load``), each reason names the
        offending id. Checked: capacity finite and > 0; load, state bytes, rates, communication cost, budget bytes
        and extra resources finite and ≥ 0; a whole, non-negative migration budget; at least one node not
        removing; and sums that stay below :data:`MAX_MAGNITUDE` (total load including the communication cost,
        total load / smallest capacity, total state bytes, each resource's total), so that no metric or solver
        overflows into inf or NaN.

        Raises:
            InvalidInput: the first violation.
        """
        check_range(self.capacity, "nodes", "capacity", self.node_ids, "node", positive=True)
        if self.removing.all():
            raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")
        check_range(self.load, "key_groups", "load", self.kg_ids, "key group")
        check_range(self.state_bytes, "key_groups", "state_bytes", self.kg_ids, "key group")
        src, dst, rate = self._coo()
        if rate.size and not (np.isfinite(rate).all() and rate.min() >= 0):
            e = int(np.flatnonzero(~(np.isfinite(rate) & (rate >= 0)))[0])
            raise InvalidInput("communication", f"rate must be finite and ≥ 0, got {rate[e]} "
                               f"({self.kg_ids[int(src[e])]!r} -> {self.kg_ids[int(dst[e])]!r})")
        _check_scalar(self.communication_cost, "communication_cost")
        if self.max_migrations is not None and (isinstance(self.max_migrations, bool) or self.max_migrations < 0
                                                or int(self.max_migrations) != self.max_migrations):
            raise InvalidInput("budget.max_migrations", f"must be a whole number ≥ 0, got {self.max_migrations}")
        if self.max_migration_bytes is not None:
            _check_scalar(self.max_migration_bytes, "budget.max_migration_bytes")
        for j, name in enumerate(self.resource_names):
            assert self.resource_load is not None and self.resource_limit is not None
            check_range(self.resource_load[:, j], "key_groups", f"resources.{name}", self.kg_ids, "key group")
            lim = self.resource_limit[:, j]
            bad = np.isnan(lim) | (lim < 0)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InvalidInput(f"nodes[{i}].limits.{name}",
                                   f"must be ≥ 0, got {lim[i]} (node {self.node_ids[i]!r})")
            _check_sum(self.resource_load[:, j], f"resources.{name}", f"the {name!r} loads", self.kg_ids)
        # sums: every metric divides Σ node load by a capacity; the communication term counts a rate twice
        total_load = _check_sum(self.load, "load", "the loads", self.kg_ids)
        total_rate = _check_sum(rate, "", "the rates")
        with np.errstate(over="ignore", invalid="ignore"):
            total = total_load + 2.0 * self.communication_cost * total_rate
        if not total <= MAX_MAGNITUDE:
            raise InvalidInput("communication_cost", f"the loads plus communication_cost × rates sum to {total:.4g}, "
                               f"more than {MAX_MAGNITUDE:g}: scale the loads or rates down")
        cmin = float(self.capacity.min())
        with np.errstate(over="ignore"):
            util = total / cmin
        if not util <= MAX_MAGNITUDE:
            i = int(np.argmin(self.capacity))
            raise InvalidInput(f"nodes[{i}].capacity", f"total load / capacity = {util:.4g} exceeds {MAX_MAGNITUDE:g} "
                               f"(node {self.node_ids[i]!r}): scale the loads down or the capacities up")
        _check_sum(self.state_bytes, "state_bytes", "the state bytes", self.kg_ids)
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        load: Sequence[float] | np.ndarray,
        current: Sequence[int] | np.ndarray,
        capacity: Sequence[float] | np.ndarray,
        *,
        removing: Sequence[bool] | np.ndarray | None = None,
        state_bytes: Sequence[float] | np.ndarray | None = None,
        comm: sp.spmatrix | None = None,
        communication_cost: float = 0.0,
        max_migrations: int | None = None,
        max_migration_bytes: float | None = None,
        operator: Sequence[str] | None = None,
        node_ids: Sequence[str] | None = None,
        kg_ids: Sequence[str] | None = None,
    ) -> Problem:
        """Build a problem directly from arrays (for generators and tests), checked by :meth:`check`."""
        load_a = np.array(load, dtype=np.float64).reshape(-1)
        cap = np.array(capacity, dtype=np.float64).reshape(-1)
        m, n = load_a.shape[0], cap.shape[0]
        cur = np.array(current, dtype=np.int64).reshape(-1)
        if cur.shape != (m,) or (m and (cur.min() < 0 or cur.max() >= n)):
            raise InvalidInput("key_groups", f"current must be {m} node indices in [0, {n})")
        nids = list(node_ids) if node_ids is not None else [f"w{i}" for i in range(n)]
        kids = list(kg_ids) if kg_ids is not None else [f"kg{k}" for k in range(m)]
        for ids, what, size in ((nids, "nodes", n), (kids, "key_groups", m)):
            if len(ids) != size or len(set(ids)) != size:
                raise InvalidInput(what, f"{size} distinct ids expected")
        matrix = None
        if comm is not None:
            import scipy.sparse as sp

            matrix = sp.csr_matrix(comm, dtype=np.float64)
            if matrix.shape != (m, m):
                raise InvalidInput("communication", f"matrix of shape {matrix.shape}, expected ({m}, {m})")
            matrix.sum_duplicates()
        rem = np.zeros(n, dtype=bool) if removing is None else np.array(removing, dtype=bool).reshape(-1)
        ops = list(operator) if operator is not None else [""] * m
        sb = np.zeros(m) if state_bytes is None else np.array(state_bytes, dtype=np.float64).reshape(-1)
        for what, got, size in (("removing", len(rem), n), ("operator", len(ops), m), ("state_bytes", len(sb), m)):
            if got != size:
                raise InvalidInput(what, f"{size} values expected, got {got}")
        problem = cls(
            node_ids=nids, capacity=cap, removing=rem, kg_ids=kids, operator=ops, load=load_a, state_bytes=sb,
            current=cur, comm=matrix, communication_cost=float(communication_cost),
            max_migrations=None if max_migrations is None else int(max_migrations),
            max_migration_bytes=None if max_migration_bytes is None else float(max_migration_bytes),
        )
        return problem.check()

    @classmethod
    def from_dict(cls, doc: Any) -> Problem:
        """Delegate of :func:`solvers.documents.problem_from_dict` (kept for callers not yet moved)."""
        from solvers import documents

        return documents.problem_from_dict(doc)

    def to_dict(self) -> dict[str, Any]:
        """Delegate of :func:`solvers.documents.problem_to_dict` (kept for callers not yet moved)."""
        from solvers import documents

        return documents.problem_to_dict(self)


@dataclass(eq=False)
class Plan:
    """The result of a planner: a new node index for every key group, and how it was obtained.

    Attributes:
        algorithm: registry name of the planner.
        assignment: (m,) int, new node index of each key group.
        status: ``optimal`` (proven), ``feasible`` (stopped by the time limit) or ``heuristic`` (no proof).
        lower_bound: proven lower bound on the after-load-distance under the same budget, or ``None``.
        seconds: wall time of the solve.
        details: planner-specific extra information (JSON-serialisable), e.g. ALBIC's collocated sets.
    """

    algorithm: str
    assignment: np.ndarray
    status: str = "heuristic"
    lower_bound: float | None = None
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.assignment = np.asarray(self.assignment, dtype=np.int64)
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def plan_to_dict(problem: Problem, plan: Plan) -> dict[str, Any]:
    """Delegate of :func:`solvers.documents.plan_to_dict` (kept for callers not yet moved)."""
    from solvers import documents

    return documents.plan_to_dict(problem, plan)


def plan_from_dict(problem: Problem, doc: Any) -> Plan:
    """Delegate of :func:`solvers.documents.plan_from_dict` (kept for callers not yet moved)."""
    from solvers import documents

    return documents.plan_from_dict(problem, doc)


# ---------------------------------------------------------------------- helpers
def comm_matrix(src: np.ndarray, dst: np.ndarray, rate: np.ndarray, m: int) -> sp.csr_matrix | None:
    """The ``comm`` of a problem of ``m`` key groups with the edges ``src[e] -> dst[e]`` at ``rate[e]`` (duplicates
    summed); ``None`` without edges: scipy.sparse is imported only for a problem that has some."""
    if not len(rate):
        return None
    import scipy.sparse as sp

    comm = sp.csr_matrix((rate, (src, dst)), shape=(m, m))
    comm.sum_duplicates()
    return comm


def int_if_whole(x: float) -> int | float:
    """``3.0`` -> ``3`` (bytes read as integers in JSON), other values unchanged."""
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


_int_if_whole = int_if_whole  # the name the controller imports


def check_range(values: np.ndarray, where: str, name: str, ids: list[str], what: str, positive: bool = False) -> None:
    """Every value finite and ≥ 0 (> 0 with ``positive``), else InvalidInput naming the first offender."""
    if not values.size:
        return
    ok = np.isfinite(values) & ((values > 0) if positive else (values >= 0))
    if ok.all():
        return
    k = int(np.flatnonzero(~ok)[0])
    v = float(values[k])
    reason = f"must be finite, got {v}" if not math.isfinite(v) else f"must be {'>' if positive else '≥'} 0, got {v}"
    raise InvalidInput(f"{where}[{k}].{name}", f"{reason} ({what} {ids[k]!r})")


def _check_scalar(value: float, where: str) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise InvalidInput(where, f"must be finite and ≥ 0, got {value}")


def _check_sum(values: np.ndarray, name: str, what: str, ids: list[str] | None = None) -> float:
    """Σ values (≥ 0, finite); InvalidInput naming the largest one when the sum exceeds :data:`MAX_MAGNITUDE`."""
    with np.errstate(over="ignore"):
        total = float(values.sum())
    if total <= MAX_MAGNITUDE:
        return total
    k = int(np.argmax(values))
    if ids is None:
        raise InvalidInput("communication", f"{what} sum to {total:.4g}, more than {MAX_MAGNITUDE:g}: scale them down")
    raise InvalidInput(f"key_groups[{k}].{name}", f"{what} sum to {total:.4g}, more than {MAX_MAGNITUDE:g} (the "
                       f"largest: {float(values[k]):.4g}, key group {ids[k]!r}): scale them down")
