"""The reference of Flux (Shah et al., ICDE 2003, as the ALBIC paper describes it, §2 and §5.2.1): the planner's
earlier implementation, one key group at a time, kept to check :mod:`solvers.baselines.flux` (vectorised
per balance pass) against it move by move. See that module's docstring for the algorithm.

Straightforward on purpose: per-node lists of ``(load, index)`` tuples, :class:`~solvers.metrics.LoadTracker` for
every move, the pairs of a pass one after the other.
"""

from __future__ import annotations

import bisect
import time

import numpy as np

from solvers.metrics import LoadTracker, load_distance_of_loads
from solvers.model import Problem


def reference_flux_moves(problem: Problem, time_limit: float = 1.0,
                         start: np.ndarray | None = None) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Run Flux from ``start`` (default: the current assignment) and return the best assignment found and the
    moves it made."""
    deadline = time.perf_counter() + time_limit
    run = _FluxRun(problem, start)
    best_score = run.score()
    if problem.removing.any():
        run.drain(deadline)
    run.balance(deadline, best_score)
    best_len = run.best_prefix_length(best_score)
    result = np.array(problem.current if start is None else start, dtype=np.int64)
    for k, j in run.moves[:best_len]:
        result[k] = j
    return result, run.moves


class _FluxRun:
    """One run of Flux: the load tracker, the key groups of every node sorted by load, and the moves made so far
    (steps 1 and 2 of the module docstring) with what step 3, the best prefix, needs."""

    def __init__(self, problem: Problem, start: np.ndarray | None) -> None:
        self.problem = problem
        self.tr = tr = LoadTracker(problem, start)
        self.cap = problem.capacity
        self.moves: list[tuple[int, int]] = []
        self.history: list[tuple[float, float]] = []
        # without communication costs every move keeps (load on removing, distance) from rising (a drain move
        # takes load off B; a balance move leaves both nodes inside the pair's old range, and t is fixed), so the
        # best prefix is found afterwards by bisection instead of scoring every move (O(n) each)
        self.monotone = not problem.communicates
        self.loads0 = tr.loads.copy()
        self.active = np.flatnonzero(problem.active)

        # Per-node key groups sorted by load (for "biggest that still narrows the gap" in O(log m)); the moved
        # ones also in a list of their own: once the count budget is spent only they can move again (at no cost),
        # so the search skips the unmoved ones instead of testing each (same plan, O(log m) instead of O(m) per
        # pair).
        self.ldl = ldl = problem.load.tolist()
        asg = tr.assignment
        order = np.lexsort((problem.load, asg))                 # by node, then load (ties by index, as the tuples)
        bounds = np.searchsorted(asg[order], np.arange(problem.n_nodes + 1))
        lo_, ko_ = problem.load[order].tolist(), order.tolist()
        self.members: dict[int, list[tuple[float, int]]] = {
            i: list(zip(lo_[bounds[i]:bounds[i + 1]], ko_[bounds[i]:bounds[i + 1]], strict=True))
            for i in range(problem.n_nodes)}
        self.moved: dict[int, list[tuple[float, int]]] = {i: [] for i in range(problem.n_nodes)}
        away = asg != problem.current
        for k in np.flatnonzero(away)[np.argsort(problem.load[away], kind="stable")].tolist():
            self.moved[int(asg[k])].append((ldl[k], k))
        self.cur = problem.current.tolist()
        self.count_cap = problem.max_migrations
        self.moves_from: list[int] = []

    def score_of(self, loads: np.ndarray) -> tuple[float, float]:
        """(load on removing nodes, load distance) of ``loads``: lower is better."""
        problem = self.problem
        on_removing = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
        return (round(on_removing, 9), load_distance_of_loads(problem, loads))

    def score(self) -> tuple[float, float]:
        return self.score_of(self.tr.loads)

    def do_move(self, k: int, j: int) -> None:
        """Move key group ``k`` to node ``j`` and record the move."""
        i = int(self.tr.assignment[k])
        item = (self.ldl[k], k)
        lst = self.members[i]
        del lst[bisect.bisect_left(lst, item)]
        bisect.insort(self.members[j], item)
        if i != self.cur[k]:
            ml = self.moved[i]
            del ml[bisect.bisect_left(ml, item)]
        if j != self.cur[k]:
            bisect.insort(self.moved[j], item)
        self.moves.append((k, j))
        if self.monotone:
            self.moves_from.append(i)
        self.tr.move(k, j)
        if not self.monotone:
            self.history.append(self.score())

    def drain(self, deadline: float) -> None:
        """1. Drain removing nodes, heaviest key groups first."""
        problem, tr, cap = self.problem, self.tr, self.cap
        drain = [k for i in np.flatnonzero(problem.removing) for _, k in self.members[int(i)]]
        drain.sort(key=lambda k: -problem.load[k])
        for k in drain:
            if time.perf_counter() > deadline:
                break
            targets = self.active
            after = (tr.loads[targets] + problem.load[k]) / cap[targets]
            j = int(targets[np.argmin(after)])
            if tr.can_afford(k, j):
                self.do_move(k, j)

    def balance(self, deadline: float, best_score: tuple[float, float]) -> None:
        """2. Balance in passes. With communication costs a move's effect differs from its key group's load, so
        the potential argument fails and the passes can cycle: stop after a pass that did not improve the best
        score."""
        best_seen = best_score
        while time.perf_counter() <= deadline:
            pass_start = len(self.history)
            if not self._balance_pass(deadline):
                break
            if not self.monotone:
                pass_best = min(self.history[pass_start:], default=best_seen)
                if not pass_best < best_seen:
                    break
                best_seen = pass_best

    def _balance_pass(self, deadline: float) -> bool:
        """One pass over the pairs (1st hottest with 1st coldest, …); whether any key group moved."""
        tr, cap, active = self.tr, self.cap, self.active
        u = tr.loads[active] / cap[active]
        ranked = active[np.argsort(-u, kind="stable")]
        moved_any = False
        for p in range(len(ranked) // 2):
            h, c = int(ranked[p]), int(ranked[-1 - p])
            uh, uc = tr.loads[h] / cap[h], tr.loads[c] / cap[c]
            gap = uh - uc
            if gap <= 1e-12:
                break
            k = self._narrowing_key_group(h, c, gap)
            if k is None:
                continue
            self.do_move(k, c)
            moved_any = True
            if time.perf_counter() > deadline:
                break
        return moved_any

    def _narrowing_key_group(self, h: int, c: int, gap: float) -> int | None:
        """The biggest key group of the hotter node ``h`` that narrows the pair's ``gap`` and fits the budget."""
        tr, cap = self.tr, self.cap
        # a move of exactly ``limit`` only mirrors the pair (no gain); in floating point it can look like a
        # gain and then the passes swap it back and forth until the time limit: keep a relative margin
        limit = 2.0 * gap / (1.0 / cap[h] + 1.0 / cap[c]) * (1.0 - 1e-9)
        # count budget spent: only moved key groups are affordable (see above)
        lst = self.moved[h] if self.count_cap is not None and tr.moves >= self.count_cap else self.members[h]
        pos = bisect.bisect_left(lst, (limit, -1)) - 1  # biggest with load < limit
        while pos >= 0:
            w, k = lst[pos]
            if w <= 0:
                return None
            if tr.can_afford(k, c):
                return k
            pos -= 1
        return None

    def best_prefix_length(self, best_score: tuple[float, float]) -> int:
        """3. The length of the prefix of the moves with the lowest score (0: none beats ``best_score``, the
        score of the start)."""
        best_len = self._monotone_prefix_length(best_score) if self.monotone and self.moves else 0
        for idx, s in enumerate(self.history):
            if s < best_score:
                best_score, best_len = s, idx + 1
        return best_len

    def _monotone_prefix_length(self, best_score: tuple[float, float]) -> int:
        """Without communication costs the score never rises along the moves: the first prefix reaching the
        final score, by bisection (0 when the final score does not beat ``best_score``)."""
        problem, moves = self.problem, self.moves
        mk = np.array([k for k, _ in moves], dtype=np.int64)
        wm = problem.load[mk]
        src, dst = np.array(self.moves_from, dtype=np.int64), np.array([j for _, j in moves], dtype=np.int64)

        def score_at(length: int) -> tuple[float, float]:
            loads = self.loads0 - np.bincount(src[:length], weights=wm[:length], minlength=problem.n_nodes)
            loads += np.bincount(dst[:length], weights=wm[:length], minlength=problem.n_nodes)
            return self.score_of(loads)

        final = score_at(len(moves))
        if not final < best_score:
            return 0
        lo, hi = 0, len(moves)  # score_at(lo) > final == score_at(hi); first index reaching final
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if score_at(mid) <= final:
                hi = mid
            else:
                lo = mid
        return hi
