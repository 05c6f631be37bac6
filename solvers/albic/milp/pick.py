"""Choosing one move or swap among the scored candidates of a step of the ALBIC MILP planner's local search (§4.3.1;
:func:`solvers.albic.milp.search.improve`): the best improving one, or in the restarts' randomised greedy one of the
few best, each of a different key group."""

from __future__ import annotations

from typing import Any

import numpy as np

PICK_KEEP = 64             # improving candidates ordered in full per step (the rest by new distance only)


def pick(newd: np.ndarray, dc: np.ndarray, dss: np.ndarray, ok: np.ndarray, d: float, scale: float,
          rng: np.random.Generator | None = None, topk: int = 1, land: np.ndarray | None = None,
          unit: np.ndarray | None = None) -> tuple[tuple[Any, ...] | None, bool]:
    """Index of the best improving candidate: lowest new d, then lowest budget use ``dc``
    (:func:`solvers.albic.milp.search._use`), then lowest Σc·dev².

    With ``rng`` one of the ``topk`` best is drawn at random (the randomised greedy of the restarts), each the best
    candidate of a different ``unit`` (the unit of the critical node it moves, same shape as ``newd``): the few
    best candidates are often one key group sent to different nodes, and drawing among them changes nothing.
    With ``land`` (target mode) the cheapest candidate that lands the critical node inside the target band
    without pushing its partner out of it wins; only if there is none the rule above applies."""
    if land is not None:
        cand = ok & land
        if cand.any():
            dcb = np.broadcast_to(dc, newd.shape)
            cmin = dcb[cand].min()
            cand &= dcb <= cmin + 1e-12
            score = np.where(cand, dss, np.inf)
            if rng is not None and topk > 1:
                flat = np.flatnonzero(cand.ravel())
                order = flat[np.argsort(score.ravel()[flat], kind="stable")]
                return np.unravel_index(int(order[int(rng.integers(min(topk, order.size)))]), newd.shape), True
            return np.unravel_index(int(np.argmin(score)), score.shape), True
    tie_better = (newd <= d + 1e-12 * scale) & (dss < -1e-9 * scale * scale) & (dc <= 0)
    improving = ok & ((newd < d - 1e-9 * scale) | tie_better)
    if not improving.any():
        return None, False
    flat = np.flatnonzero(improving.ravel())
    nd = newd.ravel()[flat]
    if flat.size > PICK_KEEP:  # only the PICK_KEEP lowest new distances can be among the few best
        keep = nd == nd.min()  # often that many tie at the least (the next node's deviation): no partition
        if np.count_nonzero(keep) < PICK_KEEP:
            keep = nd <= np.partition(nd, PICK_KEEP - 1)[PICK_KEEP - 1]
        flat, nd = flat[keep], nd[keep]
    if rng is not None and topk > 1 and flat.size > 1:
        # quantise d so that near-ties are ordered by budget use and Σc·dev²
        first = first_by_unit(np.round(nd / (1e-6 * scale)), np.broadcast_to(dc, newd.shape).ravel()[flat],
                               dss.ravel()[flat], None if unit is None else
                               np.broadcast_to(unit, newd.shape).ravel()[flat], topk)
        i = first[int(rng.integers(len(first)))]
        return np.unravel_index(int(flat[i]), newd.shape), False
    best = nd.min()
    tie = nd <= best + 1e-9 * scale
    dcf = np.broadcast_to(dc, newd.shape).ravel()[flat]
    tie &= dcf <= dcf[tie].min() + 1e-12
    score = np.where(tie, dss.ravel()[flat], np.inf)
    return np.unravel_index(int(flat[int(np.argmin(score))]), newd.shape), False


def first_by_unit(q: np.ndarray, dc: np.ndarray, dss: np.ndarray, unit: np.ndarray | None, k: int) -> list[int]:
    """The first ``k`` candidates in the order (q, dc, dss, index), each of a different ``unit`` (any with None):
    what a stable lexsort followed by the first of each unit gives, in k passes of O(n)."""
    alive = np.ones(q.size, dtype=bool)
    out: list[int] = []
    while len(out) < k and alive.any():
        m = np.flatnonzero(alive & (q == q[alive].min()))
        m = m[dc[m] == dc[m].min()]
        i = int(m[np.argmin(dss[m])])
        out.append(i)
        if unit is None:
            alive[i] = False
        else:
            alive &= unit != unit[i]
    return out
