"""Step 1 of ALBIC's Algorithm 2 (Madsen, Zhou, Cao, §4.3.2): the key group pairs worth collocating, scored from the
communication statistics (:func:`pair_scores`; used by :func:`solvers.albic.collocation.albic`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from solvers.errors import InvalidInput
from solvers.model import Problem


@dataclass
class Pairs:
    """Candidate pairs of step 1: ``src[p] → dst[p]`` with rate ``rate[p]`` above the score threshold.

    ``collocated[p]`` tells whether both ends share a node in the assignment the scores were computed on.
    ``threshold[p]`` is sF · avg(src[p]).
    """

    src: np.ndarray
    dst: np.ndarray
    rate: np.ndarray
    threshold: np.ndarray
    collocated: np.ndarray

    def __len__(self) -> int:
        return int(self.src.shape[0])


def pair_scores(problem: Problem, score_factor: float = 1.5, assignment: np.ndarray | None = None) -> Pairs:
    """Step 1 of Algorithm 2: the key group pairs worth collocating.

    out(gi) is the total rate gi sends; the number of downstream key groups of gi is Σ |DO| over the operators DO
    that gi's operator O sends to (key groups without an operator name share the operator ""); avg(gi) =
    out(gi) / that number. A directed edge gi → gj is a candidate when out(gi, gj) > sF · avg(gi).

    Args:
        problem: the problem (communication matrix, operators, current assignment).
        score_factor: sF (paper default 1.5; 1 = "more than average").
        assignment: assignment deciding "collocated"; default ``problem.current``.

    Returns:
        :class:`Pairs`, in edge order. O(m + E).
    """
    if not (score_factor >= 0) or not math.isfinite(score_factor):
        raise InvalidInput("params.score_factor", f"must be a finite number ≥ 0, got {score_factor}")
    a = problem.current if assignment is None else np.asarray(assignment, dtype=np.int64)
    src, dst, rate = problem.edges()
    keep = rate > 0
    src, dst, rate = src[keep], dst[keep], rate[keep]
    m = problem.n_key_groups
    if src.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return Pairs(z, z, np.zeros(0), np.zeros(0), np.zeros(0, dtype=bool))
    codes = {o: i for i, o in enumerate(dict.fromkeys(problem.operator))}
    op = np.fromiter(map(codes.__getitem__, problem.operator), dtype=np.int64, count=m)
    n_ops = len(codes)
    op_size = np.bincount(op, minlength=n_ops)
    # O.down: the distinct (O, DO) operator edges
    od = np.unique(op[src] * n_ops + op[dst])
    down_count = np.bincount(od // n_ops, weights=op_size[od % n_ops], minlength=n_ops)
    out = np.bincount(src, weights=rate, minlength=m)
    avg = out / np.maximum(down_count[op], 1.0)
    thr = score_factor * avg[src]
    cand = rate > thr
    s, d = src[cand], dst[cand]
    return Pairs(s, d, rate[cand], thr[cand], a[s] == a[d])
