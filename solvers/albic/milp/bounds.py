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
- a key group on an active node stays on an active node: d ≥ max load / max capacity − t (granularity);
- *sender pools* (§4.3.1 constraints (1)(2): a migration is one key group leaving its node and entering one other
  node): let ``a_min_i`` be the fewest key groups out of node ``i`` of any pattern that lands it (0 for nodes
  inside their band and for removing nodes). Every plan within the budget sends ``a_i ≥ a_min_i`` out of each
  node and ``Σ a_i ≤ maxMigrations``, so ``Σ_i (a_i − a_min_i) ≤ σ = maxMigrations − Σ a_min``: the nodes with
  ``a_min = 0`` send at most σ key groups together and a node with ``a_min ≥ 1`` at most ``a_min + σ`` of its
  own. Every arrival is one of those departures, so the b key groups arriving at a node weigh at least the b
  lightest (at most the b heaviest) of that pool — instead of "anywhere". The patterns are re-checked with
  these sums (the pool only removes candidates, so nothing that a plan does is excluded); repeated twice, each
  round with the ``a_min`` of the previous one (each is a valid lower bound on ``a_i``);
- patterns are enumerated up to ``A = min(PATTERN_MAX, budget)`` key groups in and out; when the budget allows
  more, a pattern with more than A arrivals is possible for ``a`` only if ``Σ a heaviest own − Σ A+1 lightest
  arrivals ≥ e_i`` (more arrivals only lower the net loss), symmetrically for departures, and such patterns
  touch the node more than A times: ``a_min``/``b_min``/touches are the minima over both, never overestimated.

The conditions are (nearly) monotone in ``d``, so a bisection finds a ``d`` where they fail; it is a valid
lower bound because every condition is implied by the existence of a plan with distance ≤ d (each failed check
is a proof on its own, whatever the bisection does). Grouping key groups into units and restricting
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
#: the sender-pool refinement of :func:`band_bound` runs when at most this many nodes are outside the band
POOL_NODES_MAX = 300
#: … and the instance has at most this many key groups (it doubles the bound's time at 1,000 × 100,000, where
#: the time is better spent searching: the bound there is not a target)
POOL_KEY_GROUPS_MAX = 20_000
#: seconds per key group and per (node × pattern) of :func:`band_bound`'s setup (sorts and prefix sums; the
#: n × (A+1)² pattern tables) and first checks, which cannot stop at the deadline. Measured (first call of a process
#: about twice the later ones): 0.05–0.12 s at 1,000 × 100,000, 0.16–0.35 s at 10,000 nodes × 20,000 (A = 24)
SETUP_SECONDS = (8e-7, 4e-8)


def analytic_bound(problem: Problem, steps: int = 60, deadline: float = math.inf) -> float:
    """The larger of :func:`band_bound` and :func:`lemma2_bound` (both valid lower bounds on the load distance);
    with communication costs :func:`comm_granularity_bound`."""
    if problem.communication_cost > 0 and problem.comm.nnz:
        return comm_granularity_bound(problem)
    return max(band_bound(problem, steps, deadline), lemma2_bound(problem))


def lemma2_bound(problem: Problem) -> float:
    """Lemma 2 of §4.3.1 under a migration budget: the load that must stay on removing nodes.

    Nothing moves onto a removing node (Lemma 1) and at most ``maxMigrations`` key groups (and at most
    ``maxBytes`` of state) can leave them, so at least ``R`` (:func:`load_left_on_removing`) stays on B. The
    active nodes then hold ``Σ load − R`` while the target counts all of it, so ``Σ_{j∈A} c_j (t − u_j) = R`` and
    some active node is at least ``R / Σ_{j∈A} c_j`` below ``t``: ``d ≥ R / Σ_{j∈A} c_j``. (No communication
    costs: they move the target.)
    """
    p = problem
    if not p.removing.any() or (p.communication_cost > 0 and p.comm.nnz):
        return 0.0
    return load_left_on_removing(p) / float(p.capacity[p.active].sum()) * (1 - 1e-9)


def load_left_on_removing(problem: Problem) -> float:
    """A lower bound on the load every plan leaves on the removing nodes (Lemmas 1 and 2 of §4.3.1 under the
    budget): ``R = load on B − (the most load that can leave within the budget)``, where the ``maxMigrations``
    heaviest key groups on B and the fractional knapsack of load per byte within ``maxBytes`` bound what can
    leave. Key groups' own loads only: communication costs of cut edges only add to the load on B."""
    p = problem
    if not p.removing.any():
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
    return max(0.0, total - can_leave)


def band_bound(problem: Problem, steps: int = 60, deadline: float = math.inf) -> float:
    """The bisection on the band conditions of the module docstring. It may stop at ``deadline``
    (``time.perf_counter()``): the lower end of the bisection is a valid bound at every step. The setup is not
    started when it would not end before the deadline (estimated by ``SETUP_SECONDS``); the bound is then the
    granularity bound alone (O(m))."""
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
    A = int(min(PATTERN_MAX, Mc if not math.isinf(Mc) else PATTERN_MAX))  # patterns of ≤ A key groups in/out
    setup = SETUP_SECONDS[0] * m + SETUP_SECONDS[1] * n * (A + 1) ** 2
    if math.isinf(Mc) and math.isinf(Mb) or time.perf_counter() + setup > deadline:
        return min(gran, d_cur)

    # per node: key groups by load, descending, and cumulative loads
    order = np.lexsort((-w, p.current))
    starts = np.searchsorted(p.current[order], np.arange(n + 1))
    wsorted = w[order]
    # global heaviest first (for inflow)
    g_idx = np.argsort(-w, kind="stable")
    gw = w[g_idx]
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

    # global key groups in descending load order, with their nodes (for the sender pools of :func:`feasible`)
    g_node = p.current[g_idx]
    g_w = w[g_idx]
    escape = A < Mc  # patterns with more than A key groups in (or out) are within the budget: see _minima

    def pool_sums(send: np.ndarray, caps: np.ndarray, sigma: int) -> tuple[np.ndarray, np.ndarray]:
        """Σ of the b heaviest / lightest key groups (b = 0..A+1) that can arrive anywhere when node ``send[k]``
        sends at most ``caps[k]`` of its key groups and all other nodes together at most ``sigma``."""
        senders = np.zeros(n, dtype=bool)
        senders[send] = True
        in_p = senders[g_node]
        s_take = min(max(sigma, 0), A + 1)
        cap_k = np.minimum(caps, A + 1)
        s0_, s1_ = starts[send], starts[send + 1]
        top = [wsorted[x: min(y, x + c)] for x, y, c in zip(s0_.tolist(), s1_.tolist(), cap_k.tolist(), strict=True)]
        bot = [wsorted[max(x, y - c): y] for x, y, c in zip(s0_.tolist(), s1_.tolist(), cap_k.tolist(), strict=True)]
        hp = np.concatenate(top) if top else np.zeros(0)
        lp = np.concatenate(bot) if bot else np.zeros(0)
        hn = g_w[~in_p][:s_take]
        ln = g_w[~in_p][::-1][:s_take]
        heavy = np.sort(np.concatenate([hp, hn]))[::-1][: A + 1]
        light = np.sort(np.concatenate([lp, ln]))[: A + 1]
        gl = np.full(A + 2, np.inf)
        gs = np.full(A + 2, np.inf)
        gl[: heavy.size + 1] = np.concatenate([[0.0], np.cumsum(heavy)])
        gs[: light.size + 1] = np.concatenate([[0.0], np.cumsum(light)])
        return gl, gs

    gl0 = np.full(A + 2, np.inf)
    gs0 = np.full(A + 2, np.inf)
    kk1 = min(A + 1, m)
    gl0[: kk1 + 1] = np.concatenate([[0.0], np.cumsum(gw[:kk1])])
    gs0[: kk1 + 1] = np.concatenate([[0.0], np.cumsum(gw_asc[:kk1])])
    def _net(o_small: np.ndarray, o_large: np.ndarray, gl: np.ndarray, gs: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
        """(nodes, a, b) smallest and largest net loss of the patterns (±inf: impossible pattern)."""
        with np.errstate(invalid="ignore"):
            nlo = o_small[:, :, None] - gl[None, None, : A + 1]
            nhi = o_large[:, :, None] - gs[None, None, : A + 1]
        imp = ~np.isfinite(o_large)[:, :, None] | ~np.isfinite(gs[: A + 1])[None, None, :]
        return np.where(imp, np.inf, nlo), np.where(imp, -np.inf, nhi)

    net_lo0, net_hi0 = _net(own_small, own_large, gl0, gs0)
    own_small_x = np.where(starts[1:] - starts[:-1] >= A + 1,
                           csum[starts[1:]] - csum[np.maximum(starts[1:] - (A + 1), 0)], np.inf)  # A+1 lightest own

    def _minima(sel: np.ndarray, e_s: np.ndarray, f_s: np.ndarray, gl: np.ndarray, gs: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per node of ``sel``: the least key groups out (a), in (b) and touches (a + b) of any pattern that can
        land it in its band, with ``gl``/``gs`` the sums of the b heaviest/lightest key groups that can arrive.
        Patterns with a, b ≤ A are enumerated; when the budget allows more than A, a pattern (a, b > A) may be ok
        only if ``own_large[a] − gs[A+1] ≥ e`` (more arrivals only lower the net loss), and (a > A, b) only if
        ``own_small[A+1] − gl[b] ≤ f``: those escapes bound a and b from below, touches by A + 1."""
        if gl is gl0:
            nlo, nhi = net_lo0[sel], net_hi0[sel]
        else:
            nlo, nhi = _net(own_small[sel], own_large[sel], gl, gs)
        ok = (nhi >= (e_s - tol)[:, None, None]) & (nlo <= (f_s + tol)[:, None, None])
        ok_a = ok.any(axis=2)                      # (sel, a): some b works with this a
        ok_b = ok.any(axis=1)                      # (sel, b)
        a_min = np.where(ok_a.any(axis=1), ok_a.argmax(axis=1), big)
        b_min = np.where(ok_b.any(axis=1), ok_b.argmax(axis=1), big)
        t_min = np.where(ok, ab_touch, big).min(axis=(1, 2))
        if escape:
            with np.errstate(invalid="ignore"):
                esc_a = np.isfinite(own_large[sel]) & (own_large[sel] - gs[A + 1] >= (e_s - tol)[:, None])
                esc_b = np.isfinite(gl[: A + 1])[None, :] & (own_small_x[sel][:, None] - gl[None, : A + 1]
                                                            <= (f_s + tol)[:, None])
            a_min = np.minimum(a_min, np.where(esc_a, ab_a[:, 0][None, :], big).min(axis=1))
            b_min = np.minimum(b_min, np.where(esc_b, ab_a[:, 0][None, :], big).min(axis=1))
            t_min = np.minimum(t_min, A + 1)
        else:  # A ≥ budget: every pattern is enumerated; a node with none needs more than the budget
            t_min = np.where(t_min < big, t_min, A + 1)
        return a_min, b_min, t_min, ok_a.any(axis=1)

    def feasible(d: float) -> bool:
        hi = cap * (t + d)
        lo = cap * (t - d)
        e = L - hi          # net loss needed at least (negative: may gain up to −e)
        f = L - lo          # net loss allowed at most
        sel = act_idx[~((e[act_idx] <= tol) & (f[act_idx] >= -tol))]   # active nodes outside their band
        if sel.size == 0:
            return True
        e_s, f_s = e[sel], f[sel]
        gl, gs = gl0, gs0
        for rnd in range(3):
            a_min, b_min, t_min, any_ok = _minima(sel, e_s, f_s, gl, gs)
            if not any_ok.all() and A >= Mc:
                return False  # some node needs more than the whole budget in or out of it
            # a node whose least a or b exceeds A (no pattern found) counts 0 out/in, A + 1 touches: still valid
            out_sum = int(np.where(a_min < big, a_min, 0).sum())
            in_sum = int(np.where(b_min < big, b_min, 0).sum())
            touch_sum = int(t_min.sum())
            K = max(out_sum, in_sum, (touch_sum + 1) // 2)
            if K > Mc:
                return False
            if rnd == 2 or math.isinf(Mc) or sel.size > POOL_NODES_MAX or m > POOL_KEY_GROUPS_MAX:
                break
            # every plan sends a_i ≥ a_min_i key groups out of node i and Σ a_i ≤ Mc, so the nodes with
            # a_min = 0 send at most σ = Mc − Σ a_min key groups: every arrival comes from a node with a_min ≥ 1
            # except at most σ of them (§4.3.1 (1)(2): a migration leaves one node and enters one)
            sigma = int(Mc) - out_sum
            if sigma > A:
                break
            # … and a node with a_min ≥ 1 sends at most a_min + σ of its key groups
            pk = (a_min >= 1) & (a_min < big)
            gl, gs = pool_sums(sel[pk], a_min[pk] + sigma, sigma)
        fs = f_s
        need_in = float(-fs[fs < -tol].sum())
        if need_in > tol:
            kf = int(np.searchsorted(gcum, need_in - tol)) + 1
            if kf > gcum.size or kf > Mc:
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
    if time.perf_counter() > deadline:
        return lo_d
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
