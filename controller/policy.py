"""The one judge of whether moving state is worth it: every round the controller would execute or propose, in
automatic and in proposal mode and for every planner, goes through :func:`screen` (before any solve) and
:func:`judge` (the plan). A job's :class:`~rebalancer_client.contract.Policy` sets the rules:

1. **Noise guard.** The statistics window holds B batches. Key group k's load per batch has mean μ_k and sample
   variance s²_k over the window (a batch that did not report k counts 0). Under a placement, node i's load per
   batch has variance V_i = Σ_{k on i} s²_k (key groups independent), so the window mean of its utilisation
   u_i = Σ μ_k / c_i has standard error σ_i = √(V_i / B) / c_i. A plan balances the window's means, noise
   included, so on the next window the placement it chose shows the noise of both windows: a deviation of
   standard deviation √2 σ_i even when the stream has not changed. That is the imbalance re-planning cannot remove,
   and the guard's unit. The load distance d = max_i |u_i − t| over the nodes that stay (ALBIC §4.3.1, the metric
   of ``docs/design.md``) is a maximum over n nodes, so the guard uses the family-wise (Bonferroni) quantile: with
   ``noise_sigmas`` = z, z_n is the point where one standard normal's two-sided tail is P(|N| > z) / n, and the
   noise level is z_n · √2 · max_i σ_i. A load distance at or below it is what sampling noise explains (a
   stationary stream): no round is solved. A plan's own distance is measured on the window it was fitted to, so its
   gain is also held to the noise: a plan must take more than the noise level off the load distance. With fewer
   than two batches the noise is unknown and the guard does not apply. The communication term of a node's load is
   taken as noiseless.
2. **Minimum gain** (hysteresis): a plan must take at least ``min_gain`` × t off the load distance, t being the
   mean utilisation (the balanced level), so two plans of nearly equal quality do not alternate.
3. **Threshold**: no round while d ≤ ``load_distance_threshold``.
4. **Cost of moving state**: with ``max_bytes_per_gain`` = b, a plan whose gain is g % of t may move at most
   b · g bytes.
5. **Cooldown**: ``cooldown_batches`` batches between two rounds.

A plan's own load distance is measured on the window it was fitted to, which flatters it: among the many
placements of nearly equal true quality the planner picks the one the window's noise favours (the optimizer's
curse; with coarse key groups the true floor can be far above the fitted value). The controller therefore measures,
on the first whole window of batches after a plan was executed, how much higher its placement's load distance
really was than the plan claimed, and takes that ``bias`` off the next plans' gains (rules 1, 2 and 4 use
gain = d − d_plan − bias); until it is measured no other round is solved (with the noise guard on). A plan can only
have fitted what the noise let it, so the bias counts at most as the noise level of the window it is used on: more
is a real change of the stream.

Load on nodes being removed (ALBIC's set B) is always worth draining: rules 1–4 do not hold back a plan that
lowers it; the cooldown and the budget still do. Every verdict is a :class:`~rebalancer_client.contract.Decision`
with the reason and the numbers, so a plan that is not worth it is answered as such, never silently dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from rebalancer_client.contract import Decision, Plan, Policy
from solvers import metrics
from solvers.model import Problem

#: a change in load smaller than this is rounding, not a change
EPS = 1e-9


def family_z(sigmas: float, nodes: int) -> float:
    """The z of the family-wise guard: P(max over ``nodes`` of |N(0, 1)| > z) ≤ P(|N(0, 1)| > ``sigmas``)
    (Bonferroni): the standard normal's upper ``tail / 2`` quantile (the standard library's, equal to scipy's
    ``√2 · erfcinv(tail)`` within 1e-15; scipy.special alone cost a server's start ~0.3 s of imports)."""
    half = math.erfc(sigmas / math.sqrt(2.0)) / max(1, nodes) / 2.0
    return -NormalDist().inv_cdf(half) if half > 0 else math.inf  # 0: below the smallest double (σ ≳ 37)


@dataclass(frozen=True)
class Balance:
    """The current placement over the window, as the policy sees it."""

    load_distance: float
    target: float            # t: the mean utilisation of the nodes that stay
    load_on_removing: float
    noise: float | None      # the load distance noise alone explains (None: unknown or the guard is off)
    batches: int
    bias: float = 0.0        # how optimistic the last executed plan's own distance proved (see Fit)
    settling: tuple[int, int] | None = None  # (fresh batches, batches needed) until that is measured


def balance(problem: Problem, variance: np.ndarray | None, batches: int, sigmas: float | None) -> Balance:
    """Load distance, balanced level, load on removing nodes and noise level of ``problem``'s current placement;
    ``variance``: each key group's load variance per batch over the ``batches`` of the window."""
    loads = metrics.node_loads(problem, problem.current)
    active = problem.active
    cap = problem.capacity[active]
    target = float(loads.sum() / cap.sum())
    noise = None
    if sigmas is not None and variance is not None and batches >= 2:
        per_node = np.bincount(problem.current, weights=variance, minlength=problem.n_nodes)[active]
        se = np.sqrt(per_node / batches) / cap
        spread = float(se.max()) if se.size else 0.0
        if math.isfinite(spread):  # a window without variance has no noise, whatever z (inf · 0 is not a level)
            noise = 0.0 if spread == 0 else family_z(sigmas, int(active.sum())) * math.sqrt(2.0) * spread
    on_removing = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
    return Balance(metrics.load_distance_of_loads(problem, loads), target, on_removing, noise, batches)


def _decision(worth: bool, reason: str, message: str, b: Balance, policy: Policy, batch_id: int | None,
              **numbers: float | None) -> Decision:
    return Decision(worth=worth, reason=reason, message=message, batch_id=batch_id,  # type: ignore[arg-type]
                    load_distance=_r(b.load_distance), noise=_r(b.noise), min_gain=_r(policy.min_gain * b.target),
                    load_on_removing=_r(b.load_on_removing), fit_bias=_r(b.bias) if b.bias else None,
                    **{k: _r(v) for k, v in numbers.items()})


def _r(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.6g}")


def cooling(policy: Policy, batch_id: int | None, last_round_batch: int | None) -> bool:
    """Fewer than ``cooldown_batches`` batches since the last round (batch ids going back start a new count)."""
    if batch_id is None or last_round_batch is None:
        return False
    return 0 <= batch_id - last_round_batch < policy.cooldown_batches


def screen(policy: Policy, b: Balance, *, batch_id: int | None, last_round_batch: int | None) -> Decision | None:
    """The verdict no plan can change, before any solve; ``None`` when a round may pay (solve, then
    :func:`judge`)."""
    if cooling(policy, batch_id, last_round_batch):
        assert batch_id is not None and last_round_batch is not None
        return _decision(False, "cooldown", f"{batch_id - last_round_batch} of {policy.cooldown_batches} batches "
                                            f"since the last round", b, policy, batch_id)
    if b.load_on_removing > EPS:
        return None
    if b.settling is not None and policy.noise_sigmas is not None:
        return _decision(False, "cooldown", f"the last plan's placement is measured on a window of batches it was "
                                            f"not fitted to first ({b.settling[0]} of {b.settling[1]})",
                         b, policy, batch_id)
    if policy.load_distance_threshold is not None and b.load_distance <= policy.load_distance_threshold:
        return _decision(False, "threshold", f"load distance {b.load_distance:.4g} is at or below the threshold "
                                             f"{policy.load_distance_threshold:.4g}", b, policy, batch_id)
    reachable = b.load_distance - b.bias  # the most any plan can gain
    if policy.noise_sigmas is not None and b.noise is not None and reachable <= b.noise:
        fitted = f" less the last plan's fit bias {b.bias:.4g}" if b.bias else ""
        return _decision(False, "noise", f"load distance {b.load_distance:.4g}{fitted} is within the noise of the "
                                         f"window ({b.noise:.4g} at {policy.noise_sigmas:g} sigmas over {b.batches} "
                                         f"batches): nothing to correct", b, policy, batch_id)
    if reachable < policy.min_gain * b.target:
        return _decision(False, "gain", f"even a perfect plan would gain less than the minimum "
                                        f"({policy.min_gain:g} of the mean utilisation {b.target:.4g})",
                         b, policy, batch_id)
    return None


def judge(policy: Policy, b: Balance, plan: Plan, *, batch_id: int | None,
          last_round_batch: int | None) -> Decision:
    """Whether ``plan`` (computed from the same window) is worth its migrations."""
    early = screen(policy, b, batch_id=batch_id, last_round_batch=last_round_batch)
    after = plan.metrics.after
    moved = float(plan.metrics.migration_bytes)
    numbers = {"planned_load_distance": after.load_distance, "migration_bytes": moved}
    if early is not None and early.reason == "cooldown":
        return _decision(False, "cooldown", early.message, b, policy, batch_id, **numbers)
    if not plan.moves:
        return _decision(False, "no_moves", "the plan moves nothing", b, policy, batch_id, **numbers)
    if after.load_on_removing < b.load_on_removing - EPS:
        return _decision(True, "drain", f"drains {b.load_on_removing - after.load_on_removing:.4g} of load off "
                                        f"removing nodes", b, policy, batch_id, **numbers)
    if early is not None:
        return _decision(False, early.reason, early.message, b, policy, batch_id, **numbers)
    gain = b.load_distance - after.load_distance - b.bias
    if policy.noise_sigmas is not None and b.noise is not None and gain <= b.noise:
        return _decision(False, "noise", f"the plan gains {gain:.4g} of load distance, within the noise of the window "
                                         f"({b.noise:.4g}): a plan fitted to this window would not keep it",
                         b, policy, batch_id, **numbers)
    need = policy.min_gain * b.target
    if gain < max(need, EPS):
        return _decision(False, "gain", f"the plan gains {gain:.4g} of load distance, less than the minimum "
                                        f"{need:.4g} ({policy.min_gain:g} of the mean utilisation)",
                         b, policy, batch_id, **numbers)
    allowed = None
    if policy.max_bytes_per_gain is not None:
        allowed = policy.max_bytes_per_gain * 100.0 * gain / b.target
        if moved > allowed:
            return _decision(False, "cost", f"the plan moves {moved:.4g} bytes for a gain of "
                                            f"{100 * gain / b.target:.3g} %: at most {allowed:.4g} are worth it",
                             b, policy, batch_id, bytes_allowed=allowed, **numbers)
    return _decision(True, "worth", f"load distance {b.load_distance:.4g} -> {after.load_distance:.4g} with "
                                    f"{plan.metrics.migrations} migrations", b, policy, batch_id,
                     bytes_allowed=allowed, **numbers)


def pending(reason: str, message: str, b: Balance, policy: Policy, batch_id: int | None) -> Decision:
    """A verdict without a plan: ``significant`` (proposal mode: ask for one), ``started`` (an automatic round
    is being solved), ``failed`` (its solve failed), ``window`` (not full yet)."""
    return _decision(reason == "significant", reason, message, b, policy, batch_id)
