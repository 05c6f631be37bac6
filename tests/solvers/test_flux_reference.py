"""The vectorised Flux (:mod:`solvers.baselines.flux`) makes exactly the moves of the one-at-a-time reference
(``tests/solvers/flux_reference.py``, the earlier implementation) on seeded random instances: budgets by
count and bytes, removing nodes, capacities, equal and zero loads, a start other than the current assignment, and
communication costs. Complete runs only (a time limit no run reaches): nothing here depends on the machine's speed."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from evaluation.generators import albic_synthetic, skewed
from solvers.baselines.flux import FluxRun, flux_moves, rank_order
from solvers.baselines.keyset import KeySet
from solvers.model import Problem
from tests.solvers.flux_reference import reference_flux_moves

NO_LIMIT = 1e9


def random_instance(seed: int) -> tuple[Problem, np.ndarray | None]:
    """A random instance (and sometimes a start): the shapes the planner and the benchmarks give Flux."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    m = int(rng.integers(0, 600))
    kind = seed % 4
    if kind == 0:
        load = rng.pareto(1.5, m) + 0.01
    elif kind == 1:   # equal loads (ties broken by index) and some zero ones
        load = rng.choice([0.0, 1.0, 2.5], m)
    elif kind == 2:   # few distinct values
        load = np.round(rng.uniform(0, 5, m), 1)
    else:
        load = rng.exponential(3.0, m)
    removing = rng.random(n) < 0.2
    removing[int(rng.integers(n))] = False
    comm, cost = None, 0.0
    if seed % 5 == 0 and m > 1:
        comm = sp.random(m, m, density=min(1.0, 3.0 / m), random_state=seed, format="csr") * 2
        cost = float(rng.choice([0.05, 0.5]))
    budget = rng.choice(["none", "count", "bytes", "both"])
    count = int(rng.integers(0, max(1, m // 3) + 1)) if budget in ("count", "both") else None
    sb = rng.integers(0, 1000, m).astype(float)
    byts = float(rng.uniform(0, sb.sum() / 4 + 1)) if budget in ("bytes", "both") else None
    p = Problem.from_arrays(load, rng.integers(0, n, m), rng.choice([0.5, 1.0, 2.0, 3.0], n), removing=removing,
                            state_bytes=sb, comm=comm, communication_cost=cost, max_migrations=count,
                            max_migration_bytes=byts)
    start = None
    if seed % 7 == 3 and m:
        start = p.current.copy()
        few = rng.choice(m, size=min(m, 5), replace=False)
        start[few] = np.flatnonzero(p.active)[rng.integers(0, int(p.active.sum()), few.size)]
    return p, start


def assert_same_as_reference(p: Problem, start: np.ndarray | None = None) -> None:
    expected, expected_moves = reference_flux_moves(p, NO_LIMIT, start)
    run = FluxRun(p, start)
    best = run.score()
    if p.removing.any():
        run.drain(np.inf)
    run.balance(np.inf, best)
    assert run.moves == expected_moves
    np.testing.assert_array_equal(flux_moves(p, NO_LIMIT, start), expected)


@pytest.mark.parametrize("block", range(6))
def test_flux_makes_the_reference_moves_on_random_instances(block):
    for seed in range(block * 50, (block + 1) * 50):
        p, start = random_instance(seed)
        assert_same_as_reference(p, start)


@pytest.mark.parametrize("make", [
    lambda: skewed(60, 3000, zipf=0.8, heterogeneous=True, seed=3, max_migrations=300),
    lambda: skewed(40, 2000, zipf=0.5, heterogeneous=True, removing=5, seed=4, max_migrations=150),
    lambda: skewed(50, 2500, zipf=1.2, seed=5).with_budget(None, 2e8),
    lambda: albic_synthetic(50, varies=0.0, seed=1, max_migrations=40),   # equal loads everywhere
    lambda: albic_synthetic(80, varies=1.0, seed=2, max_migrations=200),
])
def test_flux_makes_the_reference_moves_on_generated_instances(make):
    assert_same_as_reference(make())


def test_rank_order_breaks_ties_by_index():
    load = np.array([2.0, 1.0, 2.0, 0.0, -0.0, 1.0])
    assert rank_order(load).tolist() == [3, 4, 1, 5, 0, 2]
    assert rank_order(np.array([3.0, 1.0, 2.0])).tolist() == [1, 2, 0]


@pytest.mark.parametrize("seed", range(8))
def test_keyset_answers_as_a_sorted_list(seed):
    """:class:`KeySet` (dead keys skipped through jump pointers, added keys in a side array, merged now and then)
    against a plain sorted list, under random batches of removals and additions like Flux's passes."""
    rng = np.random.default_rng(seed)
    universe = int(rng.integers(1, 3000))
    keys = np.sort(rng.choice(universe, size=int(rng.integers(0, universe + 1)), replace=False))
    ks, ref = KeySet(keys, np.int32 if seed % 2 else np.int64), set(keys.tolist())
    for _ in range(60):
        present = np.array(sorted(ref), dtype=np.int64)
        # removals concentrated on a few neighbourhoods (the runs of dead keys a hot node leaves behind)
        old = present[rng.random(present.size) < rng.uniform(0, 0.3)] if present.size else present
        absent = np.setdiff1d(np.arange(universe), present)
        new = rng.choice(absent, size=min(absent.size, int(rng.integers(0, 40))), replace=False)
        ks.replace(old, new)
        ref = (ref - set(old.tolist())) | set(new.tolist())
        s = sorted(ref)
        q = rng.integers(0, universe + 2, size=50)
        expected = [max((x for x in s if x < v), default=-1) for v in q.tolist()]
        assert ks.before(q).tolist() == expected
        v = int(q[0])
        assert list(ks.descending(v)) == [x for x in reversed(s) if x < v]
        lo, hi = sorted(rng.integers(0, universe + 1, size=2).tolist())
        assert ks.between(lo, hi).tolist() == [x for x in s if lo <= x < hi]
        assert ks.size == len(s)
