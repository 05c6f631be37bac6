"""Key streams for the offline simulator.

Every stream yields chunks of dense integer key ids in [0, n_keys) (``int64``), so the simulator can count
replication with a dense table. Key id 0 is the hottest key of a Zipf stream (rank − 1); the groupings hash ids,
so the numbering does not favour any worker.

* :class:`ZipfStream` — keys drawn i.i.d. with p_r ∝ 1/r^z over ``keys`` ranks (the papers' ZF datasets).
* :class:`SkewedStream` — one key has share r, the other keys share the rest uniformly (the DKG paper's
  country-skew-rX datasets: 204 keys).
* :class:`DriftingStream` — Zipf whose rank → key mapping is re-drawn every phase, so the hot keys change
  (concept drift, as in the D-C paper's cashtags dataset).
* :class:`FileStream` — one key per line of a text file (mapped to dense ids in order of first appearance).
* :class:`ArrayStream` — an in-memory array of keys.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from solvers.errors import InvalidInput

__all__ = ["Stream", "ZipfStream", "SkewedStream", "DriftingStream", "FileStream", "ArrayStream",
           "zipf_probabilities", "zipf_exponent_for_top_share"]


def zipf_probabilities(z: float, keys: int) -> np.ndarray:
    """p_r = r^−z / Σ_{x≤K} x^−z for r = 1 … K (the CG paper's f(r, m, z), §6)."""
    if keys < 1:
        raise InvalidInput("keys", f"must be >= 1, got {keys}")
    if not math.isfinite(z) or z < 0:
        raise InvalidInput("zipf", f"exponent must be a finite number >= 0, got {z}")
    w = np.arange(1, keys + 1, dtype=float) ** (-float(z))
    p: np.ndarray = w / w.sum()
    return p


def zipf_exponent_for_top_share(p1: float, keys: int) -> float:
    """The exponent z for which the top key of a Zipf over ``keys`` keys has share ``p1`` (bisection)."""
    if not (1.0 / keys < p1 < 1.0):
        raise InvalidInput("p1", f"must be in (1/keys, 1), got {p1}")
    lo, hi = 0.0, 20.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if zipf_probabilities(mid, keys)[0] < p1:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


class Stream:
    """A finite stream of key ids. Subclasses set ``n_keys``, ``n_messages`` and implement :meth:`chunks`."""

    n_keys: int
    n_messages: int
    description: str = "stream"

    def chunks(self, size: int) -> Iterator[np.ndarray]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"kind": self.description, "keys": int(self.n_keys), "messages": int(self.n_messages)}


def _check_messages(messages: Any) -> int:
    if isinstance(messages, bool) or not isinstance(messages, (int, np.integer)) or messages < 1:
        raise InvalidInput("messages", f"must be an integer >= 1, got {messages!r}")
    return int(messages)


class _SampledStream(Stream):
    """i.i.d. keys from a probability vector (inverse-CDF sampling, chunk by chunk, seeded)."""

    def __init__(self, probs: np.ndarray, messages: int, seed: int):
        self.p = probs
        self._cdf = np.cumsum(probs)
        self._cdf[-1] = 1.0
        self.n_keys = len(probs)
        self.n_messages = _check_messages(messages)
        self.seed = int(seed)

    def _sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.searchsorted(self._cdf, rng.random(size), side="right").astype(np.int64)

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        left = self.n_messages
        while left > 0:
            m = min(size, left)
            yield self._sample(rng, m)
            left -= m


class ZipfStream(_SampledStream):
    """Zipf(z) over ``keys`` keys, ``messages`` messages, seeded. Key id r−1 has probability ∝ r^−z."""

    description = "zipf"

    def __init__(self, z: float, keys: int, messages: int, seed: int = 0):
        self.z = float(z)
        super().__init__(zipf_probabilities(self.z, int(keys)), messages, seed)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "zipf": self.z, "top_share": float(self.p[0])}


class SkewedStream(_SampledStream):
    """Key 0 has share ``hot_share`` (r ∈ [0, 1]); the other ``keys − 1`` keys share the rest uniformly.
    With ``hot_share`` = 0 all keys are uniform (the DKG paper's country-skew-r0)."""

    description = "skewed"

    def __init__(self, hot_share: float, keys: int = 204, messages: int = 100_000, seed: int = 0):
        if not (0.0 <= hot_share <= 1.0):
            raise InvalidInput("hot_share", f"must be in [0, 1], got {hot_share}")
        if keys < 2:
            raise InvalidInput("keys", f"must be >= 2, got {keys}")
        self.hot_share = float(hot_share)
        if hot_share == 0:
            p = np.full(keys, 1.0 / keys)
        else:
            p = np.full(keys, (1.0 - hot_share) / (keys - 1))
            p[0] = hot_share
        super().__init__(p, messages, seed)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "hot_share": self.hot_share}


class DriftingStream(Stream):
    """Zipf(z) whose rank → key mapping is a fresh random permutation in each of ``phases`` equal phases."""

    description = "drift"

    def __init__(self, z: float, keys: int, messages: int, phases: int = 4, seed: int = 0):
        if phases < 1:
            raise InvalidInput("phases", f"must be >= 1, got {phases}")
        self.z = float(z)
        self.p = zipf_probabilities(self.z, int(keys))
        self._cdf = np.cumsum(self.p)
        self._cdf[-1] = 1.0
        self.n_keys = int(keys)
        self.n_messages = _check_messages(messages)
        self.phases = int(phases)
        self.seed = int(seed)

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        rng = np.random.default_rng(self.seed)
        perm_rng = np.random.default_rng(self.seed + 1)
        per_phase = math.ceil(self.n_messages / self.phases)
        done = 0
        perm = np.arange(self.n_keys)
        phase = -1
        while done < self.n_messages:
            if done // per_phase != phase:
                phase = done // per_phase
                perm = perm_rng.permutation(self.n_keys) if phase > 0 else np.arange(self.n_keys)
            m = min(size, self.n_messages - done, per_phase * (phase + 1) - done)
            ranks = np.searchsorted(self._cdf, rng.random(m), side="right")
            yield perm[ranks].astype(np.int64)
            done += m

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "zipf": self.z, "phases": self.phases}


class ArrayStream(Stream):
    """An in-memory sequence of keys (ints or strings), mapped to dense ids in order of first appearance."""

    description = "array"

    def __init__(self, keys: Sequence[Any] | np.ndarray, messages: int | None = None):
        arr = np.asarray(keys)
        if arr.ndim != 1 or arr.size == 0:
            raise InvalidInput("keys", "must be a non-empty one-dimensional sequence")
        _, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(np.argsort(first, kind="stable"), kind="stable")   # rank by first appearance
        ids = order[inverse].astype(np.int64)
        if messages is not None:
            ids = ids[:_check_messages(messages)]
        self.ids = ids
        self.n_keys = int(order.size)
        self.n_messages = int(ids.size)

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        for i in range(0, self.n_messages, size):
            yield self.ids[i:i + size]


class FileStream(ArrayStream):
    """Keys from a text file, one per line (blank lines skipped); optionally only the first ``messages``."""

    description = "file"

    def __init__(self, path: str, messages: int | None = None):
        p = Path(path)
        try:
            lines = [ln.strip() for ln in p.read_text().splitlines()]
        except FileNotFoundError:
            raise InvalidInput("keys_file", f"file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput("keys_file", f"cannot read {path}: {exc}") from None
        lines = [ln for ln in lines if ln]
        if not lines:
            raise InvalidInput("keys_file", f"{path} contains no keys")
        super().__init__(np.array(lines, dtype=object).astype(str), messages)
        self.path = str(path)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": self.path}
