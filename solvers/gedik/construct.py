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

from dataclasses import dataclass

import numpy as np

from solvers.gedik.model import Config, beta, theta, utility

__all__ = ["Instance", "scan", "redist", "readj", "construct", "ALGORITHMS"]

ALGORITHMS = ("scan", "redist", "readj")


@dataclass
class Instance:
    """Input of a construction (all arrays aligned; channels are 0-based, -1 = unknown)."""

    channels: int                 # N^{t+1}
    freqs: np.ndarray             # (R,) f of the tracked items D_p^{t+1}
    old: np.ndarray               # (R,) p^t(d), -1 when there is no previous function
    hc_new: np.ndarray            # (R,) H_c^{t+1}(d)
    o_freqs: np.ndarray | None = None   # (Ro,) f of D_o (tracked before, not now)
    o_old: np.ndarray | None = None     # (Ro,) p^t(d) for D_o
    o_hc_new: np.ndarray | None = None  # (Ro,) H_c^{t+1}(d) for D_o
    has_previous: bool = True

    def __post_init__(self):
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
    """Per-construction precomputation: β values of the active resources, θ, migration baseline."""

    def __init__(self, inst: Instance, cfg: Config):
        self.n = inst.channels
        self.cfg = cfg
        act = cfg.active
        self.B = np.array([beta(cfg.resources[k], inst.freqs) for k in act]).reshape(len(act), len(inst.freqs))
        self.theta = np.array([theta(cfg.alpha[k], self.n) for k in act]).reshape(len(act))
        self.K = len(act)
        self.s = beta(cfg.resources[0], inst.freqs)
        s_o = beta(cfg.resources[0], inst.o_freqs)
        self.mig = inst.has_previous
        self.old = inst.old if inst.has_previous else np.full(len(inst.freqs), -1)
        # Eq. 18: migration of items no longer tracked, and the ideal migration over D_a = D_p^t ∪ D_p^{t+1}
        self.m0 = float(s_o[inst.o_old != inst.o_hc_new].sum()) if inst.has_previous else 0.0
        self.mbar = float(self.s.sum() + s_o.sum()) / self.n
        self.U = cfg.utility

    def gamma(self, m):
        if not self.mig or self.mbar <= 0:
            return np.zeros_like(np.asarray(m, dtype=np.float64))
        return np.asarray(m, dtype=np.float64) / self.mbar

    def rho(self, newmax, newmin, total):
        """ρ from (K, ...) arrays of new max/min and (K, ...) totals (geometric mean over K)."""
        if self.K == 0:
            return np.zeros(newmax.shape[1:])
        mean = total / self.n
        th = self.theta.reshape((self.K,) + (1,) * (newmax.ndim - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            rk = np.where(mean > 0, (newmax - newmin) / (th * mean), 0.0)
        if self.K == 1:
            return rk[0]
        return np.prod(rk, axis=0) ** (1.0 / self.K)


def _add_eval(ctx: _Ctx, L: np.ndarray, V: np.ndarray):
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


def scan(inst: Instance, cfg: Config) -> np.ndarray:
    """Algorithm 2 (scan, §4.2.2): items in decreasing frequency, each placed on the channel of best utility
    U(ρ(H_p ∪ {d⇒l}), γ); ties go to the lowest channel index. O(R·N)."""
    ctx = _Ctx(inst, cfg)
    n, R = inst.channels, len(inst.freqs)
    out = np.full(R, -1, dtype=np.int64)
    L = np.zeros((ctx.K, n))
    m = ctx.m0
    lanes = np.arange(n)
    for d in np.argsort(-inst.freqs, kind="stable"):
        a = _add_eval(ctx, L, ctx.B[:, d:d + 1])[0]
        g = ctx.gamma(m + ctx.s[d] * (lanes != ctx.old[d]))
        j = int(np.argmin(utility(ctx.U, a, g)))
        out[d] = j
        L[:, j] += ctx.B[:, d]
        if ctx.mig and j != ctx.old[d]:
            m += ctx.s[d]
    return out


def redist(inst: Instance, cfg: Config) -> np.ndarray:
    """Algorithm 3 (redist, §4.2.3): at each step, among all unplaced items and all channels, place the one with
    the lowest U(ρ, γ)/f(c) (best utility per volume). O(R²·N)."""
    ctx = _Ctx(inst, cfg)
    n, R = inst.channels, len(inst.freqs)
    out = np.full(R, -1, dtype=np.int64)
    L = np.zeros((ctx.K, n))
    m = ctx.m0
    lanes = np.arange(n)
    cand = np.argsort(-inst.freqs, kind="stable")  # ties between items go to the more frequent one
    with np.errstate(divide="ignore"):
        inv_f = np.where(inst.freqs > 0, 1.0 / inst.freqs, np.inf)
    while len(cand):
        a = _add_eval(ctx, L, ctx.B[:, cand])                              # (C, N)
        g = ctx.gamma(m + ctx.s[cand, None] * (lanes[None, :] != ctx.old[cand, None]))
        u = utility(ctx.U, a, g) * inv_f[cand, None]
        flat = int(np.argmin(u))
        ci, j = divmod(flat, n)
        d = cand[ci]
        out[d] = j
        L[:, j] += ctx.B[:, d]
        if ctx.mig and j != ctx.old[d]:
            m += ctx.s[d]
        cand = np.delete(cand, ci)
    return out


def _top3(L: np.ndarray, largest: bool):
    """Top-3 (or bottom-3) values and indices per row of a (K, N) matrix, padded with ∓inf / -1."""
    K, n = L.shape
    order = np.argsort(-L if largest else L, axis=1)[:, :3]
    vals = np.take_along_axis(L, order, axis=1)
    if n < 3:
        pad = 3 - n
        vals = np.concatenate([vals, np.full((K, pad), -np.inf if largest else np.inf)], axis=1)
        order = np.concatenate([order, np.full((K, pad), -1)], axis=1)
    return vals, order


def _excl(vals, idx, i, j):
    """Per candidate (i, j): first of the top-3 values whose channel is neither i nor j → (K, C)."""
    out = vals[:, 2:3] + 0.0 * i[None, :]
    for r in (1, 0):
        ok = (idx[:, r:r + 1] != i[None, :]) & (idx[:, r:r + 1] != j[None, :])
        out = np.where(ok, vals[:, r:r + 1], out)
    return out


def readj(inst: Instance, cfg: Config, stats: dict | None = None) -> np.ndarray:
    """Algorithm 4 (readj, §4.2.4): start from the old placement and apply moves ⟨i, d1, j, ∅⟩ and swaps
    ⟨i, d1, j, d2⟩ (Eq. 21) while one of them strictly reduces the balance penalty ρ; among those, apply the one
    with the best gain (u − u')/|f(d1) − f(d2)|, u' = U(ρ', (m + M(p^t, w))/m̄) with M from Eq. 22.

    Start: tracked items keep p^t(d) (new items their old consistent-hash channel); items whose channel no longer
    exists (N decreased) take H_c^{t+1}(d); without a previous function, items start at H_c^{t+1}(d).
    Each item moves at most ``cfg.move_limit`` (c = 5) times. The listing's ``u ← 0`` is read as "the utility of
    the current mapping". Only readjustments involving a channel that holds a max or min load of some active
    resource are evaluated: any other one cannot lower ρ (exact pruning). With ``cfg.readj_require_gain`` a step
    must also lower U (the text's "until there are no readjustments that improve the utility"); the default follows
    the listing, where the utility only ranks the ρ-reducing steps. With ``stats={"trace": True}`` the applied
    steps (d1, d2 or -1, i, j) are recorded in ``stats["readj_trace"]``, the start mapping in ``stats["readj_start"]``.
    """
    ctx = _Ctx(inst, cfg)
    n, R = inst.channels, len(inst.freqs)
    ch = np.where((ctx.old >= 0) & (ctx.old < n), ctx.old, inst.hc_new).astype(np.int64)
    start = ch.copy()
    if ctx.K == 0 or R == 0 or n == 1:
        return ch
    f = inst.freqs
    L = np.zeros((ctx.K, n))
    for k in range(ctx.K):
        L[k] = np.bincount(ch, weights=ctx.B[k], minlength=n)
    total = L.sum(axis=1)
    m = ctx.m0 + (float(ctx.s[(ch != ctx.old)].sum()) if ctx.mig else 0.0)
    rho_cur = float(ctx.rho(L.max(axis=1)[:, None], L.min(axis=1)[:, None], total[:, None])[0])
    u_cur = float(utility(ctx.U, rho_cur, ctx.gamma(m)))
    moves = np.zeros(R, dtype=np.int64)
    steps = 0
    trace = stats.setdefault("readj_trace", []) if (stats is not None and stats.get("trace")) else None
    tol = 1e-12
    while True:
        free = np.flatnonzero(moves < cfg.move_limit)
        if len(free) == 0:
            break
        Lmax, Lmin = L.max(axis=1), L.min(axis=1)
        S = np.zeros(n, dtype=bool)
        for k in range(ctx.K):
            S |= (L[k] >= Lmax[k] * (1 - 1e-12)) | (L[k] <= Lmin[k] * (1 + 1e-12) + 0.0)
        chf = ch[free]
        onS = S[chf]
        # moves: (d1 on i) -> j, with i ∈ S or j ∈ S
        d_mv = np.repeat(free, n)
        j_mv = np.tile(np.arange(n), len(free))
        i_mv = ch[d_mv]
        keep = (j_mv != i_mv) & (S[i_mv] | S[j_mv])
        d1 = [d_mv[keep]]
        d2 = [np.full(int(keep.sum()), -1)]
        # swaps: d1 on an S channel with any d2 elsewhere (pairs with both on S channels counted once)
        a_idx = free[onS]
        if len(a_idx):
            A = np.repeat(a_idx, len(free))
            Bq = np.tile(free, len(a_idx))
            ok = (ch[A] != ch[Bq]) & (~S[ch[Bq]] | (A < Bq)) & (f[A] != f[Bq])
            d1.append(A[ok])
            d2.append(Bq[ok])
        d1 = np.concatenate(d1)
        d2 = np.concatenate(d2)
        if len(d1) == 0:
            break
        is_swap = d2 >= 0
        d2c = np.where(is_swap, d2, 0)
        i = ch[d1]
        j = np.where(is_swap, ch[d2c], 0)
        j[~is_swap] = j_mv[keep]
        v1 = ctx.B[:, d1]
        v2 = np.where(is_swap[None, :], ctx.B[:, d2c], 0.0)
        delta = v1 - v2                                   # (K, C): leaves i, arrives at j
        new_i = L[:, i] - delta
        new_j = L[:, j] + delta
        tv, ti = _top3(L, True)
        bv, bi = _top3(L, False)
        newmax = np.maximum(np.maximum(_excl(tv, ti, i, j), new_i), new_j)
        newmin = np.minimum(np.minimum(_excl(bv, bi, i, j), new_i), new_j)
        a = ctx.rho(newmax, newmin, np.broadcast_to(total[:, None], newmax.shape))
        good = a < rho_cur * (1 - tol) - tol
        if not good.any():
            break
        sel = np.flatnonzero(good)
        if ctx.mig:
            s1, s2 = ctx.s[d1[sel]], np.where(is_swap[sel], ctx.s[d2c[sel]], 0.0)
            o1, o2 = ctx.old[d1[sel]], ctx.old[d2c[sel]]
            isel, jsel = i[sel], j[sel]
            M = (s1 * (o1 == isel) - s1 * (o1 == jsel)
                 + np.where(is_swap[sel], s2 * (o2 == jsel) - s2 * (o2 == isel), 0.0))   # Eq. 22
        else:
            M = np.zeros(len(sel))
        u_new = utility(ctx.U, a[sel], ctx.gamma(m + M))
        df = np.abs(f[d1[sel]] - np.where(is_swap[sel], f[d2c[sel]], 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = (u_cur - u_new) / df
        if cfg.readj_require_gain:
            ok = u_new < u_cur - tol
            if not ok.any():
                break
            gain = np.where(ok, gain, -np.inf)
        b = int(np.argmax(gain))
        c = sel[b]
        x, y = int(d1[c]), int(d2[c])
        ci, cj = int(i[c]), int(j[c])
        L[:, ci] -= delta[:, c]
        L[:, cj] += delta[:, c]
        ch[x] = cj
        moves[x] += 1
        if y >= 0:
            ch[y] = ci
            moves[y] += 1
        m += float(M[b])
        if trace is not None:
            trace.append((x, y, ci, cj))
        rho_cur = float(a[c])
        u_cur = float(u_new[b])
        steps += 1
    if stats is not None:
        stats["readj_steps"] = steps
        stats["readj_start"] = start
    return ch


def construct(algorithm: str, inst: Instance, cfg: Config, stats: dict | None = None) -> np.ndarray:
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
