"""Frequency tracking for Gedik's explicit hash: lossy counting and a sliding window of 3 lossy counters (§4.1.2).

Lossy counting (Manku & Motwani, the paper's [22]) with error ε: the stream is cut into buckets of
w = ⌈1/ε⌉ items; an entry is (key, c_a, c_e) — appearance count and maximal error; a new key in bucket b enters
with c_a = 1, c_e = b − 1; when bucket b closes every entry with c_a + c_e ≤ b is evicted. For a stream of n items
it guarantees ``f(d)·n − ε·n ≤ c_a(d) ≤ f(d)·n``: the estimate f̂ = c_a/n never over-reports and under-reports by at
most ε, and :meth:`LossyCounter.frequent` (entries with c_a ≥ (δ − ε)·n) never misses a key with f ≥ δ.
Space O((1/ε)·log(ε·n)).

Keys are 64-bit hashes (``np.uint64``, from :func:`solvers.hashing.hash64`); a bucket is processed at once with
numpy (sort, unique, merge), which yields exactly the state the item-by-item algorithm has at the bucket's end.

Sliding window (Fig. 2): three lossy counters over tumbling windows, started W/2 items apart and restarted every
3W/2 items; the counter in use is the one that has seen between W and 3W/2 items (during the first W items of the
stream, the oldest one: footnote 2 of the paper).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LossyCounter", "SlidingLossyCounter"]


class LossyCounter:
    """Lossy counting over 64-bit key hashes (§4.1.2, [22])."""

    def __init__(self, epsilon: float):
        if not (0 < epsilon < 1):
            raise ValueError("epsilon must be in (0, 1)")
        self.epsilon = float(epsilon)
        self.width = int(math.ceil(1.0 / self.epsilon))
        self.n = 0
        self.keys = np.empty(0, dtype=np.uint64)      # sorted
        self.counts = np.empty(0, dtype=np.int64)     # c_a
        self.errors = np.empty(0, dtype=np.int64)     # c_e

    def __len__(self) -> int:
        return len(self.keys)

    def _add_segment(self, seg: np.ndarray) -> None:
        bucket = self.n // self.width + 1  # current bucket id (1-based)
        u, c = np.unique(seg, return_counts=True)
        pos = np.searchsorted(self.keys, u)
        found = np.zeros(len(u), dtype=bool)
        inside = pos < len(self.keys)
        found[inside] = self.keys[pos[inside]] == u[inside]
        if found.any():
            self.counts[pos[found]] += c[found]
        new = ~found
        if new.any():
            p = pos[new]
            self.keys = np.insert(self.keys, p, u[new])
            self.counts = np.insert(self.counts, p, c[new])
            self.errors = np.insert(self.errors, p, np.full(int(new.sum()), bucket - 1, dtype=np.int64))
        self.n += len(seg)
        if self.n % self.width == 0:  # bucket `bucket` closes: evict c_a + c_e <= b
            keep = self.counts + self.errors > bucket
            if not keep.all():
                self.keys, self.counts, self.errors = self.keys[keep], self.counts[keep], self.errors[keep]

    def update(self, hashes: np.ndarray) -> None:
        """Feed the stream items (64-bit key hashes), in order."""
        h = np.asarray(hashes, dtype=np.uint64)
        i = 0
        while i < len(h):
            take = self.width - self.n % self.width
            self._add_segment(h[i:i + take])
            i += take

    def estimates(self) -> tuple[np.ndarray, np.ndarray]:
        """All entries as (keys, f̂ = c_a/n)."""
        if self.n == 0:
            return self.keys.copy(), np.zeros(0)
        return self.keys.copy(), self.counts / self.n

    def frequent(self, support: float) -> tuple[np.ndarray, np.ndarray]:
        """Keys with c_a ≥ (support − ε)·n and their estimates f̂ = c_a/n: a superset of {d : f(d) ≥ support}."""
        if self.n == 0:
            return np.empty(0, dtype=np.uint64), np.zeros(0)
        sel = self.counts >= (support - self.epsilon) * self.n
        return self.keys[sel], self.counts[sel] / self.n


class SlidingLossyCounter:
    """Sliding window of (about) ``window`` items emulated with 3 lossy counters over tumbling windows (Fig. 2).

    The counters start W/2 items apart and restart every 3W/2 items, so the one in use has seen between W and
    3W/2 of the most recent items (W is rounded down to an even number ≥ 2).
    """

    def __init__(self, epsilon: float, window: int):
        if window < 2:
            raise ValueError("window must be >= 2")
        self.epsilon = float(epsilon)
        self.half = int(window) // 2
        self.window = 2 * self.half
        self.t = 0
        self.counters = [LossyCounter(epsilon), LossyCounter(epsilon), LossyCounter(epsilon)]
        self.started = [True, False, False]

    def update(self, hashes: np.ndarray) -> None:
        h = np.asarray(hashes, dtype=np.uint64)
        i = 0
        while i < len(h):
            take = self.half - self.t % self.half
            seg = h[i:i + take]
            for j in range(3):
                if self.started[j]:
                    self.counters[j].update(seg)
            self.t += len(seg)
            i += len(seg)
            if self.t % self.half == 0:  # at t = k·W/2 counter k mod 3 (re)starts
                j = (self.t // self.half) % 3
                self.counters[j] = LossyCounter(self.epsilon)
                self.started[j] = True

    @property
    def active(self) -> LossyCounter:
        """The counter in use: the one with between W and 3W/2 items (the oldest while warming up)."""
        k = self.t // self.half
        if k < 2:
            return self.counters[0]
        return self.counters[(k - 2) % 3]

    @property
    def n(self) -> int:
        return self.active.n

    def __len__(self) -> int:
        """Entries held in all three counters (the memory of the sliding counter)."""
        return sum(len(c) for c in self.counters)

    def estimates(self) -> tuple[np.ndarray, np.ndarray]:
        return self.active.estimates()

    def frequent(self, support: float) -> tuple[np.ndarray, np.ndarray]:
        return self.active.frequent(support)
