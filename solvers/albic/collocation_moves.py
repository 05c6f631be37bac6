"""Step 3 of ALBIC's Algorithm 2 (Madsen, Zhou, Cao, §4.3.2, lines 24–37): which to-be-collocated pairs are
constrained onto one node this round, and where (parameter ``pair_order`` of :func:`solvers.albic.collocation.albic`).

* ``"paper"`` — Algorithm 2 as printed: :mod:`solvers.albic.collocation_paper`.
* ``"gain"`` (default; a multi-round view beyond the paper) — ALBIC should reach a re-optimiser's (COLA's)
  collocation over budgeted rounds (§5.3–5.4, Figs. 10–12), so each round's budget should buy as much collocation
  as it can. A pair offers two *moves*: the unit of one end (a key group, or a METIS part moved whole) joins the
  node of the other, so a pair needs one move (or the smaller part), never both. Gain = traffic made node-local −
  traffic cut (all edges of the unit); cost = migrations added. Moves go greedily by gain per migration ×
  (1 + BALANCE_WEIGHT · b), b ∈ [−1, 1] = how much the move narrows its two nodes' distance to the target (b = 1:
  overloaded → underloaded node), re-scored lazily. A move that breaks the band is taken with its best
  compensating move (a swap); the budget of nodes already out of the band is kept for the MILP. Single key groups
  not in a pair also move towards the node holding more of their traffic (the fully partitioned edges the scores
  ignore), within half the band and leaving FREE_RESERVE of the budget; the migrations left make a balanced warm
  start (:func:`solvers.albic.collocation_hint.balance_hint`).

Shared: budget accounting relative to the current assignment (``pair_budget_share`` of the budget); the band (a
move may not push a node more than ``band`` from the target utilisation, or further if it already is; if that
rejects everything, the best move that fits is taken anyway — the paper's one pair); the exact load change of a
move (key group loads plus ``communication_cost`` × the rate of edges that become cut or local, both ends, as
:func:`solvers.metrics.node_loads`). Cost: O(P log P) for P pairs plus O(deg) per evaluation of a move.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from solvers.albic.collocation_target import FUTURE_WEIGHT, free_candidates, future_gain
from solvers.model import Problem

_EPS = 1e-9
#: weight of the balance term b ∈ [−1, 1] in a move's score: gain/migration × (1 + BALANCE_WEIGHT · b)
BALANCE_WEIGHT = 0.5
ORDERS = ("gain", "target", "paper")
#: compensation searches per level, per unit of the migration budget
COMPENSATION_TRIES = 2
#: share of the budget single key groups' moves leave to balancing (the MILP and the warm start)
FREE_RESERVE = 0.25


@dataclass
class PairState:
    """The plan of one maxPL level while pairs are added: units, pins, planned nodes and the budget used."""

    problem: Problem
    adj: sp.csr_matrix
    unit_of: np.ndarray
    members: dict[int, np.ndarray]
    hint: np.ndarray
    util: np.ndarray
    t_util: float
    band: float | None
    max_moves: int | None
    max_bytes: float | None
    pin: str = "paper"
    goal: np.ndarray | None = None  # pair_order="target": the goal node of every key group
    deadline: float | None = None  # a time.perf_counter() time: no move is searched for after it
    target: dict[int, int] = field(default_factory=dict)
    choice: dict[int, list[int]] = field(default_factory=dict)
    added: list[tuple[int, int, int, int]] = field(default_factory=list)
    moves: int = 0
    nbytes: float = 0.0

    def unit(self, g: int) -> tuple[int, np.ndarray, int]:
        """(unit id, members, planned node) of key group ``g``."""
        u = int(self.unit_of[g])
        mem = self.members.get(u, np.array([g], dtype=np.int64))
        return u, mem, int(self.target.get(u, int(self.hint[g])))

    def budget_full(self) -> bool:
        return self.max_moves is not None and self.moves >= self.max_moves

    def out_of_time(self) -> bool:
        """Past the deadline: the moves taken so far stand (each kept the plan valid), no more are searched for."""
        return self.deadline is not None and time.perf_counter() > self.deadline


@dataclass
class Move:
    """Unit ``u`` (members ``mem``) goes from node ``s`` to node ``t`` and joins unit ``v``."""

    u: int
    mem: np.ndarray
    s: int
    v: int
    t: int
    gain: float  # traffic made local − traffic cut
    d_moves: int
    d_bytes: float
    delta: dict[int, float]  # utilisation change per node
    balance: float  # b ∈ [−1, 1]
    future: float = 0.0  # traffic to neighbours with the same goal node, not there yet (pair_order="target")


def evaluate(st: PairState, u: int, mem: np.ndarray, s: int, v: int, t: int) -> Move:
    """The exact effect of moving unit ``u`` from ``s`` to ``t`` on the current plan: collocation gain (rate made
    local − rate cut), migrations and bytes added, utilisation change per node and balance term b."""
    p, cur = st.problem, st.problem.current
    ip, ix, dx = st.adj.indptr, st.adj.indices, st.adj.data
    if mem.size == 1:
        k = int(mem[0])
        cols, data = ix[ip[k]:ip[k + 1]], dx[ip[k]:ip[k + 1]]
    else:
        cols = np.concatenate([ix[ip[k]:ip[k + 1]] for k in mem.tolist()])
        data = np.concatenate([dx[ip[k]:ip[k + 1]] for k in mem.tolist()])
        ext = ~np.isin(cols, mem)
        cols, data = cols[ext], data[ext]
    hn = st.hint[cols]
    r_t = float(data[hn == t].sum())
    r_s = float(data[hn == s].sum())
    r_o = float(data.sum()) - r_t - r_s
    w, c = float(p.load[mem].sum()), p.communication_cost
    cm = cur[mem]
    away_t, away_s = cm != t, cm != s
    d_moves = int(away_t.sum()) - int(away_s.sum())
    sb = p.state_bytes[mem]
    d_bytes = float(sb[away_t].sum() - sb[away_s].sum()) if st.max_bytes is not None else 0.0
    dl_s = -w - c * r_t + c * r_s - c * r_o
    dl_t = w - c * r_t + c * r_s + c * r_o
    delta = {s: dl_s / float(p.capacity[s]), t: dl_t / float(p.capacity[t])}
    T = st.t_util
    us, ut = float(st.util[s]), float(st.util[t])
    before = abs(us - T) + abs(ut - T)
    after = abs(us + delta[s] - T) + abs(ut + delta[t] - T)
    scale = abs(delta[s]) + abs(delta[t])
    bal = (before - after) / scale if scale > _EPS else 0.0
    return Move(u, mem, s, v, t, r_t - r_s, d_moves, d_bytes, delta, bal, future_gain(st, cols, data, t))


def fits(st: PairState, mv: Move, use_band: bool, free: bool = False) -> str:
    """``"ok"``, ``"budget"`` (the round's pair budget cannot pay for it) or ``"band"``. A single key group's move
    (``free``) must leave FREE_RESERVE of the budget to balancing and keep within half the band."""
    cap = st.max_moves
    if free and cap is not None:
        cap -= math.ceil(FREE_RESERVE * cap)
    if cap is not None and st.moves + mv.d_moves > cap:
        return "budget"
    if st.max_bytes is not None and st.nbytes + mv.d_bytes > st.max_bytes * (1 + _EPS):
        return "budget"
    if use_band and st.band is not None:
        T, band = st.t_util, st.band * (0.5 if free else 1.0)
        for nd, dv in mv.delta.items():
            if not st.problem.removing[nd] and \
                    abs(st.util[nd] + dv - T) > max(band, abs(st.util[nd] - T)) + _EPS:
                return "band"
    return "ok"


def commit(st: PairState, mv: Move, gi: int, gj: int, case: int, options: list[int]) -> None:
    """Apply ``mv``: the moved unit joins unit ``v`` on node ``t``, which is pinned there (``options``)."""
    mem_v = st.members.get(mv.v, np.array([mv.v], dtype=np.int64))
    merged = np.concatenate([mem_v, mv.mem])
    account(st, mv)
    st.hint[merged] = mv.t
    st.unit_of[mv.mem] = mv.v
    st.members[mv.v] = merged
    st.members.pop(mv.u, None)
    st.target.pop(mv.u, None)
    st.choice.pop(mv.u, None)
    st.target[mv.v] = mv.t
    st.choice[mv.v] = options
    st.added.append((gi, gj, mv.t, case))


def account(st: PairState, mv: Move) -> None:
    """Charge ``mv``'s migrations and bytes to the round's budget and apply its load change to the nodes."""
    st.moves += mv.d_moves
    st.nbytes += mv.d_bytes
    for nd, dv in mv.delta.items():
        st.util[nd] += dv


def _score(mv: Move) -> float:
    gain = mv.gain + FUTURE_WEIGHT * mv.future
    if gain <= _EPS:
        return -math.inf
    per = gain / max(mv.d_moves, 0.5)  # a move back to the current node costs nothing: count half a move
    return per * (1.0 + BALANCE_WEIGHT * mv.balance)


def _option(st: PairState, gi: int, gj: int, k: int) -> Move | None:
    """Move ``k`` of the pair: 0 = the unit of ``gj`` joins the node of ``gi``, 1 = the other way round; None when
    both ends already share a unit or node, or the target node is being removed."""
    (ui, mi, ni), (uj, mj, nj) = st.unit(gi), st.unit(gj)
    if ui == uj or ni == nj:
        return None
    if k == 0:
        return None if st.problem.removing[ni] else evaluate(st, uj, mj, nj, ui, ni)
    return None if st.problem.removing[nj] else evaluate(st, ui, mi, ni, uj, nj)


@dataclass
class _Snapshot:
    unit_of: np.ndarray
    hint: np.ndarray
    util: np.ndarray
    members: dict[int, np.ndarray]
    target: dict[int, int]
    choice: dict[int, list[int]]
    n_added: int
    moves: int
    nbytes: float


def _snapshot(st: PairState) -> _Snapshot:
    return _Snapshot(st.unit_of.copy(), st.hint.copy(), st.util.copy(), dict(st.members), dict(st.target),
                     dict(st.choice), len(st.added), st.moves, st.nbytes)


def _restore(st: PairState, snap: _Snapshot) -> None:
    st.unit_of[:] = snap.unit_of
    st.hint[:] = snap.hint
    st.util[:] = snap.util
    st.members, st.target, st.choice = snap.members, snap.target, snap.choice
    del st.added[snap.n_added:]
    st.moves, st.nbytes = snap.moves, snap.nbytes


def _in_band(st: PairState, nodes: set[int], util0: np.ndarray) -> bool:
    """Every node of ``nodes`` within the band, or no further out than it was (utilisation ``util0``)."""
    T = st.t_util
    band = st.band if st.band is not None else math.inf
    removing = st.problem.removing
    return all(bool(removing[nd]) or abs(float(st.util[nd]) - T) <= max(band, abs(float(util0[nd]) - T)) + _EPS
               for nd in nodes)


def _cand(st: PairState, src: np.ndarray, dst: np.ndarray, p: int, k: int) -> Move | None:
    """Candidate ``(p, k)``: move k of pair p (p ≥ 0), or (p < 0) key group −1 − p alone onto node k."""
    if p >= 0:
        return _option(st, int(src[p]), int(dst[p]), k)
    u, mem, s = st.unit(-1 - p)
    if mem.size > 1 or u in st.target or s == k or st.problem.removing[k]:
        return None
    return evaluate(st, u, mem, s, u, k)


def add_pairs_gain(st: PairState, src: np.ndarray, dst: np.ndarray, limit: float) -> None:
    """The ``"gain"`` order (module docstring): lazy greedy over the two moves of every pair ``src[p] → dst[p]``
    and, beyond the paper's pairs, single key groups towards the node with more of their traffic.

    A move that would push a node out of the band is tried together with its best *compensating* move — another
    candidate moving out of the node it overloads or into the node it underloads — and the two are taken together
    when both nodes end within the band (a swap of collocation moves keeps balance)."""
    heap: list[tuple[float, int, int]] = []
    by_node: dict[int, list[tuple[int, int]]] = {}
    for p, k in _candidates(st, src, dst):
        if st.out_of_time():
            break
        mv = _cand(st, src, dst, p, k)
        sc = -math.inf if mv is None else _score(mv)
        if mv is not None and sc > -math.inf:
            heap.append((-sc, p, k))
            by_node.setdefault(mv.s, []).append((p, k))
            by_node.setdefault(mv.t, []).append((p, k))
    heapq.heapify(heap)
    fallback: tuple[float, int, int] | None = None
    # compensation searches cost O(candidates per node) evaluations each: at most this many per level
    tries = COMPENSATION_TRIES * (st.max_moves if st.max_moves is not None else 20)
    while heap and len(st.added) < limit and not st.budget_full() and not st.out_of_time():
        neg, p, k = heapq.heappop(heap)
        mv = _cand(st, src, dst, p, k)
        if mv is None:
            continue
        sc = _score(mv)
        if sc == -math.inf:
            continue
        if heap and sc < -heap[0][0] - _EPS:
            heapq.heappush(heap, (-sc, p, k))  # stale: it no longer beats the next one
            continue
        verdict = fits(st, mv, True, p < 0)
        if verdict == "band":
            if fallback is None and p >= 0:
                fallback = (sc, p, k)
            if len(st.added) + 2 <= limit and tries > 0:
                tries -= 1
                _compensated(st, mv, p, src, dst, by_node)
            continue
        if verdict == "ok":
            _take(st, mv, p, src, dst)
    if not st.added and fallback is not None:  # every move breaks the band: the best one anyway (one pair) if it
        _, p, k = fallback                      # moves a single key group (a whole part would unbalance the round)
        got = _cand(st, src, dst, p, k)
        if got is not None and got.d_moves <= 1 and fits(st, got, False) == "ok":
            _take(st, got, p, src, dst)


def _candidates(st: PairState, src: np.ndarray, dst: np.ndarray) -> Iterator[tuple[int, int]]:
    """The two moves of every pair, then the single key groups' (built only when the pairs' are all seen)."""
    for p in range(src.size):
        yield p, 0
        yield p, 1
    yield from free_candidates(st, np.concatenate([src, dst]))


def _take(st: PairState, mv: Move, p: int, src: np.ndarray, dst: np.ndarray) -> None:
    if p >= 0:
        _commit_pair(st, mv, int(src[p]), int(dst[p]))
    else:  # a single key group pinned to the node where more of its traffic is local
        account(st, mv)
        st.hint[mv.mem] = mv.t
        st.target[mv.u] = mv.t
        st.choice[mv.u] = [mv.t]


def _compensated(st: PairState, mv: Move, p: int, src: np.ndarray, dst: np.ndarray,
                 by_node: dict[int, list[tuple[int, int]]]) -> bool:
    """Take ``mv`` (which breaks the band) with the best second move that brings its nodes back; False (and the
    plan unchanged) when there is none within the budget."""
    if fits(st, mv, False, p < 0) != "ok":
        return False
    util0 = st.util.copy()
    snap = _snapshot(st)
    _take(st, mv, p, src, dst)
    best: tuple[float, Move, int] | None = None
    seen: set[tuple[int, int]] = set()
    for nd in (mv.t, mv.s):
        for p2, k2 in by_node.get(nd, ()):
            if st.out_of_time():
                break
            if (p2, k2) in seen:
                continue
            seen.add((p2, k2))
            mv2 = _cand(st, src, dst, p2, k2)
            sc2 = -math.inf if mv2 is None else _score(mv2)
            if mv2 is None or sc2 == -math.inf or fits(st, mv2, False, p2 < 0) != "ok":
                continue
            for node, dv in mv2.delta.items():
                st.util[node] += dv
            ok = _in_band(st, set(mv.delta) | set(mv2.delta), util0)
            for node, dv in mv2.delta.items():
                st.util[node] -= dv
            if ok and (best is None or sc2 > best[0]):
                best = (sc2, mv2, p2)
    if best is None:
        _restore(st, snap)
        return False
    _take(st, best[1], best[2], src, dst)
    return True


def _commit_pair(st: PairState, mv: Move, gi: int, gj: int) -> None:
    in_u, in_v = mv.mem.size >= 2, mv.v in st.members
    case = 3 if (in_u and in_v) else 2 if (in_u or in_v) else 1
    options = [mv.t] if st.pin == "paper" else sorted({mv.s, mv.t})
    commit(st, mv, gi, gj, case, options)
