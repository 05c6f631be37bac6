"""Flux (Shah et al., ICDE 2003) as the ALBIC paper describes and uses it (§2 related work, §5.2.1).

"At the end of each period, nodes are sorted in descending order of their workloads, and then it moves the biggest
suitable data partition at the first node to the last one in the list, so that load-variance is decreased. If
necessary, it also moves a partition at the second node to the second last one in the list, and so on."

Here, generalised to the docs/design.md load model:

1. Drain: key groups on removing nodes (set B) move, heaviest first, to the active node whose utilisation after
   the move is lowest, while the budget allows.
2. Balance, in passes: sort active nodes by utilisation; pair the 1st with the last, the 2nd with the 2nd-last, …;
   on each pair move the biggest key group of the hotter node that still narrows the pair's gap
   (w·(1/c_h + 1/c_c) < 2·(u_h − u_c)) and fits the budget. Every such move strictly lowers Σ load_i²/c_i, so the
   passes terminate; they stop when the budget is spent, no pair can improve, or the time limit is reached.
3. Of the sequence of moves, the prefix with the lowest (load on removing nodes, load distance) is returned, so
   Flux never returns a plan worse than the current assignment, even when communication costs make a move's
   effect differ from its key group's own load.

Implementation: the key groups are ranked once by (load, index) and a key group of rank r on node i has the key
i·M + r in one sorted set (:class:`~solvers.baselines.keyset.KeySet`), so "the biggest key group of a node lighter
than the pair's limit" is one predecessor query on integers. Without communication costs the pairs of a pass are
disjoint and a node's load and key groups change only through its own pair: the pass computes every pair's gap,
limit and candidate in a few numpy steps from the state at its start and updates loads and keys once at its end —
the same floating-point operations, hence the same numbers and the same moves, as moving one key group at a time.
The budget is followed pair by pair only when it can bind inside the pass (a byte budget, or a count budget that
runs out or comes back within it); the time limit is checked after each pass (after each move when the pairs are
taken one by one). With communication costs a move changes its neighbours' nodes too, so the pairs are taken one
after the other with the loads of :class:`~solvers.metrics.LoadTracker`. ``tests/solvers/flux_reference.py`` keeps
the one-at-a-time implementation; the tests compare the moves.

Complexity: O(m log m) to sort, then O(n log n) per pass and O(log m) per move without communication costs
(O(n + deg) per move with them, to score it). No bound is proved (status ``heuristic``).
"""

from __future__ import annotations

import time

import numpy as np

from solvers.baselines.keyset import KeySet
from solvers.metrics import LoadTracker, load_distance_of_loads
from solvers.model import Plan, Problem
from solvers.registry import register


def flux_moves(problem: Problem, time_limit: float = 1.0, start: np.ndarray | None = None) -> np.ndarray:
    """Run Flux from ``start`` (default: the current assignment) and return the best assignment found."""
    deadline = time.perf_counter() + time_limit
    run = FluxRun(problem, start)
    best_score = run.score()
    if problem.removing.any():
        run.drain(deadline)
    run.balance(deadline, best_score)
    best_len = run.best_prefix_length(best_score)
    result = np.array(problem.current if start is None else start, dtype=np.int64)
    if best_len:
        # a key group may move more than once: its last move in the prefix counts
        ks, _, js = (x[:best_len][::-1] for x in run.move_arrays())
        _, last = np.unique(ks, return_index=True)
        result[ks[last]] = js[last]
    return result


def rank_order(load: np.ndarray) -> np.ndarray:
    """The key groups by (load, index): a quicksort, stable only when two loads are equal."""
    order: np.ndarray = np.argsort(load)
    s = load[order]
    if s.size > 1 and bool((s[1:] == s[:-1]).any()):
        order = np.argsort(load, kind="stable")
    return order


class FluxRun:
    """One run of Flux: the load tracker, every node's key groups by rank, and the moves made so far (steps 1 and
    2 of the module docstring) with what step 3, the best prefix, needs.

    A key group of rank ``r`` (its place in the order by (load, index)) on node ``i`` has the key ``i·M + r``
    (``M`` = number of key groups); ``keys`` (a :class:`~solvers.baselines.keyset.KeySet`) holds them, so the
    biggest key group of node ``h`` lighter than a limit is the key before ``h·M + searchsorted(sorted_load,
    limit)``. ``away`` holds the keys of the key groups that are not on their current node: once the count budget
    is spent only they can move again (at no cost), so the search looks only at them (same plan, O(log m) instead
    of O(m) per pair). A move changes only the key groups of its own two nodes, so both sets are updated once per
    pass (and once after the drain), in one batch."""

    def __init__(self, problem: Problem, start: np.ndarray | None) -> None:
        self.problem = p = problem
        self.tr = tr = LoadTracker(problem, start)
        self.cap = problem.capacity
        # the moves made: arrays (rank, key group, from, to) per pass (or drain), and those of the pass under way
        # one by one; with communication costs the score after each move
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.open: list[tuple[int, int, int, int]] = []
        self.n_moves = 0
        self.history: list[tuple[float, float]] = []
        # without communication costs every move keeps (load on removing, distance) from rising (a drain move
        # takes load off B; a balance move leaves both nodes inside the pair's old range, and t is fixed), so the
        # best prefix is found afterwards by bisection instead of scoring every move (O(n) each); and the pairs
        # of a pass do not interact (module docstring)
        self.plain = not problem.communicates
        self.loads0 = tr.loads.copy()
        self.active = np.flatnonzero(problem.active)
        self.order = order = rank_order(p.load)
        self.sorted_load = p.load[order]
        self.n_zero = int(np.searchsorted(self.sorted_load, 0.0, side="right"))  # ranks of load ≤ 0
        self.M = M = max(1, p.n_key_groups)
        node_of_rank = tr.assignment[order]
        dtype = np.int32 if p.n_nodes * M < 2**31 else np.int64
        self.keys = KeySet(np.sort(node_of_rank * M + np.arange(p.n_key_groups)), dtype)
        away = node_of_rank != p.current[order]
        self.away = KeySet(np.sort(node_of_rank[away] * M + np.flatnonzero(away)), dtype)
        self.count_cap = p.max_migrations

    def move_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The moves made so far: key groups, from, to."""
        if not self.chunks:
            return tuple(np.zeros(0, dtype=np.int64) for _ in range(3))  # type: ignore[return-value]
        _, k, i, j = (np.concatenate(x) for x in zip(*self.chunks, strict=True))
        return k, i, j

    @property
    def moves(self) -> list[tuple[int, int]]:
        """The moves made so far: (key group, node)."""
        k, _, j = self.move_arrays()
        return list(zip(k.tolist(), j.tolist(), strict=True))

    def score_of(self, loads: np.ndarray) -> tuple[float, float]:
        """(load on removing nodes, load distance) of ``loads``: lower is better."""
        problem = self.problem
        on_removing = float(loads[problem.removing].sum()) if problem.removing.any() else 0.0
        return (round(on_removing, 9), load_distance_of_loads(problem, loads))

    def score(self) -> tuple[float, float]:
        return self.score_of(self.tr.loads)

    def record(self, r: int, i: int, j: int) -> None:
        """Move the key group of rank ``r`` from node ``i`` to node ``j`` (one by one): the budget and the
        assignment; the loads too with communication costs (:meth:`LoadTracker.move`), else the caller updates
        them; :meth:`close` adds the moves to the list and to the keys."""
        tr = self.tr
        k = int(self.order[r])
        self.open.append((r, k, i, j))
        if self.plain:
            tr.charge(k, j)
        else:
            tr.move(k, j)
            self.history.append(self.score())

    def close(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The moves recorded one by one since the last call, as arrays (rank, key group, from, to)."""
        moves = np.array(self.open, dtype=np.int64).reshape(-1, 4)
        self.open = []
        return moves[:, 0], moves[:, 1], moves[:, 2], moves[:, 3]

    def commit(self, r: np.ndarray, k: np.ndarray, i: np.ndarray, j: np.ndarray) -> None:
        """Add the moves of one pass (or of the drain) to the list and the keys (each key group moved at most once
        among them)."""
        if not r.size:
            return
        self.chunks.append((r, k, i, j))
        self.n_moves += int(r.size)
        old, new = i * self.M + r, j * self.M + r
        self.keys.replace(old, new)
        if self.count_cap is not None:
            cur = self.problem.current[k]
            self.away.replace(old[i != cur], new[j != cur])

    def drain(self, deadline: float) -> None:
        """1. Drain removing nodes, heaviest key groups first."""
        problem, tr, cap, targets, M = self.problem, self.tr, self.cap, self.active, self.M
        ranks = np.concatenate([self.keys.between(i * M, (i + 1) * M) - i * M
                                for i in np.flatnonzero(problem.removing).tolist()])
        ranks = ranks[np.argsort(-self.sorted_load[ranks], kind="stable")]
        for r in ranks.tolist():
            if time.perf_counter() > deadline:
                break
            k = int(self.order[r])
            w = problem.load[k]
            after = (tr.loads[targets] + w) / cap[targets]
            j = int(targets[np.argmin(after)])
            i = int(tr.assignment[k])
            if tr.can_afford(k, j):
                self.record(r, i, j)
                if self.plain:
                    tr.loads[i] -= w
                    tr.loads[j] += w
        self.commit(*self.close())

    def balance(self, deadline: float, best_score: tuple[float, float]) -> None:
        """2. Balance in passes. With communication costs a move's effect differs from its key group's load, so
        the potential argument fails and the passes can cycle: stop after a pass that did not improve the best
        score."""
        best_seen = best_score
        while time.perf_counter() <= deadline:
            pass_start = len(self.history)
            if not (self._plain_pass(deadline) if self.plain else self._comm_pass(deadline)):
                break
            if not self.plain:
                pass_best = min(self.history[pass_start:], default=best_seen)
                if not pass_best < best_seen:
                    break
                best_seen = pass_best

    def _ranked(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of a pass: the hotter half of the active nodes by utilisation (1st hottest first) and the
        colder half (1st coldest first)."""
        active = self.active
        u = self.tr.loads[active] / self.cap[active]
        ranked = active[np.argsort(-u, kind="stable")]
        half = len(ranked) // 2
        return ranked[:half], ranked[::-1][:half]

    def _candidates(self, keys: KeySet, hot: np.ndarray, below: np.ndarray) -> np.ndarray:
        """Per pair, the rank of the biggest key group of ``hot`` in ``keys`` with rank < ``below`` and load > 0, or
        -1."""
        base = hot * self.M
        key = keys.before(base + below)
        out: np.ndarray = np.where(key >= base + self.n_zero, key - base, -1)
        return out

    def _plain_pass(self, deadline: float) -> bool:
        """One pass over the pairs without communication costs (pairs disjoint: gaps, limits and candidates at once,
        the loads updated at the end); whether any key group moved."""
        loads, cap, tr = self.tr.loads, self.cap, self.tr
        hot, cold = self._ranked()
        gap = loads[hot] / cap[hot] - loads[cold] / cap[cold]  # non-increasing along the pairs
        stop = np.flatnonzero(gap <= 1e-12)
        if stop.size:
            hot, cold, gap = hot[:stop[0]], cold[:stop[0]], gap[:stop[0]]
        # a move of exactly the limit only mirrors the pair (no gain); in floating point it can look like a gain
        # and then the passes swap it back and forth until the time limit: keep a relative margin
        limit = 2.0 * gap / (1.0 / cap[hot] + 1.0 / cap[cold]) * (1.0 - 1e-9)
        below = np.searchsorted(self.sorted_load, limit)
        fast = self._fast_moves(hot, cold, below)
        if fast is None:
            self._scan(hot, cold, below, deadline)
            r, k, h, c = self.close()
        else:
            r, h, c = fast
            k = self.order[r]
            tr.charge_many(k, c)
        if not r.size:
            return False
        w = self.problem.load[k]
        loads[h] -= w   # every node at most once per pass
        loads[c] += w
        self.commit(r, k, h, c)
        return True

    def _fast_moves(self, hot: np.ndarray, cold: np.ndarray,
                    below: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The pass's moves (ranks, from, to) when the budget need not be followed pair by pair: no byte budget,
        and the count budget either never spent before a pair (every pair takes its biggest narrowing key group)
        or spent all along (only moved key groups, none of them going home); else None (then :meth:`_scan`)."""
        if self.problem.max_migration_bytes is not None:
            return None
        cap, moves = self.count_cap, self.tr.moves
        spent = cap is not None and moves >= cap
        cand = self._candidates(self.away if spent else self.keys, hot, below)
        sel = np.flatnonzero(cand >= 0)
        r, h, c = cand[sel], hot[sel], cold[sel]
        if cap is None:
            return r, h, c
        cur = self.problem.current[self.order[r]]
        if spent:  # only moved key groups (never from their current node): the count stays spent unless one goes home
            return None if np.any(c == cur) else (r, h, c)
        step = np.zeros(hot.size, dtype=np.int64)
        step[sel] = (h == cur).astype(np.int64) - (c == cur)
        return (r, h, c) if moves + int(np.max(np.cumsum(step) - step, initial=0)) < cap else None

    def _scan(self, hot: np.ndarray, cold: np.ndarray, below: np.ndarray, deadline: float) -> None:
        """The pairs one after the other, following the budget (byte budget, or the count budget spent in the
        pass): each takes its biggest narrowing key group (found for all pairs at once), or the next smaller one
        that fits the budget."""
        cap, M = self.count_cap, self.M
        cand = self._candidates(self.keys, hot, below).tolist()
        cand_away = self._candidates(self.away, hot, below).tolist() if cap is not None else cand
        for h, c, ra, rm in zip(hot.tolist(), cold.tolist(), cand, cand_away, strict=True):
            spent = cap is not None and self.tr.moves >= cap
            r = rm if spent else ra
            if r >= 0 and not self.tr.can_afford(int(self.order[r]), c):
                r = self._walk(self.away if spent else self.keys, h * M + r, h, c)
            if r >= 0:
                self.record(r, h, c)
                if time.perf_counter() > deadline:
                    break

    def _walk(self, keys: KeySet, q: int, h: int, c: int) -> int:
        """The rank of the biggest key group of node ``h`` in ``keys`` with key < ``q`` and load > 0 that fits the
        budget; -1 if none."""
        base = h * self.M
        for key in keys.descending(q):
            r = key - base
            if r < self.n_zero:
                return -1
            if self.tr.can_afford(int(self.order[r]), c):
                return r
        return -1

    def _comm_pass(self, deadline: float) -> bool:
        """One pass over the pairs with communication costs, one pair after the other (a move changes the loads
        of its neighbours' nodes); whether any key group moved."""
        tr, cap, M = self.tr, self.cap, self.M
        moved_any = False
        for h, c in zip(*(x.tolist() for x in self._ranked()), strict=True):
            gap = tr.loads[h] / cap[h] - tr.loads[c] / cap[c]
            if gap <= 1e-12:
                break
            limit = 2.0 * gap / (1.0 / cap[h] + 1.0 / cap[c]) * (1.0 - 1e-9)
            spent = self.count_cap is not None and tr.moves >= self.count_cap
            r = self._walk(self.away if spent else self.keys, h * M + int(np.searchsorted(self.sorted_load, limit)),
                           h, c)
            if r < 0:
                continue
            self.record(r, h, c)
            moved_any = True
            if time.perf_counter() > deadline:
                break
        self.commit(*self.close())
        return moved_any

    def best_prefix_length(self, best_score: tuple[float, float]) -> int:
        """3. The length of the prefix of the moves with the lowest score (0: none beats ``best_score``, the
        score of the start)."""
        best_len = self._monotone_prefix_length(best_score) if self.plain and self.n_moves else 0
        for idx, s in enumerate(self.history):
            if s < best_score:
                best_score, best_len = s, idx + 1
        return best_len

    def _monotone_prefix_length(self, best_score: tuple[float, float]) -> int:
        """Without communication costs the score never rises along the moves: the first prefix reaching the
        final score, by bisection (0 when the final score does not beat ``best_score``)."""
        problem = self.problem
        mk, src, dst = self.move_arrays()
        wm = problem.load[mk]

        def score_at(length: int) -> tuple[float, float]:
            loads = self.loads0 - np.bincount(src[:length], weights=wm[:length], minlength=problem.n_nodes)
            loads += np.bincount(dst[:length], weights=wm[:length], minlength=problem.n_nodes)
            return self.score_of(loads)

        final = score_at(self.n_moves)
        if not final < best_score:
            return 0
        lo, hi = 0, self.n_moves  # score_at(lo) > final == score_at(hi); first index reaching final
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if score_at(mid) <= final:
                hi = mid
            else:
                lo = mid
        return hi


@register(
    "flux",
    "Flux: move the biggest suitable key group from the most to the least utilised node, pair by pair "
    "(ALBIC paper §5.2 baseline); drains removing nodes first; honours count and byte budgets.",
)
def solve(problem: Problem, *, time_limit: float = 1.0) -> Plan:
    start = time.perf_counter()
    a = flux_moves(problem, time_limit)
    return Plan("flux", a, status="heuristic", lower_bound=None, seconds=time.perf_counter() - start)
