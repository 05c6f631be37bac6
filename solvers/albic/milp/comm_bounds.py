"""Proven bounds and the exact cut model of the ALBIC MILP (§4.3.1) with communication costs.

Communication cost is our extension of §4.3.1 (docs/design.md): node ``i`` carries ``Σ loads + cc × rate`` of every
edge with exactly one end on ``i``, and the target ``t = Σ_i load_i / Σ_{j∈A} c_j`` counts every cut edge twice,
so ``t`` depends on the plan. The exact cut model (:func:`solvers.albic.milp.scaled.build` with ``exact_comm=True``)
has an LP relaxation of 0 — fractional placements balance perfectly — so its bound only rises as CP-SAT's search
closes; with two indicators per edge side and no symmetry breaking it often stayed 0 within a 1 s limit on
instances of 10–14 key groups. :func:`cut_model` solves it in a stronger form (all in
:mod:`solvers.albic.milp.scaled` and :mod:`solvers.albic.milp.cpsat_cut`):

- one indicator per unit edge and node, ``s = x[a,b] ∧ x[c,b]`` (both ends on ``b``), instead of one per side:
  the node gains ``cc·rate·(x[a,b] + x[c,b] − 2s)``, the target ``2·cc·rate·(1 − Σ_b s)``;
- value precedence between interchangeable nodes — active nodes of one capacity with the same allowed units and
  resource rooms (:func:`solvers.albic.milp.scaled.node_symmetry`) — cutting up to ``k!`` labellings per group of
  ``k``; the migration budget, which tells such nodes apart (a unit living on one of them stays for free), is
  charged through a permutation of the group (``build(perm_budget=True)``, an exact reformulation).

Validity: the model is exact up to the rounding of :mod:`solvers.albic.milp.scaled` (byte and resource rounding as a
relaxation, utilisations within ``tol``), and its proven bound minus ``tol`` is reported, so it is ≤ the optimum of
the problem as given — fractional rates and bytes, capacities, removing nodes, both budgets, extra resources. The
bound is on the load distance; the drain floor changes only which plan the planner prefers, not the optimum of the
distance, so the bound holds with ``drain=true`` too.

:func:`comm_analytic_bound` adds O(m log m) bounds for any size (granularity, Lemma 2 under the budget, no move
possible);
:func:`comm_proven_bound` is both for planners that only need the bound (``albic``,
:func:`solvers.albic.milp.bounds.proven_bound`).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from solvers.albic.milp.scaled import build, unit_edges
from solvers.albic.milp.state import Pool, State, keep_better
from solvers.albic.milp.units import Units
from solvers.model import Problem

PORTFOLIO_MAX = 200       # units × nodes up to which the cut model runs a CP-SAT portfolio …
PORTFOLIO_WORKERS = 4     # … of at least this many workers (its bound comes from the core/LB-search workers; on
#                           2 cores, 3–4 workers proved the hard instances in ~half the CPU time of 8)


def comm_analytic_bound(problem: Problem) -> float:
    """The largest of :func:`comm_granularity_bound`, :func:`comm_lemma2_bound` and :func:`no_move_bound`
    (O(m log m))."""
    return max(comm_granularity_bound(problem), comm_lemma2_bound(problem), no_move_bound(problem))


def no_move_bound(problem: Problem) -> float:
    """When the budget allows no migration at all (``maxMigrations = 0``, or every key group has more state bytes
    than ``maxBytes``, with a margin), the current assignment is the only plan and its load distance is the
    optimum (minus a relative 1e-9 for float noise); 0 otherwise."""
    p = problem
    if p.n_key_groups == 0:
        return 0.0
    frozen = p.max_migrations is not None and p.max_migrations < 1
    if not frozen and p.max_migration_bytes is not None:
        frozen = bool(np.all(p.state_bytes > float(p.max_migration_bytes) * (1 + 1e-9) + 1e-9))
    if not frozen:
        return 0.0
    from solvers import metrics
    return max(0.0, metrics.load_distance(p, p.current) * (1 - 1e-9))


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
    """The exact cut model (module docstring) for at most ``seconds``, hinted with ``state``; its plan is offered
    to ``pool`` (when given) and kept only if it keeps the real budget. Returns (best state, valid bound on d or
    None, CP-SAT status)."""
    from solvers.albic.milp.cpsat import solve_cpsat
    t0 = time.perf_counter()
    units = state.units
    p = units.problem
    sm = build(state, np.arange(units.n_units), np.arange(p.n_nodes), relax=True, exact_comm=True,
               perm_budget=True)
    res = solve_cpsat(state, sm, t0 + seconds - time.perf_counter(), workers=_workers(units, workers), seed=seed)
    state = keep_better(state, pool, res.place, "milp")
    return state, res.d_bound, res.status


def comm_proven_bound(problem: Problem, seconds: float) -> float:
    """A valid lower bound on the load distance with communication costs (every key group its own unit):
    :func:`comm_analytic_bound` and, when the instance is small enough (units × nodes ≤ 6,000, unit edges ×
    nodes ≤ 20,000), the proven bound of :func:`cut_model` from the current assignment within ``seconds``."""
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
