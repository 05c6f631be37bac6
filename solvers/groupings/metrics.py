"""Stream-grouping metrics (docs/design.md "Metric definitions"), one implementation used by the simulator and the CLI.

* imbalance I = max_w L_w − avg_w L_w with L_w the FRACTION of the messages routed to worker w (D-C paper §II-B,
  "L_w(t) = |{messages routed to w up to t}| / m"); :func:`imbalance_messages` is the same in messages;
* normalised imbalance (max − avg)/avg (CG paper Table 1);
* replication = Σ over keys of the number of workers that saw the key / number of keys seen (the memory cost of
  key splitting: 1 for KG, ≤ 2 for PKG, up to n for SG).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from solvers.errors import InvalidInput

__all__ = ["imbalance", "imbalance_messages", "normalized_imbalance", "replication"]


def _loads(worker_loads: npt.ArrayLike) -> np.ndarray:
    L = np.asarray(worker_loads, dtype=float)
    if L.ndim != 1 or L.size == 0:
        raise InvalidInput("worker_loads", "must be a non-empty one-dimensional array")
    if not np.all(np.isfinite(L)) or np.any(L < 0):
        raise InvalidInput("worker_loads", "loads must be finite and >= 0")
    return L


def imbalance_messages(worker_loads: npt.ArrayLike) -> float:
    """max_w L_w − avg_w L_w in messages."""
    L = _loads(worker_loads)
    return float(L.max() - L.mean())


def imbalance(worker_loads: npt.ArrayLike) -> float:
    """I(m) = max_w L_w/m − 1/n (D-C paper §II-B); 0 for an empty stream."""
    L = _loads(worker_loads)
    total = L.sum()
    return float((L.max() - L.mean()) / total) if total > 0 else 0.0


def normalized_imbalance(worker_loads: npt.ArrayLike) -> float:
    """(max − avg)/avg (CG paper Table 1); 0 for an empty stream."""
    L = _loads(worker_loads)
    avg = L.mean()
    return float((L.max() - avg) / avg) if avg > 0 else 0.0


def replication(keys: npt.ArrayLike, workers: npt.ArrayLike) -> float:
    """Average number of distinct workers per key over the keys that occur (1.0 for KG, ≤ 2 for PKG)."""
    k = np.asarray(keys, dtype=np.int64)
    w = np.asarray(workers, dtype=np.int64)
    if k.shape != w.shape or k.ndim != 1:
        raise InvalidInput("workers", "keys and workers must be one-dimensional arrays of the same length")
    if k.size == 0:
        return 0.0
    pairs = np.unique(np.stack([k, w], axis=1), axis=0)
    return float(len(pairs) / len(np.unique(k)))
