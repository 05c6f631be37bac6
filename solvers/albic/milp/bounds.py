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

#: patterns of up to this many key groups out of / into one node are enumerated
PATTERN_MAX = 24


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

    # patterns (a own key groups out, b key groups in): the net loss lies in
    # [Σ a lightest own − Σ b heaviest anywhere, Σ a heaviest own − Σ b lightest anywhere]
    A = int(min(PATTERN_MAX, Mc if not math.isinf(Mc) else PATTERN_MAX))
    g_large = np.full(A + 1, np.inf)                                 # Σ b heaviest anywhere
    g_small = np.full(A + 1, np.inf)                                 # Σ b lightest anywhere (inf: b > m)
    kk = min(A, m)
    g_large[: kk + 1] = np.concatenate([[0.0], np.cumsum(gw[:kk])])
    g_small[: kk + 1] = np.concatenate([[0.0], np.cumsum(gw_asc[:kk])])
    own_large = np.full((n, A + 1), np.inf)
    own_small = np.full((n, A + 1), np.inf)
    for i in act_idx:
        ws = seg_w[i]
        k = min(A, ws.size)
        own_large[i, : k + 1] = np.concatenate([[0.0], np.cumsum(ws[:k])])
        own_small[i, : k + 1] = np.concatenate([[0.0], np.cumsum(seg_w_asc[i][:k])])
    ab_a = np.arange(A + 1)[:, None] + np.zeros(A + 1, dtype=np.int64)[None, :]
    ab_b = ab_a.T
    ab_touch = ab_a + ab_b
    with np.errstate(invalid="ignore"):
        net_lo = own_small[:, :, None] - g_large[None, None, :]      # (n, a, b) smallest net loss
        net_hi = own_large[:, :, None] - g_small[None, None, :]      # largest net loss
    # impossible patterns (a > own key groups, b > all key groups) can never satisfy the band
    impossible = ~np.isfinite(own_large)[:, :, None] | ~np.isfinite(g_small)[None, None, :]
    net_lo = np.where(impossible, np.inf, net_lo)
    net_hi = np.where(impossible, -np.inf, net_hi)

    def feasible(d: float) -> bool:
        hi = cap * (t + d)
        lo = cap * (t - d)
        e = L - hi          # net loss needed at least (negative: may gain up to −e)
        f = L - lo          # net loss allowed at most
        out_sum = in_sum = touch_sum = 0
        need_in = 0.0
        bytes_out = 0.0
        for i in act_idx:
            if e[i] <= tol and f[i] >= -tol:
                continue  # inside the band already
            ok = (net_hi[i] >= e[i] - tol) & (net_lo[i] <= f[i] + tol)
            if not ok.any():
                if A >= Mc:
                    return False  # needs more than the whole budget in or out of one node
                touch_sum += A + 1  # every feasible pattern has more than A moves out or in
            else:
                out_sum += int(ab_a[ok].min())
                in_sum += int(ab_b[ok].min())
                touch_sum += int(ab_touch[ok].min())
            if out_sum > Mc or in_sum > Mc or (touch_sum + 1) // 2 > Mc:
                return False
            if e[i] > tol and use_bytes:
                bytes_out += frac_bytes(seg_bw[i], seg_bb[i], e[i])
            if f[i] < -tol:
                need_in += -f[i]
        K = max(out_sum, in_sum, (touch_sum + 1) // 2)
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
