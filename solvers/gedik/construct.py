"""Construction of the explicit hash H_p: scan (Alg. 2), redist (Alg. 3), readj (Alg. 4) — Gedik §4.2.

All three take the same :class:`Instance`: the tracked items of period t+1 (D_p^{t+1}) with their frequencies, the
channel each had under the previous function p^(t) (explicit entry or consistent hash), their channel under the new
consistent hash H_c^(t+1), and the items tracked at t but no longer (D_o) with the same information. They return
the channel (0-based) of every tracked item.

Metrics used inside (§4.2.1):

* migration penalty γ (Eq. 18) = [Σ_{d∈D_o} β_s(f)·1(p^t(d) ≠ H_c^{t+1}(d)) + Σ_{d∈H_p} β_s(f)·1(p^t(d) ≠ H_p(d))]
  / (Σ_{d∈D_a} β_s(f)/N^{t+1}). Algorithms 2–4 print other sets in the initial m and m̄ (D_p^{t+1}, D_n); those
  are typos against Eq. 18 and the text ("migration cost due to items not being tracked anymore", "ideal migration
  cost considering all items tracked for time periods t and t+1"), which we follow. Without a previous function
  nothing can migrate and γ = 0.
* balance penalty ρ (Eq. 19–20) over the items already placed, geometric mean over the non-constant resources
  (§4.4). Candidate placements are evaluated in bulk with numpy: the new max/min of a channel vector after changing
  one or two entries comes from its top-3/bottom-3 values, so a candidate costs O(K) instead of O(N).

Complexities as in the paper: scan O(R·N), redist O(R²·N), readj O(R²) per step with at most c·R steps (c = 5
moves per item, §4.2.4); R = |D_p^{t+1}|.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.gedik.model import Config, beta, theta, utility
from solvers.gedik.readjust import Readjustment

__all__ = ["Instance", "scan", "redist", "readj", "construct", "ALGORITHMS"]

ALGORITHMS = ("scan", "redist", "readj")


@dataclass
class Instance:
    """Input of a construction (all arrays aligned; channels are 0-based, -1 = unknown)."""

    channels: int                 # N^{t+1}
    freqs: np.ndarray             # (R,) f of the tracked items D_p^{t+1}
    old: np.ndarray               # (R,) p^t(d), -1 when there is no previous function
    hc_new: np.ndarray            # (R,) H_c^{t+1}(d)
    o_freqs: np.ndarray = field(default_factory=lambda: np.empty(0))   # (Ro,) f of D_o (tracked before, not now)
    o_old: np.ndarray = field(default_factory=lambda: np.empty(0))     # (Ro,) p^t(d) for D_o
    o_hc_new: np.ndarray = field(default_factory=lambda: np.empty(0))  # (Ro,) H_c^{t+1}(d) for D_o
    has_previous: bool = True

    def __post_init__(self) -> None:
        self.freqs = np.asarray(self.freqs, dtype=np.float64)
        self.old = np.asarray(self.old, dtype=np.int64)
        self.hc_new = np.asarray(self.hc_new, dtype=np.int64)
        for name in ("o_freqs", "o_old", "o_hc_new"):
            if getattr(self, name) is None:
                setattr(self, name, np.empty(0))
        self.o_freqs = np.asarray(self.o_freqs, dtype=np.float64)
        self.o_old = np.asarray(self.o_old, dtype=np.int64)
        self.o_hc_new = np.asarray(self.o_hc_new, dtype=np.int64)


class _Ctx:
    """Per-construction precomputation: β values of the active resources, θ, migration baseline.

    Active resources with the same function and tolerance have identical ρ_k; they are kept once with a weight
    (ρ = Π_k ρ_k^(w_k), Σ w_k = 1, the geometric mean of Eq. 20), which halves the work for LCL and LLL.
    """

    def __init__(self, inst: Instance, cfg: Config):
        self.n = inst.channels
        self.cfg = cfg
        act = cfg.active
        groups: dict[tuple[str, float], list[int]] = {}
        for k in act:
            groups.setdefault((cfg.resources[k], float(cfg.alpha[k])), []).append(k)
        keys = list(groups)
        self.K = len(keys)
        self.B = np.array([beta(fn, inst.freqs) for fn, _ in keys]).reshape(self.K, len(inst.freqs))
        self.theta = np.array([theta(a, self.n) for _, a in keys]).reshape(self.K)
        self.w = np.array([len(groups[k]) / len(act) for k in keys]).reshape(self.K)
        self.s = beta(cfg.resources[0], inst.freqs)
        s_o = beta(cfg.resources[0], inst.o_freqs)
        self.mig = inst.has_previous
        self.old = inst.old if inst.has_previous else np.full(len(inst.freqs), -1)
        # Eq. 18: migration of items no longer tracked, and the ideal migration over D_a = D_p^t ∪ D_p^{t+1}
        self.m0 = float(s_o[inst.o_old != inst.o_hc_new].sum()) if inst.has_previous else 0.0
        self.mbar = float(self.s.sum() + s_o.sum()) / self.n
        self.U = cfg.utility

    def gamma(self, m: Any) -> np.ndarray:
        if not self.mig or self.mbar <= 0:
            return np.zeros_like(np.asarray(m, dtype=np.float64))
        return np.asarray(m, dtype=np.float64) / self.mbar

    def combine(self, rk: np.ndarray) -> Any:
        """ρ from per-resource penalties rk (K, ...): weighted geometric mean (Eq. 20)."""
        if self.K == 1:
            return rk[0]
        w = self.w.reshape((self.K,) + (1,) * (rk.ndim - 1))
        return np.prod(rk ** w, axis=0)

    def rho(self, newmax: np.ndarray, newmin: np.ndarray, total: np.ndarray) -> Any:
        """ρ from (K, ...) arrays of new max/min and (K, ...) totals (geometric mean over K)."""
        if self.K == 0:
            return np.zeros(newmax.shape[1:])
        mean = total / self.n
        th = self.theta.reshape((self.K,) + (1,) * (newmax.ndim - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            rk = np.where(mean > 0, (newmax - newmin) / (th * mean), 0.0)
        return self.combine(rk)


def _add_eval(ctx: _Ctx, L: np.ndarray, V: np.ndarray) -> Any:
    """ρ after adding an item with values V (K, C) to each channel: returns (C, N)."""
    K, n = L.shape
    if K == 0:
        return np.zeros((V.shape[1], n))
    Lmax = L.max(axis=1)                        # (K,)
    srt = np.argsort(L, axis=1)
    m1 = L[np.arange(K), srt[:, 0]]
    m2 = L[np.arange(K), srt[:, 1]] if n > 1 else np.full(K, np.inf)
    min_excl = np.where(np.arange(n)[None, :] == srt[:, :1], m2[:, None], m1[:, None])  # (K, N)
    new_at = L[:, None, :] + V[:, :, None]      # (K, C, N)
    newmax = np.maximum(Lmax[:, None, None], new_at)
    newmin = np.minimum(min_excl[:, None, :], new_at)
    total = (L.sum(axis=1)[:, None] + V)[:, :, None]
    return ctx.rho(newmax, newmin, total)


def _tie_load(L: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Secondary key among placements of equal utility: the channel's load (each active resource normalised by
    its total) then its item count — the least loaded channel wins instead of the lowest index."""
    tot = L.sum(axis=1, keepdims=True)
    norm = np.divide(L, tot, out=np.zeros_like(L), where=tot > 0).sum(axis=0)
    return np.asarray(norm + 1e-9 * cnt / max(cnt.sum(), 1), dtype=np.float64)


def _tied(u: np.ndarray) -> np.ndarray:
    umin = np.min(u)
    return np.asarray(u <= umin + 1e-12 * max(1.0, abs(float(umin))))


class _Build:
    """The state a from-scratch construction (scan, redist) grows: the assignment so far, per-channel loads and
    item counts, the migration cost m so far, and the tie rule (see :func:`scan`)."""

    def __init__(self, inst: Instance, cfg: Config):
        self.ctx = _Ctx(inst, cfg)
        self.by_load = cfg.tie_break != "index"
        n = inst.channels
        self.out = np.full(len(inst.freqs), -1, dtype=np.int64)
        self.L = np.zeros((self.ctx.K, n))
        self.cnt = np.zeros(n)
        self.m = self.ctx.m0
        self.lanes = np.arange(n)

    def pick(self, tied: np.ndarray) -> int:
        """Among channels of equal utility: the least loaded (``tie_break="index"``: the lowest index)."""
        if len(tied) > 1 and self.by_load:
            return int(tied[np.argmin(_tie_load(self.L, self.cnt)[tied])])
        return int(tied[0])

    def place(self, d: int, j: int) -> None:
        ctx = self.ctx
        self.out[d] = j
        self.L[:, j] += ctx.B[:, d]
        self.cnt[j] += 1
        if ctx.mig and j != ctx.old[d]:
            self.m += ctx.s[d]


def scan(inst: Instance, cfg: Config) -> np.ndarray:
    """Algorithm 2 (scan, §4.2.2): items in decreasing frequency, each placed on the channel of best utility
    U(ρ(H_p ∪ {d⇒l}), γ). O(R·N).

    Ties: ρ (Eq. 19) only sees the max and min channel, so many placements have exactly the same utility (with two
    or more empty channels, all of them). The listing keeps the first (lowest index), which piles a from-scratch
    build onto the first channels; we keep the least loaded of the tied channels instead (``cfg.tie_break="index"``
    restores the listing's first, for the ablation in ``benchmarks.bench_gedik``).
    """
    b = _Build(inst, cfg)
    ctx = b.ctx
    for d in np.argsort(-inst.freqs, kind="stable"):
        a = _add_eval(ctx, b.L, ctx.B[:, d:d + 1])[0]
        g = ctx.gamma(b.m + ctx.s[d] * (b.lanes != ctx.old[d]))
        b.place(int(d), b.pick(np.flatnonzero(_tied(utility(ctx.U, a, g)))))
    return b.out


def redist(inst: Instance, cfg: Config) -> np.ndarray:
    """Algorithm 3 (redist, §4.2.3): at each step, among all unplaced items and all channels, place the one with
    the lowest U(ρ, γ)/f(c) (best utility per volume). O(R²·N). Ties: the most frequent tied item, on the least
    loaded of its tied channels (see :func:`scan`; ``cfg.tie_break="index"``: the lowest tied channel)."""
    b = _Build(inst, cfg)
    ctx = b.ctx
    cand = np.argsort(-inst.freqs, kind="stable")  # ties between items go to the more frequent one
    with np.errstate(divide="ignore"):
        inv_f = np.where(inst.freqs > 0, 1.0 / inst.freqs, np.inf)
    while len(cand):
        a = _add_eval(ctx, b.L, ctx.B[:, cand])                              # (C, N)
        g = ctx.gamma(b.m + ctx.s[cand, None] * (b.lanes[None, :] != ctx.old[cand, None]))
        tied = _tied(utility(ctx.U, a, g) * inv_f[cand, None])
        ci = int(np.argmax(tied.any(axis=1)))
        b.place(int(cand[ci]), b.pick(np.flatnonzero(tied[ci])))
        cand = np.delete(cand, ci)
    return b.out


def readj(inst: Instance, cfg: Config, stats: dict[str, Any] | None = None) -> np.ndarray:
    """Algorithm 4 (readj, §4.2.4): start from the old placement and apply moves ⟨i, d1, j, ∅⟩ and swaps
    ⟨i, d1, j, d2⟩ (Eq. 21) while one of them strictly reduces the balance penalty ρ; among those, apply the one
    with the best gain (u − u')/|f(d1) − f(d2)|, u' = U(ρ', (m + M(p^t, w))/m̄) with M from Eq. 22.

    Start: tracked items keep p^t(d) (new items their old consistent-hash channel); items whose channel no longer
    exists (N decreased) take H_c^{t+1}(d); without a previous function, items start at H_c^{t+1}(d).
    Each item moves at most ``cfg.move_limit`` (c = 5) times. The listing's ``u ← 0`` is read as "the utility of
    the current mapping". With ``cfg.readj_require_gain`` a step must also lower U (the text's "until there are no
    readjustments that improve the utility"); the default follows the listing, where the utility only ranks the
    ρ-reducing steps ("only uses the utility function for picking the best among those").

    Evaluation: a readjustment that touches no channel holding a max or min load of some active resource cannot
    lower any ρ_k (its max and min stay), so only readjustments with one end on such a channel S are evaluated
    (exact pruning). For each i ∈ S, one (items on i + ∅) × (items elsewhere + one empty slot per channel) block of
    numpy arrays holds all swaps and moves with an end on i; max/min of the untouched channels come from the
    top-3/bottom-3 loads. O(|S|·(R/N)·(R+N)) per step, at most c·R steps.

    With ``stats={"trace": True}`` the applied steps are recorded in ``stats["readj_trace"]`` as (mover, other or
    -1, from, to) — the mover goes from → to, the other (swaps) to → from — and the start in ``stats["readj_start"]``.
    """
    ctx = _Ctx(inst, cfg)
    n, R = inst.channels, len(inst.freqs)
    ch = np.where((ctx.old >= 0) & (ctx.old < n), ctx.old, inst.hc_new).astype(np.int64)
    start = ch.copy()
    steps = 0
    trace = stats.setdefault("readj_trace", []) if (stats is not None and stats.get("trace")) else None
    if not (ctx.K == 0 or R == 0 or n == 1):
        search = Readjustment(inst, ctx, ch)
        while (step := search.best_step()) is not None:
            search.apply(step)
            if trace is not None:
                trace.append(step.traced())
            steps += 1
    if stats is not None:
        stats["readj_steps"], stats["readj_start"] = steps, start
    return ch


def construct(algorithm: str, inst: Instance, cfg: Config, stats: dict[str, Any] | None = None) -> np.ndarray:
    """Run one of ``scan``, ``redist``, ``readj`` (channels of the tracked items)."""
    if inst.channels == 1:
        return np.zeros(len(inst.freqs), dtype=np.int64)
    if algorithm == "scan":
        return scan(inst, cfg)
    if algorithm == "redist":
        return redist(inst, cfg)
    if algorithm == "readj":
        return readj(inst, cfg, stats)
    raise ValueError(f"unknown construction algorithm {algorithm!r}")
