"""The full model of the ALBIC planner solved by levels (§4.3.1; Lemmas 1 and 2 for the drain objective).

The paper's objective ``w1·d − w2·(du + dl)`` with ``w1 ≫ w2`` puts the band's width under the distance; given to
CP-SAT as one weighted sum (``W1·d + hi − lo``) its proof needs both to close, and on small instances with awkward
capacities (1.3, 0.3, 2.9) it proved nothing in 10 s where minimising ``d`` alone took 0.3–2 s. The planner's own
objective is lexicographic anyway (:func:`solvers.albic.milp.state.exact_key`): with removing nodes that hold load
and ``drain=true``, the least ``max(d, F)`` (``F`` the drain floor), then the least load ``B`` left on the removing
nodes, then the least ``d``; then the band. :func:`full_levels` solves the levels in turn on the scaled model of
:mod:`solvers.albic.milp.scaled` (built as a relaxation of any byte or resource rounding):

1. minimise ``d``; its proven bound is the full model's bound on the distance;
2. drain objective only: with ``d ≤ cap``, ``cap = max(D, F) + tol`` scaled (``D`` the distance of level 1's plan,
   ``tol`` the model's utilisation rounding: every plan whose ``max(d, F)`` is the optimum keeps it), minimise
   ``B = Σ load of the units that stay on removing nodes`` (nothing moves onto them: Lemma 1), in integers scaled
   exactly when the loads allow it;
3. drain objective with ``D < F`` only: with ``d ≤ cap`` and ``B ≤ B*``, minimise ``d``;
4. with ``d`` at its least so far (level 1's optimum, or level 3's) and ``B ≤ B*``, minimise ``W1·d + hi − lo``
   (the band).

When CP-SAT proves the levels of the drain objective (1, 2 and, below the floor, 3) and the plan keeps the real
budget, it is the lexicographic optimum up to the rounding tolerance (``max(d, F)`` within ``4·tol``, which must be
inside the planner's ``optimal`` tolerance): the planner reports ``optimal`` on that proof. Level 4 only orders
plans of the same distance.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from solvers.albic.milp.cpsat import CpBuild, answer, build_cp, d_bound_of, run_cp
from solvers.albic.milp.scaled import SubModel, build, exact_scale
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


def _level(state: State, sm: SubModel, hint: np.ndarray | None, cap: int | None, b_max: int | None, objective: str,
           deadline: float, workers: int, seed: int) -> tuple[Any, np.ndarray | None, int | None, float]:
    """One level: (CP-SAT status, plan of ``sm.cand`` or None, the objective's value, the proven bound: on the
    scaled ``d`` for the objectives ``"d"`` and ``"band"``, on ``B`` for ``"left"``)."""
    cb = build_cp(state, sm, hint)
    if cap is not None:
        cb.model.add(cb.d <= cap)
    left, const = _left_on_removing(cb, state)
    if b_max is not None:
        cb.model.add(left <= b_max - const)
    cb.model.minimize({"d": cb.d, "left": left, "band": cb.W1 * cb.d + cb.hi - cb.lo}[objective])
    st, solver = run_cp(cb, deadline, workers, seed)
    if solver is None or st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return st, None, None, 0.0
    value = int(round(solver.objective_value)) + (const if objective == "left" else 0)
    bound = solver.best_objective_bound
    if objective != "left":
        bound = d_bound_of(bound, cb.W1 if objective == "band" else 1)
    return st, answer(cb, state, solver), value, float(bound)


def full_levels(state: State, pool: Pool, seconds: float, workers: int, seed: int, claim_tol: float
                ) -> tuple[State, float | None, str, bool]:
    """The levels of the module docstring for at most ``seconds``; every plan found is offered to ``pool``.
    Returns (best state, valid bound on ``d`` or None, level 1's status, whether the drain objective's optimum is
    proven — within ``claim_tol`` of ``max(d, F)``, which the model's rounding must allow — and in the pool)."""
    deadline = time.perf_counter() + seconds
    units = state.units
    sm = build(state, np.arange(units.n_units), np.arange(units.problem.n_nodes), relax=True)
    st1, plan, d_opt, d_int = _level(state, sm, None, None, None, "d", deadline, workers, seed)
    bound = max(0.0, d_int / sm.S - sm.tol) if plan is not None else None
    status = "optimal" if st1 == cp_model.OPTIMAL else ("feasible" if plan is not None else "none")
    state = keep_better(state, pool, plan, "milp")
    if st1 != cp_model.OPTIMAL or plan is None or d_opt is None:
        return state, bound, status, False
    cap, b_star, proven = d_opt, None, False
    if pool.floor > 0:
        d1 = exact_key(units.problem, units.assignment(plan))[2]
        cap = int(math.floor(sm.S * (max(d1, pool.floor) + sm.tol)))
        st2, plan2, b_star, _ = _level(state, sm, plan, cap, None, "left", deadline, workers, seed)
        state = keep_better(state, pool, plan2, "milp+drain")
        if st2 != cp_model.OPTIMAL or plan2 is None:
            return state, bound, status, False
        plan = plan2
        if d1 < pool.floor:  # below the floor the least d among those plans is a level of its own
            st3, plan3, d3, _ = _level(state, sm, plan, cap, b_star, "d", deadline, workers, seed)
            state = keep_better(state, pool, plan3, "milp+drain")
            if st3 != cp_model.OPTIMAL or plan3 is None or d3 is None:
                return state, bound, status, False
            plan, cap = plan3, d3
        proven = placement_ok(units, plan) and 4 * sm.tol <= claim_tol
    _, plan4, _, _ = _level(state, sm, plan, cap, b_star, "band", deadline, workers, seed)
    state = keep_better(state, pool, plan4, "milp+band")
    return state, bound, status, proven
