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

1. **Warm start** — for plain key groups the complete Flux plan (it finishes in ~0.2 s at 1,000 × 100,000; above
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
3. **Randomised restarts and ruin-and-recreate** (most of the time limit): GRASP restarts of the greedy, and
   rounds that undo ~30 % of the best plan's migrations and spend the freed budget again — either greedily or
   with a budget-aware repair that lands each critical node inside a slightly tighter band at the lowest cost.
   Stops as soon as the plan meets the bound.
   **3b. Decision model at the bound** (issue 16.2): when the restarts have not reached the bound and only a few
   nodes (≤ ``AT_BOUND_NODES``) lie outside the bound's band in the current assignment, CP-SAT looks for a plan
   with distance ≤ bound that moves only their units (:func:`solvers.albic.milp.submodel.at_bound`; a fixed band
   makes the model a small subset sum, which CP-SAT settles in milliseconds where it cannot squeeze the min–max
   objective); found, it is optimal. It takes the last ``AT_BOUND_SHARE`` of the restarts' time (on small
   instances: runs after them, before the exact model).
4. **Exact model on small instances** — when units × nodes ≤ 6,000 the full MILP is solved by CP-SAT (or CBC),
   hinted with the incumbent; its proven bound is combined with the analytic one; with communication costs CP-SAT
   charges cut edges exactly, so the plan and the bound are those of the true objective
   (:func:`solvers.albic.milp.submodel.full_model`).
5. **Large-neighbourhood search** with long time limits — the MILP restricted to the nodes with the largest
   deviation (plus removing nodes and a few random ones) and the units on them, everything else fixed
   (:func:`solvers.albic.milp.submodel.neighbourhood_search`).
6. **Very large instances** (1,000 nodes × 100,000 key groups): the same greedy is the fallback; the analytic
   bound is still reported (O(m log m)).

Removing nodes: finite key groups break Lemma 2 (the last ones on B can only leave by pushing some node up by
their own load), so a pure min-distance plan may keep them on B for ever. Below the *drain floor* (the heaviest
unit on B divided by the largest active capacity) the planner prefers less load on B over a lower distance; with
no removing nodes the objective is exactly the paper's (d first, then the band width).

Time shares (fractions of ``time_limit`` from the start of the call, named below): Flux ≤ ``FLUX_SHARE``, the
greedy until ``GREEDY_SHARE`` after Flux, every other start's local search until ``WARM_END``, restarts until
``RESTART_END`` (``RESTART_END_SMALL`` when the exact model will run; when phase 3b applies, its
``AT_BOUND_SHARE`` is the restarts' last share, or follows them on small instances), then the MILP phase;
``STOP_MARGIN`` is kept for picking and checking the plan.

Imports: phases 1 and 2 need numpy only. OR-tools (0.3 s of CPU, seconds on a loaded machine) is imported in a
background thread once they are done, and only when a MILP phase could still run
(:mod:`solvers.albic.milp.loader`); the restarts go on meanwhile, and a MILP phase starts only once the import is
done — on small instances the search waits for it after the restarts as long as the exact model keeps
``MILP_MIN_SECONDS``. A fresh process (``rebalancer plan``) therefore keeps its time limit and returns at least the
heuristic plan; ``details`` say where the time went (``flux_seconds``, ``first_plan_seconds``, ``search_seconds``,
``ortools``, ``import_start_seconds``, ``import_seconds``, ``wall_seconds``, ``cpu_seconds``).

Status (issue 16): ``optimal`` only when the plan's distance meets a *valid* lower bound — the analytic bound or
the full model's proven bound minus its rounding tolerance, both valid for the problem as given (fractional bytes
included: see :mod:`solvers.albic.milp.cpsat`) — within ``OPTIMALITY_TOL`` × the mean utilisation; ``feasible``
otherwise (the time ran out before plan and bound met). With communication costs the analytic bound is the
granularity bound of :func:`~solvers.albic.milp.bounds.comm_granularity_bound` (weak) and the full model's bound
(exact cut costs) is the real one; ``heuristic`` is never reported.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers import metrics
from solvers.albic.milp.bounds import analytic_bound
from solvers.albic.milp.loader import Loader, backend_loader
from solvers.albic.milp.search import improve
from solvers.albic.milp.state import Pool, State, cheapest_feasible_units, drain_floor, hint_place, placement_ok
from solvers.albic.milp.submodel import (
    AT_BOUND_NODES,
    LNS_MIN_SECONDS,
    at_bound,
    full_model,
    needy_nodes,
    neighbourhood_search,
)
from solvers.albic.milp.units import Units, build_units, split_units
from solvers.errors import InvalidInput
from solvers.model import Plan, Problem
from solvers.registry import Param, register

BACKENDS = ("cpsat", "cbc")
FULL_MODEL_MAX = 6000          # units × nodes up to which the whole MILP is built
FLUX_MAX_KEY_GROUPS = 200_000  # Flux as a warm start up to this size
RUIN_SHARE = 0.3               # share of the best plan's migrations undone by one ruin-and-recreate round
# time shares (fractions of the time limit, measured from the start of the call)
FLUX_SHARE = 1.0               # Flux runs to completion unless it needs more than this (1.0: up to the stop margin)
GREEDY_SHARE = 0.25            # the greedy local search from the cheapest placement, after Flux
WARM_END = 0.1                 # local search from the other starts ends here (small instances) …
WARM_END_LARGE = 0.6           # … or here (large instances)
AT_BOUND_SHARE = 0.25          # decision models at the bound (few nodes outside its band) for at most this share
FLUX_COMPLETE_MAX = 2000      # Flux always runs to completion up to this many key groups (a few ms)
MILP_MIN_SECONDS = 0.05        # a MILP phase (after the solver's import) is started only with this much time left
RESTART_END_SMALL = 0.15       # restarts and ruin-and-recreate end here when the exact model follows
RESTART_END = 0.9              # … and here otherwise (then neighbourhood search)
STOP_MARGIN = (0.03, 0.05, 6e-7)  # seconds + share of the limit + seconds per key group kept for picking and
#                                   checking the plan (O(m) work that cannot stop: ~0.06 s at 100,000 key groups)
OPTIMALITY_TOL = 1e-6          # "optimal": distance within 1e-6 × mean utilisation of a valid bound


@dataclass
class _Run:
    """What the phases of one call share."""
    p: Problem
    units: Units
    pool: Pool
    t_start: float
    limit: float
    t_lin: float
    rng: np.random.Generator
    best: State
    starts: list[tuple[np.ndarray, str]]
    solver: Loader
    lb: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def at(self, share: float) -> float:
        return self.t_start + share * self.limit

    @property
    def stop(self) -> float:
        return (self.t_start + self.limit - STOP_MARGIN[0] - STOP_MARGIN[1] * self.limit
                - STOP_MARGIN[2] * self.p.n_key_groups)

    @property
    def end(self) -> float:
        """The end of the call less the final checks' share of the stop margin (``STOP_MARGIN[2]`` per key group):
        work that cannot be resumed later (Flux, the analytic bound) may use the rest of the margin."""
        return self.t_start + self.limit - STOP_MARGIN[2] * self.p.n_key_groups

    def reached(self) -> bool:
        """The best plan meets the bound and drains every removing node: nothing left to search for."""
        assert self.pool.best is not None
        key = self.pool.best[0]
        return key[2] <= self.lb + OPTIMALITY_TOL * max(self.t_lin, 1e-300) and key[1] <= 0


def _warm_start(run: _Run, base_place: np.ndarray, flux: bool, hint: np.ndarray | None) -> None:
    """Phase 1: Flux (complete), the greedy local search from the cheapest placement, then every other start."""
    units, pool = run.units, run.pool
    if flux:
        from solvers.baselines.flux import flux_moves
        # Flux may use the stop margin's share for the search too (not the final checks' share): under a short
        # limit on a large instance a truncated Flux would make the plan worse than plain Flux (issue 16.4)
        flux_end = min(run.at(FLUX_SHARE), run.end)
        seconds = math.inf if run.p.n_key_groups <= FLUX_COMPLETE_MAX else max(0.001, flux_end - time.perf_counter())
        fl = flux_moves(run.p, seconds)
        if placement_ok(units, fl):
            run.starts.append((fl, "flux"))
            pool.offer(fl, "flux")
        run.details["flux_seconds"] = round(time.perf_counter() - run.t_start, 4)
    if hint is not None:
        hp = hint_place(units, hint)
        if placement_ok(units, hp):
            run.starts.append((hp, "hint"))
            pool.offer(hp, "hint")
    improve(run.best, min(max(time.perf_counter(), run.at(0.0)) + GREEDY_SHARE * run.limit, run.stop))
    pool.offer(run.best.place, "greedy+ls")
    run.details["first_plan_seconds"] = round(time.perf_counter() - run.t_start, 4)
    full = units.n_units * run.p.n_nodes <= FULL_MODEL_MAX
    warm_end = min(run.at(WARM_END if full else WARM_END_LARGE), run.stop)
    for idx, (place, origin) in enumerate(run.starts[1:], start=1):
        if run.reached() or time.perf_counter() >= warm_end:
            break
        s = State(units, place, run.t_lin)
        share = (warm_end - time.perf_counter()) / max(1, len(run.starts) - idx)
        improve(s, time.perf_counter() + max(0.0, share))
        pool.offer(s.place, origin + "+ls")
        if s.key() < run.best.key():
            run.best = s


def _at_bound_start(run: _Run) -> State | None:
    """Whether phase 3b applies: the incumbent is above the proven bound and only 2–``AT_BOUND_NODES`` nodes lie
    outside the bound's band in the current assignment. Returns the current assignment's state, or None."""
    if run.lb <= 0 or run.reached():
        return None
    start = State(run.units, run.p.current, run.t_lin)
    if not 2 <= needy_nodes(start, run.lb).size <= AT_BOUND_NODES:
        return None
    return start


def _at_bound(run: _Run, start: State, seed: int) -> None:
    """Phase 3b: the decision model at the bound (:func:`~solvers.albic.milp.submodel.at_bound`) for at most
    ``AT_BOUND_SHARE`` of the limit, when the restarts before it have not reached the bound and the solver is
    loaded."""
    if run.reached() or not run.solver.ready():
        return
    end = min(time.perf_counter() + AT_BOUND_SHARE * run.limit, run.stop)
    run.best, info = at_bound(start, run.pool, run.lb, run.best, end, 1, seed)
    run.details.update(info)


def _restarts(run: _Run, end: float) -> None:
    """Phase 3: GRASP restarts (every third round, from a start with one of the 3 best candidates drawn at random
    at each step) and ruin-and-recreate (undo a random ~30 % of the best plan's migrations, spend the freed budget
    again: greedily or, every other round, with a budget-aware repair towards a slightly tighter band)."""
    units, rng = run.units, run.rng
    restarts = ruins = 0
    while time.perf_counter() < end and not run.reached():
        if restarts % 3 == 0:
            place, origin = run.starts[(restarts // 3) % len(run.starts)]
            s = State(units, place, run.t_lin)
            origin += "+grasp"
        else:
            s = run.best.copy()
            origin = "ruin"
            moved = np.flatnonzero(units.cost_count_to(np.arange(units.n_units), s.place) > 0)
            if moved.size:
                r = min(moved.size, max(1, int(round(RUIN_SHARE * moved.size * rng.uniform(0.5, 1.5)))))
                pick = rng.choice(moved, size=r, replace=False)
                if ruins % 4 == 1:  # targeted: undo the migrations that touch the nodes deviating most
                    worst = np.argsort(-s.devs())[:4]
                    near = moved[np.isin(s.place[moved], worst) | np.isin(units.home[moved], worst)]
                    if near.size:
                        pick = np.concatenate([near, pick[~np.isin(pick, near)]])[: max(r, near.size)]
                for x in pick.tolist():
                    s.move(x, units.cheapest_node(x))
            ruins += 1
        if origin == "ruin" and ruins % 2 == 0:
            origin = "ruin+target"
            tau = run.best.key()[2] * rng.uniform(0.8, 0.98)
            improve(s, end, rng=rng, topk=2, target=tau, swap_nodes=64)
        else:
            improve(s, end, rng=rng, topk=3)
        improve(s, end)
        restarts += 1
        if s.key() < run.best.key():
            run.pool.offer(s.place, origin)
            run.best = s
    run.details.update(ruins=run.details.get("ruins", 0) + ruins, restarts=run.details.get("restarts", 0) + restarts,
                       search_seconds=round(time.perf_counter() - run.t_start, 4))


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
    return _solve_units(problem, unit_of, allowed, float(time_limit), backend, hint, workers, seed, drain)


def _solve_units(p: Problem, unit_of: np.ndarray | None, allowed: dict[int, np.ndarray] | None, time_limit: float,
                 backend: str, hint: np.ndarray | None, workers: int, seed: int, drain: bool) -> Plan:
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
    pool.offer(base_place, "start")
    run = _Run(p, units, pool, t_start, time_limit, t_lin, np.random.default_rng(seed),
               State(units, base_place, t_lin), [(base_place, "greedy")], backend_loader(backend), details=details)
    # phase 1: warm start; phase 2: the analytic bound (Lemma 2, budget, granularity) — no solver import before
    flux = unit_of is None and not allowed and p.n_key_groups <= FLUX_MAX_KEY_GROUPS
    _warm_start(run, base_place, flux, hint)
    run.lb = analytic_bound(p, deadline=max(run.end, time.perf_counter() + 0.01))
    details["analytic_bound"] = run.lb
    plain = unit_of is None and not allowed and not (p.communication_cost > 0 and p.comm.nnz)
    _search(run, units.n_units * p.n_nodes <= FULL_MODEL_MAX, plain, backend, workers, seed)
    return _finish(run, t_lin, c_start)


def _search(run: _Run, full: bool, plain: bool, backend: str, workers: int, seed: int) -> None:
    """Phases 3–5: restarts (3b: the decision model at the bound, after them on small instances, else before their
    last ``AT_BOUND_SHARE``), then the exact model (small instances) or neighbourhood search (large ones, long
    limits). The solver is imported in the background (:mod:`solvers.albic.milp.loader`) once the restarts start,
    only when a MILP phase could still run; each MILP phase runs only once it is loaded."""
    restart_end = RESTART_END_SMALL if full else RESTART_END
    start = _at_bound_start(run) if plain else None
    lns = not full and run.stop - run.at(restart_end) >= LNS_MIN_SECONDS
    if not run.reached() and (full or start is not None or lns):
        run.solver.start()
    if start is not None and not full:
        _restarts(run, min(run.at(restart_end - AT_BOUND_SHARE), run.stop))
        _at_bound(run, start, seed)
    _restarts(run, min(run.at(restart_end), run.stop))
    if run.reached():
        return
    if full:
        # the exact model is worth more than further restarts: leave the import the CPU until it is done (as long
        # as the model keeps MILP_MIN_SECONDS), else search on until the end
        if not run.solver.wait(run.stop - time.perf_counter() - MILP_MIN_SECONDS):
            _restarts(run, run.stop)
            return
        if start is not None:
            _at_bound(run, start, seed)
        remaining = run.stop - time.perf_counter()
        if remaining > 0.02 and not run.reached():
            run.best, bound, status = full_model(run.best, run.pool, remaining, backend, workers, seed)
            run.details["full_model"] = status
            if bound is not None:
                run.lb = max(run.lb, bound)
    elif run.solver.ready():
        run.best, info = neighbourhood_search(run.best, run.pool, run.stop, run.limit, backend, workers, run.rng,
                                              run.reached)
        run.details.update(info)
    else:
        _restarts(run, run.stop)


def _finish(run: _Run, t_lin: float, c_start: float) -> Plan:
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
    status = "optimal" if d <= lb + tol else "feasible"
    details["origin"] = origin
    details.update(run.solver.report(run.t_start))
    seconds = time.perf_counter() - run.t_start
    details.update(wall_seconds=round(seconds, 4), cpu_seconds=round(time.process_time() - c_start, 4))
    return Plan("albic-milp", units.assignment(place), status=status, lower_bound=float(lb), seconds=seconds,
                details=details)


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
    """Planner ``albic-milp``: the phases of :func:`solve_grouped` with every key group its own unit (parameters
    validated by the registry)."""
    return _solve_units(problem, None, None, float(time_limit), backend, None, workers, seed, drain)
