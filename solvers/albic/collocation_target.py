"""Single-key-group collocation moves of ALBIC's step 3 beyond the paper's candidate pairs, used by
:func:`solvers.albic.collocation_moves.add_pairs_gain`.

* ``pair_order="gain"``: a key group not in a pair moves towards the node holding more of its traffic (the fully
  partitioned edges Algorithm 2's scores, §4.3.2 lines 1–13, ignore).
* ``pair_order="target"`` (a deviation from Algorithm 2, after COLA's whole-graph partitioning, §5.2): every key
  group has a *goal* node, the METIS k-way partition of the whole traffic graph balanced by load, relabelled to the
  nodes that already hold most of each part (:func:`solvers.graph_partitioning.balanced_target`, kept stable
  across rounds). Each round moves key groups to their goal, best first by (traffic made local now +
  ``FUTURE_WEIGHT`` × traffic to neighbours whose goal is the same node but which are not there yet) per
  migration, so the moves of all rounds go the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    from solvers.albic.collocation_moves import PairState

_EPS = 1e-9
#: single-key-group candidates (and a goal) only when key groups × nodes is at most this (a dense (m, n) matrix)
FREE_MOVE_CELLS = 4_000_000
#: weight of the traffic a goal move prepares (neighbours with the same goal, not there yet) in its score
FUTURE_WEIGHT = 0.5


def free_candidates(st: PairState, ends: np.ndarray) -> list[tuple[int, int]]:
    """Single key groups that are no unit's member and not pinned, with a node to move to: ``(−1 − g, node)``.
    With a goal (``st.goal``), every such key group away from its goal, towards it; otherwise those not an end of a
    candidate pair (``ends``) with a node where more of their traffic would be local, the best node each (skipped
    on very large instances)."""
    p = st.problem
    m, n = p.n_key_groups, p.n_nodes
    if m == 0:
        return []
    rows = np.arange(m)
    single = st.unit_of == rows
    single[list(st.members)] = False
    if st.goal is not None:
        ok = np.flatnonzero(single & (st.goal != st.hint) & ~p.removing[st.goal])
        return [(-1 - int(g), int(st.goal[g])) for g in ok if int(st.unit_of[g]) not in st.target]
    if m * n > FREE_MOVE_CELLS:
        return []
    nr = (st.adj @ sp.csr_matrix((np.ones(m), (rows, st.hint)), shape=(m, n))).toarray()
    base = nr[rows, st.hint].copy()
    nr[:, p.removing] = -np.inf
    nr[rows, st.hint] = -np.inf
    t = nr.argmax(axis=1)
    single[ends] = False
    ok = np.flatnonzero(single & (nr[rows, t] - base > _EPS))
    return [(-1 - int(g), int(t[g])) for g in ok]


def future_gain(st: PairState, cols: np.ndarray, data: np.ndarray, t: int) -> float:
    """Traffic of a unit to key groups outside it (its external edges: neighbours ``cols``, rates ``data``) whose
    goal is ``t`` but which are planned elsewhere: what the unit's move to ``t`` prepares (0 without a goal)."""
    if st.goal is None:
        return 0.0
    sel = (st.goal[cols] == t) & (st.hint[cols] != t)
    return float(data[sel].sum())
