"""Where a grouping's memory goes: replication per key rank, against the D-C paper's memory model.

The D-C paper (Nasir et al., ICDE 2016, §IV-B "Memory Overhead", Fig. 5/6) compares D-Choices and W-Choices with
PKG through an *estimate*: mem_PKG = Σ_k min(f_k, 2), mem_SG = Σ_k min(f_k, n), and for D-C / W-C
Σ_{k∈H} min(f_k, d or n) + Σ_{k∉H} min(f_k, 2). The estimate charges PKG two workers for every key seen twice.
A simulation measures something else: the (key, worker) pairs that really occur. Under PKG a tail key seen a few
times usually lands on ONE of its two choices, because PKG's load vector is skewed by the head and the same choice
stays the less loaded one; under W-Choices the loads are flat, the comparison flips often and the same key reaches
both choices. :func:`replication_breakdown` separates the two effects per key-rank band so that a measured
W-C/PKG ratio can be read against the paper's estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from solvers.errors import InvalidInput

__all__ = ["pairs_per_key", "paper_pkg_memory", "replication_breakdown"]


def pairs_per_key(keys: np.ndarray, workers: np.ndarray, n_keys: int) -> np.ndarray:
    """(n_keys,) number of distinct workers each key id in [0, n_keys) was routed to (0 for keys not seen)."""
    k = np.asarray(keys, dtype=np.int64)
    w = np.asarray(workers, dtype=np.int64)
    if k.shape != w.shape or k.ndim != 1:
        raise InvalidInput("workers", "keys and workers must be one-dimensional arrays of the same length")
    if k.size and (k.min() < 0 or k.max() >= n_keys):
        raise InvalidInput("keys", f"key ids must lie in [0, {n_keys})")
    if k.size == 0:
        return np.zeros(n_keys, dtype=np.int64)
    n_workers = int(w.max()) + 1
    pairs = np.unique(k * n_workers + w)
    return np.bincount(pairs // n_workers, minlength=n_keys).astype(np.int64)


def paper_pkg_memory(keys: np.ndarray, n_keys: int) -> float:
    """The paper's PKG memory estimate Σ_k min(f_k, 2) on the empirical key counts f_k of ``keys``."""
    f = np.bincount(np.asarray(keys, dtype=np.int64), minlength=n_keys)
    return float(np.minimum(f, 2).sum())


def replication_breakdown(keys: np.ndarray, pkg_workers: np.ndarray, other_workers: np.ndarray, n_keys: int,
                          bands: tuple[int, ...] = (0, 25, 100, 1000)) -> dict[str, Any]:
    """Extra (key, worker) pairs of a head-aware grouping over PKG on the same stream, per key-rank band.

    Key ids must be ranks (0 = most frequent). For each band [a, b) of ranks (the last band runs to ``n_keys``):
    ``extra_pairs`` = pairs(other) − pairs(PKG); ``beyond_two`` = pairs beyond two workers per key (what the
    head's extra choices cost, the paper's d·|H| or n·|H| term); ``second_choice`` = keys on exactly two workers
    under the other grouping but one under PKG (the balance effect the paper's estimate already charges to PKG).

    Returns the bands, the measured replications, the paper's estimate mem_PKG and both ratios.
    """
    k = np.asarray(keys, dtype=np.int64)
    pkg = pairs_per_key(k, pkg_workers, n_keys)
    oth = pairs_per_key(k, other_workers, n_keys)
    seen = pkg > 0
    edges = [b for b in bands if b < n_keys] + [n_keys]
    rows = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        p, o = pkg[a:b], oth[a:b]
        rows.append({"ranks": [a, b], "extra_pairs": int(o.sum() - p.sum()),
                     "beyond_two": int(np.maximum(o - 2, 0).sum()),
                     "second_choice": int(np.sum((o == 2) & (p == 1)))})
    n_seen = max(int(seen.sum()), 1)
    paper = paper_pkg_memory(k, n_keys)
    return {"bands": rows, "replication_pkg": float(pkg.sum() / n_seen), "replication_other": float(oth.sum() / n_seen),
            "measured_over_measured_pkg": float(oth.sum() / max(pkg.sum(), 1)),
            "paper_mem_pkg": paper, "measured_over_paper_pkg": float(oth.sum() / paper) if paper else float("nan")}


def route(grouping: str, n_workers: int, keys: np.ndarray, *, sources: int = 5, seed: int = 0,
          chunk: int = 65_536) -> np.ndarray:
    """Worker of every message when message i enters source i mod ``sources`` (the simulator's rule), each source
    routing its messages in order with its own instance of ``grouping`` (no queue model: routing only)."""
    from solvers.groupings import make_grouping

    k = np.asarray(keys, dtype=np.int64)
    srcs = [make_grouping(grouping, n_workers, seed=seed, source_index=j) for j in range(sources)]
    out = np.empty(k.size, dtype=np.int64)
    for start in range(0, k.size, chunk):
        idx = np.arange(start, min(start + chunk, k.size))
        for j in range(sources):
            sel = idx[idx % sources == j]
            if sel.size:
                out[sel] = srcs[j].route(k[sel])
    return out
