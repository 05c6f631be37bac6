"""Balanced graph partitioning shared by the collocation planners: METIS (Karypis & Kumar, "A Fast and High
Quality Multilevel Scheme for Partitioning Irregular Graphs", SIAM J. Sci. Comput. 1998) through pymetis.

Used by ALBIC's collocation (ALBIC paper §4.3.2, Algorithm 2 line 18, ``split``) and by COLA (ALBIC paper §5.2,
the baseline that repartitions the whole communication graph each round).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import numpy as np
import pymetis
import scipy.sparse as sp
from scipy.optimize import linear_sum_assignment

from solvers.model import Problem

__all__ = ["balanced_target", "symmetric_traffic", "metis_parts"]


def symmetric_traffic(problem: Problem) -> sp.csr_matrix:
    """(m, m) CSR of out(gi, gj) + out(gj, gi), no self loops: the undirected edge weights of the METIS graphs."""
    src, dst, rate = problem.edges()
    m = problem.n_key_groups
    sym = sp.csr_matrix((np.concatenate([rate, rate]), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                        shape=(m, m))
    sym.sum_duplicates()
    sym.eliminate_zeros()
    return sym


def _int_weights(w: np.ndarray, total_cap: float = 1e9) -> np.ndarray:
    """Positive integer METIS weights proportional to ``w`` (≥ 1, sum well inside METIS' 32-bit idx_t)."""
    w = np.asarray(w, dtype=np.float64)
    if w.size == 0:
        return np.zeros(0, dtype=np.int64)
    top = float(w.max())
    if top <= 0:
        return np.ones(w.size, dtype=np.int64)
    scale = min(1e4, total_cap / w.size) / top
    return np.maximum(1, np.rint(w * scale)).astype(np.int64)


def metis_parts(adj: sp.csr_matrix, nparts: int, vweights: np.ndarray, *, seed: int = 0, ufactor: int | None = None,
                tpwgts: np.ndarray | None = None) -> np.ndarray:
    """Balanced k-way graph partitioning (METIS [Karypis & Kumar], via pymetis) of a symmetric weighted graph.

    Args:
        adj: (v, v) symmetric CSR, data = edge weights (any positive floats; scaled to integers here).
        nparts: number of parts k ≥ 1.
        vweights: (v,) vertex weights (floats ≥ 0; scaled to integers ≥ 1).
        seed: METIS random seed (deterministic for a given seed).
        ufactor: allowed imbalance in 1/1000 (METIS default 30 for k-way, 1 for recursive bisection).
        tpwgts: (k,) target part weight fractions (e.g. node capacities), or None for equal parts.

    Returns:
        (v,) int part of each vertex. Parts may be empty when k is close to v.
    """
    v = adj.shape[0]
    if nparts <= 1 or v <= 1:
        return np.zeros(v, dtype=np.int64)
    if nparts >= v and tpwgts is None:
        return np.arange(v, dtype=np.int64)
    adj = sp.csr_matrix(adj)
    adj.sort_indices()
    opts = {"seed": int(seed) % (2**31 - 1)}
    if ufactor is not None:
        opts["ufactor"] = int(ufactor)
    kwargs: dict[str, Any] = {
        "vweights": _int_weights(vweights),
        "options": pymetis.Options(**opts),
    }
    if adj.nnz:
        kwargs["eweights"] = _int_weights(adj.data)
    if tpwgts is not None:
        t = np.asarray(tpwgts, dtype=np.float64)
        kwargs["tpwgts"] = (t / t.sum()).tolist()  # fractions summing to one (pymetis warns about any other sum)
    xadj = adj.indptr.astype(np.int64)
    adjncy = adj.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):
        res = pymetis.part_graph(nparts, pymetis.CSRAdjacency(xadj, adjncy), **kwargs)
    else:  # pragma: no cover - older pymetis
        res = pymetis.part_graph(nparts, xadj=xadj, adjncy=adjncy, **kwargs)
    return np.asarray(res[1], dtype=np.int64)


#: partitions of recently seen graphs (graph fingerprint → METIS part of each key group), see balanced_target
_TARGETS: OrderedDict[bytes, np.ndarray] = OrderedDict()
_TARGETS_KEPT = 8


def _fingerprint(adj: sp.csr_matrix, nodes: np.ndarray, cap: np.ndarray, seed: int, ufactor: int) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for arr in (adj.indptr, adj.indices, np.round(adj.data, 9), nodes, cap, np.array([seed, ufactor])):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.digest()


def balanced_target(problem: Problem, adj: sp.csr_matrix, *, seed: int = 0, ufactor: int = 30) -> np.ndarray:
    """A whole-graph collocation target for multi-round planning (a deviation from ALBIC's Algorithm 2):
    the METIS k-way partition of the traffic graph into |A| parts balanced by key group load (as COLA, ALBIC paper
    §5.2, with target part weights ∝ capacity), each part relabelled to the active node that already holds most of
    its load (Hungarian assignment, scipy ``linear_sum_assignment``), so that few key groups must move.

    METIS is chaotic under small weight changes (a ±2 % load drift gives a different partition), so the partition
    is kept per graph: it is recomputed only when the traffic graph, the active nodes, their capacities, the seed or
    the tolerance change (the last few graphs are remembered in this process; a fresh process recomputes it from the
    loads it sees, deterministically for a seed). The relabelling to nodes is redone every call on the current
    assignment. Returns the (m,) target node of each key group (``problem.current`` when fewer than two nodes are
    active). O(METIS(m + E) + |A|³)."""
    nodes = np.flatnonzero(problem.active)
    m = problem.n_key_groups
    if nodes.size < 2 or m == 0:
        return np.full(m, nodes[0], dtype=np.int64) if nodes.size == 1 else problem.current.copy()
    load = np.asarray(problem.load, dtype=np.float64)
    cap = problem.capacity[nodes]
    key = _fingerprint(sp.csr_matrix(adj), nodes, cap, seed, ufactor)
    part = _TARGETS.get(key)
    if part is None or part.size != m:
        tpw = None if np.allclose(cap, cap[0]) else cap
        part = metis_parts(adj, int(nodes.size), load, seed=seed, ufactor=ufactor, tpwgts=tpw)
        _TARGETS[key] = part
        while len(_TARGETS) > _TARGETS_KEPT:
            _TARGETS.popitem(last=False)
    else:
        _TARGETS.move_to_end(key)
    col = np.full(problem.n_nodes, -1, dtype=np.int64)
    col[nodes] = np.arange(nodes.size)
    on = col[problem.current]
    ok = on >= 0
    overlap = np.zeros((nodes.size, nodes.size))
    np.add.at(overlap, (part[ok], on[ok]), load[ok] + 1e-9)
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    node_of_part = np.empty(nodes.size, dtype=np.int64)
    node_of_part[rows] = nodes[cols]
    return np.asarray(node_of_part[part], dtype=np.int64)
