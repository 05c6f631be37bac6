"""The ALBIC MILP (§4.3.1) on a sub-problem as scaled integers: the data both backends solve (OR-tools CP-SAT in
:mod:`solvers.albic.milp.cpsat`, CBC in :mod:`solvers.albic.milp.cbc`); numpy only.

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

Budgets and resource limits: bytes and resource loads are modelled *exactly* when one
scale (1, 2, 4, 8, 10, 16, 100, …, 10^6) makes them integers — integral bytes, halves, quarters, decimals; otherwise
they are rounded in the direction the model is used for: conservatively for plans (costs up, rooms down — LNS
sub-models), as a relaxation for proofs (costs down, rooms up — the full model, whose plans are then checked
against the real budget). A proof therefore never rests on a model that is tighter than the problem as given.
Resource limits are those of :class:`~solvers.albic.milp.units.Units`: ``max(limit, usage now)`` per node, i.e. a
node already above a limit may not get further above its current usage (the current assignment is always a plan).
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

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
    ``s = x[u, j] ∧ x[v, j]`` (:func:`~solvers.albic.milp.cpsat_cut.cut_terms`): ``j`` gains
    ``cc·rate·(x[u,j] + x[v,j] − 2s)``, the target ``2·cc·rate·(1 − Σ_j s)``; the rounding tolerance grows by two
    units per edge. Interchangeable nodes (:func:`node_symmetry`) get value-precedence constraints; ``perm_budget``
    (no unit spread over nodes) groups nodes regardless of migration costs and charges the budget through a
    permutation of each group (:func:`~solvers.albic.milp.cpsat_cut.perm_budget`), an exact reformulation that lets
    nodes with residents be grouped too.
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
    comm = p.communicates
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
    vals = load_c[cand] if not exact_comm else np.concatenate([load_c[cand], p.communication_cost * prate])
    S_exact = exact_util_scale(np.concatenate([vals, L_fixed]), cap[nodes], float(cap[p.active].sum()), t,
                               2.0 ** 29 / u_max)
    S = min((2 + kmax) * SCALE_MEAN / max(t, 1e-300), 2.0 ** 29 / u_max)
    S = S_exact or max(S, 1e3 / max(t, 1e-300))
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
    d_fixed, hi_fixed, lo_fixed = _fixed_band(state, nodes, S)
    cb, room_c, room_b, res_coef, res_room = _rooms(state, cand, nodes, cb_real, fixed_units, in_sub, cur_pos, relax)
    # exact scale: integral coefficients, only float noise; else each node's distance is off by ≤ (2 + k)/(2S)
    tol = 1e-9 * max(t, 1e-300) if S_exact else float((2 + kmax) / (2 * S))
    sm = SubModel(cand, nodes, mask, coef, cc, cb, base, T, S, d_fixed, hi_fixed, lo_fixed, room_c, room_b,
                  res_coef, res_room, tol, edges, comm_coef, t_coef)
    sm.sym = node_symmetry(sm, p.active[nodes]) if exact_comm else None
    if exact_comm and perm_budget and not U.mixed:
        sm.sym = node_symmetry(sm, p.active[nodes], costs=False)
        sm.perm = True
        sm.home_pos = np.searchsorted(nodes, U.home[cand])
    return sm


def exact_util_scale(values: np.ndarray, caps: np.ndarray, q: float, t: float, s_max: float) -> float | None:
    """A scale ``S ≤ s_max`` that makes every ``S·value/cap`` and ``S·t`` an integer when the values and capacities
    are short decimals (denominators ≤ 10^6): ``lcm(value denominators) · lcm(capacity numerators, numerator of
    Σ active capacities)``; None otherwise. With it the scaled model is exact (no rounding of utilisations), and its
    coefficients are often far smaller than those of the rounding scale (awkward capacities like 1.3, 0.3, 2.9)."""
    dens = 1
    nums = 1
    for x in np.unique(np.asarray(values, dtype=np.float64)).tolist():
        f = Fraction(repr(x))
        if f.denominator > 10**6:
            return None
        dens = math.lcm(dens, f.denominator)
    for x in [*np.unique(caps).tolist(), q]:
        f = Fraction(repr(float(x)))
        if f.denominator > 10**6:
            return None
        nums = math.lcm(nums, f.numerator)
        if dens * nums > s_max:
            return None
    S = float(dens * nums)
    return S if S <= s_max and S * t < 2.0 ** 52 else None


def _fixed_band(state: State, nodes: np.ndarray, S: float) -> tuple[int, int | None, int | None]:
    """(5) and the bands' ends of the active nodes outside the sub-model, scaled: their largest deviation (rounded
    down), highest and lowest utilisation (rounded outwards: a relaxation)."""
    p = state.units.problem
    out_act = p.active.copy()
    out_act[nodes] = False
    if not out_act.any():
        return 0, None, None
    u = state.util()[out_act]
    return (int(math.floor(S * float(np.max(np.abs(u - state.t))))), int(math.floor(S * float(u.max()))),
            int(math.ceil(S * float(u.min()))))


def _rooms(state: State, cand: np.ndarray, nodes: np.ndarray, cb_real: np.ndarray, fixed_units: np.ndarray,
           in_sub: np.ndarray, cur_pos: np.ndarray, relax: bool
           ) -> tuple[np.ndarray, int | None, int | None, np.ndarray | None, np.ndarray | None]:
    """(2) and the resource rows as integer knapsacks (see :func:`build`): byte costs, the rooms of migrations and
    bytes left by the fixed units, resource coefficients and rooms per node."""
    U = state.units
    p = U.problem
    room_c = room_b = None
    fixed_c, fixed_b = (U.placement_cost_of(np.flatnonzero(fixed_units), state.place)
                        if fixed_units.any() else (0, 0.0))
    if p.max_migrations is not None:
        room_c = int(p.max_migrations - fixed_c)
    cb = np.zeros(cb_real.shape, dtype=np.int64)
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
    return cb, room_c, room_b, res_coef, res_room


def node_symmetry(sm: SubModel, act: np.ndarray, costs: bool = True) -> list[np.ndarray]:
    """Groups (≥ 2) of nodes whose every column of model data is identical: activity, allowed mask, utilisation
    and communication coefficients (same capacity), fixed load, migration and byte costs (no unit has members on
    them now, or the budget is dropped), resource rooms. Swapping two such nodes maps every solution to one with
    the same loads, costs and objective, so solutions may be restricted to one labelling (value precedence).
    ``costs=False`` ignores the migration and byte costs (they are then charged through a permutation of the group,
    see :func:`~solvers.albic.milp.cpsat_cut.perm_budget`)."""
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


@dataclass
class SubResult:
    place: np.ndarray | None     # new placement of sm.cand (node indices), or None
    status: str                  # "optimal", "feasible", "none", "infeasible"
    d_bound: float | None        # proven bound on the sub-problem's d (true units, tolerance subtracted)
    seconds: float
    d_int: int | None = None     # the proven bound on the model's scaled integer d (CP-SAT)
