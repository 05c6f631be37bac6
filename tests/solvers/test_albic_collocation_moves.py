"""ALBIC step 3 with pair_order="gain" (solvers.albic.collocation_moves): the cheaper of a pair's two moves, moves
that also balance first, compensating swaps under a tight band, a balanced warm start, and more collocation per
round than the paper's order."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from evaluation.collocation_scenarios import collocation_synthetic, drift_loads
from solvers import metrics, registry
from solvers.albic.collocation import build_units, migration_cost_fraction, pair_scores
from solvers.graph_partitioning import symmetric_traffic
from solvers.model import Problem


def _problem(load, current, n_nodes, edges, operator, max_migrations=10):
    m = len(load)
    comm = sp.csr_matrix(([e[2] for e in edges], ([e[0] for e in edges], [e[1] for e in edges])), shape=(m, m))
    return Problem.from_arrays(load, current, np.ones(n_nodes), comm=comm, operator=operator,
                               max_migrations=max_migrations)


def _units(p, sf=1.5, order="gain", band=None):
    return build_units(p, pair_scores(p, sf), 1e9, mc=migration_cost_fraction(p), adj=symmetric_traffic(p),
                       pairs_per_round=None, pair_budget_share=1.0, node_load=metrics.node_loads(p, p.current),
                       max_ld_band=band, order=order)


def test_a_pair_moves_the_smaller_part():
    # sets {0,1,2} on node 0 and {3,4} on node 1 (chains of collocated pairs); the heavy pair 2 → 3 joins them.
    # The paper's case 3 merges on the less loaded node 1 and moves three key groups; two moves suffice.
    edges = [(0, 1, 10.0), (1, 2, 10.0), (2, 3, 50.0), (3, 4, 10.0)]
    p = _problem([1.1, 1.1, 1.1, 1.5, 1.5, 3.0], [0, 0, 0, 1, 1, 2], 3, edges, ["A", "B", "C", "D", "E", "Z"])
    paper = _units(p, sf=0.5, order="paper")
    assert paper.moves_committed == 3
    gain = _units(p, sf=0.5)
    assert gain.moves_committed == 2
    assert len(set(gain.unit_of[:5].tolist())) == 1
    assert gain.hint[:5].tolist() == [0] * 5


def test_moves_that_also_balance_go_first():
    # pair 0 → 1 runs from the overloaded node 0 to the underloaded node 1; pair 2 → 3 (more traffic) sits between
    # two balanced nodes. One migration: the paper's order takes the heavier pair, the gain order the balancing one.
    edges = [(0, 1, 10.0), (2, 3, 11.0)]
    ops = ["A", "B", "A", "B", "Z", "Z", "Z", "Z"]
    p = _problem([2, 2, 2, 2, 10, 6, 8, 8], [0, 1, 2, 3, 0, 1, 2, 3], 4, edges, ops, max_migrations=1)
    paper = _units(p, order="paper")
    assert [(a, b) for a, b, *_ in paper.pairs_added] == [(2, 3)]
    gain = _units(p)
    assert [(a, b, t) for a, b, t, _ in gain.pairs_added] == [(0, 1, 1)]
    assert gain.hint[0] == 1


def test_a_tight_band_takes_two_moves_that_compensate():
    # nodes 0 and 1 at the target; each single move shifts 20% of a node: only the swap keeps both in the band
    edges = [(0, 1, 10.0), (2, 3, 9.0)]
    p = _problem([2, 2, 2, 2, 6, 6], [0, 1, 1, 0, 0, 1], 2, edges, ["A", "B", "A", "B", "Z", "Z"])
    u = _units(p, band=0.05)
    assert len(u.pairs_added) == 2 and u.moves_committed == 2
    loads = np.bincount(u.hint, weights=p.load, minlength=2)
    assert loads.tolist() == [10.0, 10.0]
    assert u.hint[0] == u.hint[1] and u.hint[2] == u.hint[3]


def test_migrations_left_by_the_pairs_balance_the_warm_start():
    p = Problem.from_arrays([2.0] * 10, [0] * 7 + [1] * 3, np.ones(2), max_migrations=4)
    u = _units(p)
    assert u.moves_committed == 0 and u.allowed == {}
    assert np.bincount(u.hint, weights=p.load, minlength=2).tolist() == [10.0, 10.0]
    assert metrics.migrations(p, u.hint) == 2


def _rounds(order, rounds=8):
    p = collocation_synthetic(10, 10, 5, one_to_one=1.0, topology="chain", max_migrations=5, seed=11)
    rng = np.random.default_rng(0)
    a, cur = p.current.copy(), p
    for r in range(rounds):
        cur = drift_loads(cur, rng, a) if r else cur
        a = registry.solve("albic", cur, time_limit=0.25, pair_order=order).assignment
        assert metrics.within_budget(cur, a)
    return metrics.collocation_factor(cur, a), metrics.load_distance(cur, a) / metrics.target(
        cur, metrics.node_loads(cur, a))


def test_gain_order_collocates_more_per_round_than_the_paper_order(monkeypatch):
    # the deadlines count CPU seconds: with wall seconds a machine with 4 busy processes per core cut the gain
    # order's pairs short (collocation 0.52 against 0.64 idle, as CI saw once)
    from benchmarks.albic_milp_grid import cpu_clock

    cpu_clock(monkeypatch.setattr)
    cf_gain, ld_gain = _rounds("gain")
    cf_paper, _ = _rounds("paper")
    assert cf_gain > cf_paper + 0.05
    # balance holds up (band 10% of the target; the MILP's 0.25 s on a shared machine decides the rest)
    assert ld_gain <= 0.2


def test_single_key_groups_follow_traffic_the_pair_scores_ignore():
    # fully partitioned A → B (no pair scores: every edge is out/2 = avg); A0 on the heavy node 0 is better off
    # with both its receivers on node 1. Half the band (30% of t → 15%) admits one such move, not a second.
    edges = [(0, 2, 1.0), (0, 3, 1.0), (1, 2, 1.0), (1, 3, 1.0)]
    p = _problem([2, 2, 2, 2, 6, 2], [0, 0, 1, 1, 0, 1], 2, edges, ["A", "A", "B", "B", "Z", "Z"], max_migrations=4)
    assert len(pair_scores(p, 1.5)) == 0
    paper = _units(p, order="paper", band=0.3)
    assert paper.hint.tolist() == p.current.tolist()
    u = _units(p, band=0.3)
    assert u.pairs_added == [] and metrics.migrations(p, u.hint) == 1
    moved = int(np.flatnonzero(u.hint != p.current)[0])
    assert moved in (0, 1) and u.hint[moved] == 1
    assert u.allowed[int(u.unit_of[moved])].tolist() == [1]
    assert metrics.collocation_factor(p, u.hint) > metrics.collocation_factor(p, p.current)
