"""The ALBIC MILP (§4.3.1) on a sub-problem, solved with OR-tools CP-SAT (or CBC, :mod:`solvers.albic.milp.cbc`).

Sub-problem: a set of nodes ``N_s`` and the units currently on them (all other units stay where the incumbent
has them). Variables ``x[u, j]`` (unit ``u`` ends on node ``j ∈ N_s``, allowed nodes only) with

    (1)  Σ_j x[u, j] = 1                                     each unit on one node
    (2)  Σ cost(u, j)·x[u, j] ≤ budget − cost of fixed units  migrations (and, separately, state bytes)
    (3)  U_j ≤ T + d,  U_j ≤ hi                               upper band (hi ≥ every fixed node's utilisation)
    (4)  U_j ≥ T − d,  U_j ≥ lo   for j active                lower band (lo ≤ every fixed node's utilisation)
    (5)  d ≥ max deviation of the fixed nodes
    objective: minimise W1·d + (hi − lo),  W1 > any possible hi − lo

which is the paper's objective ``w1·d − w2·(du + dl)`` with ``w1 ≫ w2`` written with the two bands directly
(``hi = mean + d − du``, ``lo = mean − d + dl``), generalised to capacities (U_j is the utilisation load/c_j).
Removing nodes have no lower band (constraint (4) is "effectively disabled for nodes marked for removal") and
are never a destination (Lemma 1) unless the unit already sits there entirely. Optional per-node limits of
other resources (§4.3.1 "Extending to Multi-Dimensional Load") become knapsack rows.

Scaled integers (CP-SAT needs them): utilisations are multiplied by ``S = 10^6 / t`` and rounded, every
coefficient ``round(S·load_u / c_j)`` on its own. A node's scaled utilisation is off by at most
``(1 + k_j)/2`` units (k_j = units that may end on it), so the model's distance differs from the true one by at
most ``tol = max_j (1 + k_j) / (2S)`` — a relative ``(1 + k_j)·5·10^-7`` of the mean. Every plan is re-evaluated
exactly afterwards, and a bound from the model is reported as ``bound − tol``. State bytes are rounded up and the
byte budget down, so a model-feasible plan is always within the real budget.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from solvers.albic.milp.search import State

SCALE_MEAN = 1e6


@dataclass
class SubModel:
    cand: np.ndarray            # units in the model
    nodes: np.ndarray           # sub node set
    mask: np.ndarray            # (len(cand), len(nodes)) allowed
    coef: np.ndarray            # (len(cand), len(nodes)) scaled utilisation coefficients
    cc: np.ndarray              # migrations
    cb: np.ndarray              # bytes (rounded up)
    base: np.ndarray            # (len(nodes),) scaled utilisation of fixed units on each sub node
    T: int
    S: float
    d_fixed: int                # scaled max deviation of the nodes outside
    hi_fixed: int | None
    lo_fixed: int | None
    room_c: int | None
    room_b: int | None
    res_coef: np.ndarray | None  # (len(cand), R) scaled
    res_room: np.ndarray | None  # (len(nodes), R)
    tol: float


def build(state: State, cand: np.ndarray, nodes: np.ndarray) -> SubModel | None:
    U = state.units
    p = U.problem
    cand = np.asarray(cand, dtype=np.int64)
    nodes = np.asarray(nodes, dtype=np.int64)
    t = state.t
    S = SCALE_MEAN / max(t, 1e-300)
    cap = state.cap
    mask = U.allowed_mask(cand, nodes)
    cur_pos = np.searchsorted(nodes, state.place[cand])
    mask[np.arange(cand.size), cur_pos] = True
    coef = np.rint(S * U.load[cand][:, None] / cap[nodes][None, :]).astype(np.int64)
    cc, cb = U.cost_matrix(cand, nodes)
    cb = np.ceil(cb).astype(np.int64)
    L_fixed = state.L[nodes] - np.bincount(cur_pos, weights=U.load[cand], minlength=nodes.size)
    base = np.rint(S * L_fixed / cap[nodes]).astype(np.int64)
    T = int(round(S * t))
    outside = np.ones(p.n_nodes, dtype=bool)
    outside[nodes] = False
    out_act = outside & p.active
    u_all = state.util()
    if out_act.any():
        d_fixed = int(math.floor(S * float(np.max(np.abs(u_all[out_act] - t)))))
        hi_fixed = int(math.floor(S * float(u_all[out_act].max())))
        lo_fixed = int(math.ceil(S * float(u_all[out_act].min())))
    else:
        d_fixed, hi_fixed, lo_fixed = 0, None, None
    fixed_units = np.ones(U.n_units, dtype=bool)
    fixed_units[cand] = False
    room_c = room_b = None
    if p.max_migrations is not None:
        used_fixed = state.used_c - int(U.cost_count_to(cand, state.place[cand]).sum())
        room_c = int(p.max_migrations - used_fixed)
    if p.max_migration_bytes is not None:
        used_fixed_b = state.used_b - float(U.cost_bytes_to(cand, state.place[cand]).sum())
        room_b = int(math.floor(p.max_migration_bytes - used_fixed_b + 1e-9))
        # the incumbent must stay feasible after rounding costs up
        inc = int(cb[np.arange(cand.size), cur_pos].sum())
        room_b = max(room_b, inc)
    res_coef = res_room = None
    if state.res is not None:
        scale_r = 1e6 / max(float(np.nanmax(np.where(np.isfinite(U.res_limit), U.res_limit, 0.0))), 1e-9)
        res_coef = np.ceil(U.res_load[cand] * scale_r).astype(np.int64)
        usage_fixed = state.res[nodes] - _bincount2(cur_pos, U.res_load[cand], nodes.size)
        room = np.where(np.isfinite(U.res_limit[nodes]), np.floor((U.res_limit[nodes] - usage_fixed) * scale_r + 1e-6),
                        -1)
        # keep the incumbent feasible after rounding
        inc = _bincount2(cur_pos, res_coef.astype(np.float64), nodes.size)
        res_room = np.where(room >= 0, np.maximum(room, inc), -1).astype(np.int64)
    k_per_node = mask.sum(axis=0)
    tol = float((1 + k_per_node.max()) / (2 * S)) if k_per_node.size else 0.0
    return SubModel(cand, nodes, mask, coef, cc, cb, base, T, S, d_fixed, hi_fixed, lo_fixed, room_c, room_b,
                    res_coef, res_room, tol)


def _bincount2(idx: np.ndarray, vals: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, vals.shape[1]))
    np.add.at(out, idx, vals)
    return out


@dataclass
class SubResult:
    place: np.ndarray | None     # new placement of sm.cand (node indices), or None
    status: str                  # "optimal", "feasible", "none", "infeasible"
    d_bound: float | None        # proven bound on the sub-problem's d (true units, tolerance subtracted)
    seconds: float


def solve_cpsat(state: State, sm: SubModel, time_limit: float, workers: int = 1, seed: int = 0) -> SubResult:
    t0 = time.perf_counter()
    p = state.units.problem
    model = cp_model.CpModel()
    nc, nn = sm.mask.shape
    act = p.active[sm.nodes]
    maxU = int(sm.base.max() + np.where(sm.mask, sm.coef, 0).sum(axis=0).max()) + 1 if nc else int(sm.base.max()) + 1
    maxU = max(maxU, sm.T, sm.hi_fixed or 0) + 1
    W1 = 2 * maxU + 1
    d = model.new_int_var(max(0, sm.d_fixed), maxU, "d")
    hi = model.new_int_var(0, maxU, "hi")
    lo = model.new_int_var(0, maxU, "lo")
    if sm.hi_fixed is not None:
        model.add(hi >= sm.hi_fixed)
        model.add(lo <= sm.lo_fixed)
    cur_pos = np.searchsorted(sm.nodes, state.place[sm.cand])
    xs: list[list] = [[] for _ in range(nn)]       # per node: (var, row)
    cost_terms_v, cost_terms_c, cost_terms_b = [], [], []
    hint_vals = []
    for a in range(nc):
        cols = np.flatnonzero(sm.mask[a])
        if cols.size == 1:
            continue  # fixed where it is: counted as constant below
        row = []
        for b in cols.tolist():
            v = model.new_bool_var("")
            row.append(v)
            xs[b].append((v, a))
            if sm.cc[a, b]:
                cost_terms_v.append(v)
                cost_terms_c.append(int(sm.cc[a, b]))
                cost_terms_b.append(int(sm.cb[a, b]))
            hint_vals.append((v, 1 if b == cur_pos[a] else 0))
        model.add_exactly_one(row)
    single = np.array([np.count_nonzero(sm.mask[a]) == 1 for a in range(nc)], dtype=bool) if nc else np.zeros(0, bool)
    const_u = sm.base.copy()
    const_c = 0
    const_b = 0
    for a in np.flatnonzero(single):
        b = int(cur_pos[a])
        const_u[b] += sm.coef[a, b]
        const_c += int(sm.cc[a, b])
        const_b += int(sm.cb[a, b])
    util_expr = []
    for b in range(nn):
        if xs[b]:
            e = cp_model.LinearExpr.weighted_sum([v for v, _ in xs[b]], [int(sm.coef[a, b]) for _, a in xs[b]]) + int(const_u[b])
        else:
            e = int(const_u[b])
        util_expr.append(e)
        if isinstance(e, int):
            if act[b]:
                model.add(d >= abs(e - sm.T))
                model.add(hi >= e)
                model.add(lo <= e)
            continue
        if act[b]:  # removing nodes have no band: the distance is over active nodes only (DESIGN.md)
            model.add(e - sm.T <= d)
            model.add(e <= hi)
            model.add(sm.T - e <= d)
            model.add(e >= lo)
    if sm.room_c is not None and cost_terms_v:
        model.add(cp_model.LinearExpr.weighted_sum(cost_terms_v, cost_terms_c) <= sm.room_c - const_c)
    if sm.room_b is not None and cost_terms_v:
        model.add(cp_model.LinearExpr.weighted_sum(cost_terms_v, cost_terms_b) <= sm.room_b - const_b)
    if sm.res_coef is not None:
        for b in range(nn):
            for r in range(sm.res_coef.shape[1]):
                if sm.res_room[b, r] >= 0 and xs[b]:
                    const = int(sum(sm.res_coef[a, r] for a in np.flatnonzero(single) if cur_pos[a] == b))
                    model.add(cp_model.LinearExpr.weighted_sum([v for v, _ in xs[b]], [int(sm.res_coef[a, r]) for _, a in xs[b]])
                              <= int(sm.res_room[b, r]) - const)
    model.minimize(W1 * d + hi - lo)
    # hint = incumbent
    for v, val in hint_vals:
        model.add_hint(v, val)
    inc_u = []
    for b in range(nn):
        inc_u.append(int(const_u[b] + sum(int(sm.coef[a, b]) for v, a in xs[b] if cur_pos[a] == b)))
    inc_u = np.array(inc_u)
    act_u = inc_u[act] if act.any() else inc_u
    hd = max([sm.d_fixed] + [abs(int(x) - sm.T) for x in act_u])
    model.add_hint(d, min(max(hd, 0), maxU))
    hh = max([int(act_u.max())] + ([sm.hi_fixed] if sm.hi_fixed is not None else []))
    ll = min([int(act_u.min())] + ([sm.lo_fixed] if sm.lo_fixed is not None else []))
    model.add_hint(hi, min(max(hh, 0), maxU))
    model.add_hint(lo, min(max(ll, 0), maxU))
    solver = cp_model.CpSolver()
    remaining = time_limit - (time.perf_counter() - t0)
    if remaining <= 0.005:
        return SubResult(None, "none", None, time.perf_counter() - t0)
    solver.parameters.max_time_in_seconds = remaining
    solver.parameters.num_workers = max(1, int(workers))
    solver.parameters.random_seed = int(seed)
    st = solver.solve(model)
    secs = time.perf_counter() - t0
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        status = "infeasible" if st == cp_model.INFEASIBLE else "none"
        return SubResult(None, status, None, secs)
    newp = state.place[sm.cand].copy()
    for b in range(nn):
        for v, a in xs[b]:
            if solver.boolean_value(v):
                newp[a] = sm.nodes[b]
    bound_obj = solver.best_objective_bound
    d_int_bound = math.floor(bound_obj / W1) if math.isfinite(bound_obj) else 0
    d_bound = max(0.0, d_int_bound / sm.S - sm.tol)
    return SubResult(newp, "optimal" if st == cp_model.OPTIMAL else "feasible", d_bound, secs)
