"""What-if scaling without a server (``solvers.scaling``): candidate clusters, rounds, the recommendation."""

from __future__ import annotations

import numpy as np
import pytest

from solvers import metrics, registry, scaling
from solvers.errors import InvalidInput
from solvers.model import Problem, plan_to_dict


def _problem(budget: int | None = None) -> Problem:
    # w0 holds 4 hot key groups, w1 and w2 one each: w0 is the hottest node
    kgs = [{"id": f"k{i}", "node": "w0", "load": 4.0, "state_bytes": 10} for i in range(4)]
    kgs += [{"id": "k4", "node": "w1", "load": 1.0, "state_bytes": 10},
            {"id": "k5", "node": "w2", "load": 1.0, "state_bytes": 10}]
    doc = {"nodes": [{"id": "w0"}, {"id": "w1"}, {"id": "w2"}], "key_groups": kgs}
    if budget is not None:
        doc["budget"] = {"max_migrations": budget}
    return Problem.from_dict(doc)


def test_size_candidates_add_nodes_with_mean_capacity_or_mark_the_coolest_removing():
    p = _problem()
    grow = scaling.variant(p, 0, 5)
    assert grow.added == ["new-0", "new-1"] and grow.removed == []
    assert grow.problem.n_nodes == 5 and grow.problem.max_migrations is None
    np.testing.assert_allclose(grow.problem.capacity, 1.0)
    shrink = scaling.variant(p, 1, 2)
    assert shrink.added == [] and len(shrink.removed) == 1 and shrink.removed[0] in ("w1", "w2")
    assert int(np.count_nonzero(~shrink.problem.removing)) == 2


def test_explicit_changes_and_their_errors():
    p = _problem()
    v = scaling.variant(p, 0, {"add": [{"id": "x", "capacity": 2.0}], "remove": ["w0"]})
    assert v.added == ["x"] and v.removed == ["w0"] and v.problem.capacity[-1] == 2.0
    with pytest.raises(InvalidInput) as e:
        scaling.variant(p, 3, {"add": ["w1"]})
    assert e.value.field == "candidates[3].add[0].id"
    with pytest.raises(InvalidInput) as e:
        scaling.variant(p, 1, {"remove": ["nope"]})
    assert e.value.field == "candidates[1].remove[0]"
    with pytest.raises(InvalidInput) as e:
        scaling.variant(p, 2, {"remove": ["w0", "w1", "w2"]})
    assert e.value.field == "candidates[2]"
    for bad in (0, True, "3", 1.5):
        with pytest.raises(InvalidInput):
            scaling.variant(p, 0, bad)


def test_rounds_needed():
    assert scaling.rounds_needed(0, 0, 3, None) == 0
    assert scaling.rounds_needed(7, 0, 3, None) == 3
    assert scaling.rounds_needed(7, 10.0, None, 4.0) == 3
    assert scaling.rounds_needed(2, 10.0, 5, 2.0) == 5
    assert scaling.rounds_needed(3, 0, 0, None) is None
    assert scaling.rounds_needed(3, 0, None, None) == 1


def test_recommendation_is_the_smallest_cluster_meeting_the_goal():
    cands = [{"nodes": 4, "meets_target": True, "load_distance": 0.1},
             {"nodes": 3, "meets_target": True, "load_distance": 0.3},
             {"nodes": 3, "meets_target": True, "load_distance": 0.2},
             {"nodes": 2, "meets_target": False, "load_distance": 0.0}]
    assert scaling.recommend(cands, [4.0, 3.0, 3.0, 2.0]) == 2
    assert scaling.recommend(cands, [4.0, 2.5, 3.0, 2.0]) == 1  # less capacity first
    assert scaling.recommend([dict(c, meets_target=False) for c in cands], [1.0] * 4) is None


def test_report_with_a_real_planner_counts_rounds_under_the_problems_budget():
    p = _problem(budget=1)
    cands = [3, 5]
    variants = [scaling.variant(p, j, c) for j, c in enumerate(cands)]
    plans = [plan_to_dict(v.problem, registry.solve("flux", v.problem, time_limit=2.0)) for v in variants]
    doc = scaling.report(p, cands, variants, plans, "flux", None, None)
    assert doc["current"] == metrics.state_metrics(p, p.current)
    for c in doc["candidates"]:
        assert c["rounds"] == c["migrations"]  # one migration per round
        assert c["migrations"] >= 1
    assert doc["recommendation"] is not None
    assert doc["recommended"] == doc["candidates"][doc["recommendation"]]
