"""Common interface of the stream groupings.

A grouping instance is the routing state of ONE source (upstream operator instance): its local load vector, its
sketch, its round-robin counter. A simulation with s sources creates s instances with the same ``seed`` (so every
source uses the same hash functions, as a real deployment must) and different ``source_index`` (per-source
randomness and round-robin offsets).

``route(keys, now)`` takes a numpy array of integer key ids (or a list of str/bytes keys, which are turned into
64-bit ids with :func:`key_ids`), routes them in order and returns an ``int64`` array of worker indices.
Stateless groupings (KG, SG, CH) route the whole array in numpy; stateful ones (PKG, …) hash the whole array
in numpy and then run the exact sequential decision loop over Python lists (≈ 10 M decisions/s), so their
result equals routing the messages one by one. ``now`` is the simulated time in seconds for the groupings whose
rules use wall-clock periods (DKG, CG); ``observe(now, utilisation)`` delivers worker signals (CG).

All hashing uses :mod:`solvers.hashing`; hash function i of a grouping is ``hash64(key, derive_seed(seed, i))``
mod n, so KG's worker is PKG's first choice and D-Choices' F_1, F_2 are PKG's two choices.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from solvers.errors import InvalidInput
from solvers.hashing import derive_seed, hash64_array, hash64_int_seeds, mixed_seed

__all__ = ["Grouping", "ProbeSequence", "key_ids", "choice", "choices", "check_int", "check_float"]

#: seed of the hash that turns str/bytes keys into 64-bit key ids
KEY_ID_SEED = 0x5EED


def key_ids(keys: Any) -> np.ndarray:
    """Integer key ids (``int64``) for a numpy integer array (returned as is) or a sequence of str/bytes/int keys
    (hashed with the shared stable hash; distinct strings collide with probability ~ m²/2⁶⁵)."""
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        return keys.astype(np.int64, copy=False)
    if isinstance(keys, (list, tuple)) and keys and all(isinstance(k, (int, np.integer)) and not isinstance(k, bool)
                                                        and -(1 << 63) <= int(k) < (1 << 63) for k in keys):
        return np.asarray(keys, dtype=np.int64)
    return hash64_array(keys, KEY_ID_SEED).view(np.int64)


def choice(keys: np.ndarray, n: int, seed: int, i: int) -> np.ndarray:
    """The i-th hash function F_i(k) ∈ [0, n) for every key (int64 array)."""
    h = hash64_array(keys, derive_seed(seed, i))
    return (h % np.uint64(n)).astype(np.int64)


def choices(keys: np.ndarray, n: int, seed: int, d: int, start: int = 0) -> np.ndarray:
    """Matrix (len(keys), d) of hash choices F_start … F_{start+d−1}."""
    out = np.empty((len(keys), d), dtype=np.int64)
    for j in range(d):
        out[:, j] = choice(keys, n, seed, start + j)
    return out


class ProbeSequence:
    """The hash functions F_0, F_1, … of one grouping seed, evaluated for ONE key at a time, vectorised over the
    function index: ``of(key, start, count)[j] == choice([key], n, seed, start + j)[0]``."""

    def __init__(self, n: int, seed: int):
        self.n = np.uint64(n)
        self.seed = seed
        self._mixed = np.empty(0, dtype=np.uint64)

    def _ensure(self, count: int) -> None:
        have = len(self._mixed)
        if count > have:
            new = max(count, 2 * have, 16)
            extra = np.array([mixed_seed(derive_seed(self.seed, i)) for i in range(have, new)], dtype=np.uint64)
            self._mixed = np.concatenate([self._mixed, extra])

    def of(self, key: int, start: int, count: int) -> list[int]:
        self._ensure(start + count)
        h = hash64_int_seeds(key, self._mixed[start:start + count])
        out: list[int] = (h % self.n).astype(np.int64).tolist()
        return out


def check_int(name: str, value: Any, lo: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise InvalidInput(name, f"must be an integer >= {lo}, got {value!r}")
    return int(value)


def check_float(name: str, value: Any, lo: float = 0.0, hi: float = math.inf, lo_open: bool = True) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(name, f"must be a number, got {value!r}") from None
    if not math.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
        rng = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise InvalidInput(name, f"must be in {rng}, got {value!r}")
    return v


class Grouping:
    """Base class: one source's routing state. Subclasses implement :meth:`_route` on int64 key ids."""

    #: registry name
    name = "base"
    #: True if the grouping's rules depend on simulated time (DKG, CG)
    time_driven = False
    #: True if it reacts to worker signals (CG)
    uses_signals = False

    def __init__(self, n_workers: int, *, seed: int = 0, source_index: int = 0):
        self.n = check_int("workers", n_workers)
        self.seed = int(seed)
        self.source_index = check_int("source_index", source_index, lo=0)
        #: this source's local load estimate: messages it sent to each worker
        self.loads = np.zeros(self.n, dtype=np.int64)
        self.sent = 0

    def route(self, keys: Any, now: float | None = None) -> np.ndarray:
        """Route ``keys`` (in order) and return the worker of each message (``int64`` array)."""
        ids = key_ids(keys)
        if ids.ndim != 1:
            raise InvalidInput("keys", "must be a one-dimensional array")
        if len(ids) == 0:
            return np.empty(0, dtype=np.int64)
        out = self._route(ids, now)
        self.sent += len(ids)
        return out

    def route_one(self, key: Any, now: float | None = None) -> int:
        """Route a single key (convenience for per-message integrations)."""
        arr = np.asarray([key], dtype=np.int64) if isinstance(key, (int, np.integer)) else [key]
        return int(self.route(arr, now)[0])

    def observe(self, now: float, utilisation: np.ndarray) -> None:
        """Worker signals (utilisation per worker) at simulated time ``now``; ignored unless ``uses_signals``."""


    def _route(self, ids: np.ndarray, now: float | None) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, seed={self.seed}, source={self.source_index})"
