"""Step 2 of ALBIC's Algorithm 2 (Madsen, Zhou, Cao, §4.3.2, lines 15–22, "maintain collocation"): the collocated
pairs are unioned into sets and every set is split by balanced graph partitioning (METIS) into parts that respect
both maxPL and the migration budget; each part then moves as one unit (see :mod:`solvers.albic.collocation`)."""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from solvers.graph_partitioning import metis_parts
from solvers.model import Problem

__all__ = ["METIS_SECONDS_PER_ITEM", "collocated_sets", "metis_fits", "migration_cost_fraction", "split_set"]

_EPS = 1e-9
#: what a METIS partitioning is assumed to cost per vertex and per stored edge weight, in seconds: a bisection of
#: 120,000 vertices and 1.28 M weights took 1.9 s on a 2-core machine at load 15 (about 1.4 µs per item; 0.9-1.1 µs
#: for 2,000 and 20,000 vertices). A planner with a deadline skips a partitioning that would end after it.
METIS_SECONDS_PER_ITEM = 1e-6


def metis_fits(vertices: int, nnz: int, deadline: float | None) -> bool:
    """Whether METIS on a graph of ``vertices`` vertices and ``nnz`` stored edge weights is expected to end before
    ``deadline`` (a :func:`time.perf_counter` time; ``None``: no deadline)."""
    return deadline is None or time.perf_counter() + (vertices + nnz) * METIS_SECONDS_PER_ITEM <= deadline


def collocated_sets(n_key_groups: int, src: np.ndarray, dst: np.ndarray) -> list[np.ndarray]:
    """Union the collocated pairs ``(src[p], dst[p])`` into the minimum number of disjoint sets (Algorithm 2,
    ``calcSets``): two sets that share a key group become their union. Connected components (scipy); only sets of
    ≥ 2 key groups are returned, each sorted, largest first. O(m + P)."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if src.size == 0:
        return []
    graph = sp.coo_matrix((np.ones(src.size), (src, dst)), shape=(n_key_groups, n_key_groups))
    _, label = connected_components(graph, directed=False)
    grouped = np.flatnonzero(np.bincount(label)[label] >= 2)  # key groups in a component of two or more
    order = grouped[np.argsort(label[grouped], kind="stable")]  # by component, each in increasing order
    sets = np.split(order, np.flatnonzero(np.diff(label[order])) + 1) if order.size else []
    sets.sort(key=lambda s: (-len(s), int(s[0])))
    return sets


def migration_cost_fraction(problem: Problem) -> np.ndarray | None:
    """(m,) mc_k / maxMigrCost, the share of one round's budget a key group's move uses (max over the count and
    byte budgets); ``None`` when the budget is unlimited. A zero budget gives ``inf``."""
    parts = []
    if problem.max_migrations is not None:
        mm = problem.max_migrations
        parts.append(np.full(problem.n_key_groups, (1.0 / mm) if mm > 0 else math.inf))
    if problem.max_migration_bytes is not None:
        mb = problem.max_migration_bytes
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = problem.state_bytes / mb if mb > 0 else np.where(problem.state_bytes > 0, math.inf, 0.0)
        parts.append(np.asarray(frac, dtype=np.float64))
    if not parts:
        return None
    return np.asarray(np.maximum.reduce(parts), dtype=np.float64)


def split_set(members: np.ndarray, load: np.ndarray, mc: np.ndarray | None, adj: sp.csr_matrix, max_pl: float,
              *, seed: int = 0, _depth: int = 0) -> list[np.ndarray]:
    """Step 2 of Algorithm 2: split one collocated set into parts that each respect both caps.

    The number of parts is max(p1, p2), p1 = ⌈Σ mc / maxMigrCost⌉, p2 = ⌈Σ load / maxPL⌉ (``mc`` is already
    divided by maxMigrCost; ``None`` = unlimited budget). Vertex weight = mc when Pmc/maxMigrCost > PL/maxPL,
    else load; edge weight = traffic (``adj`` is the symmetric traffic of the whole problem). A part that still
    breaks a cap is split again ("it may need to be applied again on some partitions"); single key groups are
    always accepted. ``max_pl`` ≤ 0 means one part per key group (the pure MILP).

    Returns:
        list of parts (arrays of key group indices), covering ``members`` exactly once.
    """
    members = np.asarray(members, dtype=np.int64)
    if members.size <= 1:
        return [members] if members.size else []
    if max_pl <= 0:
        return [members[i:i + 1] for i in range(members.size)]
    pl = float(load[members].sum())
    pmc = float(mc[members].sum()) if mc is not None else 0.0
    ratio_pl = pl / max_pl
    if not math.isfinite(pmc):
        return [members[i:i + 1] for i in range(members.size)]
    if pmc <= 1 + _EPS and pl <= max_pl * (1 + _EPS):
        return [members]
    k = max(math.ceil(pmc - _EPS), math.ceil(ratio_pl - _EPS), 2)
    if k >= members.size:
        return [members[i:i + 1] for i in range(members.size)]
    weights = mc[members] if (mc is not None and pmc > ratio_pl) else load[members]
    sub = adj[members][:, members]
    part = metis_parts(sub, k, weights, seed=seed + _depth)
    out: list[np.ndarray] = []
    groups = [members[part == p] for p in range(k)]
    groups = [g for g in groups if g.size]
    if len(groups) == 1:  # METIS could not split (should not happen): force a split in order
        groups = [g for g in np.array_split(members, k) if g.size]
    for g in groups:
        out.extend(split_set(g, load, mc, adj, max_pl, seed=seed, _depth=_depth + 1))
    return out
