"""Proven bounds and the exact cut model of the ALBIC MILP (§4.3.1) with communication costs (issue 16, item 3).

Communication cost is our extension of §4.3.1 (DESIGN.md): node ``i`` carries ``Σ loads + cc × rate`` of every
edge with exactly one end on ``i``, and the target ``t = Σ_i load_i / Σ_{j∈A} c_j`` counts every cut edge twice,
so ``t`` depends on the plan. The exact model (:func:`solvers.albic.milp.cpsat.build` with ``exact_comm=True``:
one indicator per unit edge, node and side) has an LP relaxation of 0 — fractional placements balance perfectly —
so its bound only rises as CP-SAT's search closes; within a 1 s limit it often stays 0 on instances of 10–14
units.

:func:`cut_model` therefore solves two models, both over every unit and node:

1. **The relaxed cut model** — the exact cut model *without* the migration budget (count and bytes) and without
   the resource limits ("Extending to Multi-Dimensional Load"); Lemma 1 (nothing moves onto a removing node) and
   the allowed nodes stay. Dropping constraints only adds plans, so its optimum is ≤ the optimum of the problem
   as given, and its proven bound (minus the rounding tolerance of :mod:`solvers.albic.milp.cpsat`) is a valid
   lower bound on the load distance — with fractional bytes, capacities, removing nodes and the drain floor alike
   (the bound is on the load distance, which the drain floor does not change). Without the budget, all active
   nodes of one capacity (and one allowed set) are interchangeable, and the value-precedence constraints of
   :func:`solvers.albic.milp.cpsat.node_symmetry` cut the search by up to ``k!`` per group of ``k`` such nodes:
   CP-SAT closes it far faster than the budgeted model. Its plan is kept when it happens to keep the budget
   (it is then optimal). When the budget does not bind, its bound is the optimum itself.
2. **The exact cut model** with the budget, for the remaining time, its ``d`` starting at the relaxed model's
   proven scaled bound (same scale and coefficients, so this is implied), unless the relaxed bound already
   meets the best plan.

The reported bound is the larger of the two. :func:`comm_proven_bound` is the same pair of models for planners
that only need the bound (``albic``, :func:`solvers.albic.milp.bounds.proven_bound`).
"""

from __future__ import annotations

import dataclasses
import itertools
import time

import numpy as np

from solvers.albic.milp.state import Pool, State, placement_ok
from solvers.albic.milp.submodel import PORTFOLIO_MAX, PORTFOLIO_WORKERS
from solvers.albic.milp.units import Units
from solvers.model import Problem

RELAXED_SHARE = 0.5       # share of the exact-model time given to the relaxed cut model first
RELABEL_MAX = 7           # groups of interchangeable nodes up to this size are relabelled optimally (k! labellings)
OPTIMALITY_TOL = 1e-6     # as in solvers.albic.milp: bound and plan meet within 1e-6 × the mean utilisation


def comm_analytic_bound(problem: Problem) -> float:
    """The larger of :func:`comm_granularity_bound` and :func:`comm_lemma2_bound` (O(m log m))."""
    return max(comm_granularity_bound(problem), comm_lemma2_bound(problem))


def comm_granularity_bound(problem: Problem) -> float:
    """A bound that holds with communication costs: a key group now on an active node ends on an active node
    (Lemma 1), whose utilisation is then at least ``load_k / max capacity``, while the target is at most
    ``(Σ load + 2·cc·Σ rate) / Σ_{j∈A} c_j`` (every edge cut): ``d ≥ max_k load_k / c_max − t_max``."""
    p = problem
    on_active = p.active[p.current]
    if not on_active.any():
        return 0.0
    _, _, rate = p.edges()
    t_max = (float(p.load.sum()) + 2 * p.communication_cost * float(rate.sum())) / float(p.capacity[p.active].sum())
    return max(0.0, (float(p.load[on_active].max()) / float(p.capacity[p.active].max()) - t_max) * (1 - 1e-9))


def comm_lemma2_bound(problem: Problem) -> float:
    """Lemma 2 of §4.3.1 under the budget, with communication costs: with ``R`` the load the removing nodes end
    with (their key groups' loads plus the cost of their cut edges), the active nodes hold ``Σ_i load_i − R =
    Q·t − R`` (``Q = Σ_{j∈A} c_j``), so ``Σ_{j∈A} c_j (u_j − t) = −R`` and some active node is ``R / Q`` below
    the target, whatever ``t`` is: ``d ≥ R / Q``. Cut costs only add to ``R``, so ``R`` is at least the loads
    of the key groups that cannot leave within the budget — the communication-free
    :func:`solvers.albic.milp.bounds.lemma2_bound` (the heaviest ``maxMigrations`` key groups on B and the
    fractional knapsack within ``maxBytes`` bound what leaves), which is therefore valid here too."""
    from solvers.albic.milp.bounds import lemma2_bound
    if not problem.removing.any():
        return 0.0
    return lemma2_bound(dataclasses.replace(problem, communication_cost=0.0))


def _workers(units: Units, workers: int) -> int:
    # the cut models' LP relaxation is 0: with one worker the bound stays 0 until the search is complete; the
    # portfolio's core/LB-search workers raise it
    if units.n_units * units.problem.n_nodes <= PORTFOLIO_MAX:
        return max(workers, PORTFOLIO_WORKERS)
    return workers


def cut_model(state: State, pool: Pool | None, seconds: float, workers: int = 1, seed: int = 0
              ) -> tuple[State, float | None, str]:
    """The relaxed, then the exact cut model (module docstring) for at most ``seconds``; plans are offered to
    ``pool`` (when given) and must keep the real budget. Returns (best state, valid bound on d or None, status)."""
    from solvers.albic.milp.cpsat import build, solve_cpsat
    t0 = time.perf_counter()
    units = state.units
    p = units.problem
    w = _workers(units, workers)
    all_u, all_n = np.arange(units.n_units), np.arange(p.n_nodes)
    has_limits = p.max_migrations is not None or p.max_migration_bytes is not None or state.res is not None
    bound: float | None = None
    d_int, scale = 0, 0.0
    status = ""
    rsm = build(state, all_u, all_n, relax=True, exact_comm=True, drop_limits=True) if has_limits else None
    if rsm is not None and rsm.sym:  # without interchangeable nodes the relaxed model is hardly faster: skip it
        res = solve_cpsat(state, rsm, t0 + RELAXED_SHARE * seconds - time.perf_counter(), workers=w, seed=seed)
        status = f"relaxed {res.status}; "
        if res.d_bound is not None:
            bound, d_int, scale = res.d_bound, int(res.d_int or 0), rsm.S
        for place in _relabelled(units, res.place, [rsm.nodes[g] for g in rsm.sym]):
            state = _keep(state, pool, place)
        if bound is not None and pool is not None and pool.best is not None:
            t_low = float(p.load.sum() / p.capacity[p.active].sum())  # ≤ the target of any plan
            if pool.best[0][2] <= bound + OPTIMALITY_TOL * max(t_low, 1e-300):
                return state, bound, status + "exact not needed"
    if t0 + seconds - time.perf_counter() <= 0.05:
        return state, bound, status + "exact not run"
    sm = build(state, all_u, all_n, relax=True, exact_comm=True)
    if d_int > 0 and sm.S == scale:
        sm.d_fixed = max(sm.d_fixed, d_int)  # same scale and coefficients, more constraints: implied
    res = solve_cpsat(state, sm, t0 + seconds - time.perf_counter(), workers=w, seed=seed)
    state = _keep(state, pool, res.place)
    if res.d_bound is not None:
        bound = res.d_bound if bound is None else max(bound, res.d_bound)
    return state, bound, status + res.status


def comm_proven_bound(problem: Problem, seconds: float) -> float:
    """A valid lower bound on the load distance with communication costs (every key group its own unit):
    :func:`comm_analytic_bound` and, when the instance is small enough (units × nodes ≤ 6,000, unit edges ×
    nodes ≤ 20,000), the proven bound of :func:`cut_model` from the current assignment within ``seconds``."""
    from solvers.albic.milp.cpsat import unit_edges
    from solvers.albic.milp.submodel import EXACT_COMM_MAX
    from solvers.albic.milp.units import build_units
    p = problem
    lb = comm_analytic_bound(p)
    units = build_units(p)
    if units.n_units * p.n_nodes > 6000 or seconds <= 0.05 or len(unit_edges(units)[0]) * p.n_nodes > EXACT_COMM_MAX:
        return lb
    state = State(units, p.current.copy(), float(units.load.sum() / p.capacity[p.active].sum()))
    _, bound, _ = cut_model(state, None, seconds)
    return max(lb, bound or 0.0)


def _relabelled(units: Units, place: np.ndarray | None, groups: list[np.ndarray]) -> list[np.ndarray]:
    """The relaxed model's plan with the nodes of each group of interchangeable nodes relabelled (same loads, same
    distance) to use the fewest migrations, resp. the fewest bytes (assignment problems, blocks to nodes, solved by
    enumeration): its canonical labelling (value precedence) may move whole blocks for nothing."""
    if place is None:
        return []
    out = []
    all_u = np.arange(units.n_units)
    for by_bytes in (False, True):
        new = place.copy()
        for g in groups:
            cost = np.zeros((g.size, g.size))
            for b, node in enumerate(g.tolist()):
                members = all_u[place == node]
                for j, to in enumerate(g.tolist()):
                    c = units.cost_bytes_to(members, to) if by_bytes else units.cost_count_to(members, to)
                    cost[b, j] = float(np.sum(c))
            if g.size > RELABEL_MAX:
                continue
            perms = np.array(list(itertools.permutations(range(g.size))), dtype=np.int64)
            best = perms[int(np.argmin(cost[np.arange(g.size)[None, :], perms].sum(axis=1)))]
            for b, j in enumerate(best.tolist()):
                new[place == g[b]] = g[j]
        out.append(new)
    return out


def _keep(state: State, pool: Pool | None, place: np.ndarray | None) -> State:
    """Offer a model plan (only if it keeps the real budget, resource limits and Lemma 1); the better state."""
    if place is None or not placement_ok(state.units, place):
        return state
    new = state.copy()
    new.set_place(place)
    if pool is not None:
        pool.offer(new.place, "milp")
    return new if new.key() <= state.key() else state
