"""readj's search (Gedik §4.2.4, Algorithm 4): the readjustments ⟨i, d1, j, d2⟩ of Eq. 21 — moves (d2 = ∅) and
swaps — evaluated in numpy blocks, one per channel i that holds a max or min load, and the one of best gain applied.

:func:`solvers.gedik.construct.readj` starts the search and runs it to the end; the pruning and the block layout
are described there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from solvers.gedik.model import utility

if TYPE_CHECKING:
    from solvers.gedik.construct import Instance, _Ctx

__all__ = ["Readjustment", "Step"]


def _top3(L: np.ndarray, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Top-3 (or bottom-3) values and indices per row of a (K, N) matrix, padded with ∓inf / -1."""
    K, n = L.shape
    order = np.argsort(-L if largest else L, axis=1)[:, :3]
    vals = np.take_along_axis(L, order, axis=1)
    if n < 3:
        pad = 3 - n
        vals = np.concatenate([vals, np.full((K, pad), -np.inf if largest else np.inf)], axis=1)
        order = np.concatenate([order, np.full((K, pad), -1)], axis=1)
    return vals, order


def _excl(vals: np.ndarray, idx: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Per candidate (i, j): first of the top-3 values whose channel is neither i nor j → (K, C)."""
    out = vals[:, 2:3] + 0.0 * i[None, :]
    for r in (1, 0):
        ok = (idx[:, r:r + 1] != i[None, :]) & (idx[:, r:r + 1] != j[None, :])
        out = np.where(ok, vals[:, r:r + 1], out)
    return out


def _at(values: np.ndarray, items: np.ndarray, missing: Any) -> np.ndarray:
    """``values`` of each item, ``missing`` where the item is -1 (the ∅ side of a move)."""
    return np.asarray(np.where(items >= 0, values[np.maximum(items, 0)], missing))


@dataclass
class Step:
    """One readjustment ⟨i, d1, j, d2⟩ (Eq. 21): d1 (or -1) leaves channel i for j, d2 (or -1) goes from j to i;
    ``dvec`` (K,) is the load that leaves i for j. With its gain, the ρ' and u' it leads to and its M (Eq. 22)."""

    gain: float
    rho: float
    u: float
    mig: float
    d1: int
    d2: int
    i: int
    j: int
    dvec: np.ndarray

    def traced(self) -> tuple[int, int, int, int]:
        """(mover, other or -1, from, to), see :func:`readj`."""
        return (self.d1, self.d2, self.i, self.j) if self.d1 >= 0 else (self.d2, -1, self.j, self.i)


class Readjustment:
    """readj's search (Algorithm 4): the channel of every tracked item (updated in place), the per-resource
    channel loads L (K, N), the migration cost m, the current ρ and u, and how often each item has moved."""

    TOL = 1e-12

    def __init__(self, inst: Instance, ctx: _Ctx, ch: np.ndarray):
        self.ctx, self.f, self.ch = ctx, inst.freqs, ch
        self.n = n = inst.channels
        K, B = ctx.K, ctx.B
        self.L = L = np.array([np.bincount(ch, weights=B[k], minlength=n) for k in range(K)])
        total = L.sum(axis=1)
        with np.errstate(divide="ignore"):
            scale = np.where(total > 0, 1.0 / (ctx.theta * total / n), 0.0)
        self.sc3 = scale[:, None, None]
        self.m = ctx.m0 + (float(ctx.s[ch != ctx.old].sum()) if ctx.mig else 0.0)
        self.rho = float(ctx.combine((L.max(axis=1) - L.min(axis=1)) * scale))
        self.u = float(utility(ctx.U, self.rho, ctx.gamma(self.m)))
        self.moves = np.zeros(len(ch), dtype=np.int64)
        self.lanes = np.arange(n)
        self.zcol = np.zeros((K, 1))

    def best_step(self) -> Step | None:
        """The ρ-reducing readjustment of best gain, or None when no readjustment reduces ρ."""
        L, tol = self.L, self.TOL
        free = self.moves < self.ctx.cfg.move_limit
        Lmax, Lmin = L.max(axis=1), L.min(axis=1)
        S = np.zeros(self.n, dtype=bool)  # the channels holding a max or min load of some resource
        for k in range(self.ctx.K):
            S |= (L[k] >= Lmax[k] - tol * abs(Lmax[k])) | (L[k] <= Lmin[k] + tol * abs(Lmin[k]))
        top, bottom = _top3(L, True), _top3(L, False)
        best = None
        for i in np.flatnonzero(S).tolist():
            step = self._best_on(i, free, S, top, bottom)
            if step is not None and (best is None or step.gain > best.gain):
                best = step
        return best

    def _best_on(self, i: int, free: np.ndarray, S: np.ndarray, top: tuple[np.ndarray, np.ndarray],
                 bottom: tuple[np.ndarray, np.ndarray]) -> Step | None:
        """The best ρ-reducing readjustment with one end on channel i: one block of all moves and swaps (items on
        i + ∅) × (items elsewhere not on a lower channel of S + one empty slot per other channel)."""
        ctx, L, ch, lanes, n = self.ctx, self.L, self.ch, self.lanes, self.n
        D1 = np.flatnonzero(free & (ch == i))
        D2 = np.flatnonzero(free & (ch != i) & (~S[ch] | (ch > i)))
        V1 = np.concatenate([ctx.B[:, D1], self.zcol], axis=1)                  # (K, r): last row = ∅
        V2 = np.concatenate([ctx.B[:, D2], np.zeros((ctx.K, n - 1))], axis=1)   # (K, c): empty slot per channel
        jcol = np.concatenate([ch[D2], lanes[lanes != i]])
        # max / min of the channels other than i and j, per j
        exmax = _excl(*top, np.full(n, i), lanes)[:, jcol]                     # (K, c)
        exmin = _excl(*bottom, np.full(n, i), lanes)[:, jcol]
        delta = V1[:, :, None] - V2[:, None, :]                                 # (K, r, c): leaves i, arrives at j
        new_i = L[:, i][:, None, None] - delta
        new_j = delta + L[:, jcol][:, None, :]
        nmax = np.maximum(new_i, new_j)
        np.maximum(nmax, exmax[:, None, :], out=nmax)
        nmin = np.minimum(new_i, new_j, out=new_i)
        np.minimum(nmin, exmin[:, None, :], out=nmin)
        nmax -= nmin
        nmax *= self.sc3
        a = ctx.combine(nmax)                                                   # (r, c)
        rr, cc = np.nonzero(a < self.rho * (1 - self.TOL) - self.TOL)
        if len(rr) == 0:
            return None
        d1 = np.where(rr < len(D1), D1[np.minimum(rr, len(D1) - 1)] if len(D1) else -1, -1)
        d2 = np.where(cc < len(D2), D2[np.minimum(cc, len(D2) - 1)] if len(D2) else -1, -1)
        jj, av = jcol[cc], a[rr, cc]
        ranked = self._rank(i, d1, d2, jj, av)
        if ranked is None:
            return None
        b, gain, u_new, mig = ranked
        return Step(gain, float(av[b]), u_new, mig, int(d1[b]), int(d2[b]), i, int(jj[b]),
                     delta[:, rr[b], cc[b]].copy())

    def _rank(self, i: int, d1: np.ndarray, d2: np.ndarray, jj: np.ndarray,
              av: np.ndarray) -> tuple[int, float, float, float] | None:
        """The best of the ρ-reducing candidates ⟨i, d1, jj, d2⟩ with their ρ' ``av``, by the gain
        (u − u')/|f(d1) − f(d2)| (with ``readj_require_gain``, only those that lower u): its index, gain, u' and M
        (Eq. 22); None when none qualifies."""
        ctx, s, old = self.ctx, self.ctx.s, self.ctx.old
        if ctx.mig:
            s1, s2, o1, o2 = _at(s, d1, 0.0), _at(s, d2, 0.0), _at(old, d1, -1), _at(old, d2, -1)
            M = s1 * (o1 == i) - s1 * (o1 == jj) + s2 * (o2 == jj) - s2 * (o2 == i)   # Eq. 22
        else:
            M = np.zeros(len(av))
        u_new = utility(ctx.U, av, ctx.gamma(self.m + M))
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = (self.u - u_new) / np.abs(_at(self.f, d1, 0.0) - _at(self.f, d2, 0.0))
        if ctx.cfg.readj_require_gain:
            gain = np.where(u_new < self.u - self.TOL, gain, -np.inf)
        b = int(np.argmax(gain))
        if not np.isfinite(gain[b]) and gain[b] < 0:
            return None
        return b, float(gain[b]), float(u_new[b]), float(M[b])

    def apply(self, step: Step) -> None:
        """Apply ``step``: loads, channels, move counts, m, ρ and u."""
        self.L[:, step.i] -= step.dvec
        self.L[:, step.j] += step.dvec
        for item, to in ((step.d1, step.j), (step.d2, step.i)):
            if item >= 0:
                self.ch[item] = to
                self.moves[item] += 1
        self.m += step.mig
        self.rho, self.u = step.rho, step.u
