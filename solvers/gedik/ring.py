"""The consistent hash H_c of Gedik's partitioning function (§4.1.1) and the uniform-hash baseline.

Consistent hash (Karger et al., the paper's [19]; bucketing from [20]), exactly:

* the ring is the 64-bit unsigned integer circle [0, 2**64);
* channel ``c`` (0-based) has ``replicas`` points: ``point(c, r) = hash64(c * 2**32 + r, seed)`` for
  r = 0 .. replicas-1, where :func:`solvers.hashing.hash64` hashes the *integer* ``c * 2**32 + r``;
* a key ``k`` sits at ``hash64(k, seed)`` (its UTF-8 bytes; the same seed);
* ``H_c(k)`` is the owner of the first point clockwise at or after the key: the smallest point ``>= hash64(k)``,
  wrapping to the smallest point of the ring when there is none. Equal points are ordered by (channel, replica).

A channel's points do not depend on N, so going from N to N+1 channels only moves keys to the new channel
(footnote 1 of the paper), and every process computes the same ring from (channels, replicas, seed).

Lookup is O(1) by bucketing the ring (§4.1.1, [20]): the top ``bucket_bits`` bits of a key's position select a
bucket; a table holds the index of the first point at or after the bucket's start; keys whose bucket contains
points advance past the (few) points below them. The answer is identical to a binary search (tested). The paper's
C++ used 1000 replicas and 100 buckets with a tree per bucket; here the bucket count is a power of two ≥ 4 × the
number of points so that a vectorised lookup needs no per-bucket tree.

Uniform hash baseline: ``channel = hash64(k, seed) mod N`` (unsigned).
"""

from __future__ import annotations

import numpy as np

from rebalancer_client.contract.partitioning import DEFAULT_REPLICAS, DEFAULT_SEED
from solvers.hashing import hash64_array

__all__ = ["ConsistentHash", "uniform_lookup", "DEFAULT_REPLICAS", "DEFAULT_SEED"]


class ConsistentHash:
    """Consistent hash ring over ``channels`` channels with ``replicas`` points per channel (§4.1.1).

    Construction O(N·replicas·log(N·replicas)); :meth:`lookup` of m key positions O(m) (bucketed).
    """

    def __init__(self, channels: int, replicas: int = DEFAULT_REPLICAS, seed: int = DEFAULT_SEED):
        if channels < 1:
            raise ValueError("channels must be >= 1")
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        self.channels = int(channels)
        self.replicas = int(replicas)
        self.seed = int(seed)
        c = np.repeat(np.arange(self.channels, dtype=np.uint64), self.replicas)
        r = np.tile(np.arange(self.replicas, dtype=np.uint64), self.channels)
        pts = hash64_array((c << np.uint64(32)) | r, self.seed)
        order = np.lexsort((r, c, pts))  # by point, ties by (channel, replica)
        self.points = pts[order]
        self.owner = c[order].astype(np.int32)
        n = len(self.points)
        self._owner_ext = np.append(self.owner, self.owner[0])  # index n wraps to the first point
        bits = max(8, int(np.ceil(np.log2(4 * n))))
        self.bucket_bits = min(bits, 24)
        self._shift = np.uint64(64 - self.bucket_bits)
        starts = np.arange(1 << self.bucket_bits, dtype=np.uint64) << self._shift
        first = np.searchsorted(self.points, starts, side="left")
        self._first = np.append(first, n).astype(np.int64)
        occ = np.diff(self._first)
        self._max_occ = int(occ.max()) if len(occ) else 0
        self._bucket_has = occ > 0

    def lookup(self, positions: np.ndarray) -> np.ndarray:
        """Channels (int32) of key positions (``np.uint64`` hashes) — bucketed O(1) per key."""
        h = np.asarray(positions, dtype=np.uint64)
        b = (h >> self._shift).astype(np.int64)
        idx = self._first[b]
        sel = np.flatnonzero(self._bucket_has[b])
        if len(sel):
            hs = h[sel]
            start = idx[sel]
            occ = self._first[b[sel] + 1] - start
            adv = np.zeros(len(sel), dtype=np.int64)
            last = len(self.points) - 1
            for k in range(self._max_occ):
                live = occ > k
                if not live.any():
                    break
                adv += live & (self.points[np.minimum(start + k, last)] < hs)
            idx[sel] = start + adv
        return self._owner_ext[idx]

    def lookup_bisect(self, positions: np.ndarray) -> np.ndarray:
        """Reference lookup by binary search (O(log(N·replicas)) per key); same result as :meth:`lookup`."""
        idx = np.searchsorted(self.points, np.asarray(positions, dtype=np.uint64), side="left")
        return self._owner_ext[idx]

    def arc_shares(self) -> np.ndarray:
        """(N,) fraction of the ring each channel owns (the expected share of uniformly hashed keys)."""
        pts = self.points.astype(np.float64)
        arcs = np.diff(np.concatenate(([pts[-1] - 2.0**64], pts)))  # arc (prev, p] belongs to owner of p
        return np.bincount(self.owner, weights=arcs, minlength=self.channels) / 2.0**64

    def moved_fraction(self, other: ConsistentHash | None = None, other_uniform: int | None = None,
                       samples: int = 1 << 18) -> float:
        """Fraction of the key space whose channel differs between ``self`` and another ring (exact, by merging
        the two rings' points), or the uniform hash over ``other_uniform`` channels (by quasi-random sampling)."""
        if other is not None and other_uniform is None:
            cuts = np.union1d(self.points, other.points)  # elementary arcs (prev, cut]
            a = self.lookup_bisect(cuts)
            b = other.lookup_bisect(cuts)
            c = cuts.astype(np.float64)
            arcs = np.diff(np.concatenate(([c[-1] - 2.0**64], c)))
            return float(arcs[a != b].sum() / 2.0**64)
        if other_uniform is None:
            raise ValueError("give exactly one of other, other_uniform")
        pos = hash64_array(np.arange(samples, dtype=np.uint64), 0x5EED)
        return float(np.mean(self.lookup(pos) != uniform_lookup(pos, int(other_uniform))))


def uniform_lookup(positions: np.ndarray, channels: int) -> np.ndarray:
    """Uniform hash baseline: ``position mod N`` (unsigned) as int32."""
    return (np.asarray(positions, dtype=np.uint64) % np.uint64(channels)).astype(np.int32)
