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

Implementation: the *stream-summary* structure (counters bucketed by count, a pointer to the minimum), so every
update is O(1). Ties at eviction go to the key that reached the minimum count first (deterministic).
"""

from __future__ import annotations

from typing import Hashable, Iterable

from solvers.errors import InvalidInput

__all__ = ["SpaceSaving"]


class SpaceSaving:
    """SpaceSaving heavy-hitter sketch with ``capacity`` counters and a warm-up of ``warmup`` updates.

    Parameters
    ----------
    capacity : number of counters m (≥ 1). To find every key with frequency ≥ θ, use m ≥ 1/θ; D-Choices sizes
        it at ≥ 5n (``NOTES.md``).
    warmup : number of updates before :meth:`heavy_hitters` / :meth:`is_heavy` report anything (default 0).

    Complexity: O(1) per :meth:`update`, O(m) memory.
    """

    __slots__ = ("capacity", "warmup", "n", "counts", "errors", "_buckets", "_min")

    def __init__(self, capacity: int, warmup: int = 0):
        if not isinstance(capacity, int) or capacity < 1:
            raise InvalidInput("capacity", f"must be an integer >= 1, got {capacity!r}")
        if not isinstance(warmup, int) or warmup < 0:
            raise InvalidInput("warmup", f"must be an integer >= 0, got {warmup!r}")
        self.capacity = capacity
        self.warmup = warmup
        self.n = 0                      # updates seen
        self.counts: dict = {}          # key -> estimated count (upper bound)
        self.errors: dict = {}          # key -> maximum over-estimation
        self._buckets: dict = {}        # count -> {key: None} (insertion-ordered)
        self._min = 0                   # smallest count among monitored keys (0 while not full)

    # ------------------------------------------------------------------ updates
    def update(self, key: Hashable) -> int:
        """Count one occurrence of ``key``; return its new estimated count."""
        self.n += 1
        counts = self.counts
        buckets = self._buckets
        c = counts.get(key)
        if c is not None:
            b = buckets[c]
            del b[key]
            if not b:
                del buckets[c]
                if c == self._min:
                    self._min = c + 1
            c += 1
            counts[key] = c
            nb = buckets.get(c)
            if nb is None:
                buckets[c] = {key: None}
            else:
                nb[key] = None
            return c
        if len(counts) < self.capacity:
            counts[key] = 1
            self.errors[key] = 0
            nb = buckets.get(1)
            if nb is None:
                buckets[1] = {key: None}
            else:
                nb[key] = None
            self._min = 1
            return 1
        # replace a key with the minimum count: the newcomer inherits min (+1) and error = min
        m = self._min
        b = buckets[m]
        victim = next(iter(b))
        del b[victim]
        del counts[victim]
        del self.errors[victim]
        if not b:
            del buckets[m]
            self._min = m + 1
        c = m + 1
        counts[key] = c
        self.errors[key] = m
        nb = buckets.get(c)
        if nb is None:
            buckets[c] = {key: None}
        else:
            nb[key] = None
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
        return self._min if len(self.counts) >= self.capacity else 0

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

    def heavy_hitters(self, theta: float) -> dict:
        """Head: ``{key: estimated frequency}`` of keys with estimated count ≥ θ·N (empty before warm-up),
        sorted by decreasing frequency."""
        if self.n < self.warmup or self.n == 0:
            return {}
        bound = theta * self.n
        items = [(k, c) for k, c in self.counts.items() if c >= bound]
        items.sort(key=lambda kc: -kc[1])
        return {k: c / self.n for k, c in items}

    def top(self, k: int) -> list:
        """The ``k`` keys with the largest counters, as ``(key, count)`` pairs, largest first."""
        items = sorted(self.counts.items(), key=lambda kc: -kc[1])
        return items[:k]

    def __len__(self) -> int:
        return len(self.counts)
