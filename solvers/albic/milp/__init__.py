"""ALBIC load-balancing MILP (Madsen, Zhou, Cao — §4.3.1 "LP Solver"), planner ``albic-milp``.

The model (see :mod:`solvers.albic.milp.scaled` for the constraints): every key group (or movable *unit* of key
groups) on exactly one node (1); the migration budget by count and/or bytes (2); all active nodes inside the band
``[t − d, t + d]`` of utilisation (3)(4), removing nodes drained gradually — nothing ever moves onto them
(Lemma 1) and, because the target ``t`` counts their load but not their capacity, the optimum empties them when
the budget allows (Lemma 2); heterogeneous capacities (loads divided by the capacity weight); the secondary
objective ``w1 ≫ w2`` that tightens both bands; optional per-node limits of other resources ("Extending to
Multi-Dimensional Load").

Solving it fast enough to matter ("Speed is the work here") — the whole call, model building included, stays
inside ``time_limit``:

1. **Warm start** — for plain key groups the complete Flux plan (0.03–0.06 s of CPU at 1,000 × 100,000; above
   ``FLUX_COMPLETE_MAX`` key groups it is cut off if it needs more than ``FLUX_SHARE`` of the limit), then a
   best-improvement local search of moves and swaps around the node with the largest deviation
   (:mod:`solvers.albic.milp.search`; only units of the worst nodes move, only onto the ~48 most opposite nodes)
   from the cheapest placement, the hint (if any) and Flux's plan. The current assignment and every start are
   candidates (:class:`~solvers.albic.milp.state.Pool`), so the planner never returns anything worse than them.
2. **Proven bound** — :func:`bounds.analytic_bound`: the heaviest movable key groups, the budget and the
   band widths give, by bisection, the smallest distance any plan within the budget can reach (per node the
   fewest key groups out and in that land it in the band; every arrival is one of the budget's departures, so
   when the budget is nearly spent the arrivals come from the nodes that must send anyway — the sender pools);
   Lemma 2 under the budget (load that cannot leave the removing nodes) gives another. Its O(m log m) setup
   cannot stop, so it starts only when it fits in the time left (else the granularity bound stands in).
3. **Ruin-and-recreate** (most of the time limit): rounds that undo ~30 % of the best plan's migrations and
   spend the freed budget again — either with a randomised greedy or with a budget-aware repair that lands each
   critical node inside a slightly tighter band at the lowest cost — or kick it with zero-cost exchanges among the
   nodes it touches (:mod:`solvers.albic.milp.kicks`). Each round starts from the last accepted plan, any within
   ``ACCEPT`` (3 %) of the best distance (record-to-record travel: the min–max objective has wide plateaus when the
   budget nears the node count). Stops as soon as the plan is proven optimal. On instances too large for the exact
   model the rounds run in ``processes`` processes (default one per CPU, at most 4), each with its own seed; the
   best plan of all wins (:mod:`solvers.albic.milp.portfolio`).
   **3b. Decision model at the bound**: when the restarts have not reached the bound and only a few
   nodes (≤ ``AT_BOUND_NODES``) lie outside the bound's band in the current assignment, CP-SAT looks for a plan
   with distance ≤ bound that moves only their units (:func:`solvers.albic.milp.submodel.at_bound`; a fixed band
   makes the model a small subset sum, which CP-SAT settles in milliseconds where it cannot squeeze the min–max
   objective); found, it is optimal. It takes the last ``AT_BOUND_SHARE`` of the restarts' time (on small
   instances: runs after them, before the exact model).
   **3c. Lagrangian bound**: on instances too large for the exact model, the last ``LAGRANGE_SHARE`` of the
   restarts' time bisects between the analytic bound and the incumbent's distance with prices on the key groups
   (:mod:`solvers.albic.milp.lagrange`: a plan's migrations are at least the sum over nodes of their cheapest
   pattern); time it leaves goes back to the search.
4. **Exact model on small instances** — when units × nodes ≤ 6,000 the full MILP is solved by CP-SAT (or CBC),
   hinted with the incumbent; its proven bound is combined with the analytic one; with communication costs CP-SAT
   charges cut edges exactly, so the plan and the bound are those of the true objective
   (:func:`solvers.albic.milp.submodel.full_model`). Up to ``EXACT_FIRST_MAX`` (1,000) units × nodes phase 3b
   never runs before it, and with the solver loaded (a server's workers; not a fresh process still importing it) it
   follows the warm start at once: it proves such an instance in milliseconds (148 random ones at 1 s: median wall
   0.19 → 0.04 s, the same plans).
5. **Large-neighbourhood search** with long time limits — the MILP restricted to the nodes with the largest
   deviation (plus removing nodes and a few random ones) and the units on them, everything else fixed
   (:func:`solvers.albic.milp.submodel.neighbourhood_search`).
6. **Very large instances** (1,000 nodes × 100,000 key groups): the same greedy is the fallback; the analytic
   bound is still reported (O(m log m)).

Removing nodes: finite key groups break Lemma 2 (the last ones on B can only leave by pushing some node up by
their own load), so a pure min-distance plan may keep them on B for ever. Below the *drain floor* (the heaviest
unit on B divided by the largest active capacity) the planner prefers less load on B over a lower distance; with
no removing nodes the objective is exactly the paper's (d first, then the band width).

Time shares (fractions of ``time_limit`` from the start of the call, named in :mod:`solvers.albic.milp.phases`):
Flux ≤ ``FLUX_SHARE``, the greedy until ``GREEDY_SHARE`` after Flux, every other start's local search until
``WARM_END``, restarts until ``RESTART_END`` (``RESTART_END_SMALL`` when the exact model will run; when phase 3b
applies, its ``AT_BOUND_SHARE`` is the restarts' last share, or follows them on small instances), then the MILP
phase; ``STOP_MARGIN`` is kept for picking and checking the plan.

Imports: phases 1 and 2 need numpy only (scipy.sparse only for communication edges); numpy.random (15 ms of CPU)
is imported when the restarts first draw a number (:attr:`~solvers.albic.milp.phases.Run.rng`), so a fresh
process whose time is up before them does not pay for it. OR-tools (0.3 s of CPU,
seconds on a loaded machine) is imported in a background thread once they are done, and only when a MILP phase
could still run after it: the time left covers the import (``IMPORT_SECONDS`` of :mod:`solvers.albic.milp.loader`)
and ``MILP_MIN_SECONDS``. The restarts go on meanwhile, and a MILP phase starts only once the import is done — on
small instances the search waits for it after the restarts as long as the exact model keeps ``MILP_MIN_SECONDS``.
A fresh process (``rebalancer plan``) therefore keeps its time limit and returns at least the heuristic plan;
``details`` say where the time went (``flux_seconds``, ``first_plan_seconds``, ``search_seconds``, ``ortools``,
``import_start_seconds``, ``import_seconds``, ``wall_seconds``, ``cpu_seconds``; the CLI adds the process's
``startup_seconds`` and ``startup_cpu_seconds`` before the call).

Status: ``optimal`` only when the plan's distance meets a *valid* lower bound — the analytic bound or
the full model's proven bound minus its rounding tolerance, both valid for the problem as given (fractional bytes
included: see :mod:`solvers.albic.milp.scaled`) — within ``OPTIMALITY_TOL`` × the mean utilisation; ``feasible``
otherwise (the time ran out before plan and bound met). With communication costs the analytic bound is the
granularity bound of :func:`~solvers.albic.milp.bounds.comm_granularity_bound` (weak) and the full model's bound
(exact cut costs) is the real one; ``heuristic`` is never reported.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from solvers import metrics
from solvers.albic.milp.bounds import analytic_bound, load_left_on_removing
from solvers.albic.milp.loader import backend_loader
from solvers.albic.milp.phases import FULL_MODEL_MAX, OPTIMALITY_TOL, Run, search, warm_start
from solvers.albic.milp.portfolio import processes_for
from solvers.albic.milp.state import Pool, State, cheapest_feasible_units, drain_floor, placement_ok
from solvers.albic.milp.units import build_units, split_units
from solvers.errors import InvalidInput
from solvers.model import Plan, Problem
from solvers.registry import Param, register

__all__ = ["BACKENDS", "OPTIMALITY_TOL", "solve", "solve_grouped"]

BACKENDS = ("cpsat", "cbc")
FLUX_MAX_KEY_GROUPS = 200_000  # Flux as a warm start up to this size


def solve_grouped(problem: Problem, *, unit_of: np.ndarray | None = None,
                  allowed: dict[int, np.ndarray] | None = None, time_limit: float = 1.0,
                  backend: str = "cpsat", hint: np.ndarray | None = None, workers: int = 1,
                  seed: int = 0, drain: bool = True, processes: int = 1) -> Plan:
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
        processes: processes of the ruin-and-recreate search on instances too large for the exact model
            (:mod:`solvers.albic.milp.portfolio`; 0: one per CPU, at most 4).

    Returns:
        A :class:`Plan` with the per-key-group assignment (within the budget, never onto removing nodes except
        members already there and not moved), status ``optimal``/``feasible``/``heuristic`` and a proven
        ``lower_bound`` on the load distance of this grouped problem. If the units that are spread over nodes
        cannot all be collocated within the budget, the most expensive are left split (``details["split_units"]``).

    Communication costs: :func:`solvers.metrics.node_loads` charges ``communication_cost × rate`` to both ends
    of every cut edge, which is not linear in the placement. The local search and the neighbourhood sub-models
    charge each unit the cost of all its edges that leave the unit, as if cut (pessimistic; edges inside a unit
    are never cut); the full model (small instances, CP-SAT) charges cut edges exactly and its proven bound is
    reported (else the bound is 0). Candidate plans are compared and returned with the exact
    ``metrics.node_loads``. With ``unit_of`` the bound is one of this *grouped* problem (units restrict plans).
    """
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not math.isfinite(time_limit) \
            or time_limit <= 0:
        raise InvalidInput("time_limit", f"must be a finite number > 0, got {time_limit!r}")
    if backend not in BACKENDS:
        raise InvalidInput("params.backend", f"must be one of {list(BACKENDS)}, got {backend!r}")
    return _solve_units(problem, unit_of, allowed, float(time_limit), backend, hint, workers, seed, drain,
                        processes)


def _solve_units(p: Problem, unit_of: np.ndarray | None, allowed: dict[int, np.ndarray] | None, time_limit: float,
                 backend: str, hint: np.ndarray | None, workers: int, seed: int, drain: bool,
                 processes: int = 1) -> Plan:
    """:func:`solve_grouped` on validated parameters: the phases in order."""
    t_start, c_start = time.perf_counter(), time.process_time()
    details: dict[str, Any] = {"backend": backend}
    units0 = build_units(p, unit_of, allowed)
    units, base_place = cheapest_feasible_units(p, units0, unit_of, allowed)
    if unit_of is not None and not placement_ok(units, base_place):
        # the grouped start breaks a resource limit (only the budget is repaired above): keep no unit together, so
        # that the current assignment — always a plan — is a start, instead of searching from nothing
        units = split_units(units, list(range(units.n_units)), unit_of, allowed)
        base_place = np.array([units.cheapest_node(u) for u in range(units.n_units)], dtype=np.int64)
        details["units_split_for_resources"] = True
    units.drain = bool(drain)
    if units.broken:
        details["split_units"] = [int(u) for u in units.broken]
    if units.n_units == 0:
        return Plan("albic-milp", p.current.copy(), status="optimal", lower_bound=0.0,
                    seconds=time.perf_counter() - t_start, details=details)
    t_lin = float(units.load.sum() / p.capacity[p.active].sum())
    floor0 = drain_floor(units, base_place)
    if floor0 > 0:
        details["drain_floor"] = floor0
    pool = Pool(units, floor0)
    if unit_of is None:
        pool.offer(p.current.copy(), "current")
    if unit_of is not None or not np.array_equal(base_place, p.current):  # the same plan twice: O(m) for nothing
        pool.offer(base_place, "start")
    run = Run(p, units, pool, t_start, time_limit, t_lin, seed,
              State(units, base_place, t_lin), [(base_place, "greedy")], backend_loader(backend), details=details,
              processes=processes_for(processes))
    if run.drain:
        run.b_left = load_left_on_removing(p)
    # phase 1: warm start; phase 2: the analytic bound (Lemma 2, budget, granularity) — no solver import before
    flux = unit_of is None and not allowed and p.n_key_groups <= FLUX_MAX_KEY_GROUPS
    warm_start(run, base_place, flux, hint)
    run.lb = analytic_bound(p, deadline=max(run.end, time.perf_counter() + 0.01))
    details["analytic_bound"] = run.lb
    plain = unit_of is None and not allowed and not p.communicates
    search(run, units.n_units * p.n_nodes <= FULL_MODEL_MAX, plain, backend, workers, seed)
    return _finish(run, t_lin, c_start)


def _finish(run: Run, t_lin: float, c_start: float) -> Plan:
    """The best plan by the exact metric; "optimal" only against a valid bound (every bound here is one); where
    the time went (wall and CPU seconds of the call, the solver's import) in ``details``."""
    p, units, details = run.p, run.units, run.details
    assert run.pool.best is not None
    key, place, origin = run.pool.best
    d = key[2]
    lb = min(run.lb, d)  # every bound is ≤ the optimum ≤ d; only float noise can put it above d
    t_plan = float(metrics.node_loads(p, units.assignment(place)).sum() / p.capacity[p.active].sum())
    tol = OPTIMALITY_TOL * max(min(t_lin, t_plan), 1e-300)
    # "feasible": a proof was attempted (MILP and/or the analytic bound) and the time ran out
    status = "optimal" if run.proven(tol) else "feasible"
    details["origin"] = origin
    details.update(run.solver.report(run.t_start))
    seconds = time.perf_counter() - run.t_start
    details.update(wall_seconds=round(seconds, 4), cpu_seconds=round(time.process_time() - c_start, 4))
    return Plan("albic-milp", units.assignment(place), status=status, lower_bound=float(lb), seconds=seconds,
                details=details)


@register(
    "albic-milp",
    "ALBIC load-balancing MILP (§4.3.1): minimise the load distance within the migration budget, drain removing "
    "nodes gradually; greedy/Flux warm start, ruin-and-recreate, a proven analytic bound, "
    "CP-SAT/CBC for the exact model of small instances and neighbourhood search with long time limits.",
    params=[
        Param("backend", str, "cpsat", "MILP backend", choices=BACKENDS),
        Param("workers", int, 1, "CP-SAT worker threads", minimum=1, maximum=64),
        Param("seed", int, 0, "random seed of the neighbourhood search", minimum=0),
        Param("drain", bool, True, "below the drain floor (heaviest key group on a removing node) prefer emptying "
              "removing nodes over a lower load distance; false = the paper's objective unchanged"),
        Param("processes", int, 0, "processes of the ruin-and-recreate search on instances too large for the exact "
              "model, each with its own seed (0: one per CPU, at most 4; 1: no other process)", minimum=0,
              maximum=64),
    ],
)
def solve(problem: Problem, *, time_limit: float = 1.0, backend: str = "cpsat", workers: int = 1,
          seed: int = 0, drain: bool = True, processes: int = 0) -> Plan:
    """Planner ``albic-milp``: the phases of :func:`solve_grouped` with every key group its own unit (parameters
    validated by the registry)."""
    return _solve_units(problem, None, None, float(time_limit), backend, None, workers, seed, drain, processes)
