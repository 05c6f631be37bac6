"""ALBIC load-balancing MILP (Madsen, Zhou, Cao — §4.3.1 "LP Solver"), planner ``albic-milp``.

The model (see :mod:`solvers.albic.milp.cpsat` for the constraints): every key group (or movable *unit* of key
groups) on exactly one node (1); the migration budget by count and/or bytes (2); all active nodes inside the band
``[t − d, t + d]`` of utilisation (3)(4), removing nodes drained gradually — nothing ever moves onto them
(Lemma 1) and, because the target ``t`` counts their load but not their capacity, the optimum empties them when
the budget allows (Lemma 2); heterogeneous capacities (loads divided by the capacity weight); the secondary
objective ``w1 ≫ w2`` that tightens both bands; optional per-node limits of other resources ("Extending to
Multi-Dimensional Load").

Solving it fast enough to matter ("Speed is the work here") — the whole call, model building included, stays
inside ``time_limit``:

1. **Warm start** — a best-improvement local search of moves and swaps around the node with the largest
   deviation (:mod:`solvers.albic.milp.search`; only units of the worst nodes move, only onto the ~48 most opposite nodes),
   from the current assignment, the hint (if any) and, for plain key groups, Flux's plan. The current assignment
   and every start are candidates, so the planner never returns anything worse than them.
2. **Proven bound** — :func:`bounds.analytic_bound`: the heaviest movable key groups, the budget and the
   band widths give, by bisection, the smallest distance any plan within the budget can reach.
3. **Randomised restarts and ruin-and-recreate** (most of the time limit): GRASP restarts of the greedy, and
   rounds that undo ~30 % of the best plan's migrations and spend the freed budget again — either greedily or
   with a budget-aware repair that lands each critical node inside a slightly tighter band at the lowest cost.
   Stops as soon as the plan meets the bound.
4. **Exact model on small instances** — when units × nodes ≤ 6,000 the full MILP is solved by CP-SAT (or CBC),
   hinted with the incumbent; its proven bound is combined with the analytic one.
5. **Large-neighbourhood search** with long time limits — the MILP restricted to the nodes with the largest
   deviation (plus removing nodes and a few random ones) and the units on them, everything else fixed.
6. **Very large instances** (1,000 nodes × 100,000 key groups): the same greedy is the fallback; the analytic
   bound is still reported (O(m log m)).

Removing nodes: finite key groups break Lemma 2 (the last ones on B can only leave by pushing some node up by
their own load), so a pure min-distance plan may keep them on B for ever. Below the *drain floor* (the heaviest
unit on B divided by the largest active capacity) the planner prefers less load on B over a lower distance; with
no removing nodes the objective is exactly the paper's (d first, then the band width).

Status: ``optimal`` when the plan's distance meets the proven bound (within 1e-6 of the mean utilisation, or the
full model proved it), ``feasible`` when a proof was attempted but the time ran out, ``heuristic`` when no bound
could be attempted (communication costs without an exact model).
"""

from __future__ import annotations

import math
import time

import numpy as np

from solvers import metrics
from solvers.albic.milp.bounds import analytic_bound
from solvers.albic.milp.cpsat import build, solve_cpsat
from solvers.albic.milp.search import State, improve
from solvers.albic.milp.units import Units, build_units, split_units
from solvers.errors import InvalidInput
from solvers.model import Plan, Problem
from solvers.registry import Param, register

BACKENDS = ("cpsat", "cbc")
FULL_MODEL_MAX = 6000          # units × nodes up to which the whole MILP is built
SUB_UNITS_MAX = 360            # units in one LNS sub-MILP
FLUX_MAX_KEY_GROUPS = 200_000  # Flux as a warm start up to this size
RUIN_SHARE = 0.3               # share of the best plan's migrations undone by one ruin-and-recreate round
RESTART_SHARE = 0.9            # share of the time limit for greedy + randomised restarts (then MILP/LNS)
LNS_MIN_SECONDS = 0.25         # an LNS round is only started with this much time left
LNS_BUILD_SECONDS = 0.1        # reserved for building one sub-MILP
OPTIMALITY_TOL = 1e-6          # "optimal": distance within 1e-6 × mean utilisation of the proven bound


def _exact_key(problem: Problem, assignment: np.ndarray, floor: float = 0.0) -> tuple[float, float, float, float]:
    """(max(d, drain floor), load on removing nodes, d, utilisation range) with the exact metric."""
    loads = metrics.node_loads(problem, assignment)
    d = metrics.load_distance_of_loads(problem, loads)
    u = loads[problem.active] / problem.capacity[problem.active]
    on_b = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
    return round(max(d, floor), 12), round(on_b, 9), round(d, 12), round(float(u.max() - u.min()), 12)


def _hint_place(units: Units, hint: np.ndarray) -> np.ndarray:
    """Unit placement from a key-group assignment: each unit on the node most of its members have in the hint."""
    p = units.problem
    hint = np.asarray(hint, dtype=np.int64)
    if hint.shape != (p.n_key_groups,):
        raise InvalidInput("hint", f"must have one node index per key group ({p.n_key_groups}), got shape {hint.shape}")
    if hint.size and (hint.min() < 0 or hint.max() >= p.n_nodes):
        raise InvalidInput("hint", "names a node index out of range")
    U = units.n_units
    if np.array_equal(units.of, np.arange(p.n_key_groups)):
        return hint.copy()
    place = np.full(U, -1, dtype=np.int64)
    counts: dict[tuple[int, int], int] = {}
    for k in range(p.n_key_groups):
        key = (int(units.of[k]), int(hint[k]))
        counts[key] = counts.get(key, 0) + 1
    best: dict[int, tuple[int, int]] = {}
    for (u, j), c in counts.items():
        if u not in best or c > best[u][0]:
            best[u] = (c, j)
    for u, (_, j) in best.items():
        place[u] = j
    return place


def _placement_ok(units: Units, place: np.ndarray) -> bool:
    """Every unit on an allowed node and the budget kept."""
    p = units.problem
    if place.min() < 0:
        return False
    onto_removing = p.removing[place] & (units.home != place)
    if onto_removing.any():
        return False
    for u, al in units.allowed.items():
        if place[u] not in al:
            return False
    c, b = units.placement_cost(place)
    if p.max_migrations is not None and c > p.max_migrations:
        return False
    if p.max_migration_bytes is not None and b > p.max_migration_bytes * (1 + 1e-12):
        return False
    if units.res_load is not None:
        usage = np.zeros_like(units.res_limit)
        np.add.at(usage, place, units.res_load)
        if np.any(usage > units.res_limit + 1e-9):
            return False
    return True


def _cheapest_feasible_units(problem: Problem, units: Units, unit_of, allowed) -> tuple[Units, np.ndarray]:
    """Place every unit on its cheapest allowed node; if that exceeds the budget, break the most expensive
    units apart (their key groups then stay where they are) — all at once, most expensive first."""
    p = problem
    for _ in range(3):
        if units.mixed or units.allowed:
            place = np.array([units.cheapest_node(u) for u in range(units.n_units)], dtype=np.int64)
        else:
            place = units.home.copy()
        bad = np.flatnonzero(place < 0).tolist()
        safe = np.where(place < 0, 0, place)
        cc = units.cost_count_to(np.arange(units.n_units), safe)
        cb = units.cost_bytes_to(np.arange(units.n_units), safe)
        cc[bad] = 0
        cb[bad] = 0.0
        order = np.argsort(-cc, kind="stable")
        split: list[int] = list(bad)
        tot_c, tot_b = float(cc.sum()), float(cb.sum())
        for u in order.tolist():
            over = (p.max_migrations is not None and tot_c > p.max_migrations) or (
                p.max_migration_bytes is not None and tot_b > p.max_migration_bytes * (1 + 1e-12))
            if not over or cc[u] == 0 and cb[u] == 0:
                break
            split.append(u)
            tot_c -= cc[u]
            tot_b -= cb[u]
        if not split:
            return units, place
        units = split_units(units, split, unit_of, allowed)
    place = np.array([units.cheapest_node(u) for u in range(units.n_units)], dtype=np.int64)
    return units, place


def solve_grouped(problem: Problem, *, unit_of: np.ndarray | None = None,
                  allowed: dict[int, np.ndarray] | None = None, time_limit: float = 1.0,
                  backend: str = "cpsat", hint: np.ndarray | None = None, workers: int = 1,
                  seed: int = 0, drain: bool = True) -> Plan:
    """Solve the ALBIC MILP (§4.3.1) over movable units within ``time_limit`` seconds (the whole call).

    Args:
        problem: the instance.
        unit_of: (m,) int, the unit of each key group; the key groups of one unit end on ONE node together
            (ALBIC §4.3.2: collocated sets migrate as units). ``None``: every key group is its own unit.
            A unit's migration cost on node ``i`` is the number (and state bytes) of its members not on ``i``
            now, so a unit whose members sit on different nodes pays for the members that must move.
        allowed: optional ``{unit id (a value of unit_of, or the key group index when unit_of is None):
            node indices}`` restricting where a unit may end. Removing nodes are dropped from it unless the unit
            sits entirely on that node.
        time_limit: seconds for the whole call (> 0).
        backend: ``"cpsat"`` (OR-tools CP-SAT) or ``"cbc"`` (PuLP/CBC) for the MILP parts.
        hint: (m,) node index per key group to warm-start from (ignored if it breaks the budget).
        workers: CP-SAT worker threads.
        seed: random seed of the restarts and the neighbourhood search.
        drain: below the drain floor prefer less load on removing nodes over a lower distance (see the module
            docstring); ``False`` gives the paper's objective unchanged (distance, then band width).

    Returns:
        A :class:`Plan` with the per-key-group assignment (within the budget, never onto removing nodes except
        members already there and not moved), status ``optimal``/``feasible``/``heuristic`` and a proven
        ``lower_bound`` on the load distance of this grouped problem. If the units that are spread over nodes
        cannot all be collocated within the budget, the most expensive are left split (``details["split_units"]``).

    Communication costs: :func:`solvers.metrics.node_loads` charges ``communication_cost × rate`` to both ends
    of every cut edge, which is not linear in the placement. The MILP and the local search charge each unit the
    cost of all its edges that leave the unit, as if cut (pessimistic; edges inside a unit are never cut).
    Candidate plans are compared and returned with the exact ``metrics.node_loads``; the lower bound is then 0.
    """
    t_start = time.perf_counter()
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not math.isfinite(time_limit) \
            or time_limit <= 0:
        raise InvalidInput("time_limit", f"must be a finite number > 0, got {time_limit!r}")
    if backend not in BACKENDS:
        raise InvalidInput("params.backend", f"must be one of {list(BACKENDS)}, got {backend!r}")
    deadline = t_start + float(time_limit)
    p = problem
    details: dict = {"backend": backend}

    units0 = build_units(p, unit_of, allowed)
    units, base_place = _cheapest_feasible_units(p, units0, unit_of, allowed)
    units.drain = bool(drain)
    if units.broken:
        details["split_units"] = [int(u) for u in units.broken]
    if units.n_units == 0:
        return Plan("albic-milp", p.current.copy(), status="optimal", lower_bound=0.0,
                    seconds=time.perf_counter() - t_start, details=details)
    t_lin = float(units.load.sum() / p.capacity[p.active].sum())

    # ---- candidates (linear-model states), best by exact key at the end
    from solvers.albic.milp.search import drain_floor
    floor0 = drain_floor(units, base_place)
    if floor0 > 0:
        details["drain_floor"] = floor0
    pool: list[tuple[tuple[float, float], np.ndarray, str]] = []

    def offer(place: np.ndarray, origin: str) -> None:
        if _placement_ok(units, place):
            a = units.assignment(place)
            pool.append((_exact_key(p, a, floor0), place.copy(), origin))

    if unit_of is None:
        offer(p.current.copy(), "current")
    offer(base_place, "start")

    starts: list[tuple[np.ndarray, str]] = [(base_place, "greedy")]
    if hint is not None:
        hp = _hint_place(units, hint)
        if _placement_ok(units, hp):
            starts.append((hp, "hint"))
            offer(hp, "hint")
    budget_total = float(time_limit)
    # ---- greedy local search from each start
    greedy_deadline = t_start + (0.1 if units.n_units * p.n_nodes <= FULL_MODEL_MAX else 0.45) * budget_total
    best_state: State | None = None
    # our greedy first (the first plan), then the hint, then Flux as a further start
    s0 = State(units, base_place, t_lin)
    improve(s0, t_start + 0.25 * budget_total)
    offer(s0.place, "greedy+ls")
    best_state = s0
    details["first_plan_seconds"] = round(time.perf_counter() - t_start, 4)
    # ---- proven bound
    lb = analytic_bound(p)
    details["analytic_bound"] = lb
    tol_opt = OPTIMALITY_TOL * max(t_lin, 1e-300)

    def reached() -> bool:
        best = min(pool, key=lambda c: c[0])[0]
        return best[2] <= lb + tol_opt and best[1] <= 0
    if unit_of is None and not allowed and p.n_key_groups <= FLUX_MAX_KEY_GROUPS:
        from solvers.baselines.flux import flux_moves
        fl = flux_moves(p, max(0.01, min(0.15 * budget_total, greedy_deadline - time.perf_counter())))
        if _placement_ok(units, fl):
            starts.append((fl, "flux"))
            offer(fl, "flux")
    for idx, (place, origin) in enumerate(starts):
        if idx == 0 or reached():
            continue
        s = State(units, place, t_lin)
        share = (greedy_deadline - time.perf_counter()) / max(1, len(starts) - idx)
        improve(s, time.perf_counter() + max(0.0, share))
        offer(s.place, origin + "+ls")
        if best_state is None or s.key() < best_state.key():
            best_state = s
    # randomised restarts (GRASP) and ruin-and-recreate: every third round the greedy restarts from a start with
    # one of the 3 best candidates drawn at random at each step; the other rounds undo a random ~30 % of the best
    # plan's migrations (freeing budget) and let the randomised greedy spend it again. Accepted when better.
    rng = np.random.default_rng(seed)
    full_model = units.n_units * p.n_nodes <= FULL_MODEL_MAX
    # small instances: little GRASP, most of the time for the exact model
    restart_deadline = t_start + (0.15 if full_model else RESTART_SHARE) * budget_total
    restarts = ruins = 0
    while time.perf_counter() < restart_deadline and not reached():
        if restarts % 3 == 0:
            place, origin = starts[(restarts // 3) % len(starts)]
            s = State(units, place, t_lin)
            origin += "+grasp"
        else:
            s = best_state.copy()
            origin = "ruin"
            cost_now = units.cost_count_to(np.arange(units.n_units), s.place)
            moved = np.flatnonzero(cost_now > 0)
            if moved.size:
                r = min(moved.size, max(1, int(round(RUIN_SHARE * moved.size * rng.uniform(0.5, 1.5)))))
                pick = rng.choice(moved, size=r, replace=False)
                if ruins % 4 == 1:
                    # targeted: undo the migrations that touch the nodes deviating most
                    dev = s.devs()
                    worst = np.argsort(-dev)[:4]
                    near = moved[np.isin(s.place[moved], worst) | np.isin(units.home[moved], worst)]
                    if near.size:
                        rest = pick[~np.isin(pick, near)]
                        pick = np.concatenate([near, rest])[: max(r, near.size)]
                for x in pick.tolist():
                    s.move(x, units.cheapest_node(x))
            ruins += 1
        if origin == "ruin" and ruins % 2 == 0:
            # budget-aware repair towards a slightly better distance than the best so far
            origin = "ruin+target"
            tau = best_state.key()[2] * rng.uniform(0.8, 0.98)
            improve(s, restart_deadline, rng=rng, topk=2, target=tau, swap_nodes=64)
        else:
            improve(s, restart_deadline, rng=rng, topk=3)
        improve(s, restart_deadline)
        restarts += 1
        if s.key() < best_state.key():
            offer(s.place, origin)
            best_state = s
    details["ruins"] = ruins
    details["search_seconds"] = round(time.perf_counter() - t_start, 4)
    details["restarts"] = restarts
    details["greedy_seconds"] = round(time.perf_counter() - t_start, 4)


    # ---- MILP: full model when small, large-neighbourhood search otherwise
    milp_ran = False
    state = best_state
    n = p.n_nodes
    all_nodes = np.arange(n)
    lns_iters = lns_improved = 0
    if backend == "cbc":
        from solvers.albic.milp.cbc import solve_cbc as sub_solver
    else:
        sub_solver = solve_cpsat
    stop_margin = 0.03 + 0.05 * budget_total
    if full_model and not reached():
        remaining = deadline - time.perf_counter() - stop_margin
        if remaining > 0.02:
            # the relaxation of the budget/resource rounding: its bound is valid for the problem as given; its
            # plans are offered only if they keep the real budget (offer checks)
            sm = build(state, np.arange(units.n_units), all_nodes, relax=True)
            res = sub_solver(state, sm, remaining, workers=workers, seed=seed)
            milp_ran = True
            if res.place is not None and _placement_ok(units, res.place):
                new = state.copy()
                new.set_place(res.place)
                offer(new.place, "milp")
                if new.key() <= state.key():
                    state = new
            exactness = p.communication_cost == 0 or not p.comm.nnz
            if res.d_bound is not None and exactness:
                lb = max(lb, res.d_bound)
            details["full_model"] = res.status
    else:
        k = min(n, 12)
        while True:
            remaining = deadline - time.perf_counter() - stop_margin
            if remaining < LNS_MIN_SECONDS:  # building a sub-MILP alone takes ~0.1 s
                break
            if reached():
                break
            nodes = _neighbourhood(state, k, rng)
            cand = _units_on(state, nodes, rng)
            sm = build(state, cand, nodes)
            sub_t = min(remaining, max(0.05, min(0.3, 0.2 * budget_total))) - LNS_BUILD_SECONDS
            res = sub_solver(state, sm, sub_t, workers=workers, seed=int(rng.integers(1 << 30)))
            milp_ran = True
            lns_iters += 1
            if res.place is not None:
                new = state.copy()
                for a, u in enumerate(cand.tolist()):
                    new.move(u, int(res.place[a]))
                if new.key() < state.key() and _placement_ok(units, new.place):
                    state = new
                    lns_improved += 1
                    offer(state.place, "lns")
                if res.status == "optimal":
                    k = min(n, int(k * 1.5) + 1)
                else:
                    k = max(4, int(k * 0.7))
            else:
                k = max(4, int(k * 0.7))
        details["lns_seconds"] = round(time.perf_counter() - t_start, 4)
        details["lns_iterations"] = lns_iters
        details["lns_improved"] = lns_improved

    # ---- pick the best by the exact metric
    key, place, origin = min(pool, key=lambda c: c[0])
    a = units.assignment(place)
    d = key[2]
    tol = OPTIMALITY_TOL * max(t_lin, 1e-300)
    lb = min(lb, d)  # every bound is ≤ the optimum ≤ d; only float noise can put it above d
    exact_loads = p.communication_cost == 0 or not p.comm.nnz
    # a proof is the plan meeting a valid bound (analytic or the full model's, tolerance subtracted)
    if exact_loads and d <= lb + tol:
        status = "optimal"
    elif milp_ran or exact_loads:
        status = "feasible"  # a proof was attempted (MILP and/or the analytic bound) and the time ran out
    else:
        status = "heuristic"
    details["origin"] = origin
    return Plan("albic-milp", a, status=status, lower_bound=float(lb), seconds=time.perf_counter() - t_start,
                details=details)


def _neighbourhood(state: State, k: int, rng: np.random.Generator) -> np.ndarray:
    """Nodes of one LNS sub-MILP: the ``k`` active nodes deviating most (both sides), the removing nodes that
    still hold load, and two random nodes."""
    p = state.units.problem
    dev = state.devs()
    act = np.flatnonzero(p.active)
    kk = min(k, act.size)
    top = act[np.argsort(-dev[act], kind="stable")[:kk]]
    chosen = set(top.tolist())
    rem = np.flatnonzero(p.removing & (state.L > 0))
    if rem.size:
        rem = rem[np.argsort(-state.L[rem])[: max(2, kk // 3)]]
        chosen.update(rem.tolist())
    others = np.setdiff1d(act, top)
    if others.size:
        chosen.update(rng.choice(others, size=min(2, others.size), replace=False).tolist())
    return np.array(sorted(chosen), dtype=np.int64)


def _units_on(state: State, nodes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Units on ``nodes``; at most SUB_UNITS_MAX (per node the heaviest half of its share and a random rest)."""
    on = np.flatnonzero(np.isin(state.place, nodes))
    if on.size <= SUB_UNITS_MAX:
        return on
    per = max(2, SUB_UNITS_MAX // max(1, nodes.size))
    keep = []
    W = state.units.load
    for j in nodes.tolist():
        us = on[state.place[on] == j]
        if us.size <= per:
            keep.append(us)
            continue
        us = us[np.argsort(-W[us])]
        heavy = us[: per // 2]
        rest = rng.choice(us[per // 2:], size=per - per // 2, replace=False)
        keep.append(np.concatenate([heavy, rest]))
    return np.sort(np.concatenate(keep))


@register(
    "albic-milp",
    "ALBIC load-balancing MILP (§4.3.1): minimise the load distance within the migration budget, drain removing "
    "nodes gradually; greedy/Flux warm start, randomised restarts and ruin-and-recreate, a proven analytic bound, "
    "CP-SAT/CBC for the exact model of small instances and neighbourhood search with long time limits.",
    params=[
        Param("backend", str, "cpsat", "MILP backend", choices=BACKENDS),
        Param("workers", int, 1, "CP-SAT worker threads", minimum=1, maximum=64),
        Param("seed", int, 0, "random seed of the neighbourhood search", minimum=0),
        Param("drain", bool, True, "below the drain floor (heaviest key group on a removing node) prefer emptying "
              "removing nodes over a lower load distance; false = the paper's objective unchanged"),
    ],
)
def solve(problem: Problem, *, time_limit: float = 1.0, backend: str = "cpsat", workers: int = 1,
          seed: int = 0, drain: bool = True) -> Plan:
    """Planner ``albic-milp``: :func:`solve_grouped` with every key group its own unit."""
    return solve_grouped(problem, unit_of=None, time_limit=time_limit, backend=backend, workers=workers, seed=seed,
                         drain=drain)
