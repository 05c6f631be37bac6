"""The non-integrated scale-in baseline of the ALBIC paper's Figure 5 experiment (§5.1).

"A non-integrated approach, which first performs scale-in as an independent process and then tries to move the
key groups from the to-be-removed nodes to the other nodes evenly." Per round:

1. Drain: while a removing node (set B) still holds key groups and the budget allows, move its key groups —
   heaviest first — each to the active node with the lowest utilisation at that moment (spreading the drained
   load evenly). Balancing is not considered while draining.
2. Balance: only once B is empty, the budget left in the round goes to load balancing — the ALBIC MILP
   (:func:`solvers.albic.milp.solve_grouped`) on the drained assignment with the remaining budget.

The integrated planner (``albic-milp``) instead decides in one model whether a migration serves scale-in or an
overloaded node (Lemmas 1–2 of §4.3.1 make it drain B gradually).

Complexity: O(|B's key groups| · n) for the drain, plus the MILP's time limit for the balance.
"""

from __future__ import annotations

import time

import numpy as np

from solvers.metrics import LoadTracker
from solvers.model import Plan, Problem
from solvers.registry import Param, register


def drain_moves(problem: Problem, deadline: float) -> LoadTracker:
    """Phase 1: drain removing nodes evenly within the budget; returns the tracker after the moves."""
    tr = LoadTracker(problem)
    if not problem.removing.any():
        return tr
    active = np.flatnonzero(problem.active)
    cap = problem.capacity[active]
    on_b = np.flatnonzero(problem.removing[problem.current])
    on_b = on_b[np.argsort(-problem.load[on_b], kind="stable")]
    for k in on_b.tolist():
        if time.perf_counter() > deadline:
            break
        j = int(active[np.argmin(tr.loads[active] / cap)])
        if not tr.can_afford(k, j):
            # the count budget is spent for sure; a byte budget may still fit a smaller key group
            if problem.max_migrations is not None and tr.moves >= problem.max_migrations:
                break
            continue
        tr.move(k, j)
    return tr


@register(
    "drain-then-balance",
    "Non-integrated scale-in baseline (ALBIC §5.1, Figure 5): drain removing nodes evenly first, balance with the "
    "ALBIC MILP only with the budget left once they are empty.",
    params=[Param("backend", str, "cpsat", "MILP backend of the balancing phase", choices=("cpsat", "cbc"))],
)
def solve(problem: Problem, *, time_limit: float = 1.0, backend: str = "cpsat") -> Plan:
    start = time.perf_counter()
    tr = drain_moves(problem, start + 0.5 * time_limit)
    a = tr.assignment.copy()
    details = {"drained": int(tr.moves)}
    still_on_b = problem.removing.any() and bool(np.any(problem.removing[a]))
    left_c = None if problem.max_migrations is None else problem.max_migrations - tr.moves
    left_b = None if problem.max_migration_bytes is None else problem.max_migration_bytes - tr.bytes
    remaining = time_limit - (time.perf_counter() - start)
    if not still_on_b and (left_c is None or left_c > 0) and remaining > 0.05:
        from solvers.albic.milp import solve_grouped

        sub = problem.with_current(a).with_budget(left_c, left_b)
        plan = solve_grouped(sub, time_limit=remaining, backend=backend)
        details["balance_moves"] = int(np.count_nonzero(plan.assignment != a))
        a = plan.assignment
    return Plan("drain-then-balance", a, status="heuristic", lower_bound=None,
                seconds=time.perf_counter() - start, details=details)
