"""Frequency sketches for finding the head of a key distribution.

:class:`SpaceSaving` is the counter-based heavy-hitter algorithm of Metwally, Agrawal and El Abbadi (ICDT 2005,
"Efficient computation of frequent and top-k elements in data streams", Algorithm *Space-Saving*), used by
D-Choices / W-Choices / Round-Robin to track the head (``d-choices-w-choices.txt`` §III-A, Algorithm 1
``UPDATESPACESAVING``).

Guarantees after N updates with ``capacity`` = m counters (the property tests check all of them):

* Σ counts = N (every update adds exactly one to one counter);
* for every monitored key: ``count − error ≤ f(key) ≤ count`` (over-estimate with a known error);
* the smallest counter is ≤ N/m, and every key with ``f(key) > N/m`` is monitored;
* an unmonitored key has ``f(key) ≤ min count``.

Warm-up (a gap the papers leave): right after start every key seen is "heavy" (θ·N < 1). ``heavy_hitters`` and
``is_heavy`` therefore report nothing until ``warmup`` updates were seen (``NOTES.md``: "warm up SpaceSaving").

Implementation: a dict of counters plus a lazy min-heap with one entry per monitored key. A hit only increments
the dict (one lookup, one store); entries in the heap may be stale (too small, counts only grow) and are fixed
when they reach the top, so an eviction finds the true minimum in amortised O(log m). Ties at eviction go to the
key whose entry was refreshed first (deterministic).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable

from solvers.errors import InvalidInput

__all__ = ["SpaceSaving"]


class SpaceSaving:
    """SpaceSaving heavy-hitter sketch with ``capacity`` counters and a warm-up of ``warmup`` updates.

    Parameters
    ----------
    capacity : number of counters m (≥ 1). To find every key with frequency ≥ θ, use m ≥ 1/θ; D-Choices sizes
        it at ≥ 5n (``NOTES.md``).
    warmup : number of updates before :meth:`heavy_hitters` / :meth:`is_heavy` report anything (default 0).

    Complexity: O(1) per hit, amortised O(log m) per eviction, O(m) memory.
    """

    __slots__ = ("capacity", "warmup", "n", "counts", "errors", "_heap", "_seq")

    def __init__(self, capacity: int, warmup: int = 0):
        if not isinstance(capacity, int) or capacity < 1:
            raise InvalidInput("capacity", f"must be an integer >= 1, got {capacity!r}")
        if not isinstance(warmup, int) or warmup < 0:
            raise InvalidInput("warmup", f"must be an integer >= 0, got {warmup!r}")
        self.capacity = capacity
        self.warmup = warmup
        self.n = 0                      # updates seen
        self.counts: dict[Hashable, int] = {}  # key -> estimated count (upper bound)
        self.errors: dict[Hashable, int] = {}  # key -> maximum over-estimation
        # one heap entry per monitored key, maybe stale: (count at push, seq, key)
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    # ------------------------------------------------------------------ updates
    def _fix_top(self) -> tuple[int, int, Hashable]:
        """Refresh stale entries at the top of the heap until the top holds a current count; return it."""
        heap = self._heap
        counts = self.counts
        top = heap[0]
        while top[0] != counts[top[2]]:
            self._seq += 1
            heapq.heapreplace(heap, (counts[top[2]], self._seq, top[2]))
            top = heap[0]
        return top

    def update(self, key: Hashable) -> int:
        """Count one occurrence of ``key``; return its new estimated count."""
        self.n += 1
        counts = self.counts
        c = counts.get(key)
        if c is not None:
            c += 1
            counts[key] = c
            return c
        self._seq += 1
        if len(counts) < self.capacity:
            counts[key] = 1
            self.errors[key] = 0
            heapq.heappush(self._heap, (1, self._seq, key))
            return 1
        # replace the key with the minimum count: the newcomer inherits min (+1) and error = min
        m, _, victim = self._fix_top()
        del counts[victim]
        del self.errors[victim]
        c = m + 1
        counts[key] = c
        self.errors[key] = m
        heapq.heapreplace(self._heap, (c, self._seq, key))
        return c

    def update_many(self, keys: Iterable[Hashable]) -> None:
        """Count every key of ``keys`` in order (same result as calling :meth:`update` for each)."""
        upd = self.update
        for k in keys:
            upd(k)

    # ------------------------------------------------------------------ queries
    @property
    def warm(self) -> bool:
        """True once ``warmup`` updates have been seen."""
        return self.n >= self.warmup

    @property
    def min_count(self) -> int:
        """Smallest counter (0 while fewer than ``capacity`` keys are monitored): a bound for unmonitored keys."""
        if len(self.counts) < self.capacity:
            return 0
        return self._fix_top()[0]

    def estimate(self, key: Hashable) -> int:
        """Upper bound on the count of ``key`` (the counter, or :attr:`min_count` when not monitored)."""
        c = self.counts.get(key)
        return c if c is not None else self.min_count

    def guaranteed(self, key: Hashable) -> int:
        """Lower bound on the count of ``key`` (count − error; 0 when not monitored)."""
        c = self.counts.get(key)
        return 0 if c is None else c - self.errors[key]

    def is_heavy(self, key: Hashable, theta: float) -> bool:
        """Is ``key`` in the head: warm and estimated count ≥ θ·N (the paper's head test, §III-A)."""
        if self.n < self.warmup:
            return False
        c = self.counts.get(key)
        return c is not None and c >= theta * self.n

    def heavy_hitters(self, theta: float) -> dict[Hashable, float]:
        """Head: ``{key: estimated frequency}`` of keys with estimated count ≥ θ·N (empty before warm-up),
        sorted by decreasing frequency."""
        if self.n < self.warmup or self.n == 0:
            return {}
        bound = theta * self.n
        items = [(k, c) for k, c in self.counts.items() if c >= bound]
        items.sort(key=lambda kc: -kc[1])
        return {k: c / self.n for k, c in items}

    def top(self, k: int) -> list[tuple[Hashable, int]]:
        """The ``k`` keys with the largest counters, as ``(key, count)`` pairs, largest first."""
        items = sorted(self.counts.items(), key=lambda kc: -kc[1])
        return items[:k]

    def __len__(self) -> int:
        return len(self.counts)
