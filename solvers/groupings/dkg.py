"""Dynamic Key Grouping (Dalabasmaz & Can, ``dynamic-key-grouping.txt`` §4).

Per source:

* every key starts on two CONSECUTIVE workers h, h+1 (h = hash(k) mod n, Eq. 5; §4.4 "index and index + 1 are
  the initial targets"); its width W (number of workers) changes between 2 and the cap of Table 1
  (⌊100/Ls⌋ + 1, at most n);
* the message goes to the least loaded of its W workers (findBestCandidate, Algorithm 4); load is the integer
  percent of this source's cumulative sends (local load estimation, §4.3 "we compare the load distribution over
  the percentage");
* **scale out** (Algorithm 5): after the 15 s warm-up, if the key is in the Old space and even its least loaded
  worker is at or above Ls = Li + √Li (Li = 100/n, Eqs. 3–4), the next worker h+W is added when it is lighter
  than the current minimum;
* **scale down** (Algorithm 6): if W > 2 and at least two of its workers are below Ls, W decreases by one (the
  last worker h+W−1 stops receiving);
* a per-key check happens at most once per ``check_interval`` (60 s; the Key Item's "last time Scale Out is
  checked", §4.1.1, ``NOTES.md``);
* the Key Space (§4.1.2–4.1.3, Algorithms 1–3): Baby (unbounded), Teenage (40% of ``expected_keys``), Old (10%);
  every 15 s the hottest Baby items are promoted to Teenage, every 60 s the hottest Teenage items to Old, each
  swapping with the coldest items of the destination while the source item has more occurrences.

All periods are in simulated seconds (``now`` passed to :meth:`route`); the paper's gates are wall-clock, so a
simulator must model time (``NOTES.md``).

Fixes / interpretations (documented deviations):

* Algorithm 4 calls chooseBestTask recursively after a scale-down; the recursion is replaced by one re-selection
  among the narrowed workers, with no further scale decision for that message (no unbounded recursion, at most
  one width change per key per check interval).
* Algorithm 3 iterates "for each item in DS", so an EMPTY destination space would never be filled; free slots
  are filled with the hottest source items first, then swaps happen while the source item has strictly more
  occurrences (the paper swaps on ties too, which can ping-pong equal items).
* "truncate BS to discard quite new items" (Algorithm 1) is read as: Baby items created less than one promotion
  period ago are not eligible for promotion yet.
* Ties between equally loaded workers go to the first one in the key's order h, h+1, …
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from solvers.groupings.base import Grouping, check_float, check_int, choice

__all__ = ["DynamicKeyGrouping", "dkg_threshold", "dkg_max_width"]


def dkg_threshold(n: int) -> float:
    """Scale-out threshold Ls = Li + √Li with Li = 100/n percent (DKG Eqs. 3–4)."""
    li = 100.0 / n
    return li + math.sqrt(li)


def dkg_max_width(n: int) -> int:
    """Largest number of workers per key, ⌊100/Ls⌋ + 1 capped at n (reproduces DKG Table 1: 5→5, 10→8,
    20→14, 50→30, 100→51)."""
    return min(n, int(100.0 / dkg_threshold(n)) + 1)


class DynamicKeyGrouping(Grouping):
    """DKG (see the module docstring). Parameters: ``expected_keys`` (sizes the Old/Teenage spaces, default 100
    as in the paper), ``warmup`` (15 s), ``baby_period`` (15 s), ``old_period`` (60 s), ``check_interval``
    (60 s)."""

    name = "dkg"
    time_driven = True

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0, expected_keys: int = 100,
                 warmup: float = 15.0, baby_period: float = 15.0, old_period: float = 60.0,
                 check_interval: float = 60.0) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        self.expected_keys = check_int("expected_keys", expected_keys)
        self.old_cap = max(1, int(round(0.1 * self.expected_keys)))
        self.teen_cap = max(1, int(round(0.4 * self.expected_keys)))
        self.warmup = check_float("warmup", warmup, lo=0.0, lo_open=False)
        self.baby_period = check_float("baby_period", baby_period)
        self.old_period = check_float("old_period", old_period)
        self.check_interval = check_float("check_interval", check_interval, lo=0.0, lo_open=False)
        self.threshold = dkg_threshold(self.n)
        self.max_width = dkg_max_width(self.n)
        # key -> [count, last_seen, created, width, last_check]
        self.items: dict[int, list[Any]] = {}
        self.old: set[int] = set()
        self.teen: set[int] = set()
        self._start: float | None = None
        self._next_baby = 0.0  # both set with _start, on the first route
        self._next_old = 0.0
        self._last_baby: float | None = None

    # ------------------------------------------------------------------ key space (Algorithms 1-3)
    def width(self, key: int) -> int:
        """Current number of workers of ``key`` (2 for keys never seen)."""
        it = self.items.get(int(key))
        return 2 if it is None else it[3]

    def _promote(self, src: list[int], dst: set[int], cap: int, demote_to: set[int] | None) -> None:
        items = self.items
        src_sorted = sorted(src, key=lambda k: -items[k][0])
        dst_sorted = sorted(dst, key=lambda k: -items[k][0])
        i = 0
        while len(dst_sorted) < cap and i < len(src_sorted):   # fill free slots (fix, see module docstring)
            k = src_sorted[i]
            dst.add(k)
            dst_sorted.append(k)
            if demote_to is not None:
                demote_to.discard(k)
            i += 1
        dst_sorted.sort(key=lambda k: -items[k][0])
        for _ in range(len(dst_sorted)):                         # Algorithm 3
            if i >= len(src_sorted) or not dst_sorted:
                break
            fi = src_sorted[i]
            li = dst_sorted[-1]
            if items[li][0] >= items[fi][0]:
                break
            dst.discard(li)
            dst_sorted.pop()
            dst.add(fi)
            if demote_to is not None:
                demote_to.discard(fi)
                demote_to.add(li)
            i += 1

    def _manage(self, now: float) -> None:
        if now >= self._next_baby:
            horizon = self._last_baby if self._last_baby is not None else now
            baby = [k for k, it in self.items.items()
                    if k not in self.old and k not in self.teen and it[2] <= horizon]
            # Baby -> Teenage; demoted Teenage items go back to Baby (= not in old/teen)
            self._promote(baby, self.teen, self.teen_cap, None)
            self._last_baby = now
            while self._next_baby <= now:
                self._next_baby += self.baby_period
        if now >= self._next_old:
            self._promote(list(self.teen), self.old, self.old_cap, self.teen)
            while self._next_old <= now:
                self._next_old += self.old_period

    # ------------------------------------------------------------------ routing (Algorithms 4-6)
    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        if now is None:
            now = 0.0
        now = float(now)
        if self._start is None:
            self._start = now
            self._next_baby = now + self.baby_period
            self._next_old = now + self.old_period
        self._manage(now)
        n = self.n
        T = self.threshold
        maxw = self.max_width
        warm = (now - self._start) >= self.warmup
        check_interval = self.check_interval
        old = self.old
        items = self.items
        base = choice(ids, n, self.seed, 0).tolist()
        L = self.loads.tolist()
        tot = int(self.sent)
        out = [0] * len(base)
        for i, k in enumerate(ids.tolist()):
            it = items.get(k)
            if it is None:
                it = [0, now, now, 2, -math.inf]
                items[k] = it
            it[0] += 1
            it[1] = now
            h = base[i]
            W = it[3]
            # findBestCandidate over h, h+1, ..., h+W-1 with integer-percent loads
            best = -1
            llmin = 0
            nll = 0
            for j in range(W):
                w = (h + j) % n
                cl = (100 * L[w]) // tot if tot else 0
                if cl < T:
                    nll += 1
                if best < 0 or cl < llmin:
                    llmin = cl
                    best = w
            if warm and now - it[4] >= check_interval:
                if llmin >= T and k in old:                     # shouldScaleOut (Algorithm 5)
                    it[4] = now
                    if W < maxw:
                        cand = (h + W) % n
                        cl = (100 * L[cand]) // tot if tot else 0
                        if cl < llmin:
                            best = cand
                            it[3] = W + 1
                elif W > 2 and nll >= 2:                        # shouldScaleDown (Algorithm 6)
                    it[4] = now
                    W -= 1
                    it[3] = W
                    best = -1
                    for j in range(W):                          # re-select once (fix of the recursion)
                        w = (h + j) % n
                        cl = (100 * L[w]) // tot if tot else 0
                        if best < 0 or cl < llmin:
                            llmin = cl
                            best = w
            L[best] += 1
            tot += 1
            out[i] = best
        self.loads[:] = L
        return np.asarray(out, dtype=np.int64)

