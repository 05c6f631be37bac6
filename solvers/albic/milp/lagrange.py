"""A Lagrangian bound on the load distance of the ALBIC MILP (§4.3.1) under a migration budget by count.

A plan with distance ≤ ``d`` sends a set ``D_i`` of node ``i``'s own key groups away and receives a set ``I_i``
(constraints (1)(2): a migration is one key group leaving its node and entering one other node) so that the net
loss ``w(D_i) − w(I_i)`` lies in ``[e_i, f_i] = [L_i − c_i(t+d), L_i − c_i(t−d)]`` for every active node (3)(4),
and ``Σ_i |D_i| ≤ maxMigrations``. Relaxing "key group ``k`` departs ⇔ ``k`` arrives at exactly one node" with a
price ``λ_k ∈ [0, 1]`` splits the count into independent per-node problems: every plan has

    #migrations = Σ_i [ Σ_{k∈D_i} (1 − λ_k) + Σ_{k∈I_i} λ_k ] ≥ Σ_{i outside its band} min over patterns of i,

(nodes inside their band, removing nodes: ≥ 0 with the empty pattern) so a λ whose right-hand side exceeds the
budget proves that no plan has distance ≤ d. ``λ = ½`` gives the touch count of :mod:`.band` (Σ touches / 2),
``λ = 0`` the departures, ``λ = 1`` the arrivals; the prices found by subgradient ascent charge the key groups
that few nodes can spare (the extreme loads of the nodes that must themselves send or receive) to whoever needs
them. The per-node minimum is taken over *candidate patterns* whose cost never exceeds that of any real pattern:

- departures: the empty set, each own key group, each pair of own key groups (nodes with ≤ ``PAIR_NODE_MAX``),
  exactly; larger departure sets by count ``a`` with their load sum in ``[Σ a lightest, Σ a heaviest]`` ∩
  ``[e + b·min, f + b·max]``, each *rank* priced at its cheapest own key group in its load range;
- ``b`` arrivals whose loads sum into ``[S − f, S − e]`` (S: the departures' sum or range): the j-th largest lies in
  ``[(lo − (j−1)·max)/(b−j+1), (hi − (b−j)·min)/j]``; each rank is priced at the cheapest key group of any node
  in that range (own ones too: a relaxation);
- patterns with more than ``A`` departures or arrivals (only when the budget exceeds ``A``): at least the cheapest
  ``A + 1`` own departures, or the departures that ``A + 1`` arrivals need;
- *budget slack*: ``a_i ≥ amin_i`` etc. over the candidates and ``Σ a_i = Σ b_i ≤ maxMigrations``, so patterns
  with ``a_i > amin_i + (M − Σ amin)`` (the same for arrivals and touches) cannot occur: dropped, to a fixpoint.

Every range is widened by a small margin (``1e-8`` of the heaviest load plus the band tolerance), so float
rounding never drops a real pattern. Byte budgets only remove plans (ignored). Grouping key groups into units
restricts plans, so the bound also holds for :func:`solvers.albic.milp.solve_grouped`. No communication costs
(they move the target). :func:`lagrange_bound` bisects between a proven bound and the incumbent's distance.
"""

from __future__ import annotations

import math
import time
from functools import partial
from typing import Any

import numpy as np

from solvers.albic.milp.lagrange_ranges import RangeMin, ok_terms, rank_ranges
from solvers.model import Problem

#: patterns (a departures, b arrivals) are enumerated up to this many of each
A_MAX = 48
#: explicit pairs of own key groups are enumerated for nodes with at most this many key groups
PAIR_NODE_MAX = 64
#: subgradient steps: Polyak step × THETA0 towards budget + 1, halved after STALL steps without progress; the
#: direction keeps DEFLECT of the previous one. Tuned on the grid's 21 instances with best − analytic > 0.1 at
#: 0.15 s of CPU each: (4, 30, 0.5) and 300 steps per distance closed 12–14 of them, (2, 20, 0.5) / 200: 8–10
THETA0, STALL, DEFLECT = 4.0, 30, 0.5
#: the bound runs when at most this many active nodes lie outside the band at the incumbent's distance and the
#: instance has at most this many key groups (candidate set-up is O(nodes outside × (A+1)²) in Python)
NODES_MAX, KEY_GROUPS_MAX = 200, 20_000
#: subgradient steps per distance tried by :func:`lagrange_bound` (the grid's proofs take 30–300)
STEPS_PER_D = 300


class Timeout(Exception):
    """The candidate set-up passed its deadline (not a proof of anything)."""


#: a candidate set: per candidate its node (position in ``sel``), explicit departures ``d1``/``d2`` (−1: none),
#: sizes ``a``/``b``; rank terms ``arr``/``dep`` as (candidate, lo, hi) index ranges; ``esc`` the escape patterns
Cand = dict[str, Any]


def _own_range(wo: np.ndarray, s0: int, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in the per-node load order of the node's key groups (from ``s0``) with loads in [lo, hi]."""
    return np.searchsorted(wo, lo, "left") + s0, np.searchsorted(wo, hi, "right") + s0


class _Acc:
    """Collects candidate patterns node by node."""

    def __init__(self) -> None:
        self.cols: dict[str, list[np.ndarray]] = {k: [] for k in ("node", "d1", "d2", "a", "b")}
        self.terms: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {"arr": [], "dep": []}
        self.n = 0

    def add(self, pos: int, d1: np.ndarray, d2: np.ndarray, a: np.ndarray, b: np.ndarray, ok: np.ndarray,
            arr: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
            dep: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> bool:
        """The rows of ``ok`` (with their rank terms); whether there was any."""
        cid = np.full(ok.size, -1)
        cid[ok] = self.n + np.arange(int(ok.sum()))
        for name, col in (("node", np.full(ok.size, pos)), ("d1", d1), ("d2", d2), ("a", a), ("b", b)):
            self.cols[name].append(col[ok])
        for name, tt in (("arr", arr), ("dep", dep)):
            if tt is not None:
                r, lo, hi = tt
                m = ok[r]
                self.terms[name].append((cid[r][m], lo[m], hi[m]))
        self.n += int(ok.sum())
        return bool(ok.any())

    def done(self, sel: np.ndarray, esc: list[tuple[int, int]]) -> Cand:
        cand: Cand = {k: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for k, v in self.cols.items()}
        cand["sel"], cand["esc"] = sel, esc
        for name, tl in self.terms.items():
            cand[name] = tuple(np.concatenate([x[j] for x in tl]) if tl else np.zeros(0, dtype=np.int64)
                               for j in range(3))
        return cand


class LagrangeBound:
    """Prices λ_k ∈ [0, 1] on "key group k departs" = "k arrives somewhere"; per node the cheapest pattern."""

    def __init__(self, p: Problem, L: np.ndarray, t: float, tol: float, Mc: float) -> None:
        self.p, self.L, self.t, self.tol, self.Mc = p, L, t, tol, Mc
        w = p.load
        self.m, self.n = p.n_key_groups, p.n_nodes
        self.gorder = np.argsort(w, kind="stable")
        self.gw = w[self.gorder]
        self.gmin, self.gmax = float(self.gw[0]), float(self.gw[-1])
        self.own = np.lexsort((w, p.current))       # per node ascending load
        self.ow = w[self.own]
        self.starts = np.searchsorted(p.current[self.own], np.arange(self.n + 1))
        self.rmq_a, self.rmq_d = RangeMin(), RangeMin()
        self.lam = np.full(self.m, 0.5)
        self.eps = 1e-8 * self.gmax + tol   # margin of every load range (float rounding)
        self.A = int(min(A_MAX, Mc))
        self.escape = self.A < Mc
        self.last_best = -math.inf
        self._cache: dict[int, tuple[np.ndarray, ...]] = {}

    def _grange(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.searchsorted(self.gw, lo, side="left"), np.searchsorted(self.gw, hi, side="right")

    def candidates(self, d: float, deadline: float = math.inf) -> Cand | None:
        """The candidate patterns of every active node outside its band at distance ``d`` (None: some node has
        none, so no plan has distance ≤ d). Raises :class:`Timeout` past ``deadline``."""
        p, tol, A, eps = self.p, self.tol, self.A, self.eps
        e_all = self.L - p.capacity * (self.t + d) - tol
        f_all = self.L - p.capacity * (self.t - d) + tol
        sel = np.flatnonzero(p.active & ~((e_all <= 0) & (f_all >= 0)))
        if sel.size == 0:
            return {"sel": sel, "trivial": True}
        acc = _Acc()
        esc: list[tuple[int, int]] = []
        for pos, i in enumerate(sel.tolist()):
            if time.perf_counter() > deadline:
                raise Timeout
            e, f = float(e_all[i]), float(f_all[i])
            s0, s1 = int(self.starts[i]), int(self.starts[i + 1])
            wo = self.ow[s0:s1]
            k = wo.size
            D1, D2, SS, na, cs = self._explicit(i)
            # explicit departures with b arrivals: b·gmin ≤ S − e and b·gmax ≥ S − f
            bmin = np.maximum(np.ceil((SS - f - eps) / self.gmax - 1e-12), 0).astype(np.int64)
            bmax = np.minimum(np.floor((SS - e + eps) / self.gmin + 1e-12), A).astype(np.int64) \
                if self.gmin > 0 else np.full(SS.size, A)
            nb = np.where(na > A, 0, np.maximum(bmax - bmin + 1, 0))
            base = np.repeat(np.arange(SS.size), nb)
            bb = np.arange(base.size) - np.repeat(np.cumsum(nb) - nb, nb) + bmin[base]
            Sx = SS[base]
            # b = 0: the departures alone land the node; the empty pattern does not (the node is outside)
            keep = (na[base] + bb > 0) & ((bb > 0) | ((Sx >= e - eps) & (Sx <= f + eps)))
            base, bb, Sx = base[keep], bb[keep], Sx[keep]
            ok, terms = self._arrivals(Sx - f, Sx - e, bb)
            found = acc.add(pos, D1[base], D2[base], na[base], bb, ok, terms, None)
            # relaxed departures a ≥ 3 (a ≥ 2 on nodes without pairs): ranks of own departures and of arrivals
            a_lo = 3 if k <= PAIR_NODE_MAX else 2
            if k >= a_lo and A >= a_lo:
                ag, bg = (x.ravel() for x in np.meshgrid(np.arange(a_lo, min(A, k) + 1), np.arange(A + 1),
                                                        indexing="ij"))
                s_lo = np.maximum(cs[ag] - eps, e + bg * self.gmin - eps)
                s_hi = np.minimum(cs[k] - cs[k - ag] + eps, f + bg * self.gmax + eps)
                fe = s_lo <= s_hi
                ag, bg, s_lo, s_hi = ag[fe], bg[fe], s_lo[fe], s_hi[fe]
                okd, dterms = ok_terms(*rank_ranges(s_lo, s_hi, ag, float(wo[0]), float(wo[-1]), eps), ag.size,
                                       partial(_own_range, wo, s0))
                oka, aterms = self._arrivals(s_lo - f, s_hi - e, bg)
                none = np.full(ag.size, -1)
                found |= acc.add(pos, none, none, ag, bg, okd & oka, aterms, dterms)
            if self.escape:
                # more than A departures, or more than A arrivals (which need departures of ≥ e + A+1 lightest)
                heavy = cs[k] - cs[k - np.arange(k + 1)]
                a_esc = int(np.searchsorted(heavy, e + float(self.gw[: A + 1].sum()) - eps, side="left"))
                a_e = min(a_esc, A + 1) if k >= A + 1 else a_esc
                if a_e <= k:
                    esc.append((pos, a_e))
                    found = True
            if not found:
                return None
        cand = self._prune(acc.done(sel, esc))
        if cand is not None:
            nd = cand["node"]
            cand["seg"] = np.flatnonzero(np.r_[True, nd[1:] != nd[:-1]]) if nd.size else np.zeros(0, np.int64)
            for name in ("arr", "dep"):
                cand[name + "_q"] = RangeMin.prepare(cand[name][1], cand[name][2])
        return cand

    def _prune(self, cand: Cand) -> Cand | None:
        """Budget slack: every plan has a_i ≥ amin_i departures, b_i ≥ bmin_i arrivals and a_i + b_i ≥ tmin_i
        touches at node i (the least over its patterns), Σ a_i = Σ b_i ≤ M, so a_i ≤ amin_i + (M − Σ amin),
        b_i ≤ bmin_i + (M − Σ bmin), a_i + b_i ≤ tmin_i + (2M − Σ tmin): patterns beyond are dropped, to a fixpoint.
        None: the slack is negative (no plan)."""
        M, A = self.Mc, self.A
        n_sel = cand["sel"].size
        keep = np.ones(cand["node"].size, dtype=bool)
        esc = list(cand["esc"])
        node, a, b = cand["node"], cand["a"], cand["b"]
        while True:
            big = 10 ** 9
            amin, bmin, tmin = (np.full(n_sel, big) for _ in range(3))
            for arr, v in ((amin, a), (bmin, b), (tmin, a + b)):
                np.minimum.at(arr, node[keep], v[keep])
            for pos, ae in esc:   # an escape pattern: a ≥ ae, b ≥ 0, a + b ≥ A + 1
                amin[pos] = min(amin[pos], ae)
                bmin[pos] = 0
                tmin[pos] = min(tmin[pos], A + 1)
            if (amin >= big).any():
                return None
            sa, sb, st = M - amin.sum(), M - bmin.sum(), 2 * M - tmin.sum()
            if min(sa, sb, st) < 0:
                return None
            new = keep & (a <= amin[node] + sa) & (b <= bmin[node] + sb) & (a + b <= tmin[node] + st)
            esc2 = [(pos, ae) for pos, ae in esc if ae <= amin[pos] + sa and A + 1 <= tmin[pos] + st]
            if new.sum() == keep.sum() and len(esc2) == len(esc):
                break
            keep, esc = new, esc2
        if keep.all():
            return cand
        remap = np.cumsum(keep) - 1
        out = {k: cand[k][keep] for k in ("node", "d1", "d2", "a", "b")}
        out["sel"], out["esc"] = cand["sel"], esc
        for name in ("arr", "dep"):
            r, lo, hi = cand[name]
            mk = keep[r] if r.size else np.zeros(0, dtype=bool)
            out[name] = (remap[r[mk]], lo[mk], hi[mk])
        return out

    def _explicit(self, i: int) -> tuple[np.ndarray, ...]:
        """Node i's explicit departure sets (), singles, pairs (as two key group columns, −1: none), their load
        sums and sizes, and the prefix sums of its loads (ascending); cached."""
        if i not in self._cache:
            s0, s1 = int(self.starts[i]), int(self.starts[i + 1])
            own, wo = self.own[s0:s1], self.ow[s0:s1]
            k = own.size
            d1 = [np.full(1, -1), own]
            d2 = [np.full(1, -1), np.full(k, -1)]
            S = [np.zeros(1), wo]
            if 2 <= k <= PAIR_NODE_MAX and self.A >= 2:
                ii, jj = np.triu_indices(k, 1)
                d1.append(own[ii])
                d2.append(own[jj])
                S.append(wo[ii] + wo[jj])
            D1, D2 = np.concatenate(d1), np.concatenate(d2)
            na = (D1 >= 0).astype(np.int64) + (D2 >= 0)
            self._cache[i] = (D1, D2, np.concatenate(S), na, np.concatenate([[0.0], np.cumsum(wo)]))
        return self._cache[i]

    def _arrivals(self, lo: np.ndarray, hi: np.ndarray, b: np.ndarray
                  ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
        """Rank ranges of b arrivals summing into [lo, hi]: (ok per row, (row, lo_idx, hi_idx) terms)."""
        return ok_terms(*rank_ranges(lo, hi, b, self.gmin, self.gmax, self.eps), lo.size, self._grange)

    def value(self, cand: Cand, lam: np.ndarray) -> tuple[float, np.ndarray]:
        """The dual function at ``lam`` (a lower bound on the migrations of every plan) and a subgradient."""
        sel, node, d1, d2 = cand["sel"], cand["node"], cand["d1"], cand["d2"]
        dep = 1.0 - lam
        cost = np.where(d1 >= 0, dep[np.maximum(d1, 0)], 0.0) + np.where(d2 >= 0, dep[np.maximum(d2, 0)], 0.0)
        ar, alo, ahi = cand["arr"]
        dr, dlo, dhi = cand["dep"]
        aarg = darg = np.zeros(0, dtype=np.int64)
        if ar.size:
            self.rmq_a.build(lam[self.gorder])
            v, aarg = self.rmq_a.query(cand["arr_q"])
            cost += np.bincount(ar, weights=v, minlength=node.size)
            aarg = self.gorder[aarg]
        if dr.size:
            self.rmq_d.build(dep[self.own])
            v, darg = self.rmq_d.query(cand["dep_q"])
            cost += np.bincount(dr, weights=v, minlength=node.size)
            darg = self.own[darg]
        best = np.full(sel.size, np.inf)
        seg = cand["seg"]
        if node.size:
            best[node[seg]] = np.minimum.reduceat(cost, seg)
        esc_pick = {}
        for pos, a in cand["esc"]:
            i = int(sel[pos])
            own = self.own[self.starts[i]: self.starts[i + 1]]
            o = own[np.argsort(dep[own], kind="stable")][:a]
            c = float(dep[o].sum())
            if c < best[pos]:
                best[pos] = c
                esc_pick[pos] = o
        total = float(best.sum())
        # a subgradient: the chosen patterns' arrivals minus their departures (first cheapest per node)
        chosen = np.zeros(node.size, dtype=bool)
        if node.size:
            idx = np.flatnonzero(cost <= best[node])
            _, fi = np.unique(node[idx], return_index=True)
            chosen[idx[fi]] = True
        out = []
        for pos in esc_pick:
            chosen[node == pos] = False
            out.append(esc_pick[pos])
        m = self.m
        out += [d1[chosen & (d1 >= 0)], d2[chosen & (d2 >= 0)]]
        if dr.size:
            out.append(darg[chosen[dr]])
        g = -np.bincount(np.concatenate(out), minlength=m).astype(float)
        if ar.size:
            g += np.bincount(aarg[chosen[ar]], minlength=m)
        return total, g

    def prove(self, d: float, iters: int, deadline: float) -> bool:
        """True when the prices prove that no plan with distance ≤ d fits the budget."""
        try:
            cand = self.candidates(d, deadline)
        except Timeout:
            return False
        if cand is None:
            return True
        if cand.get("trivial"):
            return False
        lam = self.lam.copy()
        best_lam = lam
        target = self.Mc + 1.0
        theta, best, stall = THETA0, -math.inf, 0
        prev_g = None
        for _ in range(iters):
            if time.perf_counter() > deadline:
                break
            val, g = self.value(cand, lam)
            if val > self.Mc + 1e-6:
                self.lam = lam
                return True
            if val > best + 1e-9:
                best, stall, best_lam = val, 0, lam
            else:
                stall += 1
                if stall >= STALL:
                    theta *= 0.5
                    stall = 0
            if DEFLECT and prev_g is not None:
                g = g + DEFLECT * prev_g
            prev_g = g
            gg = float(g @ g)
            if gg == 0:
                break
            lam = np.clip(lam + theta * (target - val) / gg * g, 0.0, 1.0)
        self.last_best, self.lam = best, best_lam
        return False


def applies(p: Problem) -> bool:
    """Whether :func:`lagrange_bound` can say anything: no communication costs, a count budget, some load, at
    most ``KEY_GROUPS_MAX`` key groups."""
    return (not p.communicates and p.max_migrations is not None and 0 < p.n_key_groups <= KEY_GROUPS_MAX
            and float(p.load.max()) > 0)


def lagrange_bound(problem: Problem, lo: float, hi: float, deadline: float, steps: int = STEPS_PER_D) -> float:
    """The largest distance in ``[lo, hi]`` that the prices prove unreachable, by bisection (``lo``: a proven
    bound, ``hi``: the incumbent's distance; λ carried from one distance to the next), or ``lo``. Stops at
    ``deadline`` (``time.perf_counter()``); every step that returns is a proof on its own. Only without
    communication costs, with a count budget, and up to ``NODES_MAX`` nodes outside the band at ``lo`` and
    ``KEY_GROUPS_MAX`` key groups."""
    p = problem
    if not applies(p) or not hi > lo or time.perf_counter() > deadline:
        return lo
    L = np.bincount(p.current, weights=p.load, minlength=p.n_nodes)
    t = float(L.sum() / p.capacity[p.active].sum())
    dev = np.abs(L / p.capacity - t)
    if int((dev[p.active] > lo).sum()) > NODES_MAX:
        return lo
    assert p.max_migrations is not None
    bound = LagrangeBound(p, L, t, 1e-9 * max(t, 1e-300), float(p.max_migrations))
    a, b = lo, hi
    while time.perf_counter() < deadline and b - a > max(1e-6 * t, 0.005 * (hi - lo)):
        mid = 0.5 * (a + b)
        if bound.prove(mid, steps, deadline):
            a = mid
        else:
            b = mid
    return a
