"""The §5.3 / §5.4 collocation scenarios used by the ALBIC collocation benchmark."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.collocation_scenarios import collocation_synthetic, drift_loads, real_job_2
from solvers import metrics
from solvers.albic.collocation import pair_scores
from solvers.errors import InvalidInput


@pytest.mark.parametrize("x", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("topology", ["chain", "pairs"])
def test_one_to_one_share_bounds_the_collocation(x, topology):
    p = collocation_synthetic(20, 20, 10, one_to_one=x, topology=topology, seed=4)
    src, dst, rate = p.edges()
    # a sender is one-to-one when it has exactly one out-edge
    out_deg = np.bincount(src, minlength=p.n_key_groups)
    senders = np.flatnonzero(out_deg > 0)
    share = np.mean(out_deg[senders] == 1)
    assert share == pytest.approx(x, abs=0.03)
    # the pairs scored by ALBIC step 1 are exactly the one-to-one edges
    pr = pair_scores(p, 1.5)
    assert len(pr) == int(np.sum(out_deg == 1))
    # rate = load, and communication_cost makes "all cut" add comm_share (0.25) of the load
    assert 2 * p.communication_cost * rate.sum() == pytest.approx(0.25 * p.load.sum())
    # x% one-to-one: putting every one-to-one pair together is worth about x of the traffic
    one = out_deg[src] == 1
    assert rate[one].sum() / rate.sum() == pytest.approx(x, abs=0.05)


def test_synthetic_rejects_bad_input():
    with pytest.raises(InvalidInput):
        collocation_synthetic(4, 5, 2, one_to_one=1.5)
    with pytest.raises(InvalidInput):
        collocation_synthetic(4, 5, 2, topology="star")


def test_drift_changes_twenty_percent_of_nodes_by_at_most_two_percent():
    p = collocation_synthetic(40, 20, 20, one_to_one=0.5, seed=1)
    rng = np.random.default_rng(0)
    q = drift_loads(p, rng)
    before = np.bincount(p.current, weights=p.load, minlength=p.n_nodes)
    after = np.bincount(q.current, weights=q.load, minlength=q.n_nodes)
    ratio = after / before
    changed = np.flatnonzero(~np.isclose(ratio, 1.0, rtol=0, atol=1e-12))
    assert len(changed) == 8
    assert np.all(np.abs(ratio - 1) <= 0.02 + 1e-12)
    # key groups of a drawn node share one factor
    for i in changed:
        kgs = np.flatnonzero(p.current == i)
        np.testing.assert_allclose(q.load[kgs] / p.load[kgs], ratio[i])


def test_real_job_2_starts_at_the_worst_allocation_and_can_halve_its_load():
    p = real_job_2(20, 5, seed=2)
    assert p.n_key_groups == 200 and p.max_migrations == 10
    assert metrics.collocation_factor(p, p.current) == 0.0
    per_node = np.bincount(p.current, minlength=20)
    assert np.all(per_node == 10)
    ops = np.array(p.operator)
    for i in range(20):
        on = p.current == i
        assert (ops[on] == "extract").sum() == 5
    perfect = p.current.copy()
    perfect[100:] = p.current[:100]  # every sum/i next to extract/i
    total0 = metrics.node_loads(p, p.current).sum()
    total1 = metrics.node_loads(p, perfect).sum()
    assert total1 == pytest.approx(total0 / 2)


def test_budget_bound_of_a_path():
    # a → b → c on three nodes, one-to-one rates 2 and 1 (operators of two key groups, so both edges score):
    # 0 moves collocate nothing, 1 move the heavier edge, 2 moves both
    import scipy.sparse as sp

    from benchmarks.bench_albic_collocation import budget_bound
    from solvers.model import Problem

    comm = sp.csr_matrix(([2.0, 1.0], ([0, 1], [1, 2])), shape=(6, 6))
    p = Problem.from_arrays([1.0] * 6, [0, 1, 2, 0, 1, 2], [1.0] * 3, comm=comm,
                            operator=["A", "B", "C", "A", "B", "C"])
    assert [budget_bound(p, b)["scored_cf_max"] for b in (0, 1, 2)] == [0.0, round(2 / 3, 5), 1.0]
