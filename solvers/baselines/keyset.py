"""A sorted set of non-negative integer keys with vectorised predecessor queries and batched updates, for Flux
(:mod:`solvers.baselines.flux`): every balance pass asks, for ~n/2 nodes at once, for the biggest key group below a
limit and then moves ~n/2 key groups, out of m ≫ n.

Keeping one sorted array would cost O(m) per pass. Instead the keys live in a sorted ``base`` array, where removed
keys are only marked dead, and a small sorted ``extra`` array of the keys added since: a query is a binary search
in each (skipping dead keys of ``base`` through pointers that jump over runs of them), an update costs
O(k log m + |extra|) for k keys. The two are merged again (O(m)) when the dead keys and ``extra`` together pass
a quarter of ``base`` (or ``MERGE_AT``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

MERGE_AT = 4096  # dead keys plus added ones above which (or above a quarter of ``base``) the arrays are merged


class KeySet:
    """Sorted distinct keys ≥ 0 (see the module docstring)."""

    def __init__(self, keys: np.ndarray, dtype: type[np.signedinteger]) -> None:
        """``keys``: sorted, distinct, ≥ 0, each < the largest value of ``dtype``."""
        self.dtype = dtype
        self._reset(np.asarray(keys, dtype=dtype))

    def _reset(self, base: np.ndarray) -> None:
        self.base = base
        self.dead = np.zeros(base.size, dtype=bool)
        # for a dead position p: every position in (jump[p], p] is dead (-1: none alive before p)
        self.jump = np.arange(-1, base.size - 1, dtype=np.int64)
        self.n_dead = 0
        self.extra = np.zeros(0, dtype=self.dtype)

    @property
    def size(self) -> int:
        return int(self.base.size - self.n_dead + self.extra.size)

    def _alive_at_or_before(self, pos: np.ndarray) -> np.ndarray:
        """For positions of ``base`` (-1 allowed), the nearest alive position at or before each (-1 if none); the
        pointers of the dead positions passed on the way are shortened to the answer (path compression)."""
        pos = pos.copy()
        seen: list[tuple[np.ndarray, np.ndarray]] = []
        live = np.flatnonzero(pos >= 0)
        while live.size:   # each round moves every dead position left: it ends
            at = pos[live]
            live, at = live[self.dead[at]], at[self.dead[at]]
            if not live.size:
                break
            seen.append((at, live))
            pos[live] = self.jump[at]
            live = live[pos[live] >= 0]
        for at, which in seen:
            self.jump[at] = pos[which]
        return pos

    def before(self, q: np.ndarray) -> np.ndarray:
        """Per query, the largest key < ``q`` (-1 if none)."""
        q = np.asarray(q).astype(self.dtype)
        pb = self._alive_at_or_before(np.searchsorted(self.base, q) - 1)
        kb = np.where(pb >= 0, self.base[np.maximum(pb, 0)] if self.base.size else -1, -1)
        if not self.extra.size:
            out: np.ndarray = kb.astype(np.int64)
            return out
        pe = np.searchsorted(self.extra, q) - 1
        ke = np.where(pe >= 0, self.extra[np.maximum(pe, 0)], -1)
        out = np.maximum(kb, ke).astype(np.int64)
        return out

    def descending(self, q: int) -> Iterator[int]:
        """The keys < ``q``, largest first."""
        base, dead, jump, extra = self.base, self.dead, self.jump, self.extra
        pb = int(np.searchsorted(base, q)) - 1
        pe = int(np.searchsorted(extra, q)) - 1
        while True:
            while pb >= 0 and dead[pb]:
                pb = int(jump[pb])
            kb = int(base[pb]) if pb >= 0 else -1
            ke = int(extra[pe]) if pe >= 0 else -1
            if kb < 0 and ke < 0:
                return
            if kb > ke:
                yield kb
                pb -= 1
            else:
                yield ke
                pe -= 1

    def between(self, lo: int, hi: int) -> np.ndarray:
        """The keys in [lo, hi), ascending."""
        a, b = np.searchsorted(self.base, [lo, hi])
        part = self.base[a:b][~self.dead[a:b]]
        c, d = np.searchsorted(self.extra, [lo, hi])
        out: np.ndarray = np.sort(np.concatenate([part, self.extra[c:d]])).astype(np.int64)
        return out

    def replace(self, old: np.ndarray, new: np.ndarray) -> None:
        """Remove the keys ``old`` (each in the set) and add the keys ``new`` (none in it after the removal)."""
        old = np.asarray(old).astype(self.dtype)
        new = np.asarray(new).astype(self.dtype)
        if old.size:
            pos = np.minimum(np.searchsorted(self.base, old), max(self.base.size - 1, 0))
            in_base = np.zeros(old.size, dtype=bool)
            if self.base.size:
                in_base = (self.base[pos] == old) & ~self.dead[pos]
            hit = pos[in_base]
            self.dead[hit] = True
            self.jump[hit] = hit - 1
            self.jump[hit] = self._alive_at_or_before(hit - 1)   # past the dead run below, if any
            self.n_dead += int(hit.size)
            gone = old[~in_base]
            if gone.size:
                keep = np.ones(self.extra.size, dtype=bool)
                keep[np.searchsorted(self.extra, gone)] = False
                self.extra = self.extra[keep]
        if new.size:
            new = np.sort(new)
            self.extra = np.insert(self.extra, np.searchsorted(self.extra, new), new)
        if self.n_dead + self.extra.size > max(self.base.size // 4, MERGE_AT):
            rest = self.base[~self.dead]
            self._reset(np.insert(rest, np.searchsorted(rest, self.extra), self.extra))
