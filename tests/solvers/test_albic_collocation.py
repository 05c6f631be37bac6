"""ALBIC collocation end to end (Algorithm 2 with the MILP of solvers.albic.milp): pairs end together, the retry
loop lowers maxPL and stops, every round keeps the budget, collocation grows over rounds."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.collocation_scenarios import collocation_synthetic, drift_loads, real_job_2
from solvers import metrics, registry
from solvers.errors import InvalidInput
from solvers.model import Problem

TL = 0.25


def _small(x=1.0, topology="pairs", seed=3, budget=6):
    return collocation_synthetic(8, 10, 4, one_to_one=x, topology=topology, max_migrations=budget, seed=seed,
                                 varies=0.2)


def test_constrained_pairs_end_on_one_node_within_budget():
    p = _small()
    plan = registry.solve("albic", p, time_limit=TL)
    a = plan.assignment
    idx = {kid: k for k, kid in enumerate(p.kg_ids)}
    new = plan.details["new_pairs"]
    assert new, "an all one-to-one instance must offer pairs to collocate"
    for gi, gj, _node, case in new:
        assert a[idx[gi]] == a[idx[gj]], (gi, gj)
        assert case in (1, 2, 3)
    for unit in plan.details["units"]:  # every unit handed to the MILP ends on one node
        assert len({int(a[idx[k]]) for k in unit}) == 1
    assert metrics.migrations(p, a) <= p.max_migrations
    assert metrics.collocation_factor(p, a) > metrics.collocation_factor(p, p.current)


def test_pairs_per_round_one_reproduces_the_paper():
    p = _small()
    plan = registry.solve("albic", p, time_limit=TL, pairs_per_round=1)
    assert len(plan.details["new_pairs"]) <= 1
    plan0 = registry.solve("albic", p, time_limit=TL, pairs_per_round=0)
    assert plan0.details["new_pairs"] == []


@pytest.mark.slow  # every level of the retry loop, up to 5 s of solving
def test_retry_loop_lowers_max_pl_and_terminates():
    p = _small()
    # maxLD = 0 cannot be met: every level is tried, maxPL falls by stepPL down to 0 (the pure MILP), then stop
    plan = registry.solve("albic", p, time_limit=5.0, max_ld=0.0, max_pl=25.0, step_pl=10.0)
    levels = [att["max_pl"] for att in plan.details["attempts"]]
    assert levels == [25.0, 15.0, 5.0, 0.0]
    assert plan.details["attempts"][-1]["new_pairs"] == 0  # maxPL = 0: no pairs, every key group its own unit
    assert plan.details["attempts"][-1]["units"] == p.n_key_groups
    # the returned plan is the best attempt
    best = min(att["load_distance_pct"] for att in plan.details["attempts"])
    assert plan.details["load_distance_pct"] == pytest.approx(best)


def test_retry_stops_at_the_first_level_within_max_ld():
    p = _small()
    plan = registry.solve("albic", p, time_limit=2.0, max_ld=1000.0)
    assert [att["max_pl"] for att in plan.details["attempts"]] == [25.0]


@pytest.mark.slow  # six rounds of drifting loads
def test_every_round_respects_the_budget_and_collocation_grows():
    p = collocation_synthetic(10, 10, 5, one_to_one=0.6, topology="chain", max_migrations=5, seed=11)
    rng = np.random.default_rng(0)
    a = p.current.copy()
    cur = p
    cf = [metrics.collocation_factor(p, a)]
    for r in range(6):
        cur = drift_loads(cur, rng, a) if r else cur
        plan = registry.solve("albic", cur, time_limit=TL)  # the registry rejects a plan over budget
        a = plan.assignment
        assert metrics.migrations(cur, a) <= 5
        assert metrics.within_budget(cur, a)
        cf.append(metrics.collocation_factor(cur, a))
    assert cf[-1] > cf[0] + 0.1


def test_round_state_is_recoverable_from_the_problem_document():
    # a stateless caller (CLI) sends the problem document: the collocated sets come out the same
    p = _small(seed=5)
    plan1 = registry.solve("albic", p, time_limit=TL)
    q = p.with_current(plan1.assignment)
    q2 = Problem.from_dict(q.to_dict())
    d1 = registry.solve("albic", q, time_limit=TL).details
    d2 = registry.solve("albic", q2, time_limit=TL).details
    assert d1["collocated_pairs"] == d2["collocated_pairs"] > 0
    assert d1["sets"] == d2["sets"]
    assert d1["candidate_pairs"] == d2["candidate_pairs"]


def test_real_job_2_load_index_falls():
    # 50 pairs split over 10 nodes, 6 migrations per round: collocation must cut the total load steadily
    p = real_job_2(10, 5, max_migrations=6, seed=2)
    total0 = metrics.node_loads(p, p.current).sum()
    a = p.current.copy()
    for _ in range(10):
        cur = p.with_current(a)
        a = registry.solve("albic", cur, time_limit=TL).assignment
        assert metrics.migrations(cur, a) <= 6
    assert metrics.node_loads(p, a).sum() / total0 < 0.7


def test_invalid_params_are_rejected():
    p = _small()
    with pytest.raises(InvalidInput):
        registry.solve("albic", p, time_limit=TL, pin="anywhere")
    with pytest.raises(InvalidInput):
        registry.solve("albic", p, time_limit=TL, step_pl=0)
    with pytest.raises(InvalidInput):
        registry.solve("albic", p, time_limit=TL, pair_budget_share=1.5)
