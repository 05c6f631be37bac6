"""The sub-MILP of :mod:`solvers.albic.milp.scaled` solved with PuLP/CBC (``--param backend=cbc``).

Same model (ALBIC §4.3.1, constraints (1)–(5) with the w1 ≫ w2 objective written with both bands), but in real
numbers: CBC takes the scaled utilisations as floats, so no rounding tolerance beyond CBC's own (1e-9 relative
gap settings aside). The incumbent is passed as a MIP start. ``seed`` 0 keeps CBC's own fixed seed; a positive
seed is CBC's ``randomCbcSeed`` (its heuristics' rounding choices; folded into CBC's range, 1 to 2³¹ − 1), so the
planner's seeds vary this backend too.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pulp

from solvers.albic.milp.scaled import SubModel, SubResult
from solvers.albic.milp.state import State

CBC_SEED_MAX = 2**31 - 1  # CBC's randomCbcSeed: -1 (its default), 0 (the time of day) or up to this


def solve_cbc(state: State, sm: SubModel, time_limit: float, workers: int = 1, seed: int = 0) -> SubResult:
    t0 = time.perf_counter()
    p = state.units.problem
    nc, nn = sm.mask.shape
    act = p.active[sm.nodes]
    cur_pos = np.searchsorted(sm.nodes, state.place[sm.cand])
    prob = pulp.LpProblem("albic_milp", pulp.LpMinimize)
    d = prob.add_variable("d", lowBound=max(0, sm.d_fixed))
    hi = prob.add_variable("hi")
    lo = prob.add_variable("lo")
    maxU = float(sm.base.max() + (np.where(sm.mask, sm.coef, 0).sum(axis=0).max() if nc else 0)) + 1
    maxU = max(maxU, sm.T, sm.hi_fixed or 0) + 1
    W1 = 2 * maxU + 1
    xs: list[list[Any]] = [[] for _ in range(nn)]
    cost_c, cost_b = [], []
    for a in range(nc):
        cols = np.flatnonzero(sm.mask[a])
        row = []
        for b in cols.tolist():
            v = prob.add_variable(f"x_{a}_{b}", cat="Binary")
            v.setInitialValue(1 if b == cur_pos[a] else 0)
            row.append(v)
            xs[b].append((v, a))
            if sm.cc[a, b]:
                cost_c.append((v, float(sm.cc[a, b])))
                cost_b.append((v, float(sm.cb[a, b])))
        prob += pulp.lpSum(row) == 1
    for b in range(nn):
        e = pulp.lpSum(float(sm.coef[a, b]) * v for v, a in xs[b]) + float(sm.base[b])
        if act[b]:
            prob += e - sm.T <= d
            prob += sm.T - e <= d
            prob += e <= hi
            prob += e >= lo
    if sm.hi_fixed is not None:
        prob += hi >= sm.hi_fixed
        prob += lo <= sm.lo_fixed
    if sm.room_c is not None and cost_c:
        prob += pulp.lpSum(c * v for v, c in cost_c) <= sm.room_c
    if sm.room_b is not None and cost_b:
        prob += pulp.lpSum(c * v for v, c in cost_b) <= sm.room_b
    if sm.res_coef is not None and sm.res_room is not None:
        for b in range(nn):
            for r in range(sm.res_coef.shape[1]):
                if sm.res_room[b, r] >= 0 and xs[b]:
                    prob += pulp.lpSum(float(sm.res_coef[a, r]) * v for v, a in xs[b]) <= float(sm.res_room[b, r])
    prob += W1 * d + hi - lo
    remaining = time_limit - (time.perf_counter() - t0)
    if remaining <= 0.05:
        return SubResult(None, "none", None, time.perf_counter() - t0)
    solver = pulp.PULP_CBC_CMD(msg=False, timeLimit=max(1, int(math.floor(remaining))) if remaining >= 1 else remaining,
                               warmStart=True, threads=max(1, workers),
                               options=[f"randomCbcSeed {1 + (seed - 1) % CBC_SEED_MAX}"] if seed > 0 else [])
    try:
        prob.solve(solver)
    except pulp.PulpSolverError:
        return SubResult(None, "none", None, time.perf_counter() - t0)
    secs = time.perf_counter() - t0
    status = pulp.LpStatus.get(prob.status, "")
    if prob.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return SubResult(None, "infeasible" if status == "Infeasible" else "none", None, secs)
    newp = state.place[sm.cand].copy()
    for b in range(nn):
        for v, a in xs[b]:
            if (v.value() or 0) > 0.5:
                newp[a] = sm.nodes[b]
    optimal = prob.sol_status == pulp.LpSolutionOptimal
    d_bound = None
    if optimal and d.value() is not None:
        d_bound = max(0.0, float(d.value()) / sm.S - sm.tol - 1e-6 * float(d.value()) / sm.S)
    return SubResult(newp, "optimal" if optimal else "feasible", d_bound, secs)
