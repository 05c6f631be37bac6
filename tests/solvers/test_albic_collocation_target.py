"""ALBIC step 3 with pair_order="target" (solvers.albic.collocation_target, solvers.graph_partitioning
.balanced_target): a whole-graph METIS goal, relabelled to keep the most load in place, stable across rounds of
load drift, and moves of single key groups towards it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evaluation.collocation_scenarios import collocation_synthetic, drift_loads
from solvers import metrics, registry
from solvers.albic.collocation import build_units, migration_cost_fraction, pair_scores
from solvers.graph_partitioning import balanced_target, metis_parts, symmetric_traffic


def _units(p, order="target", band=None):
    return build_units(p, pair_scores(p, 1.5), 1e9, mc=migration_cost_fraction(p), adj=symmetric_traffic(p),
                       pairs_per_round=None, pair_budget_share=1.0, node_load=metrics.node_loads(p, p.current),
                       max_ld_band=band, order=order)


def test_goal_is_a_balanced_low_cut_partition_relabelled_to_keep_the_most_load_in_place():
    p = collocation_synthetic(4, 6, 4, one_to_one=0.0, topology="chain", max_migrations=None, seed=3)
    adj = symmetric_traffic(p)
    goal = balanced_target(p, adj)
    assert sorted(set(goal.tolist())) == [0, 1, 2, 3]
    # fully partitioned chain: grouping operators beats the random start
    assert metrics.collocation_factor(p, goal) > metrics.collocation_factor(p, p.current) + 0.05
    # the relabelling is the best of all 4! permutations of the parts (load kept in place)
    in_place = float(p.load[goal == p.current].sum())
    for perm in itertools.permutations(range(4)):
        other = np.asarray(perm)[goal]
        assert float(p.load[other == p.current].sum()) <= in_place + 1e-9


def test_goal_is_stable_under_load_drift():
    # METIS alone gives another partition after a ±2% drift (most key groups change part); the goal must not
    p = collocation_synthetic(20, 20, 10, one_to_one=0.5, topology="chain", max_migrations=20, seed=0)
    adj = symmetric_traffic(p)
    goal = balanced_target(p, adj)
    rng = np.random.default_rng(1)
    cur = p
    fresh_changes = []
    for _ in range(5):
        cur = drift_loads(cur, rng, cur.current)
        assert np.array_equal(balanced_target(cur, adj), goal)
        fresh = metis_parts(adj, 20, cur.load, ufactor=30)
        fresh_changes.append(int((fresh != metis_parts(adj, 20, p.load, ufactor=30)).sum()))
    assert max(fresh_changes) > 0  # the reason the partition is kept per graph


def test_target_moves_go_to_the_goal_within_the_budget():
    p = collocation_synthetic(10, 10, 5, one_to_one=0.0, topology="pairs", max_migrations=6, seed=2)
    goal = balanced_target(p, symmetric_traffic(p))
    u = _units(p)
    moved = np.flatnonzero(u.hint != p.current)
    assert 0 < moved.size <= 6 and metrics.within_budget(p, u.hint)
    pinned = [k for k in moved.tolist() if int(u.unit_of[k]) in u.allowed]
    assert pinned and all(u.hint[k] == goal[k] for k in pinned)
    assert metrics.collocation_factor(p, u.hint) > metrics.collocation_factor(p, p.current)


def _rounds(order, rounds=30):
    # the §5.3 size (40 nodes, 800 key groups, 20 migrations per round); on small instances (10 nodes) the goal,
    # ~90 % of the key groups away, is not reached in time and the gain order does as well
    p = collocation_synthetic(40, 20, 20, one_to_one=0.0, topology="pairs", max_migrations=20, seed=0)
    rng = np.random.default_rng(1)
    a, cur = p.current.copy(), p
    for r in range(rounds):
        cur = drift_loads(cur, rng, a) if r else cur
        a = registry.solve("albic", cur, time_limit=0.3, pair_order=order).assignment
        assert metrics.within_budget(cur, a)
    return metrics.collocation_factor(cur, a)


@pytest.mark.slow  # 30 rounds of two planners: a quality sweep (make test runs it)
def test_target_order_collocates_traffic_the_pair_scores_ignore_faster_than_the_gain_order(monkeypatch):
    # fully partitioned pipelines: no candidate pair scores; the goal's moves all go the same way across rounds
    # measured: 0.135 vs 0.088 after 30 rounds (bench_albic_collocation, pairs x=0). The deadlines count CPU
    # seconds: with wall seconds a machine shared with many tests skipped METIS and the goal (0.026 vs 0.031)
    from benchmarks.albic_milp_grid import cpu_clock

    cpu_clock(monkeypatch.setattr)
    assert _rounds("target") > _rounds("gain") + 0.02


def test_no_goal_without_traffic_or_on_very_large_instances(monkeypatch):
    import solvers.albic.collocation as col
    from solvers.model import Problem

    p = Problem.from_arrays([2.0] * 10, [0] * 7 + [1] * 3, np.ones(2), max_migrations=4)
    u = _units(p)  # no traffic: the goal order balances like the gain order
    assert np.bincount(u.hint, weights=p.load, minlength=2).tolist() == [10.0, 10.0]
    calls = []
    monkeypatch.setattr(col, "balanced_target", lambda *a, **k: calls.append(1) or a[0].current.copy())
    q = collocation_synthetic(4, 6, 4, one_to_one=0.0, topology="chain", max_migrations=5, seed=3)
    _units(q)
    assert calls == [1]
    monkeypatch.setattr(col, "FREE_MOVE_CELLS", q.n_key_groups * q.n_nodes - 1)
    _units(q)
    assert calls == [1]
