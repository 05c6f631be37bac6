"""Bulk, zero-copy hashing of many keys held in one byte buffer (the ``partition route`` fast path).

The hash is exactly :func:`solvers.hashing.hash64` (the project's seeded, stable 64-bit hash, see that module for
the definition); this module only computes it without creating one Python object per key: keys are given as
``(buffer, starts, lengths)`` (for example the lines of stdin read in one call), words are gathered straight out of
the buffer with numpy fancy indexing on an unaligned 8-byte view, and keys are processed in groups of equal word
count. ``tests/solvers/test_gedik_hash.py`` checks equality with :func:`solvers.hashing.hash64_array`.

Cost: O(total bytes / 8) numpy element operations, about 30–60 ns per short key on one core.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from solvers.hashing import mixed_seed  # the seed mixing of the shared definition

__all__ = ["split_lines", "hash_spans", "hash_lines", "hash_strings", "concat_keys"]

_U_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_U_C1 = np.uint64(0xFF51AFD7ED558CCD)
_U_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_U_LEN = np.uint64(0xC2B2AE3D27D4EB4F)
_U_FIN = np.uint64(0x165667B19E3779F9)
_U33 = np.uint64(33)
_U29 = np.uint64(29)
#: _MASKS[r] keeps the low r bytes of a little-endian word (r = 0..8)
_MASKS = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def split_lines(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of the lines of ``data`` (``\\n`` separated, a trailing ``\\r`` stripped).

    A final newline does not start an extra (empty) line; empty lines in the middle are kept (empty keys), so the
    i-th output line of ``partition route`` always answers the i-th input line.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    n = len(buf)
    ends = nl if (n == 0 or buf[-1] == 10) else np.append(nl, n)
    starts = np.empty(len(ends), dtype=np.int64)
    if len(ends):
        starts[0] = 0
        starts[1:] = nl[: len(ends) - 1] + 1
    lengths = ends.astype(np.int64) - starts
    if len(ends):
        cr = lengths > 0
        cr[cr] = buf[ends[cr] - 1] == 13
        lengths -= cr
    return starts, lengths


def hash_spans(data: bytes | np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int = 0) -> np.ndarray:
    """``hash64(data[s:s+l], seed)`` for every (s, l) — vectorised, ``np.uint64`` array."""
    raw = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    m = len(starts)
    out = np.empty(m, dtype=np.uint64)
    if m == 0:
        return out
    # pad so that an 8-byte read at any start is inside the buffer, then view it as a u64 at every byte offset
    padded = np.zeros((len(raw) + 23) // 8 * 8, dtype=np.uint8)
    padded[: len(raw)] = raw
    words_at = np.lib.stride_tricks.as_strided(
        padded.view(np.uint64)[:1], shape=(len(raw) + 8,), strides=(1,), writeable=False)
    s64 = np.uint64(mixed_seed(seed))
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    nwords = (lengths + 7) >> 3
    counts = np.bincount(nwords) if m else np.zeros(1, dtype=np.int64)
    present = np.flatnonzero(counts)
    if len(present) == 1:  # the common case (keys of similar length): no index arrays at all
        groups = [np.arange(m)]
    else:
        groups = [np.flatnonzero(nwords == w) for w in present.tolist()]
    for grp in groups:
        w = int(nwords[grp[0]])
        whole = len(grp) == m
        ln = lengths if whole else lengths[grp]
        st = starts if whole else starts[grp]
        h = (ln.astype(np.uint64) * _U_LEN) ^ s64
        for j in range(w):
            word = words_at[st + 8 * j]
            if j == w - 1:
                word &= _MASKS[ln - 8 * j]
            h ^= word
            h *= _U_GOLDEN
            h ^= h >> _U29
        h ^= _U_FIN
        h ^= h >> _U33
        h *= _U_C1
        h ^= h >> _U33
        h *= _U_C2
        h ^= h >> _U33
        if whole:
            return h
        out[grp] = h
    return out


def hash_lines(data: bytes, seed: int = 0) -> np.ndarray:
    """Hash every line of ``data`` (see :func:`split_lines`)."""
    starts, lengths = split_lines(data)
    return hash_spans(data, starts, lengths, seed)


def concat_keys(keys: Iterable[str | bytes]) -> tuple[bytes, np.ndarray, np.ndarray]:
    """UTF-8 encode ``keys`` (str or bytes) into one buffer; returns (buffer, starts, lengths)."""
    enc = [k.encode("utf-8") if isinstance(k, str) else bytes(k) for k in keys]
    lengths = np.fromiter((len(b) for b in enc), dtype=np.int64, count=len(enc))
    starts = np.zeros(len(enc), dtype=np.int64)
    if len(enc) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    return b"".join(enc), starts, lengths


def hash_strings(keys: Iterable[str | bytes], seed: int = 0) -> np.ndarray:
    """``hash64(k, seed)`` for a list of str/bytes keys (one join, then :func:`hash_spans`)."""
    buf, starts, lengths = concat_keys(keys)
    return hash_spans(buf, starts, lengths, seed)
