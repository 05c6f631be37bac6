"""The warm start that ALBIC's collocation step hands the MILP (Madsen, Zhou, Cao, §4.3.2 followed by §4.3.1; ``"gain"``
order of :mod:`solvers.albic.collocation_moves`): the migrations the pairs left, spent on balancing moves."""

from __future__ import annotations

import numpy as np

from solvers.albic.collocation_moves import Move, PairState, account, evaluate

_EPS = 1e-9


def balance_hint(st: PairState, max_moves: int | None, max_bytes: float | None) -> int:
    """Warm start for the MILP (``"gain"`` order): spend the migrations the pairs left on greedy balancing moves —
    repeatedly a unit that is not pinned (a key group or a METIS part, moved whole) from the most to the least
    utilised active node when that lowers the larger of the two nodes' distances to the target, preferring the
    unit whose move keeps the most collocated traffic per migration. The MILP (§4.3.1) still decides: these moves
    are not pinned, they only make its start (and its answer when the time limit is too short to improve on it)
    balanced. Returns the moves made."""
    p = st.problem
    active = np.flatnonzero(p.active)
    if active.size < 2:
        return 0
    T = st.t_util
    made = 0
    while (max_moves is None or st.moves < max_moves) and not st.out_of_time():
        ua = st.util[active]
        hi, lo = int(active[int(np.argmax(ua))]), int(active[int(np.argmin(ua))])
        worst = max(abs(float(st.util[hi]) - T), abs(float(st.util[lo]) - T))
        best: tuple[float, Move] | None = None
        seen: set[int] = set()
        for k in np.flatnonzero(st.hint == hi).tolist():
            if st.out_of_time():
                break
            u, mem, node = st.unit(k)
            if u in seen or u in st.target or node != hi:
                continue
            seen.add(u)
            mv = evaluate(st, u, mem, hi, u, lo)
            if mv.d_moves <= 0 and mem.size > 1:
                continue
            if max_moves is not None and st.moves + mv.d_moves > max_moves:
                continue
            if max_bytes is not None and st.nbytes + mv.d_bytes > max_bytes * (1 + _EPS):
                continue
            after = max(abs(float(st.util[hi]) + mv.delta[hi] - T), abs(float(st.util[lo]) + mv.delta[lo] - T))
            if after >= worst - _EPS:
                continue
            key = mv.gain / max(mv.d_moves, 1) - 1e-6 * after  # least collocation lost, then the better balance
            if best is None or key > best[0]:
                best = (key, mv)
        if best is None:
            break
        mv = best[1]
        account(st, mv)
        st.hint[mv.mem] = lo
        made += 1
    return made
