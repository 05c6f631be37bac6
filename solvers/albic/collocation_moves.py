"""Step 3 of ALBIC's Algorithm 2 (Madsen, Zhou, Cao, §4.3.2, lines 24–37): which to-be-collocated pairs are
constrained onto one node this round, and where.

Two orders (parameter ``pair_order`` of :func:`solvers.albic.collocation.albic`):

* ``"paper"`` — Algorithm 2 as printed: the highest-traffic pair first (ties at random); case 1 (neither end in a
  part) on the less loaded of the two nodes, case 2 (one end in a part) on that part's node, case 3 (both in parts)
  the two parts merged on the less loaded node. The paper adds one pair per round; ``pairs_per_round`` allows more.
* ``"gain"`` (default, a multi-round view beyond the paper) — ALBIC is meant to reach a re-optimiser's (COLA's)
  collocation over many budgeted rounds (§5.3–5.4, Figs. 10–12), so the budget of every round should buy as much
  collocation as it can. Every pair offers two *moves*: the unit of one end joins the node of the other (a unit is a
  key group or a METIS part of a collocated set, moved whole; a pair therefore needs one move, or the size of the
  smaller part, never both). A move's *gain* is the traffic it makes node-local minus the traffic it cuts (all
  edges of the moved unit, not only the scored pair); its *cost* is the migrations it adds to the round. Moves are
  taken greedily by gain per migration, weighted by ``1 + BALANCE_WEIGHT · b`` where b ∈ [−1, 1] is how much the
  move narrows the two nodes' distance to the target utilisation (b = 1: from an overloaded node to an underloaded
  one), so collocation moves also do balancing work and leave the MILP's share of the budget for the rest. Scores
  are re-evaluated lazily (a popped move is re-scored on the current plan and committed only if it still beats the
  next one).

Both orders share the budget accounting (moves and bytes relative to the current assignment, ``pair_budget_share``
of the budget), the load band (a move may not push a node more than ``band`` from the target utilisation, or further
if it already is; if that rejects everything, the best move that fits the budget is taken anyway, the paper's one
pair) and the exact load change of a move (moved key group loads plus ``communication_cost`` × the rate of the edges
that become cut or local, charged to both ends as :func:`solvers.metrics.node_loads` does).

Complexity: O(P log P) for P candidate pairs plus, per evaluation of a move, O(deg) of the moved unit's edges.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from solvers.model import Problem

_EPS = 1e-9
#: weight of the balance term b ∈ [−1, 1] in a move's score: gain/migration × (1 + BALANCE_WEIGHT · b)
BALANCE_WEIGHT = 0.5
ORDERS = ("gain", "paper")


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
    target: dict[int, int] = field(default_factory=dict)
    choice: dict[int, list[int]] = field(default_factory=dict)
    added: list[tuple[int, int, int, int]] = field(default_factory=list)
    moves: int = 0
    nbytes: float = 0.0

    def unit(self, g: int) -> tuple[int, np.ndarray, int]:
        """(unit id, members, planned node) of key group ``g``."""
        u = int(self.unit_of[g])
        mem = self.members.get(u)
        if mem is None:
            mem = np.array([g], dtype=np.int64)
        return u, mem, int(self.target.get(u, int(self.hint[g])))

    def budget_full(self) -> bool:
        return self.max_moves is not None and self.moves >= self.max_moves


@dataclass
class Move:
    """Unit ``u`` (members ``mem``) goes from node ``s`` to node ``t`` and joins unit ``v``."""

    u: int
    mem: np.ndarray
    s: int
    v: int
    t: int
    gain: float
    d_moves: int
    d_bytes: float
    delta: dict[int, float]
    balance: float


def evaluate(st: PairState, u: int, mem: np.ndarray, s: int, v: int, t: int) -> Move:
    """The exact effect of moving unit ``u`` from ``s`` to ``t`` on the current plan: collocation gain (rate made
    local − rate cut), migrations and bytes added, utilisation change per node and balance term b."""
    p = st.problem
    cur = p.current
    rows = st.adj[mem]
    cols, data = rows.indices, rows.data
    ext = ~np.isin(cols, mem)
    cols, data = cols[ext], data[ext]
    hn = st.hint[cols]
    r_t = float(data[hn == t].sum())
    r_s = float(data[hn == s].sum())
    r_o = float(data.sum()) - r_t - r_s
    w = float(p.load[mem].sum())
    c = p.communication_cost
    d_moves = int((cur[mem] != t).sum() - (cur[mem] != s).sum())
    sb = p.state_bytes[mem]
    d_bytes = float(sb[cur[mem] != t].sum() - sb[cur[mem] != s].sum())
    dl_s = -w - c * r_t + c * r_s - c * r_o
    dl_t = w - c * r_t + c * r_s + c * r_o
    delta = {s: dl_s / p.capacity[s], t: dl_t / p.capacity[t]}
    T = st.t_util
    before = abs(st.util[s] - T) + abs(st.util[t] - T)
    after = abs(st.util[s] + delta[s] - T) + abs(st.util[t] + delta[t] - T)
    scale = abs(delta[s]) + abs(delta[t])
    bal = (before - after) / scale if scale > _EPS else 0.0
    return Move(u, mem, s, v, t, r_t - r_s, d_moves, d_bytes, delta, bal)


def fits(st: PairState, mv: Move, use_band: bool) -> str:
    """``"ok"``, ``"budget"`` (the round's pair budget cannot pay for it) or ``"band"``."""
    if st.max_moves is not None and st.moves + mv.d_moves > st.max_moves:
        return "budget"
    if st.max_bytes is not None and st.nbytes + mv.d_bytes > st.max_bytes * (1 + _EPS):
        return "budget"
    if use_band and st.band is not None:
        T = st.t_util
        for nd, dv in mv.delta.items():
            if not st.problem.removing[nd] and \
                    abs(st.util[nd] + dv - T) > max(st.band, abs(st.util[nd] - T)) + _EPS:
                return "band"
    return "ok"


def commit(st: PairState, mv: Move, gi: int, gj: int, case: int, options: list[int]) -> None:
    """Apply ``mv``: the moved unit joins unit ``v`` on node ``t``, which is pinned there (``options``)."""
    mem_v = st.members.get(mv.v, np.array([mv.v], dtype=np.int64))
    merged = np.concatenate([mem_v, mv.mem])
    st.moves += mv.d_moves
    st.nbytes += mv.d_bytes
    for nd, dv in mv.delta.items():
        st.util[nd] += dv
    st.hint[merged] = mv.t
    st.unit_of[mv.mem] = mv.v
    st.members[mv.v] = merged
    st.members.pop(mv.u, None)
    st.target.pop(mv.u, None)
    st.choice.pop(mv.u, None)
    st.target[mv.v] = mv.t
    st.choice[mv.v] = options
    st.added.append((gi, gj, mv.t, case))


def _score(mv: Move) -> float:
    if mv.gain <= _EPS:
        return -math.inf
    per = mv.gain / max(mv.d_moves, 0.5)  # a move back to the current node costs nothing: count half a move
    return per * (1.0 + BALANCE_WEIGHT * mv.balance)


def _options(st: PairState, gi: int, gj: int) -> list[Move]:
    ui, mi, ni = st.unit(gi)
    uj, mj, nj = st.unit(gj)
    if ui == uj or ni == nj:
        return []
    out = []
    removing = st.problem.removing
    if not removing[ni]:
        out.append(evaluate(st, uj, mj, nj, ui, ni))
    if not removing[nj]:
        out.append(evaluate(st, ui, mi, ni, uj, nj))
    return out


def add_pairs_gain(st: PairState, src: np.ndarray, dst: np.ndarray, limit: float) -> None:
    """The ``"gain"`` order (module docstring): lazy greedy over the two moves of every pair ``src[p] → dst[p]``."""
    heap: list[tuple[float, int, int]] = []
    for p in range(src.size):
        for k, mv in enumerate(_options(st, int(src[p]), int(dst[p]))):
            sc = _score(mv)
            if sc > -math.inf:
                heap.append((-sc, p, k))
    heapq.heapify(heap)
    fallback: tuple[float, int, int] | None = None
    while heap and len(st.added) < limit and not st.budget_full():
        neg, p, k = heapq.heappop(heap)
        gi, gj = int(src[p]), int(dst[p])
        opts = _options(st, gi, gj)
        if k >= len(opts):
            continue
        mv = opts[k]
        sc = _score(mv)
        if sc == -math.inf:
            continue
        if heap and sc < -heap[0][0] - _EPS:
            heapq.heappush(heap, (-sc, p, k))  # stale: it no longer beats the next one
            continue
        verdict = fits(st, mv, True)
        if verdict == "band":
            if fallback is None:
                fallback = (sc, p, k)
            continue
        if verdict != "ok":
            continue
        _commit_pair(st, mv, gi, gj)
    if not st.added and fallback is not None:  # every move breaks the band: the best one anyway (one pair)
        _, p, k = fallback
        gi, gj = int(src[p]), int(dst[p])
        opts = _options(st, gi, gj)
        if k < len(opts) and fits(st, opts[k], False) == "ok":
            _commit_pair(st, opts[k], gi, gj)


def _commit_pair(st: PairState, mv: Move, gi: int, gj: int) -> None:
    in_u = mv.mem.size >= 2
    in_v = mv.v in st.members
    case = 3 if (in_u and in_v) else 2 if (in_u or in_v) else 1
    options = [mv.t] if st.pin == "paper" else sorted({mv.s, mv.t})
    commit(st, mv, gi, gj, case, options)


def add_pairs_paper(st: PairState, order: np.ndarray, src: np.ndarray, dst: np.ndarray, limit: float) -> None:
    """The ``"paper"`` order (module docstring): pairs in ``order`` (highest traffic first), the node by the
    paper's three cases; a pair whose moves break the budget is skipped, one that breaks the band is kept for the
    fallback."""
    banded: list[int] = []
    for p in order.tolist():
        if len(st.added) >= limit or st.budget_full():
            break
        if _paper_pair(st, int(src[p]), int(dst[p]), True) == "band":
            banded.append(p)
    if not st.added:
        for p in banded:
            if _paper_pair(st, int(src[p]), int(dst[p]), False) == "ok":
                break


def _paper_pair(st: PairState, gi: int, gj: int, use_band: bool) -> str:
    ui, mi, ni = st.unit(gi)
    uj, mj, nj = st.unit(gj)
    if ui == uj:
        return "skip"
    in_i, in_j = mi.size >= 2, mj.size >= 2
    if in_i and not in_j:
        case, cands = 2, [ni]
    elif in_j and not in_i:
        case, cands = 2, [nj]
    else:
        case, cands = (3 if in_i else 1), [ni, nj]
    cands = [c for c in dict.fromkeys(cands) if not st.problem.removing[c]]
    if not cands:
        return "skip"
    t = min(cands, key=lambda c: (st.util[c], c))
    options = cands if st.pin == "either" else [t]
    # the unit not on t moves; when both ends share t already nothing moves (only the pin is added)
    if nj == t:
        mv = evaluate(st, ui, mi, ni, uj, t) if ni != t else Move(ui, mi, t, uj, t, 0.0, 0, 0.0, {}, 0.0)
    else:
        mv = evaluate(st, uj, mj, nj, ui, t)
    verdict = fits(st, mv, use_band)
    if verdict != "ok":
        return verdict
    commit(st, mv, gi, gj, case, options)
    return "ok"
