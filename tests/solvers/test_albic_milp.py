"""Tests of the ALBIC MILP planner: optimum by enumeration, budgets, removing nodes, bounds, params."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluation.generators import albic_synthetic, skewed
from solvers import metrics, registry
from solvers.albic.milp import solve_grouped
from solvers.albic.milp.bounds import analytic_bound
from solvers.errors import InvalidInput
from solvers.model import Problem


# ---------------------------------------------------------------------- brute force
def enumerate_optimum(p: Problem, unit_of: np.ndarray | None = None, allowed: dict | None = None) -> float:
    """Smallest load distance over every assignment within the budget (units on one node, nothing moved onto a
    removing node) — by enumeration, independent of the planner."""
    return enumerate_best(p, unit_of, allowed)[2]


def enumerate_best(p: Problem, unit_of: np.ndarray | None = None, allowed: dict | None = None,
                   floor: float = 0.0) -> tuple[float, float, float]:
    """Best (max(d, floor), load on removing nodes, d) by enumeration: the planner's objective with the drain
    floor ``floor`` (floor 0 = the paper's objective, distance only)."""
    m, n = p.n_key_groups, p.n_nodes
    of = np.arange(m) if unit_of is None else np.unique(unit_of, return_inverse=True)[1]
    U = int(of.max()) + 1
    best = (np.inf, np.inf, np.inf)
    for place in itertools.product(range(n), repeat=U):
        place = np.array(place)
        if allowed and any(place[u] not in allowed[u] for u in allowed):
            continue
        a = place[of]
        moved = a != p.current
        if np.any(p.removing[a[moved]]):
            continue
        if not metrics.within_budget(p, a):
            continue
        d = metrics.load_distance(p, a)
        best = min(best, (round(max(d, floor), 9), round(metrics.load_on_removing(p, a), 9), d))
    return best


def drain_floor_of(p: Problem) -> float:
    on_b = p.removing[p.current]
    return float(p.load[on_b].max() / p.capacity[p.active].max()) if on_b.any() else 0.0


def check_plan(p: Problem, a: np.ndarray) -> None:
    assert metrics.within_budget(p, a)
    moved = a != p.current
    assert not np.any(p.removing[a[moved]]), "a key group was moved onto a removing node"


@st.composite
def small_problems(draw):
    n = draw(st.integers(2, 4))
    m = draw(st.integers(2, 7 if n <= 3 else 6))
    load = draw(st.lists(st.floats(0.0, 20.0, allow_nan=False), min_size=m, max_size=m))
    current = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    capacity = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n, max_size=n))
    removing = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if all(removing):
        removing[0] = False
    state = draw(st.lists(st.integers(0, 5), min_size=m, max_size=m))
    mm = draw(st.one_of(st.none(), st.integers(0, 3)))
    mb = draw(st.one_of(st.none(), st.integers(0, 8)))
    return Problem.from_arrays(load, current, capacity, removing=removing, state_bytes=state, max_migrations=mm,
                               max_migration_bytes=mb)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_finds_enumerated_optimum_and_bound_is_valid(p):
    t = metrics.target(p, metrics.node_loads(p, p.current))
    tol = 1e-6 * max(t, 1e-9)
    # the paper's objective (drain=False): the smallest load distance
    plan = registry.solve("albic-milp", p, time_limit=2.0, drain=False)
    a = plan.assignment
    check_plan(p, a)
    opt = enumerate_optimum(p)
    d = metrics.load_distance(p, a)
    assert d <= opt + tol, f"planner {d} > optimum {opt}"
    assert plan.lower_bound is not None and plan.lower_bound <= opt + tol
    assert plan.lower_bound <= d + tol
    assert d <= metrics.load_distance(p, p.current) + 1e-9  # never worse than doing nothing
    assert plan.status == "optimal"
    # default (drain floor): the lexicographic optimum (max(d, floor), load on removing nodes, d)
    floor = drain_floor_of(p)
    plan = registry.solve("albic-milp", p, time_limit=2.0)
    a = plan.assignment
    check_plan(p, a)
    best = enumerate_best(p, floor=floor)
    d = metrics.load_distance(p, a)
    got = (max(d, floor), metrics.load_on_removing(p, a), d)
    assert got[0] <= best[0] + tol
    if got[0] >= best[0] - tol:
        assert got[1] <= best[1] + tol
        if got[1] >= best[1] - tol:
            assert got[2] <= best[2] + tol
    assert plan.lower_bound <= d + tol and plan.lower_bound <= opt + tol


def test_synthetic_small_matches_enumeration_and_beats_current():
    # 3 nodes × 3 key groups, one hot node: the optimum needs the right pair of moves
    p = Problem.from_arrays([9, 8, 7, 1, 1, 1, 2, 2, 1], [0, 0, 0, 1, 1, 1, 2, 2, 2], [1, 1, 1], max_migrations=2)
    plan = registry.solve("albic-milp", p, time_limit=2.0)
    assert metrics.load_distance(p, plan.assignment) == pytest.approx(enumerate_optimum(p), abs=1e-6)
    assert metrics.migrations(p, plan.assignment) <= 2


@pytest.mark.parametrize("seed", [0, 5, 2**40])  # 5, 2**40: CBC's own seed set (randomCbcSeed, folded)
def test_cbc_backend_finds_optimum(seed):
    p = Problem.from_arrays([6, 5, 4, 3, 1, 1], [0, 0, 0, 0, 1, 2], [1, 1, 1], max_migrations=2)
    plan = registry.solve("albic-milp", p, time_limit=3.0, backend="cbc", seed=seed)
    check_plan(p, plan.assignment)
    assert metrics.load_distance(p, plan.assignment) == pytest.approx(enumerate_optimum(p), abs=1e-6)


# ---------------------------------------------------------------------- budgets and removing nodes
@pytest.mark.parametrize("mm,mb", [(5, None), (None, 3 * (1 << 20)), (7, 4 * (1 << 20)), (0, None)])
def test_budgets_never_exceeded_on_synthetic(mm, mb):
    p = albic_synthetic(20, varies=0.5, seed=3, max_migrations=mm)
    p = p.with_budget(mm, mb)
    plan = registry.solve("albic-milp", p, time_limit=0.5)
    check_plan(p, plan.assignment)
    if mm == 0:
        assert np.array_equal(plan.assignment, p.current)
    assert plan.lower_bound <= metrics.load_distance(p, plan.assignment) + 1e-9


def test_removing_nodes_drain_and_nothing_moves_onto_them():
    p = skewed(12, 240, zipf=0.3, removing=3, seed=4, max_migrations=1000)
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    check_plan(p, plan.assignment)
    assert metrics.load_on_removing(p, plan.assignment) == 0.0  # Lemma 2: the budget allows, so B is empty


def test_drain_is_gradual_within_budget_and_beats_non_integrated_on_overload():
    base = albic_synthetic(20, varies=0.0, seed=0)
    load = base.load.copy()
    load[base.current == 0] *= 2.0  # one overloaded node
    removing = np.zeros(20, dtype=bool)
    removing[-4:] = True
    p = Problem.from_arrays(load, base.current, np.ones(20), removing=removing, max_migrations=10)
    integ = registry.solve("albic-milp", p, time_limit=0.5)
    base_plan = registry.solve("drain-then-balance", p, time_limit=0.5)
    for a in (integ.assignment, base_plan.assignment):
        check_plan(p, a)
        assert metrics.migrations(p, a) <= 10
    # the baseline spends the whole round on draining, the integrated plan also relieves the hot node
    assert np.all(p.removing[p.current[base_plan.assignment != p.current]])
    assert metrics.load_distance(p, integ.assignment) < metrics.load_distance(p, base_plan.assignment)


def test_lower_bound_is_exact_when_the_budget_binds():
    # 2 hot nodes each need a move out, 2 cold nodes each a move in; one migration cannot fix both sides
    p = Problem.from_arrays([10, 10, 10, 10, 0.5, 0.5], [0, 0, 1, 1, 2, 3], [1] * 4, max_migrations=1)
    lb = analytic_bound(p)
    opt = enumerate_optimum(p)
    assert lb == pytest.approx(opt, abs=1e-6)
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    assert metrics.load_distance(p, plan.assignment) == pytest.approx(opt, abs=1e-6)
    assert plan.status == "optimal"


def test_heterogeneous_capacities_balance_utilisation():
    p = Problem.from_arrays([3] * 8, [0] * 8, [2.0, 1.0, 1.0])
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    u = metrics.node_loads(p, plan.assignment) / p.capacity
    assert np.allclose(u, 6.0)  # 12 / 6 / 6 is exact: utilisation 6 everywhere
    assert plan.status == "optimal" and plan.lower_bound == pytest.approx(0.0, abs=1e-9)


def test_multi_dimensional_limits_respected():
    doc = {
        "nodes": [{"id": "a", "limits": {"mem": 10}}, {"id": "b", "limits": {"mem": 3}}, {"id": "c"}],
        "key_groups": [{"id": f"k{i}", "node": "a", "load": 5, "resources": {"mem": 2}} for i in range(6)],
    }
    p = Problem.from_dict(doc)
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    mem = np.bincount(plan.assignment, weights=p.resource_load[:, 0], minlength=3)
    assert mem[1] <= 3 + 1e-9 and mem[0] <= max(10, 12)
    assert metrics.load_distance(p, plan.assignment) < metrics.load_distance(p, p.current)


# ---------------------------------------------------------------------- grouped (the planner on grouped units)
def test_grouped_units_move_together_and_pay_for_spread_members():
    p = Problem.from_arrays([5, 5, 5, 1, 1, 1, 6, 1], [0, 0, 0, 1, 1, 2, 2, 2], [1, 1, 1], max_migrations=3)
    unit_of = np.array([0, 0, 1, 2, 3, 4, 5, 2])  # unit 2 = kg3 (node 1) + kg7 (node 2): to be collocated
    plan = solve_grouped(p, unit_of=unit_of, time_limit=2.0)
    a = plan.assignment
    assert a[0] == a[1] and a[3] == a[7]
    check_plan(p, a)
    opt = enumerate_optimum(p, unit_of)
    assert metrics.load_distance(p, a) == pytest.approx(opt, abs=1e-6)
    assert plan.lower_bound <= opt + 1e-6


def test_grouped_allowed_nodes_and_hint():
    p = albic_synthetic(6, key_groups_per_node=4, varies=0.5, seed=2, max_migrations=4)
    unit_of = np.arange(p.n_key_groups) // 2
    allowed = {0: np.array([0, 5]), 3: np.array([1])}
    plan = solve_grouped(p, unit_of=unit_of, allowed=allowed, time_limit=1.0, hint=p.current)
    a = plan.assignment
    for u in range(unit_of.max() + 1):
        assert len(set(a[unit_of == u].tolist())) == 1
    assert a[0] in (0, 5) and a[6] == 1
    check_plan(p, a)
    assert plan.lower_bound <= metrics.load_distance(p, a) + 1e-9


def test_grouped_split_when_collocation_exceeds_budget():
    p = Problem.from_arrays([1, 1, 1, 1], [0, 1, 2, 0], [1, 1, 1], max_migrations=1)
    unit_of = np.array([0, 0, 0, 1])  # unit 0 spread over three nodes: needs 2 migrations
    plan = solve_grouped(p, unit_of=unit_of, time_limit=0.5)
    check_plan(p, plan.assignment)
    assert plan.details.get("split_units")


def test_communication_cost_evaluated_exactly_with_a_valid_bound():
    p = albic_synthetic(5, key_groups_per_node=4, varies=0.5, seed=1, max_migrations=3)
    rng = np.random.default_rng(0)
    src = rng.integers(0, p.n_key_groups, 30)
    dst = rng.integers(0, p.n_key_groups, 30)
    comm = sp.csr_matrix((rng.uniform(0, 5, 30), (src, dst)), shape=(p.n_key_groups,) * 2)
    p = Problem.from_arrays(p.load, p.current, p.capacity, comm=comm, communication_cost=0.2, max_migrations=3)
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    check_plan(p, plan.assignment)
    d = metrics.load_distance(p, plan.assignment)
    assert 0.0 <= plan.lower_bound <= d + 1e-9  # exact cut model: a real bound (validity: test_albic_milp_exact)
    assert d <= metrics.load_distance(p, p.current) + 1e-9


# ---------------------------------------------------------------------- quality and time on the paper's grid
def test_better_than_flux_on_a_paper_instance():
    """Within its 1 s limit, never worse than Flux. Whether the limit is kept is measured where the machine's speed
    is known, by ``bench_albic_milp`` (wall ≤ 1.1 T, quiet and under load): a timed assertion here is a test that
    passes or fails with the machine's load."""
    p = albic_synthetic(40, varies=0.3, seed=1, max_migrations=20)
    flux = registry.solve("flux", p, time_limit=1.0)
    plan = registry.solve("albic-milp", p, time_limit=1.0)
    assert metrics.load_distance(p, plan.assignment) <= metrics.load_distance(p, flux.assignment) + 1e-9
    assert plan.lower_bound <= metrics.load_distance(p, plan.assignment)


# ---------------------------------------------------------------------- invalid input
def test_invalid_parameters_raise_clear_errors():
    p = albic_synthetic(4, key_groups_per_node=3, seed=0, max_migrations=2)
    # registry.solve trusts its time limit: the API's contract and the CLI's options check it where it comes in
    with pytest.raises(InvalidInput, match="backend"):
        registry.solve("albic-milp", p, time_limit=1.0, backend="gurobi")
    with pytest.raises(InvalidInput, match="backend"):
        solve_grouped(p, backend="scip")
    with pytest.raises(InvalidInput, match="time_limit"):
        solve_grouped(p, time_limit=0)
    with pytest.raises(InvalidInput, match="unit_of"):
        solve_grouped(p, unit_of=np.zeros(3, dtype=int))
    with pytest.raises(InvalidInput, match="hint"):
        solve_grouped(p, hint=np.zeros(2, dtype=int))


@st.composite
def small_grouped(draw):
    p = draw(small_problems())
    m, n = p.n_key_groups, p.n_nodes
    unit_of = np.array(draw(st.lists(st.integers(0, m - 1), min_size=m, max_size=m)))
    allowed = None
    if draw(st.booleans()):
        u = int(unit_of[0])
        allowed = {u: np.array(sorted(set(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n)))))}
    return p, unit_of, allowed


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_grouped())
def test_grouped_valid_and_optimal_when_collocation_fits(case):
    p, unit_of, allowed = case
    # drain=False: the paper's objective, which enumerate_optimum computes (with the default drain floor the
    # planner may empty a removing node at a larger distance, by design)
    plan = solve_grouped(p, unit_of=unit_of, allowed=allowed, time_limit=2.0, drain=False)
    a = plan.assignment
    check_plan(p, a)
    d = metrics.load_distance(p, a)
    assert plan.lower_bound <= d + 1e-9
    if plan.details.get("split_units"):
        return  # collocating every unit does not fit the budget: units were split (reported), nothing to compare
    units = np.unique(unit_of)
    for u in units:
        assert len(set(a[unit_of == u].tolist())) == 1, "a unit was split"
    if allowed:
        (u, nodes), = allowed.items()
        node = a[unit_of == u][0]
        members_home = p.current[unit_of == u]
        assert node in nodes or (p.removing[node] and np.all(members_home == node))
    opt = enumerate_optimum(p, unit_of, {int(np.searchsorted(units, u)): v for u, v in (allowed or {}).items()})
    if np.isfinite(opt):
        assert d <= opt + 1e-6 * max(1.0, float(p.load.sum()))


def test_decision_model_at_the_bound_finds_the_coordinated_exchange():
    # the instance of `rebalancer generate albic-synthetic --nodes 20 --max-migrations 10 --seed 3`: two nodes
    # 25 % over and two 25 % under; the optimum 0.4247 = the analytic bound needs each overloaded node to send the
    # right four key groups to the underloaded ones, plus one swap elsewhere (10 moves), which moves and swaps of the
    # local search did not find in 1 s (0.877). The decision model at the bound, from the current assignment, does.
    import time

    from solvers.albic.milp.state import Pool, State
    from solvers.albic.milp.submodel import AT_BOUND_NODES, at_bound, needy_nodes
    from solvers.albic.milp.units import build_units

    p = albic_synthetic(20, key_groups_per_node=20, varies=0.5, seed=3, max_migrations=10)
    lb = analytic_bound(p)
    units = build_units(p, None, None)
    t = float(p.load.sum() / p.capacity.sum())
    tol = 1e-6 * t   # the planner's "optimal": within 1e-6 × the mean utilisation of the bound
    start = State(units, p.current, t)
    assert 2 <= needy_nodes(start, lb).size <= AT_BOUND_NODES
    pool = Pool(units, 0.0)
    best, info = at_bound(start, pool, lb, start, time.perf_counter() + 30.0, workers=1, seed=0)
    a = units.assignment(best.place)
    assert metrics.within_budget(p, a)
    assert metrics.load_distance(p, a) <= lb + tol, (metrics.load_distance(p, a), lb)
    assert info["at_bound_improved"] == 1
    # and the planner (its ruins or this model; how soon depends on the machine): whatever it returns, "optimal" is
    # the bound
    plan = registry.solve("albic-milp", p, time_limit=5.0)
    if plan.status == "optimal":
        assert metrics.load_distance(p, plan.assignment) <= lb + tol
