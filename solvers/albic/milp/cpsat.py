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

Scaled integers (CP-SAT needs them): utilisations are multiplied by ``S ≈ (2 + k)·4·10^6 / t`` (k = the most units
that may end on one node; capped so that the objective stays inside int64) and rounded, every coefficient
``round(S·load_u / c_j)`` on its own, and the target ``T = round(S·t)``. A node's scaled distance ``|U_j − T|`` is
off by at most ``(2 + k_j)/2`` units, so the model's distance differs from the true one by at most
``tol = (2 + k)/(2S)`` (≈ 1.3·10^-7 of the mean). Every plan is re-evaluated exactly afterwards, and a bound from the
model is reported as ``bound − tol``.

Budgets and resource limits (issue 16, items 1 and 5): bytes and resource loads are modelled *exactly* when one
scale (1, 2, 4, 8, 10, 16, 100, …, 10^6) makes them integers — integral bytes, halves, quarters, decimals; otherwise
they are rounded in the direction the model is used for: conservatively for plans (costs up, rooms down — LNS
sub-models), as a relaxation for proofs (costs down, rooms up — the full model, whose plans are then checked
against the real budget). A proof therefore never rests on a model that is tighter than the problem as given.
Resource limits are those of :class:`~solvers.albic.milp.units.Units`: ``max(limit, usage now)`` per node, i.e. a
node already above a limit may not get further above its current usage (the current assignment is always a plan).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from solvers.albic.milp.state import State
from solvers.albic.milp.units import Units

SCALE_MEAN = 4e6


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
    # exact communication costs (full model only, ``build(exact_comm=True)``): unit edges as positions in cand,
    # the scaled cost each cut edge adds to a node's utilisation and to the target
    edges: np.ndarray | None = None      # (E, 2)
    comm_coef: np.ndarray | None = None  # (E, len(nodes))
    t_coef: np.ndarray | None = None     # (E,)
    # groups of interchangeable nodes (positions in ``nodes``): swapping two of them maps every model solution to
    # one with the same objective (see :func:`node_symmetry`)
    sym: list[np.ndarray] | None = None
    # the budget of units living on a group is charged through a permutation of the group (``build(perm_budget)``)
    perm: bool = False
    home_pos: np.ndarray | None = None   # (len(cand),) position of each unit's home in ``nodes`` (perm only)


def exact_scale(values: np.ndarray, limit: float = 2.0 ** 50) -> float | None:
    """The smallest ``s`` in 1, 2, 4, 8, 10, 16, 100, …, 10^6 that makes every value an integer (to float noise)
    with ``s · Σ|values| < limit``; ``None`` if there is none (then the caller rounds, see :func:`build`)."""
    v = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    v = v[np.isfinite(v)]
    total = float(v.sum()) if v.size else 0.0
    for s in (1.0, 2.0, 4.0, 8.0, 10.0, 16.0, 100.0, 1e3, 1e4, 1e5, 1e6):
        if s * total >= limit:
            return None
        y = v * s
        if np.all(np.abs(y - np.rint(y)) <= 1e-9 * np.maximum(1.0, y)):
            return s
    return None


def _int_costs(vals: np.ndarray, room: float | np.ndarray, relax: bool, target_room: float = 1e6
               ) -> tuple[np.ndarray, np.ndarray]:
    """Integer knapsack coefficients and room for ``Σ vals ≤ room``: exact when a scale makes every value integral,
    otherwise rounded so that the integer model is a *relaxation* (coefficients down, room up: every real plan stays
    feasible, so the model's optimum is a valid bound) or, ``relax=False``, *conservative* (coefficients up, room
    down: every model plan is really feasible)."""
    room_a = np.asarray(room, dtype=np.float64)
    fin = np.isfinite(room_a)
    s = exact_scale(np.concatenate([np.ravel(vals), np.ravel(room_a[fin])]))
    if s is not None:
        coef = np.rint(vals * s).astype(np.int64)
        r = np.floor(room_a * s * (1 + 1e-12) + 1e-9)
        return coef, np.where(fin, r, -1).astype(np.int64)
    top = max(float(np.max(room_a[fin], initial=0.0)), float(np.max(vals, initial=0.0)), 1e-300)
    s = target_room / top
    if relax:
        coef = np.floor(vals * s).astype(np.int64)
        r = np.ceil(room_a * s * (1 + 1e-9) + 1e-6)
    else:
        coef = np.ceil(vals * s).astype(np.int64)
        r = np.floor(room_a * s)
    return coef, np.where(fin, r, -1).astype(np.int64)


def unit_edges(units: Units) -> tuple[np.ndarray, np.ndarray]:
    """Communication between different units: (E, 2) unit pairs (u < v) and the summed rate of both directions."""
    p = units.problem
    src, dst, rate = p.edges()
    us, ud = units.of[src], units.of[dst]
    keep = us != ud
    a, b = np.minimum(us[keep], ud[keep]), np.maximum(us[keep], ud[keep])
    if a.size == 0:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    pairs, inv = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
    return pairs.astype(np.int64), np.bincount(inv.ravel(), weights=rate[keep], minlength=len(pairs))


def build(state: State, cand: np.ndarray, nodes: np.ndarray, relax: bool = False,
          exact_comm: bool = False, perm_budget: bool = False) -> SubModel:
    """The sub-MILP over units ``cand`` and nodes ``nodes`` (everything else fixed as in ``state``).

    Budgets and resource limits are integer knapsacks: exact when the bytes (resp. resource loads) and their limits
    scale to integers (integral, halves, decimals up to 10^-6 — the usual case), otherwise rounded
    conservatively (``relax=False``: every model plan keeps the real limits; for plans) or as a relaxation
    (``relax=True``: every real plan is a model plan, so the model's bound is valid for the problem as given; for
    proofs — its plans are checked against the real limits by the caller). Utilisations are always rounded and
    the model's distance bound is corrected by ``tol`` (see the module docstring).

    ``exact_comm`` (the full model only: every unit, every node): communication costs are modelled exactly — a
    unit's own load without its edges, and per unit edge ``(u, v)`` and node ``j`` the indicator
    ``s = x[u, j] ∧ x[v, j]`` (:func:`_cut_terms`): ``j`` gains ``cc·rate·(x[u,j] + x[v,j] − 2s)``, the target
    ``2·cc·rate·(1 − Σ_j s)``; the rounding tolerance grows by two units per edge. Interchangeable nodes
    (:func:`node_symmetry`) get value-precedence constraints; ``perm_budget`` (no unit spread over nodes) groups
    nodes regardless of migration costs and charges the budget through a permutation of each group
    (:func:`_perm_budget`), an exact reformulation that lets nodes with residents be grouped too.
    """
    U = state.units
    p = U.problem
    cand = np.asarray(cand, dtype=np.int64)
    nodes = np.asarray(nodes, dtype=np.int64)
    t = state.t
    cap = state.cap
    mask = U.allowed_mask(cand, nodes)
    cur_pos = np.searchsorted(nodes, state.place[cand])
    mask[np.arange(cand.size), cur_pos] = True
    k_per_node = mask.sum(axis=0)
    kmax = int(k_per_node.max()) if k_per_node.size else 0
    comm = p.communication_cost > 0 and p.comm.nnz > 0
    exact_comm = exact_comm and comm
    load_c = U.load
    pairs, prate = np.zeros((0, 2), dtype=np.int64), np.zeros(0)
    if exact_comm:
        if cand.size != U.n_units or nodes.size != p.n_nodes:
            raise ValueError("exact communication costs need the full model")
        load_c = np.bincount(U.of, weights=p.load, minlength=U.n_units).astype(np.float64)
        pairs, prate = unit_edges(U)
        kmax += 2 * len(pairs)
    fixed_units = np.ones(U.n_units, dtype=bool)
    fixed_units[cand] = False
    in_sub = np.isin(state.place, nodes) & fixed_units
    L_fixed = np.bincount(np.searchsorted(nodes, state.place[in_sub]), weights=U.load[in_sub], minlength=nodes.size)
    # scale: the rounding error of a node's distance is ≤ (2 + k)/(2S); aim at (2 + k)/(2S) ≈ 10^-7·t, within
    # int64 for the objective W1·d + hi − lo (W1 ≈ 2·max utilisation): keep the largest utilisation below 2^29
    u_max = float((L_fixed.max(initial=0.0) + U.load[cand].sum()) / cap[nodes].min()) if nodes.size else 0.0
    if exact_comm:
        u_max = max(u_max, float((p.load.sum() + 2 * p.communication_cost * prate.sum()) / cap[p.active].sum()))
    u_max = max(u_max, t, float(state.util()[p.active].max(initial=0.0)), 1e-300)
    S = min((2 + kmax) * SCALE_MEAN / max(t, 1e-300), 2.0 ** 29 / u_max)
    S = max(S, 1e3 / max(t, 1e-300))
    coef = np.rint(S * load_c[cand][:, None] / cap[nodes][None, :]).astype(np.int64)
    cc, cb_real = U.cost_matrix(cand, nodes)
    base = np.rint(S * L_fixed / cap[nodes]).astype(np.int64)
    T = int(round(S * t))
    edges = comm_coef = t_coef = None
    if exact_comm:
        q = float(cap[p.active].sum())
        T = int(round(S * float(p.load.sum()) / q))
        cost = p.communication_cost * prate
        edges = pairs
        comm_coef = np.rint(S * cost[:, None] / cap[nodes][None, :]).astype(np.int64)
        t_coef = np.rint(S * 2 * cost / q).astype(np.int64)
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
    room_c = room_b = None
    fixed_c, fixed_b = (U.placement_cost_of(np.flatnonzero(fixed_units), state.place)
                        if fixed_units.any() else (0, 0.0))
    if p.max_migrations is not None:
        room_c = int(p.max_migrations - fixed_c)
    cb = np.zeros(cc.shape, dtype=np.int64)
    if p.max_migration_bytes is not None:
        cb, rb = _int_costs(cb_real, float(p.max_migration_bytes) - fixed_b, relax)
        room_b = int(rb)
        if not relax:  # the incumbent must stay feasible after rounding costs up
            room_b = max(room_b, int(cb[np.arange(cand.size), cur_pos].sum()))
    res_coef = res_room = None
    if state.res is not None:
        assert U.res_load is not None and U.res_limit is not None
        fixed_res = _bincount2(np.searchsorted(nodes, state.place[in_sub]), U.res_load[in_sub], nodes.size)
        res_coef, res_room = _int_costs(U.res_load[cand], U.res_limit[nodes] - fixed_res, relax)
        if not relax:
            inc = _bincount2(cur_pos, res_coef.astype(np.float64), nodes.size)
            res_room = np.where(res_room >= 0, np.maximum(res_room, inc), -1).astype(np.int64)
    tol = float((2 + kmax) / (2 * S))
    sm = SubModel(cand, nodes, mask, coef, cc, cb, base, T, S, d_fixed, hi_fixed, lo_fixed, room_c, room_b,
                  res_coef, res_room, tol, edges, comm_coef, t_coef)
    sm.sym = node_symmetry(sm, p.active[nodes]) if exact_comm else None
    if exact_comm and perm_budget and not U.mixed:
        sm.sym = node_symmetry(sm, p.active[nodes], costs=False)
        sm.perm = True
        sm.home_pos = np.searchsorted(nodes, U.home[cand])
    return sm


def node_symmetry(sm: SubModel, act: np.ndarray, costs: bool = True) -> list[np.ndarray]:
    """Groups (≥ 2) of nodes whose every column of model data is identical: activity, allowed mask, utilisation
    and communication coefficients (same capacity), fixed load, migration and byte costs (no unit has members on
    them now, or the budget is dropped), resource rooms. Swapping two such nodes maps every solution to one with
    the same loads, costs and objective, so solutions may be restricted to one labelling (value precedence).
    ``costs=False`` ignores the migration and byte costs (they are then charged through a permutation of the group,
    see :func:`_perm_budget`)."""
    cols = [act[None, :].astype(np.int64), sm.mask.astype(np.int64), sm.coef, sm.base[None, :]]
    if costs:
        cols += [sm.cc, sm.cb]
    if sm.comm_coef is not None:
        cols.append(sm.comm_coef)
    if sm.res_room is not None:
        cols.append(sm.res_room.T.astype(np.int64))
    data = np.concatenate([np.asarray(c, dtype=np.int64).reshape(-1, sm.nodes.size) for c in cols], axis=0)
    groups: dict[bytes, list[int]] = {}
    for b in range(sm.nodes.size):
        groups.setdefault(data[:, b].tobytes(), []).append(b)
    return [np.array(g, dtype=np.int64) for g in groups.values() if len(g) >= 2]


def _bincount2(idx: np.ndarray, vals: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((n, vals.shape[1]))
    np.add.at(out, idx, vals)
    return out


def _cut_terms(model: cp_model.CpModel, sm: SubModel, xs: list[list[Any]], single: np.ndarray,
               cur_pos: np.ndarray, hint_vals: list[tuple[Any, int]], hint_pos: np.ndarray | None = None
               ) -> tuple[list[list[tuple[int, Any]]], Any]:
    """Exact communication costs with one indicator per unit edge ``(a, c)`` and node ``b``: ``s = x[a,b] ∧ x[c,b]``
    (both ends on ``b``; ``s ≤ x[a,b]``, ``s ≤ x[c,b]``, ``s ≥ x[a,b] + x[c,b] − 1``). The edge is cut at ``b``
    on exactly ``x[a,b] + x[c,b] − 2s`` sides, and cut at all iff ``1 − Σ_b s``: the node gains
    ``cc·rate·(x[a,b] + x[c,b] − 2s)``, the target ``2·cc·rate·(1 − Σ_b s)`` — the same values as the two
    indicators per side (``y = x[a,b] ∧ ¬x[c,b]``) used before, with half the variables; the per-node terms and
    the target expression are returned (without ``sm.edges``: no terms and the constant T)."""
    nn = sm.mask.shape[1]
    comm_u: list[list[tuple[int, Any]]] = [[] for _ in range(nn)]
    if sm.edges is None or sm.comm_coef is None or sm.t_coef is None or len(sm.edges) == 0:
        return comm_u, sm.T
    xvar = {(a, b): v for b in range(nn) for v, a in xs[b]}
    hp = cur_pos if hint_pos is None else hint_pos

    def x_of(a: int, b: int) -> Any:
        if single[a]:
            return 1 if b == cur_pos[a] else 0
        return xvar.get((a, b), 0)

    T_const = int(sm.T)
    t_terms: list[tuple[int, Any]] = []
    for e, (a1, a2) in enumerate(sm.edges.tolist()):
        together: list[Any] = []
        for b in range(nn):
            xa, xc = x_of(a1, b), x_of(a2, b)
            if isinstance(xa, int) and xa == 0 or isinstance(xc, int) and xc == 0:
                sv: Any = 0
            elif isinstance(xa, int):
                sv = xc
            elif isinstance(xc, int):
                sv = xa
            else:
                sv = model.new_bool_var("")
                model.add(sv <= xa)
                model.add(sv <= xc)
                model.add(sv >= xa + xc - 1)
                hint_vals.append((sv, int(hp[a1] == b and hp[a2] == b)))
            if not (isinstance(sv, int) and sv == 0):
                together.append(sv)
            sides = xa + xc - 2 * sv
            if sm.comm_coef[e, b] and not (isinstance(sides, int) and sides == 0):
                comm_u[b].append((int(sm.comm_coef[e, b]), sides))
        if sm.t_coef[e]:
            T_const += int(sm.t_coef[e])
            for sv in together:
                t_terms.append((-int(sm.t_coef[e]), sv))
    T_expr: Any = T_const + sum(c * y for c, y in t_terms) if t_terms else T_const
    return comm_u, T_expr


def _sym_order(sm: SubModel, g: np.ndarray) -> list[int]:
    """The units (positions in cand) that may go to the nodes of group ``g``, heaviest first (the order of the
    value-precedence constraints)."""
    free = np.flatnonzero(sm.mask[:, g[0]] & (sm.mask.sum(axis=1) > 1))
    return [int(a) for a in free[np.argsort(-sm.coef[free, g[0]], kind="stable")]]


def _canonical(pos: np.ndarray, sm: SubModel) -> tuple[np.ndarray, list[dict[int, int]]]:
    """``pos`` with the nodes of each symmetry group relabelled in the order of their first unit (the labelling
    that :func:`_break_symmetry` keeps; the same loads and costs), and per group the map physical → canonical
    position."""
    out = pos.copy()
    maps = []
    for g in sm.sym or []:
        order = _sym_order(sm, g)
        gl = g.tolist()
        seen: list[int] = []
        for a in order:
            if int(pos[a]) in gl and int(pos[a]) not in seen:
                seen.append(int(pos[a]))
        seen += [b for b in gl if b not in seen]
        relabel = dict(zip(seen, gl, strict=True))
        maps.append(relabel)
        for a in order:
            if int(pos[a]) in relabel:
                out[a] = relabel[int(pos[a])]
    return out, maps


def _perm_budget(model: cp_model.CpModel, sm: SubModel, xs: list[list[Any]], maps: list[dict[int, int]],
                 hint_pos: np.ndarray, hint_vals: list[tuple[Any, int]]
                 ) -> tuple[list[tuple[Any, int, int]], int, int, list[list[list[Any]]]]:
    """The budget with value precedence over groups that ignore costs (``sm.perm``): the model's labelling of a
    group is canonical, and a permutation ``z[j][h]`` (canonical position ``j`` is physical node ``h``) gives the
    real plan. A unit living on node ``h`` of a group stays iff it is on the position ``j`` with ``z[j][h]``:
    ``w ≤ x[u, g_j]``, ``w ≤ z[j][h]`` and its cost is ``cost_u·(1 − Σ_j w)`` (only upper bounds on ``w``: the
    budget rows are ≤, so any ``w`` below the truth only charges more). Every real plan is a canonical placement
    with one permutation at the same cost, and conversely: an exact reformulation. Returns the cost terms
    (var, migrations, bytes), their constants and ``z`` per group."""
    assert sm.home_pos is not None
    xvar = {(a, b): v for b in range(len(xs)) for v, a in xs[b]}
    terms: list[tuple[Any, int, int]] = []
    const_c = const_b = 0
    zs: list[list[list[Any]]] = []
    for gi, g in enumerate(sm.sym or []):
        k = g.size
        z = [[model.new_bool_var("") for _ in range(k)] for _ in range(k)]
        for j in range(k):
            model.add_exactly_one(z[j])
            model.add_exactly_one([z[i][j] for i in range(k)])
        inv = {c: ph for ph, c in maps[gi].items()}   # canonical node → physical node
        for j in range(k):
            for h in range(k):
                hint_vals.append((z[j][h], int(inv.get(int(g[j])) == int(g[h]))))
        zs.append(z)
        pos_in = {int(b): i for i, b in enumerate(g.tolist())}
        for a in np.flatnonzero(np.isin(sm.home_pos, g)).tolist():
            h = pos_in[int(sm.home_pos[a])]
            ca, ba = int(sm.cc[a].max()), int(sm.cb[a].max())
            if ca == 0 and ba == 0:
                continue
            const_c += ca
            const_b += ba
            for j in range(k):
                x = xvar.get((a, int(g[j])))
                if x is None:
                    continue
                w = model.new_bool_var("")
                model.add(w <= x)
                model.add(w <= z[j][h])
                hint_vals.append((w, int(hint_pos[a] == g[j] and inv.get(int(g[j])) == int(g[h]))))
                terms.append((w, -ca, -ba))
    return terms, const_c, const_b, zs


def _break_symmetry(model: cp_model.CpModel, sm: SubModel, xs: list[list[Any]], single: np.ndarray) -> None:
    """Value precedence within each group of interchangeable nodes ``g_0 < g_1 < …`` (:func:`node_symmetry`),
    units ``u_0, u_1, …`` heaviest first: ``x[u_k, g_j] ≤ Σ_{l<k} x[u_l, g_{j−1}]`` — a node of the group is used
    only after the previous one, by an earlier unit. Every solution has a relabelling of the group's nodes (by
    their first unit) that keeps it, with the same loads, costs and objective, so the optimum is unchanged."""
    if not sm.sym:
        return
    xvar = {(a, b): v for b in range(len(xs)) for v, a in xs[b]}
    for g in sm.sym:
        order = [a for a in _sym_order(sm, g) if not single[a]]
        for j in range(1, len(g)):
            prev: list[Any] = []
            for a in order:
                v = xvar.get((a, int(g[j])))
                if v is not None:
                    if prev:
                        model.add(v <= sum(prev))
                    else:
                        model.add(v == 0)
                w = xvar.get((a, int(g[j - 1])))
                if w is not None:
                    prev.append(w)


@dataclass
class SubResult:
    place: np.ndarray | None     # new placement of sm.cand (node indices), or None
    status: str                  # "optimal", "feasible", "none", "infeasible"
    d_bound: float | None        # proven bound on the sub-problem's d (true units, tolerance subtracted)
    seconds: float
    d_int: int | None = None     # the proven bound on the model's scaled integer d (CP-SAT)


def solve_cpsat(state: State, sm: SubModel, time_limit: float, workers: int = 1, seed: int = 0,
                d_max: int | None = None, hint: np.ndarray | None = None) -> SubResult:
    """Solve the sub-MILP ``sm`` (objective ``W1·d + hi − lo``) hinted with ``state``.

    ``d_max`` (scaled utilisation units) turns it into the *decision* model: ``d ≤ d_max``, fewest migrations.
    CP-SAT finds such plans far faster than it optimises the min–max objective (a subset-sum with a fixed band,
    not a band to squeeze). Its ``d_bound`` then says nothing about the distance (the caller ignores it).
    ``hint``: a node per unit of ``sm.cand`` to hint instead of ``state`` (nodes outside ``sm.nodes``: home)."""
    t0 = time.perf_counter()
    p = state.units.problem
    model = cp_model.CpModel()
    nc, nn = sm.mask.shape
    act = p.active[sm.nodes]
    maxU = int(sm.base.max() + np.where(sm.mask, sm.coef, 0).sum(axis=0).max()) + 1 if nc else int(sm.base.max()) + 1
    if sm.comm_coef is not None and sm.t_coef is not None:
        maxU += int(sm.comm_coef.sum(axis=0).max(initial=0)) + int(sm.T + sm.t_coef.sum())
    maxU = max(maxU, sm.T, sm.hi_fixed or 0) + 1
    W1 = 2 * maxU + 1
    d = model.new_int_var(max(0, sm.d_fixed), maxU, "d")
    hi = model.new_int_var(0, maxU, "hi")
    lo = model.new_int_var(0, maxU, "lo")
    if sm.hi_fixed is not None:
        model.add(hi >= sm.hi_fixed)
        model.add(lo <= sm.lo_fixed)
    cur_pos = np.searchsorted(sm.nodes, state.place[sm.cand])
    hint_src = cur_pos
    if hint is not None:
        hp = np.searchsorted(sm.nodes, hint)
        inside = (hp < sm.nodes.size) & (sm.nodes[np.minimum(hp, sm.nodes.size - 1)] == hint)
        hint_src = np.where(inside & sm.mask[np.arange(cur_pos.size), np.minimum(hp, sm.nodes.size - 1)],
                            hp, cur_pos)
    hint_pos, maps = _canonical(hint_src, sm)
    perm_units = np.zeros(nc, dtype=bool)
    if sm.perm and sm.home_pos is not None:
        perm_units = np.isin(sm.home_pos, np.concatenate(sm.sym)) if sm.sym else perm_units
    xs: list[list[Any]] = [[] for _ in range(nn)]       # per node: (var, row)
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
            if sm.cc[a, b] and not perm_units[a]:
                cost_terms_v.append(v)
                cost_terms_c.append(int(sm.cc[a, b]))
                cost_terms_b.append(int(sm.cb[a, b]))
            hint_vals.append((v, 1 if b == hint_pos[a] else 0))
        model.add_exactly_one(row)
    single = np.array([np.count_nonzero(sm.mask[a]) == 1 for a in range(nc)], dtype=bool) if nc else np.zeros(0, bool)
    const_u = sm.base.copy()
    const_c = 0
    const_b = 0
    for a in np.flatnonzero(single).tolist():
        b = int(cur_pos[a])
        const_u[b] += sm.coef[a, b]
        const_c += int(sm.cc[a, b])
        const_b += int(sm.cb[a, b])
    comm_u, T_expr = _cut_terms(model, sm, xs, single, cur_pos, hint_vals, hint_pos)
    zs: list[list[list[Any]]] = []
    if perm_units.any():
        terms, pc, pb, zs = _perm_budget(model, sm, xs, maps, hint_pos, hint_vals)
        const_c += pc
        const_b += pb
        for v, c, b in terms:
            cost_terms_v.append(v)
            cost_terms_c.append(c)
            cost_terms_b.append(b)
    _break_symmetry(model, sm, xs, single)
    for b in range(nn):
        if xs[b]:
            e = cp_model.LinearExpr.weighted_sum([v for v, _ in xs[b]], [int(sm.coef[a, b]) for _, a in xs[b]])
            e = e + int(const_u[b])
        else:
            e = int(const_u[b])  # type: ignore[assignment]
        if comm_u[b]:
            e = e + sum(c * y for c, y in comm_u[b])
        if not act[b]:
            continue  # removing nodes have no band: the distance is over active nodes only (DESIGN.md)
        if isinstance(e, int) and isinstance(T_expr, int):
            model.add(d >= abs(e - T_expr))
        else:
            model.add(e - T_expr <= d)
            model.add(T_expr - e <= d)
        model.add(hi >= e)
        model.add(lo <= e)
    if sm.room_c is not None and cost_terms_v:
        model.add(cp_model.LinearExpr.weighted_sum(cost_terms_v, cost_terms_c) <= sm.room_c - const_c)
    if sm.room_b is not None and cost_terms_v:
        model.add(cp_model.LinearExpr.weighted_sum(cost_terms_v, cost_terms_b) <= sm.room_b - const_b)
    if sm.res_coef is not None and sm.res_room is not None:
        for b in range(nn):
            for r in range(sm.res_coef.shape[1]):
                if sm.res_room[b, r] >= 0 and xs[b]:
                    const = int(sum(sm.res_coef[a, r] for a in np.flatnonzero(single) if cur_pos[a] == b))
                    use = cp_model.LinearExpr.weighted_sum([v for v, _ in xs[b]],
                                                           [int(sm.res_coef[a, r]) for _, a in xs[b]])
                    model.add(use <= int(sm.res_room[b, r]) - const)
    if d_max is not None:
        model.add(d <= d_max)
        if cost_terms_v:
            model.minimize(cp_model.LinearExpr.weighted_sum(cost_terms_v, cost_terms_c))
    elif sm.edges is not None:
        W1 = 1  # exact communication costs: d alone (the band tie-break makes the cut model much slower to prove)
        model.minimize(d)
    else:
        model.minimize(W1 * d + hi - lo)
    # hint = incumbent
    for v, val in hint_vals:
        model.add_hint(v, val)
    inc_u = np.array([int(const_u[b] + sum(int(sm.coef[a, b]) for v, a in xs[b] if cur_pos[a] == b))
                      for b in range(nn if sm.edges is None else 0)], dtype=np.int64)
    act_u = inc_u[act] if inc_u.size and act.any() else inc_u
    if act_u.size:  # the incumbent's d, hi and lo (without exact communication costs)
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
    phys = np.arange(nn)   # canonical position → physical position (the permutations of sm.perm)
    for g, z in zip(sm.sym or [], zs, strict=False):
        for j in range(g.size):
            for h in range(g.size):
                if solver.boolean_value(z[j][h]):
                    phys[g[j]] = g[h]
    for b in range(nn):
        for v, a in xs[b]:
            if solver.boolean_value(v):
                newp[a] = sm.nodes[phys[b]]
    if d_max is not None:  # the objective was the migration count: no bound on d
        return SubResult(newp, "optimal" if st == cp_model.OPTIMAL else "feasible", None, secs)
    bound_obj = solver.best_objective_bound
    # W1·d ≥ bound − (hi − lo) > bound − W1; the float of a bound near 2^59 may be off by up to 2^7 units
    d_int_bound = (math.floor((bound_obj - 256.0) / W1) if W1 > 1 else math.ceil(bound_obj - 1e-6)) \
        if math.isfinite(bound_obj) else 0
    d_bound = max(0.0, d_int_bound / sm.S - sm.tol)
    return SubResult(newp, "optimal" if st == cp_model.OPTIMAL else "feasible", d_bound, secs, int(d_int_bound))
