"""The phases of the ALBIC MILP planner (§4.3.1) after its set-up: warm start, restarts and ruin-and-recreate, the
decision model at the bound, the exact model or neighbourhood search (see :mod:`solvers.albic.milp` for the whole
scheme and the time shares named here).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.albic.milp.kicks import kick, kickable
from solvers.albic.milp.lagrange import applies as lagrange_applies
from solvers.albic.milp.lagrange import lagrange_bound
from solvers.albic.milp.loader import Loader
from solvers.albic.milp.portfolio import Child, finish, in_parallel
from solvers.albic.milp.search import improve, land
from solvers.albic.milp.state import Pool, State, hint_place, placement_ok
from solvers.albic.milp.submodel import (
    AT_BOUND_NODES,
    LNS_MIN_SECONDS,
    at_bound,
    full_model,
    needy_nodes,
    neighbourhood_search,
)
from solvers.albic.milp.units import Units
from solvers.model import Problem

FULL_MODEL_MAX = 6000          # units × nodes up to which the whole MILP is built
EXACT_FIRST_MAX = 1000         # … and up to which it follows the warm start at once (no restarts, no phase 3b)
RUIN_SHARE = 0.3               # share of the best plan's migrations undone by one ruin-and-recreate round
TARGET_RANGE = (0.8, 0.98)     # every other ruin is repaired towards a band of this share of the best distance
ACCEPT = 0.03                  # a round's plan is the next round's start when within this share of the best distance
KICK_SHARE = 0.5               # share of the rounds that kick the plan (:mod:`.kicks`) instead of ruining it
# time shares (fractions of the time limit, measured from the start of the call)
FLUX_SHARE = 1.0               # Flux runs to completion unless it needs more than this (1.0: up to the stop margin)
GREEDY_SHARE = 0.25            # the greedy local search from the cheapest placement, after Flux
WARM_END = 0.1                 # local search from the other starts ends here (small instances) …
WARM_END_LARGE = 0.6           # … or here (large instances)
AT_BOUND_SHARE = 0.25          # decision models at the bound (few nodes outside its band) for at most this share
FLUX_COMPLETE_MAX = 2000       # Flux always runs to completion up to this many key groups (a few ms)
MILP_MIN_SECONDS = 0.05        # a MILP phase (after the solver's import) is started only with this much time left
RESTART_END_SMALL = 0.15       # restarts and ruin-and-recreate end here when the exact model follows
RESTART_END = 0.9              # … and here otherwise (then neighbourhood search)
STOP_MARGIN = (0.03, 0.05, 6e-7)  # seconds + share of the limit + seconds per key group kept for picking and
#                                   checking the plan (O(m) work that cannot stop: ~0.06 s at 100,000 key groups)
OPTIMALITY_TOL = 1e-6          # "optimal": distance within 1e-6 × mean utilisation of a valid bound
LAGRANGE_SHARE = 0.15          # the Lagrangian bound (:mod:`.lagrange`) after the restarts, for at most this share
RNG_IMPORT_SECONDS = 0.02      # numpy.random's import (15 ms of CPU): restarts start in a fresh process only with this
#                                much time left (:attr:`Run.rng`)


@dataclass
class Run:
    """What the phases of one call share."""
    p: Problem
    units: Units
    pool: Pool
    t_start: float
    limit: float
    t_lin: float
    seed: int
    best: State
    starts: list[tuple[np.ndarray, str]]
    solver: Loader
    lb: float = 0.0
    b_left: float = 0.0        # a lower bound on the load every plan leaves on removing nodes (drain objective)
    lex_proven: bool = False   # the full model by levels proved the drain objective (:mod:`.levels`)
    processes: int = 1         # processes of the restarts on large instances (:mod:`.portfolio`)
    children: list[Child] = field(default_factory=list)  # … those still searching (:func:`.portfolio.finish`)
    details: dict[str, Any] = field(default_factory=dict)
    _rng: np.random.Generator | None = None

    @property
    def rng(self) -> np.random.Generator:
        """The random generator of the restarts and the neighbourhood search (``default_rng(seed)``), made on first
        use: a fresh process (``rebalancer plan``) imports numpy.random only when a call gets that far."""
        if self._rng is None:
            from numpy.random import default_rng
            self._rng = default_rng(self.seed)
        return self._rng

    def rng_in_time(self, end: float) -> bool:
        """Whether :attr:`rng` is at hand before ``end``: made, numpy.random imported, or time left for the import
        (``RNG_IMPORT_SECONDS``)."""
        return self._rng is not None or "numpy.random" in sys.modules \
            or end - time.perf_counter() >= RNG_IMPORT_SECONDS

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

    @property
    def drain(self) -> bool:
        """Whether the objective is the lexicographic drain objective (something on a removing node, drain on)."""
        return self.pool.floor > 0

    def proven(self, tol: float | None = None) -> bool:
        """The best plan is optimal: the full model by levels proved it, or its distance meets the bound (within
        ``tol``, default ``OPTIMALITY_TOL`` × the mean) and, with the drain objective, the load it leaves on removing
        nodes meets theirs (``b_left``): both at their least, so is ``max(d, F)``."""
        assert self.pool.best is not None
        key = self.pool.best[0]
        if self.lex_proven:
            return True
        tol = OPTIMALITY_TOL * max(self.t_lin, 1e-300) if tol is None else tol
        return key[2] <= self.lb + tol and (
            not self.drain or key[1] <= self.b_left + 1e-9 * float(self.units.load.sum()) + 1e-12)

    def reached(self) -> bool:
        """Nothing left to search for (:meth:`proven`)."""
        return self.proven()


def warm_start(run: Run, base_place: np.ndarray, flux: bool, hint: np.ndarray | None) -> None:
    """Phase 1: Flux (complete), the greedy local search from the cheapest placement, then every other start."""
    units, pool = run.units, run.pool
    if flux:
        from solvers.baselines.flux import flux_moves
        # Flux may use the stop margin's share for the search too (not the final checks' share): under a short
        # limit on a large instance a truncated Flux would make the plan worse than plain Flux
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


def _at_bound_start(run: Run) -> State | None:
    """Whether phase 3b applies: the incumbent is above the proven bound and only 2–``AT_BOUND_NODES`` nodes lie
    outside the bound's band in the current assignment. Returns the current assignment's state, or None."""
    if run.lb <= 0 or run.reached():
        return None
    start = State(run.units, run.p.current, run.t_lin)
    if not 2 <= needy_nodes(start, run.lb).size <= AT_BOUND_NODES:
        return None
    return start


def _at_bound(run: Run, start: State, seed: int, reserve: float = 0.0) -> None:
    """Phase 3b: the decision model at the bound (:func:`~solvers.albic.milp.submodel.at_bound`) for at most
    ``AT_BOUND_SHARE`` of the limit, when the restarts before it have not reached the bound and the solver is
    loaded."""
    if run.reached() or not run.solver.ready():
        return
    end = min(time.perf_counter() + AT_BOUND_SHARE * run.limit, run.stop - reserve)
    run.best, info = at_bound(start, run.pool, run.lb, run.best, end, 1, seed)
    run.details.update(info)


def restarts(run: Run, end: float) -> None:
    """Phase 3: ruin-and-recreate: undo a random ~30 % of the start's migrations (every fourth round those touching
    the nodes deviating most first) and spend the freed budget again — greedily with one of the 3 best candidates
    drawn at random at each step or, every other round, with a budget-aware repair towards a band
    ``TARGET_RANGE`` × the best distance. In ``KICK_SHARE`` of the rounds the start is kicked instead: 1–3
    zero-cost exchanges among the nodes it touches (:func:`~solvers.albic.milp.kicks.kick`), then the local
    search. The start is the last accepted plan, and a round's plan is accepted when its distance is within
    ``ACCEPT`` of the best one (record-to-record travel): the search walks along the plateaus of the min–max
    objective instead of ruining the same best plan again (on the grid's budgets 30–40, where the budget nears the
    node count: 87 → 97–99 of 116 runs within the best known + 5 %; with the kicks and the budget-freeing step of
    :func:`~solvers.albic.milp.kicks.free_step` 106–109). When the start's worst node is one it does not touch, a
    ruin first *lands* it inside the band by a swap (:func:`~solvers.albic.milp.search.land`) with the budget the
    ruin freed, before the repair spends that budget on the nodes the ruin unbalanced: the plan's distance is then
    no longer pinned to that node (grid at 1 s, planner seeds 0–5, 22 runs: 100–106 of 108 within the best known +
    5 %, median 103, against 97–100 without it in the same hour). (GRASP restarts from the starts in one round of
    three made the plans of 12 grid instances × 2 seeds at 1 s of CPU 7 % worse in geometric mean: the time goes to
    ruins.)"""
    units = run.units
    ruins = kicks = 0
    cur = run.best
    kicking = kickable(cur)
    while time.perf_counter() < end and not run.reached() and run.rng_in_time(end):
        rng = run.rng
        s = cur.copy()
        if kicking and rng.random() < KICK_SHARE and kick(s, rng, int(rng.integers(1, 4))):
            kicks += 1
            improve(s, end)
            cur = _accept(run, s, cur, "kick")
            continue
        origin = "ruin"
        moved = np.flatnonzero(units.cost_count_to(np.arange(units.n_units), s.place) > 0)
        h = int(np.argmax(s.devs()))
        lone = not ((s.place[moved] == h).any() or (units.home[moved] == h).any())  # the worst node is untouched
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
        if lone and land(s, h, run.best.key()[2] * rng.uniform(*TARGET_RANGE), rng):
            origin = "ruin+land"
        if ruins % 2 == 0:
            origin += "+target"
            tau = run.best.key()[2] * rng.uniform(*TARGET_RANGE)
            improve(s, end, rng=rng, topk=2, target=tau, swap_nodes=64)
        else:
            improve(s, end, rng=rng, topk=3)
        improve(s, end)
        cur = _accept(run, s, cur, origin)
    run.details.update(ruins=run.details.get("ruins", 0) + ruins, kicks=run.details.get("kicks", 0) + kicks,
                       search_seconds=round(time.perf_counter() - run.t_start, 4))


def _tighten(run: Run, end: float) -> None:
    """Phase 3c: the Lagrangian bound (:func:`~solvers.albic.milp.lagrange.lagrange_bound`) between the proven
    bound and the incumbent's distance until ``end`` (time it leaves goes back to the search)."""
    if run.reached() or run.pool.best is None:
        return
    t0 = time.perf_counter()
    lb = lagrange_bound(run.p, run.lb, run.pool.best[0][2], end)
    run.details.update(lagrange_bound=lb, lagrange_seconds=round(time.perf_counter() - t0, 4))
    run.lb = max(run.lb, lb)


def _accept(run: Run, s: State, cur: State, origin: str) -> State:
    """The next round's start after a round that ended with ``s``: ``s`` if it is the new best plan (offered to the
    pool) or within ``ACCEPT`` of the best distance, else ``cur``."""
    if s.key() < run.best.key():
        run.pool.offer(s.place, origin)
        run.best = s
        return s
    return s if s.key()[0] <= run.best.key()[0] * (1 + ACCEPT) else cur


def search(run: Run, full: bool, plain: bool, backend: str, workers: int, seed: int) -> None:
    """:func:`_search`, then the answers of search processes that were still running when the restarts ended
    (:func:`~solvers.albic.milp.portfolio.finish`: taken until the stop time, every child ended)."""
    try:
        _search(run, full, plain, backend, workers, seed)
    finally:
        finish(run)


def _search(run: Run, full: bool, plain: bool, backend: str, workers: int, seed: int) -> None:
    """Phases 3–5: restarts (3b: the decision model at the bound, after them on small instances, else before their
    last ``AT_BOUND_SHARE``; neither before an exact model of at most ``EXACT_FIRST_MAX`` units × nodes when the
    solver is loaded), then the
    exact model (small instances; by levels,
    :mod:`solvers.albic.milp.levels`) or neighbourhood search (large ones, long limits). The solver is imported in
    the background (:mod:`solvers.albic.milp.loader`) once the restarts start, only when a MILP phase could still
    run after it (the time left covers the import and ``MILP_MIN_SECONDS``); each MILP phase runs only once it is
    loaded."""
    # a small exact model proves its optimum in milliseconds: the decision model before it would only take its time,
    # and so would the restarts once the solver is loaded (on a loaded machine all of it); while a fresh process
    # imports the solver they search as before (the import may not end in time)
    small = full and run.units.n_units * run.p.n_nodes <= EXACT_FIRST_MAX
    restart_end = 0.0 if small and run.solver.ready() else RESTART_END_SMALL if full else RESTART_END
    start = _at_bound_start(run) if plain and not small else None
    lns = not full and run.stop - run.at(restart_end) >= LNS_MIN_SECONDS
    if not run.reached() and (full or start is not None or lns):
        run.solver.start(run.stop - time.perf_counter() - MILP_MIN_SECONDS)
    # phase 3c's share (the Lagrangian bound) is kept from the restarts and the decision model before it
    reserve = LAGRANGE_SHARE * run.limit if not full and lagrange_applies(run.p) else 0.0
    if start is not None and not full:
        restarts(run, min(run.at(restart_end - AT_BOUND_SHARE), run.stop - reserve))
        _at_bound(run, start, seed, reserve)
    end = min(run.at(restart_end), run.stop - reserve)
    if full:
        restarts(run, end)
    else:  # (the exact model follows the restarts of small instances: one process is enough there)
        in_parallel(run, end, run.processes, restarts)
    if reserve:
        _tighten(run, min(time.perf_counter() + reserve, run.stop))
    if run.reached():
        return
    if full:
        # the exact model is worth more than further restarts: leave the import the CPU until it is done (as long
        # as the model keeps MILP_MIN_SECONDS), else search on until the end
        if not run.solver.wait(run.stop - time.perf_counter() - MILP_MIN_SECONDS):
            restarts(run, run.stop)
            return
        if start is not None:
            _at_bound(run, start, seed)
        remaining = run.stop - time.perf_counter()
        if remaining > 0.02 and not run.reached():
            if backend == "cpsat" and not run.p.communicates:
                from solvers.albic.milp.levels import full_levels  # OR-tools: loaded by now
                run.best, bound, status, run.lex_proven = full_levels(
                    run.best, run.pool, remaining, workers, seed, OPTIMALITY_TOL * run.t_lin)
                if run.drain:
                    run.details["drain_model"] = "optimal" if run.lex_proven else "not proven"
            else:
                run.best, bound, status = full_model(run.best, run.pool, remaining, backend, workers, seed)
            run.details["full_model"] = status
            if bound is not None:
                run.lb = max(run.lb, bound)
    elif run.solver.ready() and run.stop - time.perf_counter() >= LNS_MIN_SECONDS:
        run.best, info = neighbourhood_search(run.best, run.pool, run.stop, run.limit, backend, workers, run.rng,
                                              run.reached)
        run.details.update(info)
    else:
        restarts(run, run.stop)
