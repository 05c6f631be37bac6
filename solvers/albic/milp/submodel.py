"""The MILP phases of the ALBIC planner (§4.3.1): the full model on small instances, neighbourhood search otherwise.

- :func:`full_model` — the whole §4.3.1 model (every unit, every node) by CP-SAT (or CBC), hinted with the
  incumbent. With communication costs CP-SAT charges every cut edge exactly (indicator per edge and node;
  :func:`solvers.albic.milp.comm_bounds.cut_model`: symmetry breaking, the budget through
  permutations), so it optimises the true objective and proves a bound > 0; CBC and very many edges keep the
  pessimistic loads (every edge leaving a unit charged as cut) and prove nothing. It is built as a *relaxation*
  of any byte/resource rounding (:func:`solvers.albic.milp.scaled.build` with ``relax=True``), so its proven
  bound (minus the utilisation rounding tolerance) is a valid lower bound for the problem as given; its plan is
  kept only if it really keeps the budget.
- :func:`neighbourhood_search` — large-neighbourhood search: the model restricted to the nodes deviating most
  (plus removing nodes that still hold load and two random nodes) and the units on them, everything else fixed;
  conservative rounding, so every sub-model plan is feasible (and is checked again).

OR-tools / PuLP and the model builder (:mod:`.scaled`) are imported here lazily, only when a MILP phase runs (by
then the solver's background import, :mod:`.loader`, has loaded them): a fresh process that never gets that far
does not pay for them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from solvers.albic.milp.state import Pool, State, keep_better, placement_ok
from solvers.albic.milp.units import Units

SUB_UNITS_MAX = 360            # units in one LNS sub-MILP
LNS_MIN_SECONDS = 0.25         # an LNS round is only started with this much time left
LNS_BUILD_SECONDS = 0.1        # reserved for building one sub-MILP
EXACT_COMM_MAX = 20_000        # unit edges × nodes up to which the full model charges cut edges exactly
AT_BOUND_NODES = 10            # the decision model at a target distance: at most this many nodes outside its band …
AT_BOUND_UNITS = 400           # … holding at most this many units
AT_BOUND_MIN_SECONDS = 0.02    # a decision model is only started with this much time left


def _backend(backend: str) -> Callable[..., Any]:
    if backend == "cbc":
        from solvers.albic.milp.cbc import solve_cbc
        return solve_cbc
    from solvers.albic.milp.cpsat import solve_cpsat
    return solve_cpsat


def full_model(state: State, pool: Pool, seconds: float, backend: str, workers: int, seed: int
               ) -> tuple[State, float | None, str]:
    """Solve the full model for ``seconds``; returns (best state, valid bound on d or None, solver status).

    The solver's modules are normally loaded already (:mod:`solvers.albic.milp.loader`); an import here counts
    against ``seconds``."""
    t0 = time.perf_counter()
    solver = _backend(backend)
    seconds -= time.perf_counter() - t0
    if seconds <= 0.02:
        return state, None, "not run (no time left after importing the solver)"
    from solvers.albic.milp.scaled import build  # loaded with the solver (:mod:`.loader`), like every MILP phase
    units = state.units
    p = units.problem
    exact_loads = not p.communicates
    # communication costs: exact cut indicators (CP-SAT) when the model stays small; else the pessimistic loads
    exact_comm = not exact_loads and backend == "cpsat" and _edge_count(units) * p.n_nodes <= EXACT_COMM_MAX
    if exact_comm:  # the relaxed and the exact cut model
        from solvers.albic.milp.comm_bounds import cut_model
        return cut_model(state, pool, seconds, workers, seed)
    sm = build(state, np.arange(units.n_units), np.arange(p.n_nodes), relax=True, exact_comm=exact_comm)
    res = solver(state, sm, seconds, workers=workers, seed=seed)
    state = keep_better(state, pool, res.place, "milp")
    bound = res.d_bound if exact_loads or exact_comm else None
    return state, bound, res.status


def needy_nodes(start: State, tau: float) -> np.ndarray:
    """Nodes that every plan with distance ≤ ``tau`` must change: active nodes outside ``[t − τ, t + τ]`` in
    ``start`` and removing nodes that hold load."""
    p = start.units.problem
    return np.flatnonzero((start.devs() > tau) | (~p.active & (start.L > 0)))


def at_bound(start: State, pool: Pool, lb: float, best: State, deadline: float, workers: int, seed: int
             ) -> tuple[State, dict[str, Any]]:
    """Decision models from the current assignment: is there a plan with distance ≤ τ that moves
    only units of the nodes outside the τ band?

    τ starts at the proven bound ``lb`` — a plan found there is optimal — and is bisected towards the incumbent's
    distance while the time lasts; a failed τ proves nothing (nodes inside the band could have helped), it only
    moves the next τ up. The incumbent's placement of those units is the hint (4× faster on 20 × 400 / 10 / 0.3
    seed 0). Each model keeps every other unit at home, so the whole budget is available; it runs
    only while the nodes outside the band are few (``AT_BOUND_NODES``, ``AT_BOUND_UNITS``): then the ALBIC model
    (§4.3.1) with a fixed band is a small multi-way subset sum that CP-SAT settles in milliseconds, where the local
    search's moves and swaps need a coordinated 8–10-move exchange (e.g. two overloaded nodes sending four key
    groups each, with the right ones, to two underloaded nodes).

    Returns the best state (``best`` or better) and ``{"at_bound_tries", "at_bound_improved"}``."""
    from solvers.albic.milp.cpsat import solve_cpsat
    from solvers.albic.milp.scaled import build
    units = start.units
    info: dict[str, Any] = {"at_bound_tries": 0, "at_bound_improved": 0}
    lo, hi = lb, best.key()[2]
    tau = lb
    while hi - lo > 1e-3 * max(hi, 1e-300):
        remaining = deadline - time.perf_counter()
        needy = needy_nodes(start, tau)
        cand = np.flatnonzero(np.isin(start.place, needy))
        if remaining < AT_BOUND_MIN_SECONDS or needy.size < 2 or needy.size > AT_BOUND_NODES \
                or cand.size > AT_BOUND_UNITS:
            break
        sm = build(start, cand, needy)
        d_max = int(math.ceil(sm.S * (tau + sm.tol)))
        res = solve_cpsat(start, sm, remaining, workers=workers, seed=seed, d_max=d_max, hint=best.place[cand])
        info["at_bound_tries"] += 1
        new = _moved(start, cand, res.place)
        if new is not None and placement_ok(units, new.place):
            pool.offer(new.place, "at-bound")
            if new.key() < best.key():
                best = new
                info["at_bound_improved"] += 1
            hi = min(hi, new.key()[2])
            if hi <= tau:
                break  # at τ: the bound itself (optimal), or the best this bisection can show
        else:  # no plan within τ found (or one that breaks a resource limit): τ moves up
            lo = tau
        tau = 0.5 * (lo + hi)
    return best, info


def _moved(state: State, cand: np.ndarray, place: np.ndarray | None) -> State | None:
    """A copy of ``state`` with the units ``cand`` on the nodes ``place`` of a sub-model's answer (None: none)."""
    if place is None:
        return None
    new = state.copy()
    for a, u in enumerate(cand.tolist()):
        new.move(u, int(place[a]))
    return new


def _edge_count(units: Units) -> int:
    from solvers.albic.milp.scaled import unit_edges
    return len(unit_edges(units)[0])


def neighbourhood_search(state: State, pool: Pool, deadline: float, budget_total: float, backend: str, workers: int,
                         rng: np.random.Generator, done: Callable[[], bool]) -> tuple[State, dict[str, int]]:
    """LNS rounds until ``deadline`` (or ``done()``); the neighbourhood grows after a proven sub-optimum."""
    if deadline - time.perf_counter() < LNS_MIN_SECONDS or done():
        return state, {"lns_iterations": 0, "lns_improved": 0}
    from solvers.albic.milp.scaled import build
    units = state.units
    n = units.problem.n_nodes
    solver = _backend(backend)
    k = min(n, 12)
    iters = improved = 0
    while True:
        remaining = deadline - time.perf_counter()
        if remaining < LNS_MIN_SECONDS or done():
            break
        nodes = _neighbourhood(state, k, rng)
        cand = _units_on(state, nodes, rng)
        sm = build(state, cand, nodes)
        sub_t = min(remaining, max(0.05, min(0.3, 0.2 * budget_total))) - LNS_BUILD_SECONDS
        res = solver(state, sm, sub_t, workers=workers, seed=int(rng.integers(1 << 30)))
        iters += 1
        new = _moved(state, cand, res.place)
        if new is not None:
            if new.key() < state.key() and placement_ok(units, new.place):
                state = new
                improved += 1
                pool.offer(state.place, "lns")
            k = min(n, int(k * 1.5) + 1) if res.status == "optimal" else max(4, int(k * 0.7))
        else:
            k = max(4, int(k * 0.7))
    return state, {"lns_iterations": iters, "lns_improved": improved}


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
