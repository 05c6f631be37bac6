"""Proven bounds of ``albic-milp`` with communication costs (:mod:`solvers.albic.milp.comm_bounds`).

Checked against the independent exact model of :mod:`tests.solvers.albic_exact_reference`: every bound is ≤ the
exact optimum (validity), the exact cut model (one indicator per edge and node, value precedence between
interchangeable nodes, the budget through a permutation of each group) keeps the optimum, and instances where the
old bound stayed 0 now get a bound > 0.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import registry
from solvers.albic.milp.bounds import analytic_bound, proven_bound
from solvers.albic.milp.comm_bounds import comm_analytic_bound, comm_lemma2_bound, comm_proven_bound
from solvers.albic.milp.cpsat import solve_cpsat
from solvers.albic.milp.scaled import build, node_symmetry
from solvers.albic.milp.state import State
from solvers.albic.milp.units import build_units
from solvers.model import Problem
from tests.solvers.albic_exact_reference import BOUND_DEADLINE_S, SWEEP_WORK, exact_optimum, random_problem

#: the larger cases of a sweep against exact references: `make test` runs them, `make test-fast` the smallest
SWEEP = pytest.mark.slow


def _tol(opt: float) -> float:
    return 1e-6 * max(1.0, opt) + 1e-9


def _state(p: Problem) -> State:
    units = build_units(p)
    return State(units, p.current.copy(), float(units.load.sum() / p.capacity[p.active].sum()))


def _model_bound(p: Problem, seconds: float, perm_budget: bool) -> tuple[float, str, float]:
    """(bound, status, rounding tolerance) of the full cut model (with value precedence between nodes of one
    capacity and the budget through permutations, or only between nodes nobody lives on)."""
    s = _state(p)
    sm = build(s, np.arange(s.units.n_units), np.arange(p.n_nodes), relax=True, exact_comm=True,
               perm_budget=perm_budget)
    res = solve_cpsat(s, sm, seconds, workers=2)
    return float(res.d_bound or 0.0), res.status, sm.tol


@pytest.mark.parametrize("seed", [pytest.param(55, marks=SWEEP), pytest.param(494, marks=SWEEP), 566])
def test_bound_positive_where_the_exact_cut_model_alone_stayed_zero(seed):
    """Seeds of the exact benchmark (random_problem(seed)) where the old proven bound (the cut model with two
    indicators per edge side, no symmetry breaking) was 0 after 2 s: the symmetric model proves the optimum."""
    p = random_problem(np.random.default_rng(seed))
    assert p.communicates
    opt_f = exact_optimum(p, work=60.0)   # ~10 s on a busy machine
    if opt_f is None:
        pytest.skip("the exact reference did not prove the optimum in time")
    opt = float(opt_f)
    lb = comm_proven_bound(p, seconds=BOUND_DEADLINE_S)
    assert 0 < lb <= opt + _tol(opt)
    assert proven_bound(p, seconds=BOUND_DEADLINE_S) > 0


def test_lemma2_with_communication_costs():
    """A removing node that cannot be emptied (one migration for two key groups) keeps the load of a key group;
    cut costs only add to it, so ``d ≥ load left on B / Σ active capacities`` whatever the cut. The old
    communication bound was 0 here."""
    load = np.array([30.0, 30.0, 30.0, 30.0, 40.0, 40.0])
    current = np.array([0, 0, 1, 1, 2, 2])
    comm = sp.csr_matrix((np.array([5.0, 5.0, 3.0]), (np.array([0, 1, 4]), np.array([2, 3, 0]))), shape=(6, 6))
    p = Problem.from_arrays(load, current, np.ones(3), removing=np.array([False, False, True]),
                            state_bytes=np.ones(6), max_migrations=1, comm=comm, communication_cost=1.0)
    lb = analytic_bound(p)
    assert lb == pytest.approx(40.0 / 2.0, rel=1e-6)
    assert comm_lemma2_bound(p) == pytest.approx(lb)
    opt = float(exact_optimum(p, work=10.0))
    assert lb <= opt + _tol(opt)
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    assert plan.lower_bound is not None and plan.lower_bound >= lb - 1e-9
    # no migration allowed at all: the current assignment is the only plan, its distance the optimum
    frozen = p.with_budget(0, None)
    assert analytic_bound(frozen) == pytest.approx(float(exact_optimum(frozen, work=10.0)), rel=1e-8)
    assert analytic_bound(p.with_budget(None, 0.5)) == pytest.approx(analytic_bound(frozen))  # every kg has 1 byte


def _check_valid(seed: int) -> tuple[float, float] | None:
    p = random_problem(np.random.default_rng(seed), comm=True)
    opt_f = exact_optimum(p, work=SWEEP_WORK)
    if opt_f is None:
        return None
    opt = float(opt_f)
    assert comm_analytic_bound(p) <= opt + _tol(opt)
    lb = comm_proven_bound(p, seconds=BOUND_DEADLINE_S)
    assert lb <= opt + _tol(opt), (seed, lb, opt)
    # both forms of the exact cut model keep the optimum: when proved, their bound is the optimum up to the
    # utilisation rounding of the scaled model
    for perm in (True, False):
        full, st, tol = _model_bound(p, 3.0, perm_budget=perm)
        assert full <= opt + _tol(opt), (seed, perm, full, opt)
        if st == "optimal":
            assert full >= opt - 2 * tol - _tol(opt), (seed, perm, full, opt)
    return lb, opt


@pytest.mark.parametrize("seed", range(1000, 1006))
def test_comm_bounds_are_valid_against_the_exact_reference(seed):
    _check_valid(seed)


@pytest.mark.slow  # with the bench's exact section (python -m benchmarks.bench_albic_milp --only exact)
def test_comm_bounds_are_valid_against_the_exact_reference_many():
    positive = proved = 0
    for seed in range(2000, 2020):
        r = _check_valid(seed)
        if r is None:
            continue
        proved += r[1] > 1e-9
        positive += r[1] > 1e-9 and r[0] > 0
    assert positive >= 0.8 * proved


def test_node_symmetry_groups_only_identical_nodes():
    """Nodes of one capacity are interchangeable when the budget goes through permutations; otherwise only nodes
    nobody lives on."""
    load = np.array([10.0, 20.0, 30.0, 40.0])
    current = np.array([0, 0, 1, 2])
    comm = sp.csr_matrix((np.array([1.0]), (np.array([0]), np.array([3]))), shape=(4, 4))
    p = Problem.from_arrays(load, current, np.array([1.0, 1.0, 1.0, 1.0, 2.0, 1.0]), max_migrations=2,
                            comm=comm, communication_cost=1.0)
    s = _state(p)
    all_u, all_n = np.arange(s.units.n_units), np.arange(p.n_nodes)
    sym = build(s, all_u, all_n, relax=True, exact_comm=True).sym
    assert [g.tolist() for g in sym or []] == [[3, 5]]
    perm = build(s, all_u, all_n, relax=True, exact_comm=True, perm_budget=True)
    assert perm.perm and [g.tolist() for g in perm.sym or []] == [[0, 1, 2, 3, 5]]
    assert [g.tolist() for g in node_symmetry(perm, p.active)] == [[3, 5]]


@pytest.mark.parametrize("seed", [40, pytest.param(174, marks=SWEEP)])
def test_budget_through_permutations_gives_real_optimal_plans(seed):
    """Budget-bound instances with interchangeable nodes (seed 174: 4 nodes, 14 key groups, 5 migrations, where
    the old model proved nothing in 3 s): the model's canonical labelling is mapped back through the permutation,
    and the plan keeps the real budget and reaches the exact optimum."""
    from solvers import metrics
    from solvers.albic.milp.comm_bounds import cut_model
    from solvers.albic.milp.state import Pool
    p = random_problem(np.random.default_rng(seed))
    opt_f = exact_optimum(p, work=60.0)   # seed 174: ~5 s for the single-worker reference, more under load
    if opt_f is None:
        pytest.skip("the exact reference did not prove the optimum in time")
    opt = float(opt_f)
    state = _state(p)
    pool = Pool(state.units, 0.0)
    _, bound, status = cut_model(state, pool, 10.0)
    assert bound is not None and bound <= opt + _tol(opt)
    assert pool.best is not None and pool.best[2] == "milp"   # the model's plan keeps the real budget
    a = state.units.assignment(pool.best[1])
    assert metrics.within_budget(p, a)
    if status == "optimal":
        assert bound >= opt - 1e-4 * opt
        assert metrics.load_distance(p, a) == pytest.approx(opt, rel=1e-6, abs=1e-9)
