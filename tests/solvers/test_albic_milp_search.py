"""The local search of ``albic-milp`` (:mod:`solvers.albic.milp.search`) and the exact scale of its sub-models
(:mod:`solvers.albic.milp.scaled`), against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from solvers.albic.milp.levels import full_levels
from solvers.albic.milp.pick import first_by_unit
from solvers.albic.milp.scaled import build, exact_util_scale
from solvers.albic.milp.search import _apply, _best_swap
from solvers.albic.milp.state import Pool, State
from solvers.albic.milp.units import build_units
from solvers.model import Problem
from tests.solvers.albic_exact_reference import exact_optimum


def _state(p: Problem, place: np.ndarray) -> State:
    units = build_units(p)
    return State(units, place, float(units.load.sum() / p.capacity[p.active].sum()))


def _brute_best_swap_distance(s: State, h: int) -> float:
    """The least distance any swap of a unit on ``h`` with a unit elsewhere reaches within the budget."""
    best = np.inf
    on_h = np.flatnonzero(s.place == h)
    others = np.flatnonzero((s.place != h) & s.act[s.place])
    for r, q in itertools.product(on_h.tolist(), others.tolist()):
        t = s.copy()
        j = int(t.place[q])
        t.move(r, j)
        t.move(q, h)
        if t.feasible_budget():
            best = min(best, t.key()[2])
    return best


def assert_best_swap_found(s: State) -> None:
    """``_best_swap`` at the worst node of ``s`` finds a swap within the budget reaching the brute-force least
    distance whenever some swap improves on the current one."""
    u, dev = s.util(), s.devs()
    h = int(np.argmax(dev))
    d = float(dev[h])
    sw, _ = _best_swap(s, u, dev, h, d, s.max_c - s.used_c, s.max_b - s.used_b, 64, max(s.t, 1e-12))
    brute = _brute_best_swap_distance(s, h)
    if brute < d - 1e-9 * s.t:
        assert sw is not None
        t = s.copy()
        _apply(t, sw)
        assert t.feasible_budget() and t.key()[2] <= brute + 1e-9 * s.t  # (no feasible swap is below brute)


@pytest.mark.parametrize("seed", range(40))
def test_swap_window_keeps_every_improving_swap(seed):
    # the window of partner loads must not hide the best swap: its distance is the brute-force least one whenever
    # some swap improves on the current distance
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(3, 7)), int(rng.integers(8, 30))
    p = Problem.from_arrays(np.round(rng.uniform(1, 20, m), 2), rng.integers(0, n, m),
                            rng.choice([0.5, 1.0, 2.0], n), max_migrations=int(rng.integers(2, 8)))
    assert_best_swap_found(_state(p, p.current))


@pytest.mark.parametrize("seed", range(30))
def test_first_candidates_by_unit_are_those_of_a_stable_lexsort(seed):
    # the randomised greedy draws among the first k candidates of distinct units in the order (q, dc, dss, index):
    # the k-pass selection must give exactly what a stable lexsort and the first of each unit give, ties included
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    q = rng.integers(0, 3, n).astype(float)
    dc = rng.choice([0.0, 0.5, 1.0], n)
    dss = rng.integers(-3, 3, n).astype(float)
    unit = rng.integers(0, max(1, n // 4), n)
    order = np.lexsort((dss, dc, q))
    for k in (1, 2, 3, 5):
        assert first_by_unit(q, dc, dss, None, k) == order[:k].tolist()
        _, first = np.unique(unit[order], return_index=True)
        assert first_by_unit(q, dc, dss, unit, k) == order[np.sort(first)][:k].tolist()


def test_exact_scale_of_short_decimals():
    # loads in hundredths, capacities 1.3 / 0.3 / 2.9: S = 100 · lcm(13, 3, 29, 45) makes every S·load/cap integral
    caps = np.array([1.3, 0.3, 2.9])
    loads = np.array([1.25, 7.5, 19.99])
    s = exact_util_scale(loads, caps, float(caps.sum()), float(loads.sum() / caps.sum()), 2.0 ** 40)
    assert s is not None
    assert np.allclose(np.outer(loads, 1 / caps) * s, np.rint(np.outer(loads, 1 / caps) * s), rtol=0, atol=1e-6)
    assert exact_util_scale(np.array([np.pi]), caps, float(caps.sum()), 1.0, 2.0 ** 40) is None


def test_awkward_capacities_are_proved_by_levels():
    # capacities 1.3 / 0.3 / 2.9; the weighted objective W1·d + hi − lo proved nothing in 10 s here,
    # d alone (level 1) proves the optimum in well under a second
    rng = np.random.default_rng(2)
    m = 26
    p = Problem.from_arrays(rng.integers(1, 120, m).astype(float), rng.integers(0, 3, m), [1.3, 0.3, 2.9],
                            max_migrations=int(rng.integers(1, m)))
    s = _state(p, p.current)
    sm = build(s, np.arange(s.units.n_units), np.arange(3), relax=True)
    assert sm.tol < 1e-8 * s.t   # the exact scale: integral coefficients
    pool = Pool(s.units, 0.0)
    _, bound, status, _ = full_levels(s, pool, 60.0, 1, 0, 1e-6 * s.t)
    opt = float(exact_optimum(p, work=60.0))
    assert status == "optimal" and bound == pytest.approx(opt, rel=1e-6)
    assert pool.best is not None and pool.best[0][2] == pytest.approx(opt, rel=1e-6)
