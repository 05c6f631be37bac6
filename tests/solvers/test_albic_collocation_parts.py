"""ALBIC collocation, steps 1–3 (scores, sets, METIS splitting, constrained pairs) — no MILP needed here."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import metrics
from solvers.albic.collocation import (
    build_units,
    collocated_sets,
    migration_cost_fraction,
    pair_scores,
    split_set,
)
from solvers.graph_partitioning import metis_parts, symmetric_traffic
from solvers.model import Problem


def _problem(load, current, n_nodes, edges, operator, max_migrations=None, state=None, ccost=0.0):
    m = len(load)
    r = [e[0] for e in edges]
    c = [e[1] for e in edges]
    v = [e[2] for e in edges]
    comm = sp.csr_matrix((v, (r, c)), shape=(m, m))
    return Problem.from_arrays(load, current, np.ones(n_nodes), comm=comm, operator=operator,
                               max_migrations=max_migrations, state_bytes=state, communication_cost=ccost)


# ------------------------------------------------------------------------------------------------ step 1
def test_scores_and_threshold_on_hand_made_graph():
    # A = {0, 1}, B = {2, 3, 4}, C = {5}; A sends to B only, B sends to C only.
    # a0: out 12 over |B| = 3 downstream → avg 4, threshold 6 → only (0,2) with 10 scores.
    # a1: 3,3,3 → avg 3, threshold 4.5 → nothing scores.
    # b-key groups send to C (1 downstream key group): avg = out, so out(b, c) = avg never exceeds 1.5·avg.
    edges = [(0, 2, 10.0), (0, 3, 1.0), (0, 4, 1.0), (1, 2, 3.0), (1, 3, 3.0), (1, 4, 3.0),
             (2, 5, 4.0), (3, 5, 4.0)]
    ops = ["A", "A", "B", "B", "B", "C"]
    p = _problem([1] * 6, [0, 1, 1, 0, 1, 0], 2, edges, ops)
    pr = pair_scores(p, 1.5)
    assert list(zip(pr.src.tolist(), pr.dst.tolist(), strict=False)) == [(0, 2)]
    assert pr.threshold[0] == pytest.approx(6.0)
    assert pr.collocated.tolist() == [False]  # 0 on node 0, 2 on node 1
    # sF = 0.5: thresholds 2 (a0) and 1.5 (a1); every a1 edge (3) and a0's 10 score; b→c (4 > 2) scores too
    pr = pair_scores(p, 0.5)
    got = set(zip(pr.src.tolist(), pr.dst.tolist(), strict=False))
    assert got == {(0, 2), (1, 2), (1, 3), (1, 4), (2, 5), (3, 5)}
    col = {(int(s), int(d)): bool(c) for s, d, c in zip(pr.src, pr.dst, pr.collocated, strict=False)}
    assert col[(1, 2)] and col[(1, 4)] and not col[(1, 3)] and col[(3, 5)] and not col[(2, 5)]


def test_scores_count_every_downstream_operator():
    # A = {0} sends to B = {1, 2} and C = {3, 4, 5}: 5 downstream key groups. out = 10 → avg 2, threshold 3.
    edges = [(0, 1, 3.5), (0, 2, 2.5), (0, 3, 2.0), (0, 4, 1.0), (0, 5, 1.0)]
    p = _problem([1] * 6, [0] * 6, 1, edges, ["A", "B", "B", "C", "C", "C"])
    pr = pair_scores(p, 1.5)
    assert pr.src.tolist() == [0] and pr.dst.tolist() == [1]
    assert pr.collocated.all()


def test_scores_without_communication():
    p = _problem([1, 2], [0, 1], 2, [], ["", ""])
    assert len(pair_scores(p)) == 0


# ------------------------------------------------------------------------------------------------ step 2
def test_sets_union_overlapping_pairs():
    src = np.array([0, 1, 5, 9, 3])
    dst = np.array([1, 2, 6, 8, 2])
    sets = collocated_sets(10, src, dst)
    assert [s.tolist() for s in sets] == [[0, 1, 2, 3], [5, 6], [8, 9]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 29), st.integers(0, 29)), max_size=40))
def test_sets_are_the_minimal_union(pairs):
    pairs = [(a, b) for a, b in pairs if a != b]
    src = np.array([a for a, _ in pairs], dtype=np.int64)
    dst = np.array([b for _, b in pairs], dtype=np.int64)
    sets = collocated_sets(30, src, dst)
    where = {}
    for i, s in enumerate(sets):
        for k in s.tolist():
            assert k not in where, "sets must be disjoint"
            where[k] = i
    for a, b in pairs:  # every pair inside one set
        assert where[a] == where[b]
    touched = {a for p in pairs for a in p}
    assert set(where) == touched
    for s in sets:  # minimal: each set is connected by its pairs (no split possible without breaking a pair)
        inside = set(s.tolist())
        reach = {int(s[0])}
        grew = True
        while grew:
            grew = False
            for a, b in pairs:
                if (a in reach) != (b in reach) and a in inside:
                    reach |= {a, b}
                    grew = True
        assert reach == inside


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(2, 60),
    max_pl=st.floats(1.0, 40.0),
    budget=st.one_of(st.none(), st.integers(1, 12)),
    seed=st.integers(0, 1000),
)
def test_parts_respect_both_caps(size, max_pl, budget, seed):
    rng = np.random.default_rng(seed)
    m = size + 5
    load = rng.uniform(0.1, 6.0, size=m)
    r = rng.integers(0, m, size=4 * m)
    c = rng.integers(0, m, size=4 * m)
    keep = r != c
    comm = sp.csr_matrix((rng.uniform(0.5, 5, size=keep.sum()), (r[keep], c[keep])), shape=(m, m))
    p = Problem.from_arrays(load, np.zeros(m, dtype=int), np.ones(2), comm=comm, max_migrations=budget)
    members = np.sort(rng.choice(m, size=size, replace=False))
    mc = migration_cost_fraction(p)
    parts = split_set(members, p.load, mc, symmetric_traffic(p), max_pl, seed=seed)
    allk = np.concatenate(parts)
    assert sorted(allk.tolist()) == members.tolist()  # a partition of the set
    for part in parts:
        if part.size >= 2:
            assert p.load[part].sum() <= max_pl * (1 + 1e-9)
            if budget is not None:
                assert part.size <= budget
    p1 = math.ceil(size / budget) if budget else 1
    p2 = math.ceil(p.load[members].sum() / max_pl - 1e-9)
    if p.load[members].max() <= max_pl:  # (a single key group above maxPL is a part of its own anyway)
        assert len(parts) >= min(size, max(p1, p2))


def test_split_keeps_heavy_traffic_together():
    # two cliques of 4 with heavy internal traffic and one light bridge; loads force 2 parts
    m = 8
    edges = []
    for block in (range(0, 4), range(4, 8)):
        for a in block:
            for b in block:
                if a < b:
                    edges.append((a, b, 100.0))
    edges.append((3, 4, 1.0))
    p = _problem([1.0] * m, [0] * m, 1, edges, [""] * m)
    parts = split_set(np.arange(m), p.load, None, symmetric_traffic(p), max_pl=4.0)
    assert sorted(sorted(x.tolist()) for x in parts) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_metis_split_of_10000_vertices_is_balanced():
    """40 parts of a 10,000-vertex graph within 10 % of the mean weight. How fast: `bench_albic_collocation`'s
    ``metis_split_10000_s`` (target 0.5 s) — a timed assertion here passed or failed with the machine's load."""
    rng = np.random.default_rng(1)
    n = 10_000
    r = rng.integers(0, n, size=30_000)
    c = rng.integers(0, n, size=30_000)
    keep = r != c
    a = sp.csr_matrix((rng.uniform(1, 10, keep.sum()), (r[keep], c[keep])), shape=(n, n))
    a = (a + a.T).tocsr()
    w = rng.uniform(1, 5, n)
    part = metis_parts(a, 40, w, seed=3)
    assert np.bincount(part).size == 40
    loads = np.bincount(part, weights=w)
    assert loads.max() <= 1.1 * loads.mean()


# ------------------------------------------------------------------------------------------------ step 3
def _pair_problem(current, loads=None, max_migrations=10):
    # operator A = {0, 1, 2}, B = {3, 4, 5}; i → i + 3 one-to-one with rates 30, 20, 10
    edges = [(0, 3, 30.0), (1, 4, 20.0), (2, 5, 10.0)]
    load = loads if loads is not None else [1.0] * 6
    return _problem(load, current, 3, edges, ["A"] * 3 + ["B"] * 3, max_migrations=max_migrations)


def _units(p, **kw):
    args = dict(mc=migration_cost_fraction(p), adj=symmetric_traffic(p), pairs_per_round=None,
                pair_budget_share=1.0, node_load=metrics.node_loads(p, p.current))
    args.update(kw)
    return build_units(p, pair_scores(p, 1.0), 1e9, **args)


def test_case1_pair_goes_to_the_less_loaded_node():
    # 0 on node 0 (loaded 5), 3 on node 1 (loaded 1): the pair is pinned to node 1, one move
    p = _pair_problem([0, 2, 2, 1, 2, 2], loads=[5.0, 1, 1, 1, 1, 1])
    u = _units(p, pairs_per_round=1)
    assert u.unit_of[0] == u.unit_of[3]
    assert u.allowed[int(u.unit_of[0])].tolist() == [1]
    assert u.hint[0] == 1 and u.hint[3] == 1
    assert u.moves_committed == 1 and [c for *_, c in u.pairs_added] == [1]


def test_case2_pair_joins_the_collocated_part():
    # A = {0,1,2}, B = {3,4,5}, C = {6,7}. 0 → 3 is collocated on node 0 (a set); 3 → 6 scores (50 > sF·51/2)
    # and 6 sits on the light node 1. Case 2: the pair goes to the node of the set, node 0, although it is heavier.
    edges = [(0, 3, 30.0), (3, 6, 50.0), (3, 7, 1.0)]
    p = _problem([9.0, 1, 1, 1, 1, 1, 0.5, 0.5], [0, 2, 2, 0, 2, 2, 1, 2], 3, edges,
                 ["A", "A", "A", "B", "B", "B", "C", "C"], max_migrations=10)
    u = _units(p)
    assert u.unit_of[0] == u.unit_of[3] == u.unit_of[6]
    assert u.allowed[int(u.unit_of[6])].tolist() == [0]
    assert [c for *_, c in u.pairs_added] == [2]
    assert u.moves_committed == 1 and u.hint[6] == 0


def test_case3_parts_merge_on_less_loaded_node_and_cost_the_moved_part():
    # sets {0,3} on node 0 and {1,4} on node 1 (both collocated); the heavy pair 3 → 4 joins the two sets
    edges = [(0, 3, 30.0), (1, 4, 30.0), (3, 4, 100.0)]
    ops = ["A", "A", "Z", "B", "B2", "Z"]
    # B → B2 has one downstream key group (avg = out), so it scores only with sF < 1: use sF = 0.5
    p = _problem([1.0, 1.0, 0.1, 1.0, 1.0, 0.1], [0, 1, 2, 0, 1, 2], 3, edges, ops, max_migrations=10)
    pr = pair_scores(p, 0.5)
    u = build_units(p, pr, 1e9, mc=migration_cost_fraction(p), adj=symmetric_traffic(p), pairs_per_round=None,
                    pair_budget_share=1.0, node_load=np.array([2.0, 5.0, 0.2]))
    assert len(set(u.unit_of[[0, 1, 3, 4]].tolist())) == 1
    assert u.allowed[int(u.unit_of[0])].tolist() == [0]   # node 0 is less loaded than node 1
    assert u.moves_committed == 2                           # the part {1, 4} moves
    assert [c for *_, c in u.pairs_added] == [3]


def test_pairs_fill_the_budget_best_first_and_pairs_per_round_limits():
    p = _pair_problem([0, 0, 0, 1, 1, 1], max_migrations=2)
    u = _units(p)
    assert [(a, b) for a, b, *_ in u.pairs_added] == [(0, 3), (1, 4)]  # 2 moves fit, highest rates first
    assert u.moves_committed == 2
    u1 = _units(p, pairs_per_round=1)
    assert [(a, b) for a, b, *_ in u1.pairs_added] == [(0, 3)]
    u0 = _units(p.with_budget(0, None))
    assert u0.pairs_added == [] and u0.moves_committed == 0
    half = _units(p.with_budget(4, None), pair_budget_share=0.5)
    assert half.moves_committed == 2


def test_no_pair_is_pinned_to_a_removing_node():
    p = Problem.from_arrays([1.0, 1.0], [0, 1], np.ones(2), removing=[True, False],
                            comm=sp.csr_matrix(([10.0], ([0], [1])), shape=(2, 2)), operator=["A", "B"],
                            max_migrations=5)
    u = build_units(p, pair_scores(p, 0.5), 1e9, mc=migration_cost_fraction(p), adj=symmetric_traffic(p),
                    pairs_per_round=None, pair_budget_share=1.0, node_load=np.array([0.0, 5.0]))
    assert u.allowed[int(u.unit_of[0])].tolist() == [1]  # node 0 is lighter but removing
