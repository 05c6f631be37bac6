"""Load ranges and range minima for :mod:`solvers.albic.milp.lagrange` (the Lagrangian bound of §4.3.1).

A pattern's ``b`` arrivals (or ``a`` departures) whose loads sum into ``[lo, hi]`` are priced rank by rank: the
j-th largest lies in a range of loads (:func:`rank_ranges`), which is a contiguous range of the key groups sorted
by load, and its price is the smallest price in that range (:class:`RangeMin`, a sparse table rebuilt per price
vector; the ranges are fixed per distance and prepared once).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class RangeMin:
    """Range minimum (value and position) over an array (sparse table as one padded 2-D array), rebuilt per λ;
    the queries are fixed per candidate set (:func:`prepare`)."""

    def build(self, v: np.ndarray) -> None:
        n = v.size
        levels = max(1, n.bit_length())
        V = np.full((levels, n), np.inf)
        P = np.zeros((levels, n), dtype=np.int64)
        V[0], P[0] = v, np.arange(n)
        for j in range(1, levels):
            h = 1 << (j - 1)
            w = n - (1 << j) + 1
            if w <= 0:
                break
            a, b = V[j - 1, :w], V[j - 1, h: h + w]
            tb = b < a
            V[j, :w] = np.where(tb, b, a)
            P[j, :w] = np.where(tb, P[j - 1, h: h + w], P[j - 1, :w])
        self.V, self.P = V, P

    @staticmethod
    def prepare(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The distinct ranges [lo, hi) as (level, left, right start, inverse map)."""
        key = lo.astype(np.int64) * (1 << 32) + hi
        uk, inv = np.unique(key, return_inverse=True)
        ulo, uhi = uk >> 32, uk & ((1 << 32) - 1)
        k = np.floor(np.log2(np.maximum(uhi - ulo, 1))).astype(np.int64)
        return k, ulo, uhi - (1 << k), inv

    def query(self, q: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        k, l0, h0, inv = q
        va, vb = self.V[k, l0], self.V[k, h0]
        tb = vb < va
        return np.where(tb, vb, va)[inv], np.where(tb, self.P[k, h0], self.P[k, l0])[inv]


def rank_ranges(lo: np.ndarray, hi: np.ndarray, cnt: np.ndarray, vmin: float, vmax: float, eps: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For sets of ``cnt`` values in [vmin, vmax] summing into [lo, hi]: the range of the j-th largest value
    (j = 1..cnt): [(lo − (j−1)·vmax)/(cnt−j+1), (hi − (cnt−j)·vmin)/j] (the j−1 larger ones weigh at most vmax
    each, the cnt−j+1 others at most the j-th each; symmetrically), widened by ``eps``. Returns (row, lower,
    upper) per term."""
    row = np.repeat(np.arange(cnt.size), cnt)
    j = np.arange(row.size) - np.repeat(np.cumsum(cnt) - cnt, cnt) + 1
    c = cnt[row]
    low = np.maximum((lo[row] - (j - 1) * vmax) / (c - j + 1), vmin) - eps
    up = np.minimum((hi[row] - (c - j) * vmin) / j, vmax) + eps
    return row, low, up


def ok_terms(row: np.ndarray, low: np.ndarray, up: np.ndarray, rows: int,
             to_idx: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
             ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """The index ranges ``[lo, hi)`` (``to_idx``: loads → positions in a load-sorted array) of the rank terms of
    (row, low, up) from :func:`rank_ranges`, and per row whether every one of its terms has a key group in range
    (else no set of that size fits: the pattern is impossible)."""
    lo_i, hi_i = to_idx(low, up)
    nonempty = (hi_i > lo_i) & (low <= up)
    ok = np.ones(rows, dtype=bool)
    np.logical_and.at(ok, row, nonempty)
    if row.size == 0:
        return ok, None
    return ok, (row, lo_i, hi_i)
