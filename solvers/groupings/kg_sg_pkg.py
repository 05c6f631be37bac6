"""The classic groupings: Key Grouping, Shuffle Grouping, Partial Key Grouping and Power of Two Choices.

Definitions follow ``d-choices-w-choices.txt`` §II-B (KG, SG, PKG) and ``consistent-grouping-heterogeneous-
cluster.txt`` §4.1/§4.3 (PoTC).
"""

from __future__ import annotations

import numpy as np

from solvers.groupings.base import Grouping, choice
from solvers.hashing import derive_seed

__all__ = ["KeyGrouping", "ShuffleGrouping", "PartialKeyGrouping", "PowerOfTwoChoices"]


def less_loaded_of_two(first: np.ndarray, second: np.ndarray, loads: np.ndarray) -> np.ndarray:
    """Route message i to whichever of ``first[i]``, ``second[i]`` has the lower local load (ties: ``first``),
    counting each message as it goes — the exact sequential rule of PKG (Nasir et al., ICDE 2015, §III) and PoTC.
    ``loads`` (this source's local load vector) is updated in place. A plain loop over Python ints: the decisions
    depend on each other, and this runs at ~2 M messages/s."""
    L = loads.tolist()
    out = [0] * len(first)
    for i, (a, b) in enumerate(zip(first.tolist(), second.tolist(), strict=True)):
        if L[b] < L[a]:
            a = b
        L[a] += 1
        out[i] = a
    loads[:] = L
    return np.asarray(out, dtype=np.int64)


class KeyGrouping(Grouping):
    """KG: every message of a key goes to worker F_1(k) = hash(k) mod n (D-C paper §II-B; CG paper §4.1).

    Stateless and fully vectorised: O(m) numpy work for m keys. One worker per key (replication 1).
    """

    name = "kg"

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        out = choice(ids, self.n, self.seed, 0)
        self.loads += np.bincount(out, minlength=self.n)
        return out


class ShuffleGrouping(Grouping):
    """SG: round-robin over the workers, ignoring keys (D-C paper §II-B: "SG is usually implemented via
    round-robin selection of workers"). Each source starts at worker ``source_index mod n``. Vectorised."""

    name = "sg"

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        self._next = self.source_index % self.n

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        out = (self._next + np.arange(len(ids), dtype=np.int64)) % self.n
        self._next = int((self._next + len(ids)) % self.n)
        self.loads += np.bincount(out, minlength=self.n)
        return out


class PartialKeyGrouping(Grouping):
    """PKG: key splitting over two hash choices F_1(k), F_2(k), each message to the one with the smaller LOCAL
    load (local load estimation: messages this source sent), ties to F_1 (D-C paper §II-B, Greedy-2 of §III-B;
    CG paper Eq. "P_t(j) = argmin_i L_i(t)").

    The two hashes are computed for the whole array in numpy; the greedy decisions are an exact sequential loop
    (the result equals routing the messages one at a time). At most two workers per key.
    """

    name = "pkg"

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        return less_loaded_of_two(choice(ids, self.n, self.seed, 0), choice(ids, self.n, self.seed, 1), self.loads)


class PowerOfTwoChoices(Grouping):
    """PoTC (Azar et al.): each MESSAGE picks two workers uniformly at random and goes to the less loaded one
    (CG paper §4.3 and §6.1.1: "two hashes are applied to the messages, rather than the keys"). A key may reach
    every worker. The two choices are hashes of the message's sequence number at this source, with a per-source
    seed, so the result does not depend on how the stream is cut into arrays."""

    name = "potc"

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0) -> None:
        super().__init__(n_workers, seed=seed, source_index=source_index)
        self._mseed = derive_seed(self.seed, 1000 + self.source_index)

    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:
        seq = np.arange(self.sent, self.sent + len(ids), dtype=np.int64)
        return less_loaded_of_two(choice(seq, self.n, self._mseed, 0), choice(seq, self.n, self._mseed, 1), self.loads)
