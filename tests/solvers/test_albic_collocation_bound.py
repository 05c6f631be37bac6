"""The `albic` planner reports a proven lower bound on the load distance, valid against an independent
exact model, and a grouped start that breaks a resource limit no longer leaves the search without a plan."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import metrics, registry
from tests.solvers.albic_exact_reference import exact_optimum, random_problem


@pytest.mark.parametrize("seed", range(12))
def test_albic_bound_is_valid_and_status_honest(seed: int) -> None:
    p = random_problem(np.random.default_rng(seed), comm=seed % 2 == 0)
    plan = registry.solve("albic", p, time_limit=0.5)
    d = metrics.load_distance(p, plan.assignment)
    assert plan.lower_bound is not None and plan.lower_bound <= d + 1e-9
    opt = exact_optimum(p)
    assert opt is not None
    t = metrics.target(p, metrics.node_loads(p, p.current))
    assert plan.lower_bound <= float(opt) + 1e-6 * max(t, 1e-9)
    if plan.status == "optimal":
        assert d <= float(opt) + 1e-6 * max(t, 1e-9)


def test_albic_with_resource_limits_plans_instead_of_crashing() -> None:
    # seed 3: an extra resource whose limits the grouped start breaks; solve_grouped asserted on an empty pool
    p = random_problem(np.random.default_rng(3), comm=True)
    assert p.resource_names
    plan = registry.solve("albic", p, time_limit=0.5)
    assert metrics.within_budget(p, plan.assignment)
