"""COLA baseline: balanced graph partitioning from scratch, parts mapped to keep key groups in place."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from evaluation.collocation_scenarios import collocation_synthetic, real_job_2
from solvers import metrics, registry
from solvers.baselines.cola import map_parts_to_nodes
from solvers.model import Problem


def test_cola_ignores_budget_and_reports_moves():
    p = real_job_2(nodes=6, key_groups_per_operator_per_node=3, max_migrations=2, seed=3)
    plan = registry.solve("cola", p)  # the registry would reject a budget breach without ignores_budget
    assert plan.details["ignores_budget"] is True
    moved = metrics.migrations(p, plan.assignment)
    assert plan.details["migrations"] == moved
    assert moved > p.max_migrations
    # perfect collocation is available and balanced enough: the one-to-one pairs end together
    assert metrics.collocation_factor(p, plan.assignment) >= 0.9
    before = metrics.node_loads(p, p.current).sum()
    after = metrics.node_loads(p, plan.assignment).sum()
    assert after < 0.6 * before


def test_cola_balances_within_max_ld_when_possible():
    p = collocation_synthetic(nodes=10, key_groups_per_node=20, operators=10, one_to_one=0.5, seed=2)
    plan = registry.solve("cola", p)
    ld = metrics.load_distance(p, plan.assignment)
    t = metrics.target(p, metrics.node_loads(p, plan.assignment))
    assert 100 * ld / t <= 10.0 + 1e-9
    assert metrics.collocation_factor(p, plan.assignment) > metrics.collocation_factor(p, p.current)
    assert not np.any(p.removing[plan.assignment])


def test_cola_keeps_a_good_placement_in_place():
    # 4 nodes × 2 key groups, each pair i ↔ i+4 talks heavily and already shares a node: nothing should move
    m = 8
    current = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    comm = sp.csr_matrix((np.full(4, 50.0), (np.arange(4), np.arange(4) + 4)), shape=(m, m))
    p = Problem.from_arrays(np.ones(m), current, np.ones(4), comm=comm, operator=["A"] * 4 + ["B"] * 4,
                            communication_cost=0.1)
    plan = registry.solve("cola", p)
    assert metrics.migrations(p, plan.assignment) == 0


def test_map_parts_to_nodes_maximises_overlap():
    p = Problem.from_arrays(np.ones(6), [0, 0, 1, 1, 2, 2], np.ones(3))
    part = np.array([2, 2, 0, 0, 1, 1])  # part 2 is on node 0, part 0 on node 1, part 1 on node 2
    a = map_parts_to_nodes(p, part, np.arange(3))
    assert a.tolist() == [0, 0, 1, 1, 2, 2]


def test_cola_never_uses_removing_nodes():
    p = collocation_synthetic(nodes=6, key_groups_per_node=10, operators=6, one_to_one=1.0, seed=5)
    import dataclasses

    rem = np.zeros(6, dtype=bool)
    rem[0] = True
    p = dataclasses.replace(p, removing=rem)
    plan = registry.solve("cola", p)
    assert not np.any(plan.assignment == 0)
