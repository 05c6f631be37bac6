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
from collections.abc import Callable

import numpy as np

from solvers.albic.milp.band import BandConditions
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
    if problem.communicates:
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
    if not p.removing.any() or p.communicates:
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
    """The bisection on the band conditions of the module docstring (§4.3.1 under a migration budget; the
    conditions are checked by :class:`solvers.albic.milp.band.BandConditions`). It may stop at ``deadline``
    (``time.perf_counter()``): the lower end of the bisection is a valid bound at every step. The setup is not
    started when it would not end before the deadline (estimated by ``SETUP_SECONDS``); the bound is then the
    granularity bound alone (O(m))."""
    p = problem
    if p.communicates or time.perf_counter() > deadline:
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
    conditions = BandConditions(p, L, t, tol, A, Mc, Mb, (POOL_NODES_MAX, POOL_KEY_GROUPS_MAX))
    return _bisect(conditions.feasible, min(gran, d_cur), d_cur, t, steps, deadline)


def _bisect(feasible: Callable[[float], bool], lo_d: float, hi_d: float, t: float, steps: int, deadline: float
            ) -> float:
    """The largest ``d`` found in ``[lo_d, hi_d]`` (``hi_d``: the current assignment's distance) where
    ``feasible`` fails — a valid lower bound at every step — or ``lo_d`` when it holds there."""
    if time.perf_counter() > deadline:
        return lo_d
    if feasible(lo_d):
        return lo_d
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
    if not p.communicates:
        return analytic_bound(p, deadline=time.perf_counter() + seconds)
    from solvers.albic.milp.comm_bounds import comm_proven_bound
    return comm_proven_bound(p, seconds)
