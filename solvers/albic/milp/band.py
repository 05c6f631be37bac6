"""The band conditions behind :func:`solvers.albic.milp.bounds.band_bound` (§4.3.1 under a migration budget).

:class:`BandConditions` holds the tables that are built once per problem (key groups by load per node and
globally, the n × (A+1)² pattern tables, the load-per-byte orders of the fractional knapsacks) and answers
:meth:`BandConditions.feasible`: do the necessary conditions of :mod:`solvers.albic.milp.bounds` hold for some
plan with distance ≤ d? A ``False`` is a proof that no such plan exists.
"""

from __future__ import annotations

import math

import numpy as np

from solvers.model import Problem

#: "no pattern found" in the per-node minima of key groups out / in
BIG = 10 ** 9


def frac_bytes(ws: np.ndarray, bs: np.ndarray, need: float, tol: float) -> float:
    """Minimum bytes to carry ≥ need load, items fractional, in ratio order."""
    if need <= tol:
        return 0.0
    cl = np.cumsum(ws)
    k = int(np.searchsorted(cl, need - tol))
    if k >= ws.size:
        return math.inf
    before_l = cl[k - 1] if k > 0 else 0.0
    before_b = float(bs[:k].sum())
    if ws[k] <= 0:
        return before_b
    return float(before_b + (need - before_l) / ws[k] * bs[k])


class ByteTables:
    """Key groups in descending load-per-byte order, per node (as global prefix sums in (node, ratio) order, for
    the segment-wise fractional knapsack vectorised over nodes) and over all key groups."""

    def __init__(self, p: Problem, starts: np.ndarray, tol: float) -> None:
        w, b = p.load, p.state_bytes
        self.starts, self.tol = starts, tol
        ratio = np.where(b > 0, w / np.where(b > 0, b, 1.0), np.inf)
        border = np.lexsort((-ratio, p.current))
        self.bw, self.bb = w[border], b[border]
        self.bw_cum = np.concatenate([[0.0], np.cumsum(self.bw)])
        self.bb_cum = np.concatenate([[0.0], np.cumsum(self.bb)])
        gorder = np.argsort(-ratio, kind="stable")
        self.g_bw, self.g_bb = w[gorder], b[gorder]

    def out_of_nodes(self, nodes: np.ndarray, need: np.ndarray) -> float:
        """Σ over ``nodes`` of the least bytes carrying ≥ need out of the node (fractional, ratio order)."""
        bw_cum, bb_cum, tol = self.bw_cum, self.bb_cum, self.tol
        s0 = self.starts[nodes]
        s1 = self.starts[nodes + 1]
        goal = bw_cum[s0] + need - tol
        k = np.searchsorted(bw_cum, goal, side="left") - 1       # last prefix below the goal: item k completes it
        k = np.maximum(k, s0)
        if np.any(k >= s1):
            return math.inf
        before_l = bw_cum[k] - bw_cum[s0]
        before_b = bb_cum[k] - bb_cum[s0]
        wk, bk = self.bw[k], self.bb[k]
        part = np.where(wk > 0, (need - before_l) / np.where(wk > 0, wk, 1.0) * bk, 0.0)
        return float(np.sum(before_b + np.maximum(part, 0.0)))

    def anywhere(self, need: float) -> float:
        """The least bytes carrying ≥ need load with key groups from anywhere (fractional, ratio order)."""
        return frac_bytes(self.g_bw, self.g_bb, need, self.tol)


class BandConditions:
    """The band conditions of :mod:`solvers.albic.milp.bounds` for one problem without communication costs:
    ``L`` the current node loads, ``t`` the target, ``A`` the pattern box (patterns of ≤ A key groups in / out are
    enumerated), ``Mc``/``Mb`` the budgets (inf: none), ``pool_max`` the (nodes outside the band, key groups) up
    to which the sender-pool refinement runs."""

    def __init__(self, p: Problem, L: np.ndarray, t: float, tol: float, A: int, Mc: float, Mb: float,
                 pool_max: tuple[int, int]) -> None:
        m, n = p.n_key_groups, p.n_nodes
        w, act = p.load, p.active
        self.cap, self.L, self.t, self.tol, self.A, self.Mc, self.Mb = p.capacity, L, t, tol, A, Mc, Mb
        self.m, self.n, self.pool_max = m, n, pool_max
        # per node: key groups by load, descending, and cumulative loads
        order = np.lexsort((-w, p.current))
        self.starts = starts = np.searchsorted(p.current[order], np.arange(n + 1))
        self.wsorted = w[order]
        # global heaviest first (for inflow)
        g_idx = np.argsort(-w, kind="stable")
        gw = w[g_idx]
        self.gcum = np.cumsum(gw)
        gw_asc = gw[::-1]
        self.byte_tables = ByteTables(p, starts, tol) if not math.isinf(Mb) else None
        self.act_idx = np.flatnonzero(act)
        self._pattern_tables(act)
        # global key groups in descending load order, with their nodes (for the sender pools of :meth:`feasible`)
        self.g_node = p.current[g_idx]
        self.g_w = w[g_idx]
        self.escape = A < Mc  # patterns with more than A key groups in (or out) are within the budget: see _minima
        self.gl0 = np.full(A + 2, np.inf)
        self.gs0 = np.full(A + 2, np.inf)
        kk1 = min(A + 1, m)
        self.gl0[: kk1 + 1] = np.concatenate([[0.0], np.cumsum(gw[:kk1])])
        self.gs0[: kk1 + 1] = np.concatenate([[0.0], np.cumsum(gw_asc[:kk1])])
        self.net_lo0, self.net_hi0 = self._net(self.own_small, self.own_large, self.gl0, self.gs0)
        csum, s0, s1 = self.csum, starts[:-1], starts[1:]
        self.own_small_x = np.where(s1 - s0 >= A + 1, csum[s1] - csum[np.maximum(s1 - (A + 1), 0)],
                                    np.inf)  # A+1 lightest own

    def _pattern_tables(self, act: np.ndarray) -> None:
        """Patterns (a own key groups out, b key groups in): the net loss lies in
        [Σ a lightest own − Σ b heaviest anywhere, Σ a heaviest own − Σ b lightest anywhere].
        own_large[i, a] / own_small[i, a]: Σ of node i's a heaviest / lightest key groups (inf: fewer than a)."""
        A, m, starts = self.A, self.m, self.starts
        self.csum = csum = np.concatenate([[0.0], np.cumsum(self.wsorted)])
        aa = np.arange(A + 1)[None, :]
        s0, s1 = starts[:-1, None], starts[1:, None]
        fits = aa <= (s1 - s0)
        self.own_large = np.where(fits, csum[np.minimum(s0 + aa, m)] - csum[s0], np.inf)
        self.own_small = np.where(fits, csum[s1] - csum[np.maximum(s1 - aa, 0)], np.inf)
        self.own_large[~act] = np.inf
        self.own_small[~act] = np.inf
        self.ab_a = np.arange(A + 1)[:, None] + np.zeros(A + 1, dtype=np.int64)[None, :]
        self.ab_touch = self.ab_a + self.ab_a.T

    def _pool_sums(self, send: np.ndarray, caps: np.ndarray, sigma: int) -> tuple[np.ndarray, np.ndarray]:
        """Σ of the b heaviest / lightest key groups (b = 0..A+1) that can arrive anywhere when node ``send[k]``
        sends at most ``caps[k]`` of its key groups and all other nodes together at most ``sigma``."""
        A, starts, wsorted = self.A, self.starts, self.wsorted
        senders = np.zeros(self.n, dtype=bool)
        senders[send] = True
        in_p = senders[self.g_node]
        s_take = min(max(sigma, 0), A + 1)
        cap_k = np.minimum(caps, A + 1)
        s0_, s1_ = starts[send], starts[send + 1]
        top = [wsorted[x: min(y, x + c)] for x, y, c in zip(s0_.tolist(), s1_.tolist(), cap_k.tolist(), strict=True)]
        bot = [wsorted[max(x, y - c): y] for x, y, c in zip(s0_.tolist(), s1_.tolist(), cap_k.tolist(), strict=True)]
        hp = np.concatenate(top) if top else np.zeros(0)
        lp = np.concatenate(bot) if bot else np.zeros(0)
        hn = self.g_w[~in_p][:s_take]
        ln = self.g_w[~in_p][::-1][:s_take]
        heavy = np.sort(np.concatenate([hp, hn]))[::-1][: A + 1]
        light = np.sort(np.concatenate([lp, ln]))[: A + 1]
        gl = np.full(A + 2, np.inf)
        gs = np.full(A + 2, np.inf)
        gl[: heavy.size + 1] = np.concatenate([[0.0], np.cumsum(heavy)])
        gs[: light.size + 1] = np.concatenate([[0.0], np.cumsum(light)])
        return gl, gs

    def _net(self, o_small: np.ndarray, o_large: np.ndarray, gl: np.ndarray, gs: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        """(nodes, a, b) smallest and largest net loss of the patterns (±inf: impossible pattern)."""
        A = self.A
        with np.errstate(invalid="ignore"):
            nlo = o_small[:, :, None] - gl[None, None, : A + 1]
            nhi = o_large[:, :, None] - gs[None, None, : A + 1]
        imp = ~np.isfinite(o_large)[:, :, None] | ~np.isfinite(gs[: A + 1])[None, None, :]
        return np.where(imp, np.inf, nlo), np.where(imp, -np.inf, nhi)

    def _minima(self, sel: np.ndarray, e_s: np.ndarray, f_s: np.ndarray, gl: np.ndarray, gs: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per node of ``sel``: the least key groups out (a), in (b) and touches (a + b) of any pattern that can
        land it in its band, with ``gl``/``gs`` the sums of the b heaviest/lightest key groups that can arrive.
        Patterns with a, b ≤ A are enumerated; when the budget allows more than A, a pattern (a, b > A) may be ok
        only if ``own_large[a] − gs[A+1] ≥ e`` (more arrivals only lower the net loss), and (a > A, b) only if
        ``own_small[A+1] − gl[b] ≤ f``: those escapes bound a and b from below, touches by A + 1."""
        A, tol, own_large, ab_a = self.A, self.tol, self.own_large, self.ab_a
        if gl is self.gl0:
            nlo, nhi = self.net_lo0[sel], self.net_hi0[sel]
        else:
            nlo, nhi = self._net(self.own_small[sel], own_large[sel], gl, gs)
        ok = (nhi >= (e_s - tol)[:, None, None]) & (nlo <= (f_s + tol)[:, None, None])
        ok_a = ok.any(axis=2)                      # (sel, a): some b works with this a
        ok_b = ok.any(axis=1)                      # (sel, b)
        a_min = np.where(ok_a.any(axis=1), ok_a.argmax(axis=1), BIG)
        b_min = np.where(ok_b.any(axis=1), ok_b.argmax(axis=1), BIG)
        t_min = np.where(ok, self.ab_touch, BIG).min(axis=(1, 2))
        if self.escape:
            with np.errstate(invalid="ignore"):
                esc_a = np.isfinite(own_large[sel]) & (own_large[sel] - gs[A + 1] >= (e_s - tol)[:, None])
                esc_b = np.isfinite(gl[: A + 1])[None, :] & (self.own_small_x[sel][:, None] - gl[None, : A + 1]
                                                            <= (f_s + tol)[:, None])
            a_min = np.minimum(a_min, np.where(esc_a, ab_a[:, 0][None, :], BIG).min(axis=1))
            b_min = np.minimum(b_min, np.where(esc_b, ab_a[:, 0][None, :], BIG).min(axis=1))
            t_min = np.minimum(t_min, A + 1)
        else:  # A ≥ budget: every pattern is enumerated; a node with none needs more than the budget
            t_min = np.where(t_min < BIG, t_min, A + 1)
        return a_min, b_min, t_min, ok_a.any(axis=1)

    def _migrations_fit(self, sel: np.ndarray, e_s: np.ndarray, f_s: np.ndarray) -> bool:
        """The count conditions: every node of ``sel`` has a pattern within the budget and
        #migrations ≥ max(Σ out_i, Σ in_i, ⌈Σ touches_i / 2⌉) fits it, re-checked with the sender pools."""
        A, Mc = self.A, self.Mc
        gl, gs = self.gl0, self.gs0
        for rnd in range(3):
            a_min, b_min, t_min, any_ok = self._minima(sel, e_s, f_s, gl, gs)
            if not any_ok.all() and A >= Mc:
                return False  # some node needs more than the whole budget in or out of it
            # a node whose least a or b exceeds A (no pattern found) counts 0 out/in, A + 1 touches: still valid
            out_sum = int(np.where(a_min < BIG, a_min, 0).sum())
            in_sum = int(np.where(b_min < BIG, b_min, 0).sum())
            touch_sum = int(t_min.sum())
            K = max(out_sum, in_sum, (touch_sum + 1) // 2)
            if K > Mc:
                return False
            if rnd == 2 or math.isinf(Mc) or sel.size > self.pool_max[0] or self.m > self.pool_max[1]:
                break
            # every plan sends a_i ≥ a_min_i key groups out of node i and Σ a_i ≤ Mc, so the nodes with
            # a_min = 0 send at most σ = Mc − Σ a_min key groups: every arrival comes from a node with a_min ≥ 1
            # except at most σ of them (§4.3.1 (1)(2): a migration leaves one node and enters one)
            sigma = int(Mc) - out_sum
            if sigma > A:
                break
            # … and a node with a_min ≥ 1 sends at most a_min + σ of its key groups
            pk = (a_min >= 1) & (a_min < BIG)
            gl, gs = self._pool_sums(sel[pk], a_min[pk] + sigma, sigma)
        return True

    def _inflow_fits(self, sel: np.ndarray, e: np.ndarray, f_s: np.ndarray) -> bool:
        """The heaviest ``K`` movable key groups carry Σ f_i within the count budget, and the fractional-knapsack
        minima of bytes out of the nodes above their band and into those below it fit the byte budget."""
        tol, Mc, Mb = self.tol, self.Mc, self.Mb
        need_in = float(-f_s[f_s < -tol].sum())
        if need_in > tol:
            kf = int(np.searchsorted(self.gcum, need_in - tol)) + 1
            if kf > self.gcum.size or kf > Mc:
                return False
        if self.byte_tables is not None:
            over = sel[e[sel] > tol]
            bytes_out = self.byte_tables.out_of_nodes(over, e[over]) if over.size else 0.0
            if bytes_out > Mb * (1 + 1e-9) + 1e-6:
                return False
            if need_in > tol and self.byte_tables.anywhere(need_in) > Mb * (1 + 1e-9) + 1e-6:
                return False
        return True

    def feasible(self, d: float) -> bool:
        """False when no plan has distance ≤ d (some necessary condition fails); True otherwise."""
        hi = self.cap * (self.t + d)
        lo = self.cap * (self.t - d)
        e = self.L - hi          # net loss needed at least (negative: may gain up to −e)
        f = self.L - lo          # net loss allowed at most
        act_idx, tol = self.act_idx, self.tol
        sel = act_idx[~((e[act_idx] <= tol) & (f[act_idx] >= -tol))]   # active nodes outside their band
        if sel.size == 0:
            return True
        e_s, f_s = e[sel], f[sel]
        if not self._migrations_fit(sel, e_s, f_s):
            return False
        return self._inflow_fits(sel, e, f_s)
