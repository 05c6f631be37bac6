"""Band neighbourhood search for the ALBIC MILP (§4.3.1): re-tuning the exchanges among the nodes a plan touches.

Within a migration budget the incumbent's moves are a set of exchanges between nodes (a hot node sends key groups,
a cold one receives them, and two nodes swap key groups to trim each other). Once the budget is spent the local
search's moves and swaps of :mod:`solvers.albic.milp.search` can only change one or two key groups at a time around
the worst node, and they stall when the worst node is one the plan already rebalanced: improving it means choosing
*other* key groups for several exchanges at once.

Each round here asks CP-SAT a decision question on a small sub-model (:func:`solvers.albic.milp.scaled.build`
with conservative rounding, so every answer is a real plan): with every unit outside the neighbourhood fixed where
the incumbent has it, is there a placement of the neighbourhood's units that keeps all its active nodes inside the
band ``[t − τ, t + τ]`` within the budget left by the fixed units (fewest migrations)? With a fixed band the model
is a small multi-way subset sum that CP-SAT settles in milliseconds, where it cannot squeeze the min–max objective
(the decision model of :func:`solvers.albic.milp.submodel.at_bound`, here from the incumbent instead of the current
assignment). The neighbourhood:

- the *needy* nodes — active nodes deviating more than ``τ`` (and removing nodes that still hold load); every plan
  with distance ≤ τ must change them, and every node outside the neighbourhood must already be within τ;
- the nodes they exchanged key groups with in the incumbent (its sources and destinations): those exchanges are
  what is re-tuned — a moved key group may go back home and another take its place;
- partners with room on the other side of the target (the coldest nodes for hot needy nodes and the hottest for
  cold ones) and a few random nodes.

``τ`` steps down from the incumbent's distance towards the proven bound: by a larger step after a success, a smaller
one after a failure (a failed τ proves nothing: the neighbourhood was too small or CP-SAT ran out of time); each
success is polished by the local search.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from solvers.albic.milp.scaled import build
from solvers.albic.milp.search import improve
from solvers.albic.milp.state import Pool, State, placement_ok

NEEDY_MAX = 12          # at most this many needy nodes (a larger τ is tried instead)
NODES_MAX = 24          # nodes in one sub-model …
UNITS_MAX = 480         # … holding at most this many units
ROUND_SECONDS = 0.25    # CP-SAT's limit for one decision model (less when the call ends sooner)
MIN_SECONDS = 0.02      # a round is only started with this much time left
STEP0, STEP_MIN = 0.05, 0.004   # relative steps of τ below the incumbent's distance


def _neighbourhood(state: State, tau: float, rng: np.random.Generator) -> np.ndarray:
    """The nodes of one round (module docstring), at most ``NODES_MAX`` and ``UNITS_MAX`` units."""
    units = state.units
    p = units.problem
    dev = state.devs()
    u = state.util()
    needy = np.flatnonzero((dev > tau) | (~p.active & (state.L > 0)))
    needy = needy[np.argsort(-np.where(p.active[needy], dev[needy], np.inf), kind="stable")]
    chosen: list[int] = needy.tolist()
    moved = np.flatnonzero(units.cost_count_to(np.arange(units.n_units), state.place) > 0)
    home, now = units.home[moved], state.place[moved]
    linked: list[int] = []
    for j in needy.tolist():
        linked += home[now == j].tolist() + now[home == j].tolist()
    act = np.flatnonzero(p.active)
    hot = bool(np.any(u[needy[p.active[needy]]] > state.t)) if needy.size else False
    cold = bool(np.any(u[needy[p.active[needy]]] < state.t)) if needy.size else False
    order = np.argsort(u[act], kind="stable")
    partners = (act[order[:4]].tolist() if hot else []) + (act[order[::-1][:4]].tolist() if cold else [])
    extra = rng.choice(act, size=min(3, act.size), replace=False).tolist()
    counts = np.bincount(state.place, minlength=state.n)
    out: list[int] = []
    total = 0
    for j in chosen + rng.permutation(np.array(linked, dtype=np.int64)).tolist() + partners + extra:
        if j in out or len(out) >= NODES_MAX or total + counts[j] > UNITS_MAX:
            continue
        out.append(int(j))
        total += int(counts[j])
    return np.array(sorted(out), dtype=np.int64)


def band_search(state: State, pool: Pool, lb: float, deadline: float, rng: np.random.Generator,
                done: Any) -> tuple[State, dict[str, int]]:
    """Rounds of the decision model until ``deadline`` or ``done()``; returns the best state and
    ``{"band_rounds", "band_improved"}``."""
    from solvers.albic.milp.cpsat import solve_cpsat
    units = state.units
    info = {"band_rounds": 0, "band_improved": 0}
    step = STEP0
    while not done():
        remaining = deadline - time.perf_counter()
        d = state.key()[2]
        if remaining < MIN_SECONDS or d <= lb:
            break
        tau = max(lb, d * (1 - step))
        dev = np.sort(state.devs())[::-1]
        if dev.size > NEEDY_MAX and dev[NEEDY_MAX] > tau:   # too many needy nodes: the largest τ that has fewer
            tau = min(float(dev[NEEDY_MAX]), d * (1 - STEP_MIN))
        nodes = _neighbourhood(state, tau, rng)
        cand = np.flatnonzero(np.isin(state.place, nodes))
        sm = build(state, cand, nodes)
        if sm.d_fixed > math.ceil(sm.S * (tau + sm.tol)):
            step = max(STEP_MIN, step * 0.5)
            continue
        d_max = int(math.ceil(sm.S * (tau + sm.tol)))
        res = solve_cpsat(state, sm, min(remaining, ROUND_SECONDS), d_max=d_max, seed=int(rng.integers(1 << 30)))
        info["band_rounds"] += 1
        if res.place is not None:
            new = state.copy()
            for a, x in enumerate(cand.tolist()):
                new.move(x, int(res.place[a]))
            if placement_ok(units, new.place):
                improve(new, min(deadline, time.perf_counter() + 0.2 * remaining))
                if new.key() < state.key():
                    state = new
                    pool.offer(state.place, "band")
                    info["band_improved"] += 1
                    step = min(0.5, step * 1.5)
                    continue
        step = max(STEP_MIN, step * 0.5)
    return state, info
