"""Consistent hashing and consistent hashing with bounded loads.

* **CH** (Karger et al.; ``consistent-grouping-heterogeneous-cluster.txt`` §4.2): workers and keys are hashed
  onto the unit circle (here: the 64-bit ring); a key goes to the first worker point clockwise. Each worker has
  ``replicas`` points (virtual workers on the ring, §4.2 "copies of workers points in the circle").
  Stateless and vectorised (``searchsorted`` on the sorted ring).
* **CH-BL** (Mirrokni, Thorup, Zadimoghaddam, SODA 2018; CG paper §4.2 "Consistent Hashing with Bounded
  Load"): every worker has capacity ⌈(1+ε)·t/n⌉ where t is the number of messages this source has routed
  including the current one; a message goes to the first worker clockwise from its key's position whose local
  load is below that capacity. Hence max load ≤ ⌈(1+ε)·avg⌉ at every moment.

CH-BL's walk over full workers uses "next candidate" pointers with path compression, valid while the capacity
stays constant (loads only grow, so a full worker stays full) and reset when the capacity increases; each
decision is exactly the one of the naïve clockwise walk.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.groupings.base import Grouping, check_float, check_int
from solvers.hashing import derive_seed, hash64_array

__all__ = ["ConsistentHashing", "ConsistentHashingBoundedLoads"]

_RING_SALT = 7777


class ConsistentHashing(Grouping):
    """CH with ``replicas`` ring points per worker (default 10). One worker per key."""

    name = "ch"

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0, replicas: int = 10) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        self.replicas = check_int("replicas", replicas)
        pts = hash64_array(np.arange(self.n * self.replicas, dtype=np.int64), derive_seed(self.seed, _RING_SALT))
        order = np.argsort(pts, kind="stable")
        self.ring = pts[order]
        self.owner = (order // self.replicas).astype(np.int64)

    def _start(self, ids: np.ndarray) -> np.ndarray:
        pos = hash64_array(ids, derive_seed(self.seed, 0))
        starts: np.ndarray = np.searchsorted(self.ring, pos, side="left") % len(self.ring)
        return starts

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        out: np.ndarray = self.owner[self._start(ids)]
        self.loads += np.bincount(out, minlength=self.n)
        return out


class ConsistentHashingBoundedLoads(ConsistentHashing):
    """CH-BL with ε (default 0.3 as in the CG paper's Table 1 comparison; the paper's later experiments use 0.01)
    and ``replicas`` ring points per worker. Max local load ≤ ⌈(1+ε)·t/n⌉ after t messages."""

    name = "chbl"

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0, replicas: int = 10,
                 eps: float = 0.3) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index, replicas=replicas)
        self.eps = check_float("eps", eps)
        self._cap = -1
        self._nxt: list[int] = []

    def capacity(self, t: int) -> int:
        """⌈(1+ε)·t/n⌉ (with a 1e-9 guard against floating-point round-up)."""
        return max(1, math.ceil((1.0 + self.eps) * t / self.n - 1e-9))

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        starts = self._start(ids).tolist()
        owner = self.owner.tolist()
        R = len(owner)
        L = self.loads.tolist()
        t = int(self.sent)
        cap = self._cap
        nxt = self._nxt
        one_eps = 1.0 + self.eps
        n = self.n
        out = [0] * len(starts)
        for i, p in enumerate(starts):
            t += 1
            c = math.ceil(one_eps * t / n - 1e-9)
            if c != cap:
                cap = c
                nxt = list(range(1, R))
                nxt.append(0)
            q = p
            while L[owner[q]] >= cap:
                q = nxt[q]
            while p != q:             # path compression over the full points just walked
                r = nxt[p]
                nxt[p] = q
                p = r
            w = owner[q]
            L[w] += 1
            out[i] = w
        self._cap = cap
        self._nxt = nxt
        self.loads[:] = L
        return np.asarray(out, dtype=np.int64)

