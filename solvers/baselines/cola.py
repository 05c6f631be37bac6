"""COLA (Khandekar et al., Middleware 2009) as the ALBIC paper describes and uses it (§2, §5.3–5.4).

"COLA uses a balanced graph partitioning algorithm to put operators into a number of balanced partitions to
achieve both load balancing and minimization of cross-node communication. It first puts all operators into one
partition, and then gradually splits the partitions until a solution with a sufficient load balance is obtained."
The ALBIC paper runs it from scratch every adaptation period ("a complete re-optimization"), which is why it moves
far more key groups than the budget allows.

Here, on key groups (``method="split"``, the default, follows that description):

1. Start with one partition holding every key group. Repeatedly split the heaviest partition in two with METIS
   (pymetis; vertex weight = load, edge weight = out(gi, gj) + out(gj, gi), so the cut traffic is minimal).
2. Once there are at least |A| partitions, pack them onto the active nodes after every split (LPT: heaviest
   partition first onto the node with the lowest utilisation after it) and stop at the first packing whose load
   distance (docs/design.md, communication cost of cut edges included) is at most ``max_ld`` percent of the target
   utilisation — "a sufficient load balance". The best packing seen is kept if none is.
3. Nodes of equal capacity are relabelled by a maximum-weight matching (Hungarian algorithm, scipy) on the key
   groups (ties: state bytes) already on them, so as much as possible stays in place; balance is unchanged.

``method="kway"`` is a variant: one METIS k-way partitioning into |A| parts (target weights ∝ capacity), the
imbalance tolerance tightened from loose to strict until the load distance is ≤ ``max_ld``, parts matched to
nodes the same way.

The migration budget is ignored (``details["ignores_budget"] = True``); ``details["migrations"]`` reports the
moves. The time limit holds: a METIS partitioning is started only when it is expected to end in time
(:func:`solvers.albic.collocation_sets.metis_fits`), a bisection that cannot is made by load alone. Complexity:
O(P) METIS bisections and packings for P final partitions (≈ |A| to a few |A|), matching O(|A|³).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment

from solvers import metrics
from solvers.albic.collocation_sets import metis_fits
from solvers.graph_partitioning import metis_parts, symmetric_traffic
from solvers.model import Plan, Problem
from solvers.registry import Param, register

#: METIS imbalance tolerances tried, loosest first (1/1000: 300 = parts may be 30% above their target weight)
UFACTORS = (300, 200, 100, 50, 30, 10, 1)


def _columns(problem: Problem, nodes: np.ndarray) -> np.ndarray:
    """(n,) the position of each node in ``nodes``, -1 for the others."""
    col = np.full(problem.n_nodes, -1, dtype=np.int64)
    col[nodes] = np.arange(len(nodes))
    return col


def map_parts_to_nodes(problem: Problem, part: np.ndarray, nodes: np.ndarray, same_capacity_only: bool = False
                       ) -> np.ndarray:
    """Map part p (0..len(nodes)-1) to a distinct node of ``nodes`` keeping as many key groups (then bytes) in
    place as possible; returns the (m,) assignment."""
    k = len(nodes)
    overlap = np.zeros((k, k))
    on = _columns(problem, nodes)[problem.current]
    ok = on >= 0
    total_bytes = float(problem.state_bytes.sum()) or 1.0
    np.add.at(overlap, (part[ok], on[ok]), 1.0 + problem.state_bytes[ok] / (total_bytes + 1.0))
    if same_capacity_only:  # part p was packed for node nodes[p]: only nodes of the same capacity may swap
        cap = problem.capacity[nodes]
        overlap[~np.isclose(cap[:, None], cap[None, :])] = -1e12
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    node_of_part = np.empty(k, dtype=np.int64)
    node_of_part[rows] = nodes[cols]
    return np.asarray(node_of_part[part], dtype=np.int64)


def _lpt(part_load: np.ndarray, nodes: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Longest-processing-time bin packing: heaviest part first onto the node with the lowest utilisation after
    placing it. Returns the node of each part."""
    order = np.argsort(-part_load, kind="stable")
    used = np.zeros(len(nodes))
    cap = capacity[nodes]
    node_of = np.empty(len(part_load), dtype=np.int64)
    for p in order:
        j = int(np.argmin((used + part_load[p]) / cap))
        used[j] += part_load[p]
        node_of[p] = j
    return node_of


def _ld_pct(problem: Problem, a: np.ndarray) -> float:
    loads = metrics.node_loads(problem, a)
    t = metrics.target(problem, loads)
    return 100.0 * metrics.load_distance_of_loads(problem, loads) / t if t > 0 else 0.0


def _relabel(problem: Problem, a: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Permute the nodes of equal capacity among themselves so that as many key groups as possible stay in place
    (the balance is unchanged)."""
    src = _columns(problem, nodes)[a]
    return map_parts_to_nodes(problem, src, nodes, same_capacity_only=True)


def _halve(problem: Problem, adj: Callable[[], Any], mem: np.ndarray, seed: int, deadline: float | None
           ) -> tuple[list[np.ndarray], bool]:
    """``mem`` split in two by METIS (minimum traffic cut, balanced load) when it is expected to end before the
    deadline (:func:`metis_fits`), else by load alone: sorted by load, alternately to either side (each side stays
    sorted, so splitting it again sorts in linear time). Returns the two sides and whether METIS split them."""
    nnz = 2 * problem.comm_nnz * mem.size // max(problem.n_key_groups, 1)  # the part's share of the edges
    if metis_fits(mem.size, nnz, deadline):
        half = metis_parts(adj()[mem][:, mem], 2, problem.load[mem], seed=seed)
        return [mem[half == 0], mem[half == 1]], True
    ranked = mem[np.argsort(-problem.load[mem], kind="stable")]
    return [ranked[0::2], ranked[1::2]], False


def cola_split(problem: Problem, *, max_ld: float = 10.0, seed: int = 0, deadline: float | None = None
               ) -> tuple[np.ndarray, dict[str, Any]]:
    """COLA as the ALBIC paper describes it: one partition holding every key group, the heaviest partition split
    in two by METIS (min traffic cut) again and again; after each split (once there are ≥ |A| partitions) the
    partitions are packed onto the active nodes (LPT) and the loop stops at the first packing whose load
    distance is ≤ ``max_ld`` percent of the target. Nodes of equal capacity are then relabelled to keep key groups
    in place.

    ``deadline``: once it has passed the best packing so far is returned; before the first packing, a split that
    METIS could not finish in time is made by load alone (:func:`_halve`), so the time limit holds on any graph
    (``details["load_splits"]`` counts those)."""
    nodes = np.flatnonzero(problem.active)
    m = problem.n_key_groups
    cache: list[Any] = []

    def adj() -> Any:
        if not cache:
            cache.append(symmetric_traffic(problem))
        return cache[0]

    parts: list[np.ndarray] = [np.arange(m, dtype=np.int64)]
    loads = [float(problem.load.sum())]
    best: tuple[float, np.ndarray, int] | None = None
    splits = by_load = 0
    while True:
        if len(parts) >= len(nodes):
            pl = np.array(loads)
            node_of = _lpt(pl, nodes, problem.capacity)
            a = np.empty(m, dtype=np.int64)
            for p, mem in enumerate(parts):
                a[mem] = nodes[node_of[p]]
            ld = _ld_pct(problem, a)
            if best is None or ld < best[0]:
                best = (ld, a, len(parts))
            if ld <= max_ld:
                best = (ld, a, len(parts))
                break
        if deadline is not None and time.perf_counter() > deadline and best is not None:
            break
        big = int(np.argmax([ld_ if mem.size > 1 else -1.0 for ld_, mem in zip(loads, parts, strict=False)]))
        if parts[big].size <= 1:
            if best is None:  # fewer key groups than nodes
                a = np.empty(m, dtype=np.int64)
                for p, mem in enumerate(parts):
                    a[mem] = nodes[p % len(nodes)]
                best = (_ld_pct(problem, a), a, len(parts))
            break
        mem = parts.pop(big)
        loads.pop(big)
        sides, metis = _halve(problem, adj, mem, seed + splits, deadline)
        by_load += not metis
        for sub in sides:
            if sub.size:
                parts.append(sub)
                loads.append(float(problem.load[sub].sum()))
        if len(parts) == 1:  # METIS left everything on one side: split in order
            mem = parts.pop()
            loads.pop()
            for sub in np.array_split(mem, 2):
                parts.append(sub)
                loads.append(float(problem.load[sub].sum()))
        splits += 1
    assert best is not None
    a = _relabel(problem, best[1], nodes)
    return a, {"method": "split", "partitions": best[2], "load_distance_pct": round(best[0], 4),
               "load_splits": by_load}


def cola_kway(problem: Problem, *, max_ld: float = 10.0, seed: int = 0, deadline: float | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
    """Variant: one METIS k-way partitioning into |A| parts, the imbalance tolerance (ufactor) tightened from
    loose to strict until the load distance is ≤ ``max_ld`` percent; parts mapped to nodes keeping key groups in
    place."""
    nodes = np.flatnonzero(problem.active)
    if not metis_fits(problem.n_key_groups, 2 * problem.comm_nnz, deadline):  # no time for one k-way partitioning
        a, info = cola_split(problem, max_ld=max_ld, seed=seed, deadline=deadline)
        return a, {**info, "method": "kway", "fallback": "split"}
    adj = symmetric_traffic(problem)
    cap = problem.capacity[nodes]
    tpw = None if np.allclose(cap, cap[0]) else cap
    best: tuple[float, np.ndarray, int] | None = None
    tried = []
    for uf in UFACTORS:
        part = metis_parts(adj, len(nodes), problem.load, seed=seed, ufactor=uf, tpwgts=tpw)
        a = map_parts_to_nodes(problem, part, nodes)
        ld_pct = _ld_pct(problem, a)
        tried.append({"ufactor": uf, "load_distance_pct": round(ld_pct, 4)})
        if best is None or ld_pct < best[0]:
            best = (ld_pct, a, uf)
        if ld_pct <= max_ld:
            best = (ld_pct, a, uf)
            break
        if deadline is not None and time.perf_counter() > deadline:
            break
    assert best is not None
    return best[1], {"method": "kway", "ufactor": best[2], "load_distance_pct": round(best[0], 4), "tried": tried}


def cola_assignment(problem: Problem, *, max_ld: float = 10.0, method: str = "split", seed: int = 0,
                    deadline: float | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """COLA's assignment of ``problem`` (``method`` ``"split"`` = the paper's description, ``"kway"`` = one
    k-way partitioning) and what it did."""
    nodes = np.flatnonzero(problem.active)
    m = problem.n_key_groups
    if m == 0:
        return problem.current.copy(), {"method": method}
    if len(nodes) == 1:
        return np.full(m, nodes[0], dtype=np.int64), {"method": method}
    if method == "kway":
        return cola_kway(problem, max_ld=max_ld, seed=seed, deadline=deadline)
    return cola_split(problem, max_ld=max_ld, seed=seed, deadline=deadline)


@register(
    "cola",
    "COLA (Khandekar et al.; ALBIC paper §5.3 baseline): balanced METIS graph partitioning from scratch, parts "
    "mapped to nodes to keep key groups in place; ignores the migration budget.",
    params=[
        Param("max_ld", float, 10.0, "sufficient load balance: load distance in percent of the target utilisation",
              minimum=0.0),
        Param("method", str, "split", "'split': gradual METIS bisection + packing (the paper's description); "
              "'kway': one k-way partitioning with a tightening imbalance tolerance", choices=("split", "kway")),
        Param("seed", int, 0, "METIS seed", minimum=0),
    ],
)
def solve(problem: Problem, *, time_limit: float = 1.0, max_ld: float = 10.0, method: str = "split",
          seed: int = 0) -> Plan:
    start = time.perf_counter()
    a, info = cola_assignment(problem, max_ld=max_ld, method=method, seed=seed, deadline=start + time_limit)
    details = {"ignores_budget": True, "migrations": metrics.migrations(problem, a),
               "migration_bytes": metrics.migration_bytes(problem, a), **info}
    return Plan("cola", a, status="heuristic", lower_bound=None, seconds=time.perf_counter() - start, details=details)
