"""``albic-milp`` with removing nodes: ``optimal`` means the lexicographic optimum of the drain objective
(``max(d, F)``, then the load left on removing nodes, then ``d``), checked by brute force.

The restarts are switched off in the sweeps (``no_restarts``), so that the status rests on the bound and the
exact models alone — the heuristics find the optimum often enough to hide a false proof.
"""

from __future__ import annotations

import numpy as np
import pytest

import solvers.albic.milp.phases as phases
from solvers import metrics, registry
from solvers.albic.milp.bounds import load_left_on_removing
from solvers.albic.milp.levels import full_levels
from solvers.albic.milp.state import Pool, State, drain_floor
from solvers.albic.milp.units import build_units
from solvers.model import Problem
from tests.solvers.albic_exact_reference import enumerate_plans, lexicographic_best, random_drain_problem

#: d = 3.2143 with 6.0 on the removing node w3 was once reported optimal; a plan of the same d drains it
FALSE_DRAIN_PROOF_CASE = dict(load=[0, 1, 13.25, 6, 5.5, 1.25], current=[0, 0, 0, 3, 0, 2], capacity=[0.5, 1, 2, 0.5],
                    removing=[False, False, False, True])


@pytest.fixture
def no_restarts(monkeypatch):
    monkeypatch.setattr(phases, "restarts", lambda run, end: None)


def lexicographic_check(p: Problem, time_limit: float) -> tuple[str, bool]:
    """(status, whether the plan is the lexicographic optimum); fails when ``optimal`` is claimed for a plan that is
    not."""
    _, d, on_b = enumerate_plans(p)
    on_b_now = p.removing[p.current]
    floor = float(p.load[on_b_now].max() / p.capacity[p.active].max()) if on_b_now.any() else 0.0
    t = metrics.target(p, metrics.node_loads(p, p.current))
    tol = 1e-6 * max(t, 1e-9) + 1e-9
    best = lexicographic_best(d, on_b, floor, tol)
    plan = registry.solve("albic-milp", p, time_limit=time_limit)
    a = plan.assignment
    dist = metrics.load_distance(p, a)
    got = (max(dist, floor), metrics.load_on_removing(p, a), dist)
    optimum = True
    for g, b in zip(got, best, strict=True):
        if g > b + tol:
            optimum = False
            break
        if g < b - tol:
            break
    if plan.status == "optimal":
        assert optimum, f"'optimal' plan {got}, lexicographic optimum {best} ({plan.details})"
    assert plan.lower_bound is not None and plan.lower_bound <= float(d.min()) + tol
    return plan.status, optimum


def test_full_levels_prove_the_issue_case():
    p = Problem.from_arrays(**FALSE_DRAIN_PROOF_CASE)
    units = build_units(p)
    t = float(units.load.sum() / p.capacity[p.active].sum())
    pool = Pool(units, drain_floor(units, p.current))
    state = State(units, p.current, t)
    _, bound, status, proven = full_levels(state, pool, 60.0, 1, 0, 1e-6 * t)
    assert status == "optimal" and proven and bound is not None and bound <= 3.2142857 + 1e-6
    a = units.assignment(pool.best[1])
    assert metrics.load_on_removing(p, a) == 0.0
    assert metrics.load_distance(p, a) == pytest.approx(3.2142857142857144)


def test_issue_case_is_optimal_only_with_the_removing_node_empty(no_restarts):
    p = Problem.from_arrays(**FALSE_DRAIN_PROOF_CASE)
    plan = registry.solve("albic-milp", p, time_limit=5.0)
    if plan.status == "optimal":   # the level-1 model alone finds d = 3.2143 with 6.0 on w3
        assert metrics.load_on_removing(p, plan.assignment) == 0.0
    lexicographic_check(p, 5.0)


def test_load_left_on_removing_is_a_lower_bound():
    # two key groups of 5 and 3 on the removing node, one migration: at least 3 stays
    p = Problem.from_arrays([5.0, 3.0, 1.0], [2, 2, 0], [1.0, 1.0, 1.0], removing=[False, False, True],
                            max_migrations=1)
    assert load_left_on_removing(p) == pytest.approx(3.0)
    _, _, on_b = enumerate_plans(p)
    assert on_b.min() == pytest.approx(3.0)


@pytest.mark.parametrize("start", range(0, 200, 100))
def test_optimal_means_the_lexicographic_optimum(no_restarts, start):
    for seed in range(start, start + 100):
        lexicographic_check(random_drain_problem(np.random.default_rng(seed)), 0.2)

# 2,000 more instances: the drain section of benchmarks/bench_albic_milp.py
