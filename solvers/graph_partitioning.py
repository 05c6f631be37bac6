"""Balanced graph partitioning shared by the collocation planners: METIS (Karypis & Kumar, "A Fast and High
Quality Multilevel Scheme for Partitioning Irregular Graphs", SIAM J. Sci. Comput. 1998) through pymetis.

Used by ALBIC's collocation (ALBIC paper §4.3.2, Algorithm 2 line 18, ``split``) and by COLA (ALBIC paper §5.2,
the baseline that repartitions the whole communication graph each round).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pymetis
import scipy.sparse as sp

from solvers.model import Problem

__all__ = ["symmetric_traffic", "metis_parts"]


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
        kwargs["tpwgts"] = (t / t.sum() * (1 - 1e-6)).tolist()
    xadj = adj.indptr.astype(np.int64)
    adjncy = adj.indices.astype(np.int64)
    if hasattr(pymetis, "CSRAdjacency"):
        res = pymetis.part_graph(nparts, pymetis.CSRAdjacency(xadj, adjncy), **kwargs)
    else:  # pragma: no cover - older pymetis
        res = pymetis.part_graph(nparts, xadj=xadj, adjncy=adjncy, **kwargs)
    return np.asarray(res[1], dtype=np.int64)
