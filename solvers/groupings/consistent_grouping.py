"""Power of Random Choices and Consistent Grouping (Nasir et al., ``consistent-grouping-heterogeneous-cluster.txt``).

* **PORC** (§5.1): bins (virtual workers) have capacity ⌈(1+ε)·t/B⌉ (t = messages this source has routed
  including the current one, B bins); a key probes H_1(k), H_2(k), … (salted hashes, here
  ``hash64(k, derive_seed(seed, i))`` mod B) and goes to the first bin with spare capacity. H_1(k) is the
  key's *principal* bin. Probes are capped (``max_probes``, default 10·B); past the cap the least loaded bin is
  used so the bound still holds (``NOTES.md``: "cap the probes").
  Each decision equals the naïve probe walk: a per-key pointer to the first probe that may still have room is
  kept while the capacity is constant (bins only fill up) and cleared when the capacity grows.
* **CG** (§5.2): PORC over α·n virtual workers (α = 10 per worker) and a mapping virtual worker → worker.
  Workers signal *busy* (utilisation > 0.85) or *idle* (< 0.75) (§7.2), each at most once per period t0 (§6:
  t0 is "the minimum time period that each worker waits after sending a signal"); the source keeps two FCFS
  queues and pairs them: each pair moves ONE virtual worker from the longest-waiting busy worker to the
  longest-waiting idle worker ("pairing virtual workers": total virtual workers constant, no state migration —
  later messages of the moved virtual worker go to the new worker, partial state is merged downstream).
  The virtual worker moved is the one the busy worker received last (the first one it owns if none moved in).
  A worker always keeps at least one virtual worker.

Defaults follow the paper: ε = 0.01 (§7.2 Q1), α = 10, thresholds 0.75 / 0.85. ``utilisation`` is whatever the
caller measures; the simulator passes queue length / queue capacity (CG paper Table 4, "Resource Utilization").
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from solvers.errors import InvalidInput
from solvers.groupings.base import Grouping, ProbeSequence, check_float, check_int, choice

__all__ = ["PowerOfRandomChoices", "ConsistentGrouping"]


class _PorcCore:
    """PORC state over B bins for one source (local bin loads)."""

    def __init__(self, bins: int, seed: int, eps: float, max_probes: int | None):
        self.B = bins
        self.seed = seed
        self.eps = eps
        self.max_probes = max(2, int(max_probes)) if max_probes is not None else max(64, 10 * bins)
        self.loads = [0] * bins
        self.t = 0
        self._cap = -1
        self._first: dict[int, int] = {}  # key -> index of the first probe that may still have room (this period)
        self._probes: dict[int, list[int]] = {}  # key -> cached probe list H_1(k), H_2(k), ...
        self.overflows = 0          # messages that hit the probe cap
        self._seq = ProbeSequence(bins, seed)

    def capacity(self) -> int:
        return max(1, math.ceil((1.0 + self.eps) * max(self.t, 1) / self.B - 1e-9))

    def _extend(self, key: int, probes: list[int]) -> None:
        block = min(max(8, len(probes)), self.max_probes - len(probes))
        if block <= 0:
            return
        probes.extend(self._seq.of(key, len(probes), block))

    def route(self, ids: np.ndarray) -> list[int]:
        B = self.B
        c1 = choice(ids, B, self.seed, 0).tolist()
        L = self.loads
        t = self.t
        cap = self._cap
        first = self._first
        probes_of = self._probes
        one_eps = 1.0 + self.eps
        maxp = self.max_probes
        out = [0] * len(c1)
        for i, k in enumerate(ids.tolist()):
            t += 1
            c = math.ceil(one_eps * t / B - 1e-9)
            if c != cap:
                cap = c
                first.clear()
            b = c1[i]
            if L[b] >= cap:
                j = first.get(k, 1)
                pr = probes_of.get(k)
                if pr is None:
                    pr = [b]
                    probes_of[k] = pr
                while True:
                    if j >= len(pr):
                        if len(pr) >= maxp:
                            b = -1
                            break
                        self._extend(k, pr)
                        continue
                    b = pr[j]
                    if L[b] < cap:
                        break
                    j += 1
                if b < 0:
                    b = min(range(B), key=L.__getitem__)
                    self.overflows += 1
                    j = len(pr)
                first[k] = j
            L[b] += 1
            out[i] = b
        self.t = t
        self._cap = cap
        return out


class PowerOfRandomChoices(Grouping):
    """PORC over the n workers as bins (CG paper §5.1). Parameters: ``eps`` (default 0.01), ``max_probes``.
    Max local load ≤ ⌈(1+ε)·t/n⌉."""

    name = "porc"

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0, eps: float = 0.01,
                 max_probes: int | None = None) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        eps = check_float("eps", eps)
        if max_probes is not None:
            check_int("max_probes", max_probes, lo=2)
        self.core = _PorcCore(self.n, self.seed, eps, max_probes)

    @property
    def eps(self) -> float:
        return self.core.eps

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        out = np.asarray(self.core.route(ids), dtype=np.int64)
        self.loads[:] = self.core.loads
        return out


class ConsistentGrouping(Grouping):
    """CG (CG paper §5.2): PORC over ``alpha``·n virtual workers + virtual workers moved from busy to idle
    workers, one per period ``t0`` seconds. Parameters: ``alpha`` (10), ``eps`` (0.01), ``t0`` (simulated
    seconds, default 5), ``busy`` (0.85), ``idle`` (0.75), ``max_probes``."""

    name = "cg"
    time_driven = True
    uses_signals = True

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0, alpha: int = 10, eps: float = 0.01,
                 t0: float = 5.0, busy: float = 0.85, idle: float = 0.75, max_probes: int | None = None) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        self.alpha = check_int("alpha", alpha)
        self.t0 = check_float("t0", t0, lo=0.0, lo_open=False)
        self.busy = check_float("busy", busy)
        self.idle = check_float("idle", idle, lo=0.0, lo_open=False)
        if self.idle > self.busy:
            raise InvalidInput("idle", f"idle threshold {idle} must be <= busy threshold {busy}")
        eps = check_float("eps", eps)
        self.V = self.alpha * self.n
        self.core = _PorcCore(self.V, self.seed, eps, max_probes)
        # virtual worker v starts on worker v mod n; owned[w] is a stack (last received on top)
        self.vw_owner = np.arange(self.V, dtype=np.int64) % self.n
        self.owned = [list(range(w, self.V, self.n)) for w in range(self.n)]
        self._busy_q: deque[int] = deque()
        self._idle_q: deque[int] = deque()
        self._last_signal = np.full(self.n, -math.inf)
        self.moves: list[tuple[float, int, int, int]] = []  # (time, vw, from, to)

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        vws = np.asarray(self.core.route(ids), dtype=np.int64)
        out = self.vw_owner[vws]
        self.loads += np.bincount(out, minlength=self.n)
        return out

    def virtual_worker_counts(self) -> np.ndarray:
        """Number of virtual workers per worker (sums to α·n at all times)."""
        return np.bincount(self.vw_owner, minlength=self.n)

    def observe(self, now: float, utilisation: np.ndarray) -> None:
        u = np.asarray(utilisation, dtype=float)
        if u.shape != (self.n,):
            raise InvalidInput("utilisation", f"expected {self.n} values, got shape {u.shape}")
        # a worker signals at most once per t0 (§6: "the minimum time period that each worker waits after
        # sending a signal"); FCFS queues of the workers currently signalling, stale entries dropped
        ready = (now - self._last_signal) >= self.t0
        busy = set(np.flatnonzero((u > self.busy) & ready).tolist())
        idle = set(np.flatnonzero((u < self.idle) & ready).tolist())
        self._busy_q = deque(w for w in self._busy_q if w in busy)
        self._idle_q = deque(w for w in self._idle_q if w in idle)
        for w in sorted(busy - set(self._busy_q)):
            self._busy_q.append(w)
        for w in sorted(idle - set(self._idle_q)):
            self._idle_q.append(w)
        # pair every busy worker with an idle one: one virtual worker moves per pair
        while self._busy_q and self._idle_q:
            b = self._busy_q.popleft()
            if len(self.owned[b]) <= 1:
                continue
            i = self._idle_q.popleft()
            v = self.owned[b].pop()
            self.owned[i].append(v)
            self.vw_owner[v] = i
            self.moves.append((float(now), int(v), int(b), int(i)))
            self._last_signal[b] = now
            self._last_signal[i] = now
