"""The drain objective of the ALBIC planner solved exactly on small instances (§4.3.1, Lemmas 1 and 2).

With removing nodes that hold load and ``drain=true`` the planner's objective is lexicographic (see
:func:`solvers.albic.milp.state.drain_floor`): the least ``max(d, F)`` (``F`` the drain floor), then the least load
left on the removing nodes ``B``, then the least ``d``. The full model of :func:`solvers.albic.milp.submodel.
full_model` minimises ``d`` alone, so its optimum can leave load on B that a plan of the same ``d`` moves off:
proving ``d`` is not proving the objective. :func:`drain_model` solves the three levels in turn on the scaled model
of :mod:`solvers.albic.milp.scaled` (built as a relaxation of any byte or resource rounding, as the full model):

1. minimise ``W1·d + hi − lo`` (the full model); its proven bound on ``d`` is reported as the full model's;
2. with ``d ≤ cap``, ``cap = max(D, F) + tol`` scaled (``D`` the distance of level 1's plan, ``tol`` the
   utilisation rounding of the scaled model: every plan whose ``max(d, F)`` is the optimum keeps it), minimise
   ``B = Σ load of the units that stay on removing nodes`` (nothing moves onto them: Lemma 1), in integers scaled
   exactly when the loads allow it;
3. with ``d ≤ cap`` and ``B ≤ B*``, minimise ``W1·d + hi − lo`` again.

When CP-SAT proves all three and the plan keeps the real budget, it is the lexicographic optimum up to the
rounding tolerance (``max(d, F)`` within ``3·tol`` ≈ 4·10^-7 of the mean, far inside the planner's ``optimal``
tolerance of 10^-6): the planner reports ``optimal`` on that proof.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from solvers.albic.milp.cpsat import CpBuild, answer, build_cp, d_bound_of, run_cp
from solvers.albic.milp.scaled import build, exact_scale
from solvers.albic.milp.state import Pool, State, exact_key, keep_better, placement_ok


def _left_on_removing(cb: CpBuild, state: State) -> tuple[Any, int]:
    """The load left on removing nodes as a CP-SAT expression in scaled integers (exact when one scale of
    :func:`~solvers.albic.milp.scaled.exact_scale` makes the loads integral, else rounded at 2^-40 of their sum),
    with its constant part (units that cannot leave)."""
    sm = cb.sm
    units = state.units
    removing = units.problem.removing[sm.nodes]
    w = units.load[sm.cand]
    s = exact_scale(w) or 2.0 ** 40 / max(float(w.sum()), 1e-300)
    wi = np.rint(w * s).astype(np.int64)
    vs: list[Any] = []
    cs: list[int] = []
    for b in np.flatnonzero(removing).tolist():
        for v, a in cb.xs[b]:
            vs.append(v)
            cs.append(int(wi[a]))
    fixed = np.flatnonzero(cb.single & removing[cb.cur_pos])
    const = int(wi[fixed].sum())
    return (cp_model.LinearExpr.weighted_sum(vs, cs) if vs else 0), const


def _level(state: State, sm: Any, hint: np.ndarray | None, cap: int | None, b_max: int | None, minimise_b: bool,
           deadline: float, workers: int, seed: int) -> tuple[Any, np.ndarray | None, int | None, float]:
    """One level: (CP-SAT status, plan of ``sm.cand`` or None, the objective's value, its proven bound)."""
    cb = build_cp(state, sm, hint)
    if cap is not None:
        cb.model.add(cb.d <= cap)
    left, const = _left_on_removing(cb, state)
    if b_max is not None:
        cb.model.add(left <= b_max - const)
    cb.model.minimize(left if minimise_b else cb.W1 * cb.d + cb.hi - cb.lo)
    st, solver = run_cp(cb, deadline, workers, seed)
    if solver is None or st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return st, None, None, 0.0
    value = int(round(solver.objective_value)) + (const if minimise_b else 0)
    bound = solver.best_objective_bound if minimise_b else d_bound_of(solver.best_objective_bound, cb.W1)
    return st, answer(cb, state, solver), value, float(bound)


def drain_model(state: State, pool: Pool, seconds: float, workers: int, seed: int, claim_tol: float
                ) -> tuple[State, float | None, str, bool]:
    """The three levels of the module docstring for at most ``seconds``; every plan found is offered to ``pool``.
    Returns (best state, valid bound on ``d`` or None, level 1's status, whether the lexicographic optimum is
    proven — within ``claim_tol`` of ``max(d, F)``, which the model's rounding must allow — and in the pool)."""
    deadline = time.perf_counter() + seconds
    units = state.units
    sm = build(state, np.arange(units.n_units), np.arange(units.problem.n_nodes), relax=True)
    st1, plan, _, d_int = _level(state, sm, None, None, None, False, deadline, workers, seed)
    bound = max(0.0, d_int / sm.S - sm.tol) if plan is not None else None
    status = "optimal" if st1 == cp_model.OPTIMAL else ("feasible" if plan is not None else "none")
    state = keep_better(state, pool, plan, "milp")
    if st1 != cp_model.OPTIMAL or plan is None:
        return state, bound, status, False
    d1 = exact_key(units.problem, units.assignment(plan))[2]
    cap = int(math.floor(sm.S * (max(d1, pool.floor) + sm.tol)))
    st2, plan2, b_star, _ = _level(state, sm, plan, cap, None, True, deadline, workers, seed)
    state = keep_better(state, pool, plan2, "milp+drain")
    if st2 != cp_model.OPTIMAL or plan2 is None or b_star is None:
        return state, bound, status, False
    st3, plan3, _, _ = _level(state, sm, plan2, cap, b_star, False, deadline, workers, seed)
    state = keep_better(state, pool, plan3, "milp+drain")
    proven = st3 == cp_model.OPTIMAL and plan3 is not None and placement_ok(units, plan3) and 4 * sm.tol <= claim_tol
    return state, bound, status, proven
