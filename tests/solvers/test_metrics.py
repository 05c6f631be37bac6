"""Metrics against hand-computed examples (docs/design.md "Metric definitions")."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import metrics
from solvers.model import Problem


def problem(**kw):
    # nodes: w0 cap 1, w1 cap 2, w2 cap 1 (removing)
    base = dict(load=[4.0, 2.0, 6.0, 3.0], current=[0, 0, 1, 2], capacity=[1.0, 2.0, 1.0],
                removing=[False, False, True], state_bytes=[10, 20, 30, 40])
    base.update(kw)
    return Problem.from_arrays(**base)


def test_node_loads_utilisation_target_and_distance():
    p = problem()
    loads = metrics.node_loads(p, p.current)
    np.testing.assert_allclose(loads, [6.0, 6.0, 3.0])
    # t = (6 + 6 + 3) / (1 + 2) = 5 ; u = [6, 3, (3)] ; distance over active = max(|6-5|, |3-5|) = 2
    assert metrics.target(p, loads) == pytest.approx(5.0)
    assert metrics.load_distance(p, p.current) == pytest.approx(2.0)
    assert metrics.load_on_removing(p, p.current) == pytest.approx(3.0)


def test_communication_cost_adds_to_both_endpoints_of_cut_edges():
    comm = sp.csr_matrix(([10.0, 4.0], ([0, 1], [2, 0])), shape=(4, 4))  # kg0->kg2 (cut), kg1->kg0 (same node)
    p = problem(comm=comm, communication_cost=0.5)
    loads = metrics.node_loads(p, p.current)
    # cut edge kg0(w0)->kg2(w1), rate 10, cost 0.5 -> +5 on w0 and +5 on w1
    np.testing.assert_allclose(loads, [11.0, 11.0, 3.0])
    # collocation factor: same-node rate 4 of total 14
    assert metrics.collocation_factor(p, p.current) == pytest.approx(4 / 14)
    # move kg2 to w0: no cut edges left
    a = np.array([0, 0, 0, 2])
    np.testing.assert_allclose(metrics.node_loads(p, a), [12.0, 0.0, 3.0])
    assert metrics.collocation_factor(p, a) == pytest.approx(1.0)


def test_collocation_factor_none_without_communication():
    assert metrics.collocation_factor(problem(), np.array([0, 0, 1, 2])) is None


def test_migrations_bytes_and_budget():
    p = problem(max_migrations=1, max_migration_bytes=25)
    a = np.array([1, 0, 1, 0])  # kg0 and kg3 move: bytes 10 + 40
    assert metrics.migrations(p, a) == 2
    assert metrics.migration_bytes(p, a) == 50
    assert not metrics.within_budget(p, a)
    assert metrics.within_budget(p, np.array([1, 0, 1, 2]))


def test_plan_metrics_block():
    p = problem()
    a = np.array([0, 1, 1, 0])  # drain w2 (kg3 -> w0), kg1 -> w1 : loads [7, 8, 0]
    m = metrics.plan_metrics(p, a)
    assert m["before"]["load_distance"] == pytest.approx(2.0)
    # t = 15/3 = 5; u = [7, 4] -> distance 2
    assert m["after"]["load_distance"] == pytest.approx(2.0)
    assert m["after"]["load_on_removing"] == 0.0
    assert m["migrations"] == 2 and m["migration_bytes"] == 60


def test_load_tracker_matches_full_recomputation():
    rng = np.random.default_rng(3)
    m, n = 60, 5
    comm = sp.random(m, m, density=0.1, random_state=4, format="csr") * 10
    p = Problem.from_arrays(rng.uniform(0, 5, m), rng.integers(0, n, m), rng.uniform(0.5, 2, n),
                            removing=[False] * 4 + [True], comm=comm, communication_cost=0.3,
                            state_bytes=rng.integers(0, 100, m))
    tr = metrics.LoadTracker(p)
    for _ in range(200):
        k, j = int(rng.integers(m)), int(rng.integers(n))
        tr.move(k, j)
        np.testing.assert_allclose(tr.loads, metrics.node_loads(p, tr.assignment), atol=1e-9)
        assert tr.moves == metrics.migrations(p, tr.assignment)
        assert tr.bytes == pytest.approx(metrics.migration_bytes(p, tr.assignment))
    assert tr.load_distance() == pytest.approx(metrics.load_distance(p, tr.assignment))
