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
import time

import numpy as np

from solvers.model import Problem

#: patterns of up to this many key groups out of / into one node are enumerated
PATTERN_MAX = 24


def analytic_bound(problem: Problem, steps: int = 60, deadline: float = math.inf) -> float:
    """The larger of :func:`band_bound` and :func:`lemma2_bound` (both valid lower bounds on the load distance);
    with communication costs :func:`comm_granularity_bound`."""
    if problem.communication_cost > 0 and problem.comm.nnz:
        return comm_granularity_bound(problem)
    return max(band_bound(problem, steps, deadline), lemma2_bound(problem))


def lemma2_bound(problem: Problem) -> float:
    """Lemma 2 of §4.3.1 under a migration budget: the load that must stay on removing nodes.

    Nothing moves onto a removing node (Lemma 1) and at most ``maxMigrations`` key groups (and at most
    ``maxBytes`` of state) can leave them, so at least ``R = load on B − (the most load that can leave within the
    budget)`` stays on B: the ``maxMigrations`` heaviest key groups on B, and the fractional knapsack of load per
    byte within the byte budget, bound what can leave. The active nodes then hold ``Σ load − R`` while the target
    counts all of it, so ``Σ_{j∈A} c_j (t − u_j) = R`` and some active node is at least ``R / Σ_{j∈A} c_j`` below
    ``t``: ``d ≥ R / Σ_{j∈A} c_j``. (No communication costs: they move the target.)
    """
    p = problem
    if not p.removing.any() or (p.communication_cost > 0 and p.comm.nnz):
        return 0.0
    on_b = p.removing[p.current]
    wb = p.load[on_b]
    total = float(wb.sum())
    if total <= 0:
        return 0.0
    can_leave = total
    if p.max_migrations is not None:
        can_leave = min(can_leave, float(np.sort(wb)[::-1][: int(p.max_migrations)].sum()))
    if p.max_migration_bytes is not None:
        bb = p.state_bytes[on_b]
        free = bb <= 0
        leave_b = float(wb[free].sum())
        room = float(p.max_migration_bytes) * (1 + 1e-9) + 1e-9
        wr, br = wb[~free], bb[~free]
        order = np.argsort(-(wr / br), kind="stable")
        cb = np.cumsum(br[order])
        k = int(np.searchsorted(cb, room, side="right"))   # items fully inside the budget
        leave_b += float(wr[order][:k].sum())
        if k < order.size:
            left = room - (float(cb[k - 1]) if k else 0.0)
            leave_b += wr[order][k] * max(0.0, left) / br[order][k]
        can_leave = min(can_leave, leave_b)
    rest = max(0.0, total - can_leave)
    return rest / float(p.capacity[p.active].sum()) * (1 - 1e-9)


def band_bound(problem: Problem, steps: int = 60, deadline: float = math.inf) -> float:
    """The bisection on the band conditions of the module docstring. It may stop at ``deadline``
    (``time.perf_counter()``): the lower end of the bisection is a valid bound at every step."""
    p = problem
    if p.communication_cost > 0 and p.comm.nnz or time.perf_counter() > deadline:
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
        # segment-wise fractional knapsack, vectorised over nodes: global prefix sums in (node, ratio) order
        bw_cum = np.concatenate([[0.0], np.cumsum(bw)])
        bb_cum = np.concatenate([[0.0], np.cumsum(bb)])
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
        return float(before_b + (need - before_l) / ws[k] * bs[k])

    # patterns (a own key groups out, b key groups in): the net loss lies in
    # [Σ a lightest own − Σ b heaviest anywhere, Σ a heaviest own − Σ b lightest anywhere]
    A = int(min(PATTERN_MAX, Mc if not math.isinf(Mc) else PATTERN_MAX))
    g_large = np.full(A + 1, np.inf)                                 # Σ b heaviest anywhere
    g_small = np.full(A + 1, np.inf)                                 # Σ b lightest anywhere (inf: b > m)
    kk = min(A, m)
    g_large[: kk + 1] = np.concatenate([[0.0], np.cumsum(gw[:kk])])
    g_small[: kk + 1] = np.concatenate([[0.0], np.cumsum(gw_asc[:kk])])
    # own_large[i, a] / own_small[i, a]: Σ of node i's a heaviest / lightest key groups (inf: fewer than a)
    csum = np.concatenate([[0.0], np.cumsum(wsorted)])
    aa = np.arange(A + 1)[None, :]
    s0, s1 = starts[:-1, None], starts[1:, None]
    fits = aa <= (s1 - s0)
    own_large = np.where(fits, csum[np.minimum(s0 + aa, m)] - csum[s0], np.inf)
    own_small = np.where(fits, csum[s1] - csum[np.maximum(s1 - aa, 0)], np.inf)
    own_large[~act] = np.inf
    own_small[~act] = np.inf
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

    def frac_bytes_nodes(nodes: np.ndarray, need: np.ndarray) -> float:
        """Σ over ``nodes`` of the least bytes carrying ≥ need out of the node (fractional, ratio order)."""
        s0 = starts[nodes]
        s1 = starts[nodes + 1]
        goal = bw_cum[s0] + need - tol
        k = np.searchsorted(bw_cum, goal, side="left") - 1       # last prefix below the goal: item k completes it
        k = np.maximum(k, s0)
        if np.any(k >= s1):
            return math.inf
        before_l = bw_cum[k] - bw_cum[s0]
        before_b = bb_cum[k] - bb_cum[s0]
        wk, bk = bw[k], bb[k]
        part = np.where(wk > 0, (need - before_l) / np.where(wk > 0, wk, 1.0) * bk, 0.0)
        return float(np.sum(before_b + np.maximum(part, 0.0)))

    big = 10 ** 9

    def feasible(d: float) -> bool:
        hi = cap * (t + d)
        lo = cap * (t - d)
        e = L - hi          # net loss needed at least (negative: may gain up to −e)
        f = L - lo          # net loss allowed at most
        sel = act_idx[~((e[act_idx] <= tol) & (f[act_idx] >= -tol))]   # active nodes outside their band
        if sel.size == 0:
            return True
        ok = (net_hi[sel] >= (e[sel] - tol)[:, None, None]) & (net_lo[sel] <= (f[sel] + tol)[:, None, None])
        any_ok = ok.any(axis=(1, 2))
        if not any_ok.all() and A >= Mc:
            return False  # some node needs more than the whole budget in or out of it
        out_sum = int(np.where(ok, ab_a, big).min(axis=(1, 2))[any_ok].sum())
        in_sum = int(np.where(ok, ab_b, big).min(axis=(1, 2))[any_ok].sum())
        # every feasible pattern of a node without an ok pattern has more than A moves out or in
        touch_sum = int(np.where(ok, ab_touch, big).min(axis=(1, 2))[any_ok].sum()) + (A + 1) * int((~any_ok).sum())
        fs = f[sel]
        need_in = float(-fs[fs < -tol].sum())
        K = max(out_sum, in_sum, (touch_sum + 1) // 2)
        if need_in > tol:
            kf = int(np.searchsorted(gcum, need_in - tol)) + 1
            if kf > gcum.size:
                return False
            K = max(K, kf)
        if K > Mc:
            return False
        if use_bytes:
            over = sel[e[sel] > tol]
            bytes_out = frac_bytes_nodes(over, e[over]) if over.size else 0.0
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
        if time.perf_counter() > deadline:
            break
        mid = 0.5 * (lo_d + hi_d)
        if feasible(mid):
            hi_d = mid
        else:
            lo_d = mid
        if hi_d - lo_d <= 1e-7 * max(t, 1e-300):
            break
    return max(0.0, lo_d)


def comm_granularity_bound(problem: Problem) -> float:
    """The analytic bound with communication costs (granularity and Lemma 2 under the budget):
    :func:`solvers.albic.milp.comm_bounds.comm_analytic_bound`."""
    from solvers.albic.milp.comm_bounds import comm_analytic_bound
    return comm_analytic_bound(problem)


def proven_bound(problem: Problem, seconds: float = 1.0) -> float:
    """A valid lower bound on the load distance of ``problem`` (every key group its own unit), for planners that
    report one (``albic``). Without communication costs: :func:`analytic_bound`. With them:
    :func:`solvers.albic.milp.comm_bounds.comm_proven_bound` (the analytic communication bounds and, when the
    instance is small enough, the proven bound of the exact cut model solved by CP-SAT for at most ``seconds``)."""
    p = problem
    if not (p.communication_cost > 0 and p.comm.nnz):
        return analytic_bound(p, deadline=time.perf_counter() + seconds)
    from solvers.albic.milp.comm_bounds import comm_proven_bound
    return comm_proven_bound(p, seconds)
