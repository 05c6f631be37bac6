"""The kicks and the budget-freeing step of ``albic-milp``'s restarts (:mod:`solvers.albic.milp.kicks`): exchanges
among the nodes a plan already touches that keep the budget, Lemma 1 and (for the freeing step) the distance; and the
swap that lands a ruined plan's worst node inside the band (:func:`solvers.albic.milp.search.land`)."""

from __future__ import annotations

import numpy as np
import pytest

from solvers.albic.milp.kicks import free_step, kick, kickable
from solvers.albic.milp.search import _apply, improve, land
from solvers.albic.milp.state import State, placement_ok
from solvers.albic.milp.units import build_units
from solvers.model import Problem
from tests.solvers.test_albic_milp_search import assert_best_swap_found


def _plan(seed: int, search: bool = True) -> tuple[Problem, State]:
    """A random instance (some removing nodes, a byte budget in one of three) and the local search's plan (or, with
    ``search=False``, random migrations within the budget)."""
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(4, 9)), int(rng.integers(20, 60))
    removing = np.zeros(n, dtype=bool)
    if seed % 3 == 0:
        removing[int(rng.integers(n))] = True
    p = Problem.from_arrays(np.round(rng.uniform(1, 20, m), 2), rng.integers(0, n, m), rng.choice([0.5, 1.0, 2.0], n),
                            state_bytes=np.round(rng.uniform(1, 5, m), 1), removing=removing,
                            max_migrations=int(rng.integers(3, 10)),
                            max_migration_bytes=20.0 if seed % 3 == 1 else None)
    units = build_units(p)
    s = State(units, p.current, float(units.load.sum() / p.capacity[p.active].sum()))
    if search:
        improve(s, np.inf)
        return p, s
    act = np.flatnonzero(p.active)
    for k in rng.permutation(m)[: p.max_migrations].tolist():
        j = int(rng.choice(act))
        t = s.copy()
        t.move(k, j)
        if t.feasible_budget():
            s = t
    return p, s


def _touched(p: Problem, place: np.ndarray) -> set[int]:
    moved = np.flatnonzero(place != p.current)
    return set(p.current[moved].tolist()) | set(place[moved].tolist())


@pytest.mark.parametrize("seed", range(40))
def test_kicks_keep_the_budget_and_stay_among_touched_nodes(seed):
    p, s = _plan(seed)
    assert kickable(s)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        before, used = _touched(p, s.place), s.used_c
        kick(s, rng, 3)
        assert s.feasible_budget() and s.used_c <= used
        assert placement_ok(s.units, s.place)           # budget, bytes, nothing moved onto a removing node
        assert _touched(p, s.place) <= before
        fresh = State(s.units, s.place, s.t)             # the incremental loads and costs are exact
        np.testing.assert_allclose(s.L, fresh.L, atol=1e-9)
        assert (s.used_c, s.floor) == (fresh.used_c, fresh.floor)


@pytest.mark.parametrize("seed", range(40))
def test_free_step_frees_budget_without_raising_the_distance(seed):
    p, s = _plan(seed, search=False)
    dev = s.devs()
    d = float(dev.max())
    op = free_step(s, s.util(), d, max(s.t, 1e-12))
    if op is None:
        return
    before, used = _touched(p, s.place), s.used_c
    _apply(s, op)
    assert s.used_c < used
    assert placement_ok(s.units, s.place)
    assert _touched(p, s.place) <= before
    assert float(s.devs().max()) <= d + 1e-12 * s.t   # no node above the old distance (the worst is unchanged)


@pytest.mark.parametrize("seed", range(40))
def test_swap_with_the_budget_spent_keeps_every_improving_swap(seed):
    # with no migration left, _best_swap scores only migrated partner units and the units on the homes of the
    # critical node's guests: no swap within the budget may be lost (brute force over every pair)
    p, s = _plan(seed, search=False)
    s.max_c = float(s.used_c)                      # the budget is spent
    assert_best_swap_found(s)


def _lands(s: State, t: State, h: int, target: float) -> bool:
    """``t`` (``s`` after a swap) puts ``h`` within ``target`` and leaves every other node within the larger of
    ``target`` and its deviation in ``s``, in the budget."""
    before, after = s.devs(), t.devs()
    tol = 1e-9 * s.t
    others = np.arange(s.n) != h
    return bool(t.feasible_budget() and after[h] <= target + tol
                and np.all(after[others] <= np.maximum(target, before[others]) + tol))


@pytest.mark.parametrize("seed", range(40))
def test_land_puts_the_worst_node_in_the_band_whenever_a_swap_can(seed):
    # a plan with budget left (its migrations partly undone, as after a ruin): land() applies a swap with the
    # worst node that lands it within the target when one exists (brute force over every pair), else nothing
    p, s = _plan(seed, search=seed % 2 == 0)
    for x in np.flatnonzero(s.place != s.units.home)[: 1 + seed % 3].tolist():
        s.move(x, int(s.units.home[x]))
    h = int(np.argmax(s.devs()))
    target = float(s.devs()[h]) * (0.3 + 0.6 * (seed % 4) / 3)
    exists = False
    for r in np.flatnonzero(s.place == h).tolist():
        for q in np.flatnonzero((s.place != h) & s.act[s.place]).tolist():
            t = s.copy()
            _apply(t, ("swap", r, q))
            exists = exists or _lands(s, t, h, target)
    t = s.copy()
    applied = land(t, h, target, np.random.default_rng(seed))
    assert applied == exists
    if applied:
        assert int((t.place != s.place).sum()) == 2 and _lands(s, t, h, target)
        assert placement_ok(t.units, t.place)
