"""The controller is the one judge of whether moving state is worth it (controller/policy.py).

Unit tests of the rules on numbers, then the acceptance runs through the real API: a steady stream moves nothing
in automatic and in proposal mode, whatever the planner; a stream whose hot keys shift is rebalanced within the
first full window after the shift.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller import policy
from controller.windows import Batch, Window
from evaluation.rebalancing import run, stream
from rebalancer_client import RebalancerClient
from rebalancer_client import contract as c
from solvers import documents
from solvers.model import Plan, Problem
from tests.helpers.server import InProcessServer

NODES, KEY_GROUPS, WINDOW = 8, 120, 5


def _window(loads: list[np.ndarray]) -> Window:
    w = Window(WINDOW, KEY_GROUPS)
    for b, load in enumerate(loads):
        counted, _, evict = w.classify(b)
        assert counted
        w.add(Batch(b, 0, np.arange(KEY_GROUPS, dtype=np.int32), load), evict)
    return w


def _problem(w: Window) -> Problem:
    return documents.problem_from_dict({
        "nodes": [{"id": f"p{i}"} for i in range(NODES)],
        "key_groups": [{"id": f"agg/{k}", "node": f"p{k * NODES // KEY_GROUPS}", "load": float(x)}
                       for k, x in enumerate(w.mean_load())]})


def _balance(loads: list[np.ndarray], sigmas: float | None = 3.0) -> policy.Balance:
    w = _window(loads)
    return policy.balance(_problem(w), w.load_variance(), len(w.batches), sigmas)


def test_family_z_is_the_sigmas_for_one_node_and_grows_with_the_nodes() -> None:
    assert policy.family_z(3.0, 1) == pytest.approx(3.0)
    zs = [policy.family_z(3.0, n) for n in (1, 2, 8, 64, 1024)]
    assert zs == sorted(zs) and zs[-1] > zs[0] + 1
    # the family-wise tail: P(|N| > z_n) * n equals P(|N| > 3)
    assert math.erfc(zs[2] / math.sqrt(2)) * 8 == pytest.approx(math.erfc(3 / math.sqrt(2)), rel=1e-6)
    assert policy.family_z(40.0, 8) == math.inf  # a tail below the smallest double: no finite z
    # where the tail reaches the subnormal doubles (σ ≈ 37–39) z stays defined and grows with σ
    for nodes in (1, 8, 1000, 10**6):
        zs = [policy.family_z(float(s), nodes) for s in np.arange(36.0, 40.0, 0.0005)]
        assert all(b >= a for a, b in zip(zs, zs[1:], strict=False)), nodes


def test_the_server_starts_without_importing_scipy() -> None:
    # scipy.special (the policy's one use of scipy, now the standard library's NormalDist) cost every server and
    # CLI start ~0.3 s of imports before it could answer; the planners, which need scipy, are imported after the
    # start (in the background and in the solver workers)
    import subprocess
    import sys

    code = "import sys, api.app, cli.main; print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_a_window_without_variance_has_no_noise_whatever_the_sigmas() -> None:
    # z is infinite for σ ≳ 38.5 (its tail underflows): the noise of a window of identical batches is 0, not inf · 0
    steady = [np.full(KEY_GROUPS, 10.0)] * 3
    for sigmas in (3.0, 38.49, 40.0):
        assert _balance(steady, sigmas).noise == 0.0
    varied = [np.full(KEY_GROUPS, 10.0), np.full(KEY_GROUPS, 12.0), np.full(KEY_GROUPS, 11.0)]
    assert _balance(varied, 40.0).noise == math.inf


def test_window_variance_is_the_sample_variance_with_absent_key_groups_counted_zero() -> None:
    rng = np.random.default_rng(1)
    loads = [rng.poisson(50, KEY_GROUPS).astype(float) for _ in range(WINDOW + 2)]
    loads[3][7] = 0.0
    w = Window(WINDOW, KEY_GROUPS)
    for b, load in enumerate(loads):
        keep = np.flatnonzero(load > 0).astype(np.int32)  # a key group without records is not reported
        counted, _, evict = w.classify(b)
        w.add(Batch(b, 0, keep, load[keep]), evict)
    held = np.stack(loads[-WINDOW:])
    var = w.load_variance()
    assert var is not None
    np.testing.assert_allclose(var, held.var(axis=0, ddof=1), rtol=1e-9, atol=1e-9)
    assert _window(loads[:1]).load_variance() is None


def test_a_steady_stream_is_noise_at_every_batch_and_would_not_be_without_the_guard() -> None:
    batches = list(stream("steady", key_groups=KEY_GROUPS, batches=40, seed=7))
    rules = c.Policy()
    guarded = [policy.screen(rules, _balance(batches[b - WINDOW + 1:b + 1]), batch_id=b, last_round_batch=None)
               for b in range(WINDOW - 1, len(batches))]
    assert all(d is not None and d.reason == "noise" for d in guarded), [d and d.reason for d in guarded]
    unguarded = [policy.screen(c.Policy(noise_sigmas=None, min_gain=0.0),
                               _balance(batches[b - WINDOW + 1:b + 1], sigmas=None), batch_id=b, last_round_batch=None)
                 for b in range(WINDOW - 1, len(batches))]
    assert all(d is None for d in unguarded)  # without the guard every window would be solved


def test_a_real_imbalance_passes_the_screen() -> None:
    batches = list(stream("shifting", key_groups=KEY_GROUPS, batches=WINDOW, shift_at=100, seed=3))
    assert policy.screen(c.Policy(), _balance(batches), batch_id=4, last_round_batch=None) is None


def _plan(problem: Problem, moves: dict[int, int]) -> c.Plan:
    a = problem.current.copy()
    for k, node in moves.items():
        a[k] = node
    return documents.plan_document(problem, Plan(algorithm="test", assignment=a))


def _skewed() -> tuple[Problem, policy.Balance]:
    rng = np.random.default_rng(5)
    lam = np.full(KEY_GROUPS, 100.0)
    lam[:15] *= 3  # node p0 holds key groups 0..14
    w = _window([rng.poisson(lam).astype(float) for _ in range(WINDOW)])
    problem = _problem(w)
    return problem, policy.balance(problem, w.load_variance(), WINDOW, 3.0)


def test_judge_min_gain_cost_and_no_moves() -> None:
    problem, bal = _skewed()
    one = _plan(problem, {0: 1})
    big = _plan(problem, {k: 1 + k % 7 for k in range(10)})
    rules = c.Policy()
    assert policy.judge(rules, bal, _plan(problem, {}), batch_id=9, last_round_batch=None).reason == "no_moves"
    worth = policy.judge(rules, bal, big, batch_id=9, last_round_batch=None)
    assert worth.worth and worth.reason == "worth"
    assert worth.planned_load_distance is not None and worth.planned_load_distance < worth.load_distance
    gain_needed = c.Policy(min_gain=(bal.load_distance - one.metrics.after.load_distance) / bal.target + 0.01)
    assert policy.judge(gain_needed, bal, one, batch_id=9, last_round_batch=None).reason == "gain"
    problem.state_bytes[:] = 1e9
    costly = documents.plan_document(problem, Plan(algorithm="t", assignment=np.array(
        [1 + k % 7 if k < 10 else problem.current[k] for k in range(KEY_GROUPS)])))
    verdict = policy.judge(c.Policy(max_bytes_per_gain=1e6), bal, costly, batch_id=9, last_round_batch=None)
    assert verdict.reason == "cost" and not verdict.worth and verdict.bytes_allowed is not None
    assert verdict.bytes_allowed < costly.metrics.migration_bytes
    assert policy.judge(c.Policy(max_bytes_per_gain=1e12), bal, costly, batch_id=9, last_round_batch=None).worth


def test_cooldown_and_threshold_and_draining() -> None:
    problem, bal = _skewed()
    rules = c.Policy(cooldown_batches=3)
    assert policy.screen(rules, bal, batch_id=10, last_round_batch=8).reason == "cooldown"  # type: ignore[union-attr]
    assert policy.screen(rules, bal, batch_id=11, last_round_batch=8) is None
    assert policy.screen(rules, bal, batch_id=3, last_round_batch=8) is None  # ids went back: a new count
    high = c.Policy(load_distance_threshold=bal.load_distance)
    assert policy.screen(high, bal, batch_id=1, last_round_batch=None).reason == "threshold"  # type: ignore[union-attr]
    # a removing node with load: always worth draining, even under a threshold and the noise
    problem.removing[0] = True
    drain_bal = policy.balance(problem, None, WINDOW, 3.0)
    assert policy.screen(high, drain_bal, batch_id=1, last_round_batch=None) is None
    plan = _plan(problem, {k: 1 + k % 7 for k in range(15)})
    verdict = policy.judge(c.Policy(min_gain=10.0), drain_bal, plan, batch_id=1, last_round_batch=None)
    assert verdict.worth and verdict.reason == "drain"


# ---------------------------------------------------------------------------------------------- through the API
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    db = tmp_path_factory.mktemp("policy") / "rebalancer.db"
    with InProcessServer(max_time_limit_s=1.0, database_url=f"sqlite:///{db}").start() as srv:
        yield srv


def _client(srv: InProcessServer) -> RebalancerClient:
    return RebalancerClient(srv.url, transport=srv.transport(), timeout=60)


@pytest.mark.parametrize("algorithm", ["albic-milp", "albic", "flux", "cola", "drain-then-balance"])
@pytest.mark.parametrize("auto", [True, False], ids=["auto", "proposals"])
def test_a_steady_stream_moves_nothing(server: InProcessServer, algorithm: str, auto: bool) -> None:
    with _client(server) as rc:
        trace = run(rc, f"steady-{algorithm}-{auto}", stream("steady", batches=30, seed=11), auto=auto,
                    algorithm=algorithm, window_batches=WINDOW)
        assert trace.total_migrations == 0
        assert trace.proposals == 0
        assert set(trace.reasons[WINDOW - 1:]) == {"noise"}
        # asked anyway, a proposal on the steady window is judged not worth it, and executing it is refused (a
        # short solve: no plan can gain more than the load distance, which is within the noise)
        prop = rc.create_proposal(f"steady-{algorithm}-{auto}", time_limit_s=0.2)
        assert prop.decision is not None and not prop.decision.worth
        assert prop.decision.reason in ("noise", "no_moves")


@pytest.mark.parametrize("auto", [True, False], ids=["auto", "proposals"])
def test_shifting_hot_keys_are_rebalanced_within_the_first_full_window(server: InProcessServer, auto: bool) -> None:
    shift = 20
    with _client(server) as rc:
        trace = run(rc, f"shifting-{auto}", stream("shifting", batches=32, shift_at=shift, seed=2), auto=auto,
                    window_batches=WINDOW)
        first_round = next(e for e in rc.history(f"shifting-{auto}").epochs if e.epoch > 0)
    # decided on the first full window (batch WINDOW - 1); the placement runs from the next batch, or one later in
    # automatic mode, whose solve runs in the background while that batch runs
    lag = 1 if auto else 0
    first = trace.first_migration()
    assert first is not None and first <= WINDOW + lag  # the skew is there from the start
    # then the hot block stays put: the plans that a window's noise flatters are not chased (the fit bias) — after a
    # first round that left less than the policy's minimum gain (2 % of the mean node load) to gain, no other; a
    # first round cut short by a loaded machine (1 s of a CPU shared with many tests) at Flux's quality (measured:
    # 9.4 % left, 17 moves, then 12 five batches later) is improved once, as is worth it, and not again
    later = [m for m in trace.migrations[first + 1:shift] if m]
    assert first_round.metrics is not None
    left = first_round.metrics.after.load_distance / (first_round.metrics.after.total_load / len(first_round.nodes))
    assert len(later) <= (0 if left <= 0.02 else 1), (trace.migrations, left)
    after = trace.first_migration(after=shift)
    # the window holds the new hot keys from batch `shift` on: decided there or at the latest when it is full of them
    assert after is not None and after <= shift + WINDOW + lag
    assert trace.load_distance[-1] < 0.5 * max(trace.load_distance[shift:shift + 2])


def test_execute_refuses_a_plan_not_worth_it_unless_forced(server: InProcessServer) -> None:
    with _client(server) as rc:
        run(rc, "refuse", stream("steady", batches=WINDOW, seed=4), auto=False, window_batches=WINDOW)
        prop = rc.create_proposal("refuse", algorithm="flux")
        assert prop.decision is not None and not prop.decision.worth
        if prop.plan is not None and prop.plan.moves:
            from rebalancer_client import ConflictError

            with pytest.raises(ConflictError, match="not worth"):
                rc.execute_proposal("refuse", prop.id)
            ex = rc.execute_proposal("refuse", prop.id, force=True)
            assert ex.epoch == prop.base_epoch + 1


def test_the_last_plans_fit_bias_is_taken_off_the_gain_and_no_round_before_it_is_measured() -> None:
    import dataclasses

    problem, bal = _skewed()
    rules = c.Policy()
    assert bal.noise is not None and bal.load_distance > bal.noise
    assert policy.screen(rules, bal, batch_id=20, last_round_batch=None) is None
    # the last plan proved this much worse than it claimed: what is left to gain is within the noise
    biased = dataclasses.replace(bal, bias=bal.load_distance - 0.5 * bal.noise)
    assert policy.screen(rules, biased, batch_id=20, last_round_batch=None).reason == "noise"  # type: ignore[union-attr]
    plan = _plan(problem, {k: 1 + k % 7 for k in range(10)})
    assert policy.judge(rules, bal, plan, batch_id=20, last_round_batch=None).worth
    assert policy.judge(rules, biased, plan, batch_id=20, last_round_batch=None).reason == "noise"
    settling = dataclasses.replace(bal, settling=(2, WINDOW))
    verdict = policy.screen(rules, settling, batch_id=20, last_round_batch=None)
    assert verdict is not None and verdict.reason == "cooldown" and "2 of 5" in verdict.message
    # without the noise guard neither applies (the rounds of a policy that only asks for improvement)
    assert policy.screen(c.Policy(noise_sigmas=None), settling, batch_id=20, last_round_batch=None) is None


def test_a_proposal_judged_not_worth_it_starts_the_cooldown(server: InProcessServer) -> None:
    with _client(server) as rc:
        run(rc, "paced", stream("steady", batches=WINDOW, seed=9), auto=False, window_batches=WINDOW)
        prop = rc.create_proposal("paced", algorithm="flux")
        assert prop.decision is not None and not prop.decision.worth
        ack = rc.post_stats("paced", batch_id=WINDOW, epoch=0, load=next(stream("steady", batches=1)).tolist())
        assert ack.decision is not None and ack.decision.reason == "cooldown"
