"""A proven lower bound on the load distance of the ALBIC MILP (§4.3.1) under a migration budget.

"Analytic bounds (the heaviest movable key group, the budget)". For a candidate distance ``d`` every active node
``i`` must end with a load in ``[c_i(t−d), c_i(t+d)]`` (``t`` is fixed when there are no communication costs).
Necessary conditions for some plan with distance ≤ d:

- a node above ``c_i(t+d)`` must send away at least its excess ``e_i``: at least ``out_i`` of its key groups
  (its heaviest first is the fewest), and at least the fractional-knapsack minimum of state bytes;
- a node below ``c_i(t−d)`` must receive at least ``f_i``: at least ``in_i`` key groups (the heaviest anywhere
  first), and the fractional-knapsack minimum of bytes;
- if a single key group cannot land the node inside its band (no key group with load in
  ``[e_i, e_i + 2d·c_i]``, resp. ``[f_i, f_i + 2d·c_i]``), the node is touched by at least two moves;
- each migration leaves one node and enters one, so #migrations ≥ max(Σ out_i, Σ in_i, ⌈Σ touches_i / 2⌉), and
  the heaviest ``K`` movable key groups must carry Σ f_i;
- a key group on an active node stays on an active node: d ≥ max load / max capacity − t (granularity).

The conditions are monotone in ``d``, so a bisection gives the smallest ``d`` that passes them; it is a valid
lower bound because every condition is implied by feasibility. Grouping key groups into units and restricting
their nodes only removes plans, so the bound also holds for :func:`solvers.albic.milp.solve_grouped`.

With ``communication_cost > 0`` the target itself depends on the plan; the bound returned is then the trivial 0.

Complexity: O(m log m) to sort, then O(n log m) per bisection step (≤ 60 steps).
"""

from __future__ import annotations

import math

import numpy as np

from solvers.model import Problem


def analytic_bound(problem: Problem, steps: int = 60) -> float:
    p = problem
    if p.communication_cost > 0 and p.comm.nnz:
        return 0.0
    m, n = p.n_key_groups, p.n_nodes
    if m == 0:
        return 0.0
    w = p.load
    cap = p.capacity
    act = p.active
    L = np.bincount(p.current, weights=w, minlength=n)
    t = float(L.sum() / cap[act].sum())
    dev = np.abs(L / cap - t)
    d_cur = float(dev[act].max())
    tol = 1e-9 * max(t, 1e-300)

    on_active = act[p.current]
    gran = 0.0
    if on_active.any():
        gran = max(0.0, float(w[on_active].max()) / float(cap[act].max()) - t)
    Mc = math.inf if p.max_migrations is None else float(p.max_migrations)
    Mb = math.inf if p.max_migration_bytes is None else float(p.max_migration_bytes)
    if math.isinf(Mc) and math.isinf(Mb):
        return min(gran, d_cur)

    # per node: key groups by load, descending, and cumulative loads
    order = np.lexsort((-w, p.current))
    starts = np.searchsorted(p.current[order], np.arange(n + 1))
    wsorted = w[order]
    cum = np.cumsum(wsorted)
    seg_cum = [cum[starts[i]:starts[i + 1]] - (cum[starts[i] - 1] if starts[i] > 0 else 0.0) for i in range(n)]
    seg_w = [wsorted[starts[i]:starts[i + 1]] for i in range(n)]
    seg_w_asc = [x[::-1] for x in seg_w]
    # global heaviest first (for inflow)
    gw = np.sort(w)[::-1]
    gcum = np.cumsum(gw)
    gw_asc = gw[::-1]
    use_bytes = not math.isinf(Mb)
    if use_bytes:
        b = p.state_bytes
        ratio = np.where(b > 0, w / np.where(b > 0, b, 1.0), np.inf)
        border = np.lexsort((-ratio, p.current))
        bw, bb = w[border], b[border]
        seg_bw = [bw[starts[i]:starts[i + 1]] for i in range(n)]
        seg_bb = [bb[starts[i]:starts[i + 1]] for i in range(n)]
        gorder = np.argsort(-ratio, kind="stable")
        g_bw, g_bb = w[gorder], b[gorder]

    act_idx = np.flatnonzero(act)

    def frac_bytes(ws: np.ndarray, bs: np.ndarray, need: float) -> float:
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
        return before_b + (need - before_l) / ws[k] * bs[k]

    def has_in(asc: np.ndarray, lo: float, hi: float) -> bool:
        j = int(np.searchsorted(asc, lo - tol))
        return j < asc.size and asc[j] <= hi + tol

    def feasible(d: float) -> bool:
        hi = cap * (t + d)
        lo = cap * (t - d)
        e = L - hi
        f = lo - L
        out_total = 0
        in_total = 0
        touches = 0
        bytes_out = 0.0
        need_in = 0.0
        for i in act_idx:
            if e[i] > tol:
                sc = seg_cum[i]
                if sc.size == 0 or sc[-1] < e[i] - tol:
                    return False
                k = int(np.searchsorted(sc, e[i] - tol)) + 1
                out_total += k
                tch = k
                width = 2 * d * cap[i]
                if k == 1:
                    if not has_in(seg_w_asc[i], e[i], e[i] + width):
                        tch += 1
                elif float(seg_w_asc[i][:k].sum()) > e[i] + width + tol:
                    tch += 1
                touches += tch
                if use_bytes:
                    bytes_out += frac_bytes(seg_bw[i], seg_bb[i], e[i])
            elif f[i] > tol:
                if gcum[-1] < f[i] - tol:
                    return False
                k = int(np.searchsorted(gcum, f[i] - tol)) + 1
                in_total += k
                tch = k
                width = 2 * d * cap[i]
                if k == 1:
                    if not has_in(gw_asc, f[i], f[i] + width):
                        tch += 1
                elif float(gw_asc[:k].sum()) > f[i] + width + tol:
                    tch += 1
                touches += tch
                need_in += f[i]
            if out_total > Mc or in_total > Mc:
                return False
        K = max(out_total, in_total, (touches + 1) // 2)
        if need_in > tol:
            kf = int(np.searchsorted(gcum, need_in - tol)) + 1
            if kf > gcum.size:
                return False
            K = max(K, kf)
        if K > Mc:
            return False
        if use_bytes:
            if bytes_out > Mb * (1 + 1e-9) + 1e-6:
                return False
            if need_in > tol and frac_bytes(g_bw, g_bb, need_in) > Mb * (1 + 1e-9) + 1e-6:
                return False
        return True

    lo_d = min(gran, d_cur)
    if feasible(lo_d):
        return lo_d
    hi_d = d_cur
    if not feasible(hi_d):  # cannot happen (the current assignment is feasible); stay safe
        return lo_d
    for _ in range(steps):
        mid = 0.5 * (lo_d + hi_d)
        if feasible(mid):
            hi_d = mid
        else:
            lo_d = mid
        if hi_d - lo_d <= 1e-7 * max(t, 1e-300):
            break
    return max(0.0, lo_d)
