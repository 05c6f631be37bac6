"""The scaled sub-MILP of :mod:`solvers.albic.milp.scaled` (ALBIC §4.3.1) solved with OR-tools CP-SAT.

:func:`build_cp` builds its model — a Boolean ``x[u, j]`` per unit and allowed node, (1) one per unit, (2) the budget
rows, (3)(4) the active nodes' bands around the target, (5) the fixed nodes' deviation as the floor of ``d``, the
resource rows — hinted with the incumbent; :func:`solve_cpsat` minimises ``W1·d + hi − lo`` (the paper's
``w1·d − w2·(du + dl)``, ``w1 ≫ w2``) or, as a decision model, the migrations under ``d ≤ d_max``. Exact
communication costs, value precedence between interchangeable nodes and the budget through their permutations
(:mod:`solvers.albic.milp.cpsat_cut`) serve the cut model of :mod:`solvers.albic.milp.comm_bounds`. This module
imports OR-tools (preloaded by a server, loaded in the background by the planner: :mod:`solvers.albic.milp.loader`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from solvers.albic.milp.cpsat_cut import break_symmetry, canonical, cut_terms, perm_budget
from solvers.albic.milp.scaled import SubModel, SubResult
from solvers.albic.milp.state import State


@dataclass
class CpBuild:
    """A CP-SAT model of a :class:`~solvers.albic.milp.scaled.SubModel` with the handles an objective and the
    answer need: ``d``, ``hi``, ``lo``, the Booleans ``xs[b] = [(x, position in cand), …]`` per node, the budget
    terms (variables, migrations, bytes) and the permutations of ``sm.perm``."""
    model: cp_model.CpModel
    sm: SubModel
    d: Any
    hi: Any
    lo: Any
    xs: list[list[tuple[Any, int]]]
    cost: tuple[list[Any], list[int], list[int]]
    zs: list[list[list[Any]]]
    cur_pos: np.ndarray
    single: np.ndarray
    W1: int


def _max_util(sm: SubModel) -> int:
    """An upper end of every scaled utilisation (and the target) the model can reach."""
    top = int(sm.base.max()) + 1
    if sm.mask.shape[0]:
        top += int(np.where(sm.mask, sm.coef, 0).sum(axis=0).max())
    if sm.comm_coef is not None and sm.t_coef is not None:
        top += int(sm.comm_coef.sum(axis=0).max(initial=0)) + int(sm.T + sm.t_coef.sum())
    return max(top, sm.T, sm.hi_fixed or 0) + 1


def _hint_positions(state: State, sm: SubModel, hint: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(current position of each unit of ``sm.cand`` in ``sm.nodes``, its hinted position): ``hint`` where it names
    an allowed node of the sub-model, else the current one."""
    cur_pos = np.searchsorted(sm.nodes, state.place[sm.cand])
    if hint is None:
        return cur_pos, cur_pos
    hp = np.minimum(np.searchsorted(sm.nodes, hint), sm.nodes.size - 1)
    ok = (sm.nodes[hp] == hint) & sm.mask[np.arange(cur_pos.size), hp]
    return cur_pos, np.where(ok, hp, cur_pos)


def build_cp(state: State, sm: SubModel, hint: np.ndarray | None = None) -> CpBuild:
    """Constraints (1)–(5), the budget and the resource rows of ``sm`` (module docstring), hinted with the
    incumbent ``state`` (or ``hint``: a node per unit of ``sm.cand``; nodes outside ``sm.nodes`` mean home); no
    objective."""
    model = cp_model.CpModel()
    nc, nn = sm.mask.shape
    maxU = _max_util(sm)
    d = model.new_int_var(max(0, sm.d_fixed), maxU, "d")
    hi = model.new_int_var(0, maxU, "hi")
    lo = model.new_int_var(0, maxU, "lo")
    if sm.hi_fixed is not None:
        model.add(hi >= sm.hi_fixed)
        model.add(lo <= sm.lo_fixed)
    cur_pos, hint_src = _hint_positions(state, sm, hint)
    hint_pos, maps = canonical(hint_src, sm)
    perm_units = np.zeros(nc, dtype=bool)
    if sm.perm and sm.home_pos is not None and sm.sym:
        perm_units = np.isin(sm.home_pos, np.concatenate(sm.sym))
    single = sm.mask.sum(axis=1) == 1      # fixed where they are: constants
    cb = CpBuild(model, sm, d, hi, lo, [[] for _ in range(nn)], ([], [], []), [], cur_pos, single, 2 * maxU + 1)
    hint_vals: list[tuple[Any, int]] = []
    for a in np.flatnonzero(~single).tolist():
        row = []
        for b in np.flatnonzero(sm.mask[a]).tolist():
            v = model.new_bool_var("")
            row.append(v)
            cb.xs[b].append((v, a))
            if sm.cc[a, b] and not perm_units[a]:
                _add_cost(cb, v, int(sm.cc[a, b]), int(sm.cb[a, b]))
            hint_vals.append((v, 1 if b == hint_pos[a] else 0))
        model.add_exactly_one(row)
    fixed = np.flatnonzero(single)
    const_u = sm.base + np.bincount(cur_pos[fixed], weights=sm.coef[fixed, cur_pos[fixed]], minlength=nn).astype(
        np.int64)
    const_c = int(sm.cc[fixed, cur_pos[fixed]].sum())
    const_b = int(sm.cb[fixed, cur_pos[fixed]].sum())
    comm_u, T_expr = cut_terms(model, sm, cb.xs, single, cur_pos, hint_vals, hint_pos)
    if perm_units.any():
        terms, pc, pb, cb.zs = perm_budget(model, sm, cb.xs, maps, hint_pos, hint_vals)
        const_c, const_b = const_c + pc, const_b + pb
        for v, c, b in terms:
            _add_cost(cb, v, c, b)
    break_symmetry(model, sm, cb.xs, single)
    _band_rows(cb, const_u, comm_u, T_expr, state.units.problem.active[sm.nodes])
    _limit_rows(cb, const_c, const_b)
    for v, val in hint_vals:
        model.add_hint(v, val)
    if sm.edges is None:
        _hint_bands(cb, const_u, state.units.problem.active[sm.nodes], maxU)
    return cb


def _add_cost(cb: CpBuild, v: Any, count: int, byts: int) -> None:
    for terms, x in zip(cb.cost, (v, count, byts), strict=True):
        terms.append(x)


def _band_rows(cb: CpBuild, const_u: np.ndarray, comm_u: list[list[tuple[int, Any]]], T_expr: Any,
               act: np.ndarray) -> None:
    """(3)(4)(5): every active node's scaled utilisation within ``T ± d`` and inside ``[lo, hi]``; removing nodes
    have no band (the distance is over active nodes only)."""
    model, sm = cb.model, cb.sm
    for b in range(len(cb.xs)):
        if not act[b]:
            continue
        e: Any = int(const_u[b])
        if cb.xs[b]:
            e = cp_model.LinearExpr.weighted_sum([v for v, _ in cb.xs[b]], [int(sm.coef[a, b]) for _, a in cb.xs[b]])
            e = e + int(const_u[b])
        if comm_u[b]:
            e = e + sum(c * y for c, y in comm_u[b])
        if isinstance(e, int) and isinstance(T_expr, int):
            model.add(cb.d >= abs(e - T_expr))
        else:
            model.add(e - T_expr <= cb.d)
            model.add(T_expr - e <= cb.d)
        model.add(cb.hi >= e)
        model.add(cb.lo <= e)


def _limit_rows(cb: CpBuild, const_c: int, const_b: int) -> None:
    """(2) the budget rows (migrations, bytes) and the per-node resource rows."""
    model, sm = cb.model, cb.sm
    vs, cs, bs = cb.cost
    if sm.room_c is not None and vs:
        model.add(cp_model.LinearExpr.weighted_sum(vs, cs) <= sm.room_c - const_c)
    if sm.room_b is not None and vs:
        model.add(cp_model.LinearExpr.weighted_sum(vs, bs) <= sm.room_b - const_b)
    if sm.res_coef is None or sm.res_room is None:
        return
    fixed = np.flatnonzero(cb.single)
    for b in range(len(cb.xs)):
        for r in range(sm.res_coef.shape[1]):
            if sm.res_room[b, r] >= 0 and cb.xs[b]:
                const = int(sm.res_coef[fixed[cb.cur_pos[fixed] == b], r].sum())
                use = cp_model.LinearExpr.weighted_sum([v for v, _ in cb.xs[b]],
                                                       [int(sm.res_coef[a, r]) for _, a in cb.xs[b]])
                model.add(use <= int(sm.res_room[b, r]) - const)


def _hint_bands(cb: CpBuild, const_u: np.ndarray, act: np.ndarray, maxU: int) -> None:
    """Hint ``d``, ``hi`` and ``lo`` with the incumbent's values (without exact communication costs)."""
    sm = cb.sm
    inc_u = np.array([int(const_u[b] + sum(int(sm.coef[a, b]) for _, a in cb.xs[b] if cb.cur_pos[a] == b))
                      for b in range(len(cb.xs))], dtype=np.int64)
    act_u = inc_u[act] if act.any() else inc_u
    if not act_u.size:
        return
    hd = max([sm.d_fixed] + [abs(int(x) - sm.T) for x in act_u])
    hh = max([int(act_u.max())] + ([sm.hi_fixed] if sm.hi_fixed is not None else []))
    ll = min([int(act_u.min())] + ([sm.lo_fixed] if sm.lo_fixed is not None else []))
    for var, val in ((cb.d, hd), (cb.hi, hh), (cb.lo, ll)):
        cb.model.add_hint(var, min(max(val, 0), maxU))


def run_cp(cb: CpBuild, deadline: float, workers: int, seed: int) -> tuple[Any, cp_model.CpSolver | None]:
    """Solve ``cb.model`` until ``deadline`` (``time.perf_counter()``); (CP-SAT status, solver) — no solver when
    less than 5 ms remain."""
    remaining = deadline - time.perf_counter()
    if remaining <= 0.005:
        return cp_model.UNKNOWN, None
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = remaining
    solver.parameters.num_workers = max(1, int(workers))
    solver.parameters.random_seed = int(seed)
    return solver.solve(cb.model), solver


def answer(cb: CpBuild, state: State, solver: cp_model.CpSolver) -> np.ndarray:
    """The node of every unit of ``cb.sm.cand`` in the solver's solution (the permutations of ``sm.perm``
    applied)."""
    sm = cb.sm
    newp: np.ndarray = state.place[sm.cand].copy()
    phys = np.arange(len(cb.xs))   # canonical position → physical position
    for g, z in zip(sm.sym or [], cb.zs, strict=False):
        for j in range(g.size):
            for h in range(g.size):
                if solver.boolean_value(z[j][h]):
                    phys[g[j]] = g[h]
    for b in range(len(cb.xs)):
        for v, a in cb.xs[b]:
            if solver.boolean_value(v):
                newp[a] = sm.nodes[phys[b]]
    return newp


def solve_cpsat(state: State, sm: SubModel, time_limit: float, workers: int = 1, seed: int = 0,
                d_max: int | None = None, hint: np.ndarray | None = None) -> SubResult:
    """Solve the sub-MILP ``sm`` (objective ``W1·d + hi − lo``) hinted with ``state``.

    ``d_max`` (scaled utilisation units) turns it into the *decision* model: ``d ≤ d_max``, fewest migrations.
    CP-SAT finds such plans far faster than it optimises the min–max objective (a subset-sum with a fixed band,
    not a band to squeeze). Its ``d_bound`` then says nothing about the distance (the caller ignores it).
    ``hint``: a node per unit of ``sm.cand`` to hint instead of ``state`` (nodes outside ``sm.nodes``: home)."""
    t0 = time.perf_counter()
    cb = build_cp(state, sm, hint)
    model = cb.model
    if d_max is not None:
        model.add(cb.d <= d_max)
        if cb.cost[0]:
            model.minimize(cp_model.LinearExpr.weighted_sum(cb.cost[0], cb.cost[1]))
    elif sm.edges is not None:
        cb.W1 = 1  # exact communication costs: d alone (the band tie-break makes the cut model much slower to prove)
        model.minimize(cb.d)
    else:
        model.minimize(cb.W1 * cb.d + cb.hi - cb.lo)
    st, solver = run_cp(cb, t0 + time_limit, workers, seed)
    secs = time.perf_counter() - t0
    if solver is None or st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        status = "infeasible" if st == cp_model.INFEASIBLE else "none"
        return SubResult(None, status, None, secs)
    newp = answer(cb, state, solver)
    status = "optimal" if st == cp_model.OPTIMAL else "feasible"
    if d_max is not None:  # the objective was the migration count: no bound on d
        return SubResult(newp, status, None, secs)
    d_int_bound = d_bound_of(solver.best_objective_bound, cb.W1)
    return SubResult(newp, status, max(0.0, d_int_bound / sm.S - sm.tol), secs, d_int_bound)


def d_bound_of(bound_obj: float, W1: int) -> int:
    """The proven bound on the scaled ``d`` from the bound of ``W1·d + hi − lo``: ``W1·d ≥ bound − (hi − lo) >
    bound − W1``; the float of a bound near 2^59 may be off by up to 2^7 units."""
    if not math.isfinite(bound_obj):
        return 0
    return math.floor((bound_obj - 256.0) / W1) if W1 > 1 else math.ceil(bound_obj - 1e-6)
