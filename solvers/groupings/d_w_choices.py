"""Head-aware groupings of Nasir et al., "When Two Choices Are not Enough: Balancing at Scale in Distributed
Stream Processing" (``d-choices-w-choices.txt``): D-Choices, W-Choices and the Round-Robin baseline.

Every source tracks the head H = {k : p_k ≥ θ} of its own sub-stream with a :class:`~solvers.sketches.SpaceSaving`
sketch (§III-A, Algorithm 1 ``UPDATESPACESAVING``); head keys get d ≥ 2 choices, tail keys the two choices of PKG
(Greedy-d process, §III-B). Loads are the source's local load vector (no feedback), as in PKG.

* **D-Choices** (§III-B, §IV-A): head keys use the Greedy-d process over F_1 … F_d with d from
  :func:`find_optimal_choices` (Proposition 4.1, Eq. 3); if d reaches n it switches to W-Choices.
* **W-Choices** (§III-B): head keys go to the least loaded of all n workers.
* **Round-Robin** (§III-B): head keys round-robin over all n workers, load-oblivious.

Defaults (Table III): θ = 1/(5n), ε = 10⁻⁴.

Fixes of the reference code's known bugs (``NOTES.md``):

* d is clamped to [2, n] (the reference can return d = 1, i.e. fewer choices than PKG);
* :func:`find_optimal_choices` checks Eq. 3 for EVERY prefix h = 1 … |H| (the reference checks only h = 1 and
  h = |H|);
* the sketch has at least 5n counters (default max(5n, ⌈2/θ⌉)) and a warm-up: nothing counts as head before
  ``warmup`` messages (default ⌈10/θ⌉ = 50n) and a head key needs an estimated count ≥ max(θ·N, ``min_count``)
  (default 5), so a key seen once or twice right after start is not "heavy". Why 10/θ: a key of true frequency
  just below θ has an expected count of k after k/θ messages, so its count crosses θ·N by chance with a
  probability that falls only as 1/√k; every time it does, W-Choices sends it to the least loaded of all n
  workers and the state stays there. Measured (``benchmarks/groupings_memory.py``, n = 100, z = 1.0, m = 10⁷):
  W-C memory / the paper's PKG estimate 1.302 with ⌈1/θ⌉, 1.289 with ⌈10/θ⌉ (the paper's model: 1.25),
  imbalance unchanged (3·10⁻⁷); keys ranked 51–1000 got 57 extra (key, worker) pairs, now 7;
* messages are counted (the reference's Storm run never counted them, so its D-C behaved as W-C).

Deviation (documented): Algorithm 1 calls FINDOPTIMALCHOICES on every message; here d is recomputed every
``d_interval`` messages of the source (default 1000) from the sketch's current head. d depends only on the head's
estimated frequencies, which move by O(1/N) per message (right after warm-up, when N < ``d_interval``, d is
refreshed at N + N, i.e. ever less often while the estimates settle).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from solvers.errors import InvalidInput
from solvers.groupings.base import Grouping, ProbeSequence, check_float, check_int, choice
from solvers.sketches import SpaceSaving

__all__ = ["find_optimal_choices", "DChoices", "WChoices", "RoundRobinHead"]


def find_optimal_choices(head_freqs: Sequence[float] | np.ndarray, n: int, eps: float = 1e-4,
                         tail: float | None = None) -> int:
    """FINDOPTIMALCHOICES (D-C paper §IV-A): the smallest d ∈ [2, n] satisfying Proposition 4.1 (Eq. 3),

        Σ_{i≤h} p_i + (b_h/n)^d Σ_{h<i≤|H|} p_i + (b_h/n)^2 Σ_{i>|H|} p_i ≤ b_h (1/n + ε),
        b_h = n − n ((n−1)/n)^{h·d},

    for EVERY prefix h = 1 … |H| of the head (sorted by decreasing frequency). The search starts at
    max(2, ⌈p_1·n⌉) (the lower bound p_1 ≤ d/n) and increases d; it returns n when no d < n satisfies all
    constraints (the caller then behaves as W-Choices).

    Parameters
    ----------
    head_freqs : frequencies p_i of the head keys (any order; normalised by the total number of messages).
    n : number of workers.
    eps : imbalance tolerance ε.
    tail : total frequency of the keys outside the head; default 1 − Σ head (clamped at 0).

    Returns d (an int in [min(2, n), n]). Cost O(|H|) numpy work per candidate d, at most n candidates.
    """
    n = check_int("workers", n)
    eps = check_float("eps", eps, lo=0.0, lo_open=False)
    p = np.sort(np.asarray(head_freqs, dtype=float))[::-1]
    if p.size and (not np.all(np.isfinite(p)) or p[-1] < 0):
        raise InvalidInput("head_freqs", "frequencies must be finite and >= 0")
    if n <= 2:
        return n
    if p.size == 0:
        return 2
    if tail is None:
        tail = max(0.0, 1.0 - float(p.sum()))
    prefix = np.cumsum(p)
    rest = prefix[-1] - prefix
    h = np.arange(1, p.size + 1, dtype=float)
    d0 = max(2, math.ceil(p[0] * n - 1e-12))
    if d0 >= n:
        return n
    d = np.arange(d0, n, dtype=float)[:, None]                # all candidates at once, smallest first
    b = n - n * ((n - 1) / n) ** (h[None, :] * d)
    lhs = prefix[None, :] + (b / n) ** d * rest[None, :] + (b / n) ** 2 * tail
    ok = np.all(lhs <= b * (1.0 / n + eps) + 1e-15, axis=1)
    hit = np.flatnonzero(ok)
    return int(d0 + hit[0]) if hit.size else n


class _HeadGrouping(Grouping):
    """Shared machinery: the per-source sketch, the head test and PKG for the tail."""

    mode = "d"

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0, theta: float | None = None,
                 eps: float = 1e-4, counters: int | None = None, warmup: int | None = None, d_interval: int = 1000,
                 min_count: int = 5) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        n = self.n
        self.theta = check_float("theta", 1.0 / (5 * n) if theta is None else theta, lo=0.0, hi=1.0)
        self.eps = check_float("eps", eps, lo=0.0, lo_open=False)
        default_counters = max(5 * n, math.ceil(2.0 / self.theta))
        self.counters = check_int("counters", default_counters if counters is None else counters)
        if self.counters < 5 * n:
            raise InvalidInput("counters", f"the head sketch needs at least 5n = {5 * n} counters, got {counters}")
        self.warmup = check_int("warmup", math.ceil(10.0 / self.theta) if warmup is None else warmup, lo=0)
        self.min_count = check_int("min_count", min_count, lo=1)
        self.d_interval = check_int("d_interval", d_interval)
        self.sketch = SpaceSaving(self.counters, warmup=self.warmup)
        self.d = 2                 # current number of choices for head keys (D-C)
        self.max_d = 2             # largest d used so far
        self._next_d_update = 0
        self._cands: dict[int, list[int]] = {}  # head key -> list of its n hash choices F_1 … F_n
        self._rr = self.source_index % n
        self._seq = ProbeSequence(n, self.seed)
        self._heaps: dict[int, Any] = {}  # head key -> (d, lazy heap of (load, position, worker)) for D-Choices

    def head(self) -> dict[Hashable, float]:
        """Current head {key: estimated frequency} of this source (empty before warm-up)."""
        hh = self.sketch.heavy_hitters(self.theta)
        n = max(self.sketch.n, 1)
        return {k: f for k, f in hh.items() if f * n >= self.min_count}

    def _update_d(self) -> None:
        hh = self.head()
        self.d = find_optimal_choices(list(hh.values()), self.n, self.eps)
        self.max_d = max(self.max_d, self.d)

    def _candidates(self, key: int) -> list[int]:
        c = self._cands.get(key)
        if c is None:
            c = self._seq.of(key, 0, self.n)
            self._cands[key] = c
        return c

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        n = self.n
        c1 = choice(ids, n, self.seed, 0).tolist()
        c2 = choice(ids, n, self.seed, 1).tolist()
        L = self.loads.tolist()
        # lazy min-heap over (load, worker): one entry per worker, possibly stale (loads only grow), fixed when
        # it reaches the top; the fixed top is exactly min(range(n), key=L) including the lowest-index tie-break
        heap = [(L[w], w) for w in range(n)]
        heapq.heapify(heap)
        hreplace = heapq.heapreplace
        heaps = self._heaps
        ss = self.sketch
        upd = ss.update
        theta = self.theta
        warmup = self.warmup
        min_count = self.min_count
        mode = self.mode
        out = [0] * len(c1)
        for i, k in enumerate(ids.tolist()):
            c = upd(k)
            N = ss.n
            if N >= warmup and c >= min_count and c >= theta * N:
                if mode == "w":
                    lw, a = heap[0]
                    while lw != L[a]:
                        hreplace(heap, (L[a], a))
                        lw, a = heap[0]
                elif mode == "rr":
                    a = self._rr
                    self._rr = (a + 1) % n
                else:
                    if N >= self._next_d_update:
                        self._update_d()
                        # early estimates are crude: refresh at N + min(d_interval, N) (doubling until then)
                        self._next_d_update = N + min(self.d_interval, N)
                    d = self.d
                    if d >= n:
                        lw, a = heap[0]
                        while lw != L[a]:
                            hreplace(heap, (L[a], a))
                            lw, a = heap[0]
                    else:
                        # Greedy-d over F_1(k) … F_d(k): a lazy heap per head key over its distinct candidates,
                        # ordered by (load, position in F order) = min(F_1..F_d, key=load) with its tie-break
                        hp = heaps.get(k)
                        if hp is None or hp[0] != d:
                            seen = set()
                            entries = []
                            for pos, w in enumerate(self._candidates(k)[:d]):
                                if w not in seen:
                                    seen.add(w)
                                    entries.append((L[w], pos, w))
                            heapq.heapify(entries)
                            hp = (d, entries)
                            heaps[k] = hp
                        hk = hp[1]
                        lw, pos, a = hk[0]
                        while lw != L[a]:
                            hreplace(hk, (L[a], pos, a))
                            lw, pos, a = hk[0]
            else:
                a = c1[i]
                b = c2[i]
                if L[b] < L[a]:
                    a = b
            L[a] += 1
            out[i] = a
        self.loads[:] = L
        return np.asarray(out, dtype=np.int64)


class DChoices(_HeadGrouping):
    """D-Choices (D-C paper §III-B, Algorithm 1, d from Proposition 4.1): head keys use the least loaded of
    F_1(k) … F_d(k); tail keys use PKG. A head key reaches at most d workers (d ≤ :attr:`max_d`). Parameters:
    ``theta`` (head threshold, default 1/(5n)), ``eps`` (ε, default 10⁻⁴), ``counters``, ``warmup``,
    ``d_interval`` (see the module docstring for the fixes and the deviation)."""

    name = "dchoices"
    mode = "d"


class WChoices(_HeadGrouping):
    """W-Choices (D-C paper §III-B): head keys go to the least loaded of ALL n workers (ties to the lowest
    index); tail keys use PKG."""

    name = "wchoices"
    mode = "w"


class RoundRobinHead(_HeadGrouping):
    """Round-Robin (D-C paper §III-B baseline): head keys round-robin over all n workers, regardless of load;
    tail keys use PKG."""

    name = "rr"
    mode = "rr"
