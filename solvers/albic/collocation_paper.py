"""Step 3 of ALBIC's Algorithm 2 as printed (Madsen, Zhou, Cao, §4.3.2, lines 24–37; ``pair_order="paper"``):
the highest-traffic to-be-collocated pair first; case 1 (neither end in a part) on the less loaded of the two
nodes, case 2 (one end in a part) on that part's node, case 3 (both in parts) the parts merged on the less loaded
node. Budget, band and load accounting are shared with the ``"gain"`` order (:mod:`solvers.albic.collocation_moves`).
"""

from __future__ import annotations

import numpy as np

from solvers.albic.collocation_moves import Move, PairState, commit, evaluate, fits

__all__ = ["add_pairs_paper"]


def add_pairs_paper(st: PairState, order: np.ndarray, src: np.ndarray, dst: np.ndarray, limit: float) -> None:
    """The ``"paper"`` order (module docstring): pairs in ``order`` (highest traffic first), the node by the
    paper's three cases; a pair whose moves break the budget is skipped, one that breaks the band is kept for the
    fallback."""
    banded: list[int] = []
    for p in order.tolist():
        if len(st.added) >= limit or st.budget_full() or st.out_of_time():
            break
        if _paper_pair(st, int(src[p]), int(dst[p]), True) == "band":
            banded.append(p)
    if not st.added:
        for p in banded:
            if _paper_pair(st, int(src[p]), int(dst[p]), False) == "ok":
                break


def _paper_pair(st: PairState, gi: int, gj: int, use_band: bool) -> str:
    (ui, mi, ni), (uj, mj, nj) = st.unit(gi), st.unit(gj)
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
