"""Flux (Shah et al., ICDE 2003) as the ALBIC paper describes and uses it (§2 related work, §5.2.1).

"At the end of each period, nodes are sorted in descending order of their workloads, and then it moves the biggest
suitable data partition at the first node to the last one in the list, so that load-variance is decreased. If
necessary, it also moves a partition at the second node to the second last one in the list, and so on."

Here, generalised to the DESIGN.md load model:

1. Drain: key groups on removing nodes (set B) move, heaviest first, to the active node whose utilisation after
   the move is lowest, while the budget allows.
2. Balance, in passes: sort active nodes by utilisation; pair the 1st with the last, the 2nd with the 2nd-last, …;
   on each pair move the biggest key group of the hotter node that still narrows the pair's gap
   (w·(1/c_h + 1/c_c) < 2·(u_h − u_c)) and fits the budget. Every such move strictly lowers Σ load_i²/c_i, so the
   passes terminate; they stop when the budget is spent, no pair can improve, or the time limit is reached.
3. Of the sequence of moves, the prefix with the lowest (load on removing nodes, load distance) is returned, so
   Flux never returns a plan worse than the current assignment, even when communication costs make a move's
   effect differ from its key group's own load.

Complexity: O(m log m) to sort, then O(log m + n + deg) per move. No bound is proved (status ``heuristic``).
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from solvers.metrics import LoadTracker
from solvers.model import Plan, Problem
from solvers.registry import register


def flux_moves(problem: Problem, time_limit: float = 1.0, start: np.ndarray | None = None) -> np.ndarray:
    """Run Flux from ``start`` (default: the current assignment) and return the best assignment found."""
    deadline = time.perf_counter() + time_limit
    tr = LoadTracker(problem, start)
    cap = problem.capacity
    moves: list[tuple[int, int]] = []
    history: list[tuple[float, float]] = []

    def score() -> tuple[float, float]:
        on_removing = float(tr.loads[problem.removing].sum()) if problem.removing.any() else 0.0
        return (round(on_removing, 9), tr.load_distance())

    best_score = score()
    active = np.flatnonzero(problem.active)

    # Per-node key groups sorted by load (for "biggest that still narrows the gap" in O(log m)).
    members: dict[int, list[tuple[float, int]]] = {int(i): [] for i in range(problem.n_nodes)}
    order = np.argsort(problem.load, kind="stable")
    for k in order:
        members[int(tr.assignment[k])].append((float(problem.load[k]), int(k)))

    def do_move(k: int, j: int) -> None:
        i = int(tr.assignment[k])
        lst = members[i]
        pos = bisect.bisect_left(lst, (float(problem.load[k]), k))
        del lst[pos]
        bisect.insort(members[j], (float(problem.load[k]), k))
        tr.move(k, j)
        moves.append((k, j))
        history.append(score())

    # 1. drain removing nodes, heaviest key groups first
    if problem.removing.any():
        drain = [k for i in np.flatnonzero(problem.removing) for _, k in members[int(i)]]
        drain.sort(key=lambda k: -problem.load[k])
        for k in drain:
            if time.perf_counter() > deadline:
                break
            targets = active
            after = (tr.loads[targets] + problem.load[k]) / cap[targets]
            j = int(targets[np.argmin(after)])
            if tr.can_afford(k, j):
                do_move(k, j)

    # 2. balance in passes
    while time.perf_counter() <= deadline:
        u = tr.loads[active] / cap[active]
        ranked = active[np.argsort(-u, kind="stable")]
        moved_any = False
        for p in range(len(ranked) // 2):
            h, c = int(ranked[p]), int(ranked[-1 - p])
            uh, uc = tr.loads[h] / cap[h], tr.loads[c] / cap[c]
            gap = uh - uc
            if gap <= 1e-12:
                break
            limit = 2.0 * gap / (1.0 / cap[h] + 1.0 / cap[c])
            lst = members[h]
            pos = bisect.bisect_left(lst, (limit, -1)) - 1  # biggest with load < limit
            while pos >= 0:
                w, k = lst[pos]
                if w <= 0:
                    pos = -1
                    break
                if tr.can_afford(k, c):
                    break
                pos -= 1
            if pos < 0:
                continue
            do_move(k, c)
            moved_any = True
            if time.perf_counter() > deadline:
                break
        if not moved_any:
            break

    # 3. best prefix
    best_len = 0
    for idx, s in enumerate(history):
        if s < best_score:
            best_score, best_len = s, idx + 1
    result = np.array(problem.current if start is None else start, dtype=np.int64)
    for k, j in moves[:best_len]:
        result[k] = j
    return result


@register(
    "flux",
    "Flux: move the biggest suitable key group from the most to the least utilised node, pair by pair "
    "(ALBIC paper §5.2 baseline); drains removing nodes first; honours count and byte budgets.",
)
def solve(problem: Problem, *, time_limit: float = 1.0) -> Plan:
    start = time.perf_counter()
    a = flux_moves(problem, time_limit)
    return Plan("flux", a, status="heuristic", lower_bound=None, seconds=time.perf_counter() - start)
