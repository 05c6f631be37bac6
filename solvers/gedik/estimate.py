"""Metrics of a built Gedik partitioning function (the ``metrics`` field of the function document, see
:mod:`solvers.gedik.function`): relative imbalance b (Eq. 11) and relative migration m (Eq. 12), estimated from the
spec's known frequencies and the consistent hash's arc shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from solvers.gedik.model import Config, balance_metrics, beta

if TYPE_CHECKING:
    from solvers.gedik.function import PartitionFunction, Spec


def _shares(fn: PartitionFunction) -> np.ndarray:
    if fn.ring is None:
        return np.full(fn.channels, 1.0 / fn.channels)
    return fn.ring.arc_shares()


def _moved_fraction(prev: PartitionFunction, new: PartitionFunction) -> float:
    """Fraction of the (position) key space whose base channel changes between two functions."""
    if prev.seed != new.seed:
        return 1.0 - 1.0 / max(new.channels, 1)  # independent hashes: a random key keeps its channel w.p. ~1/N
    if prev.ring is not None and new.ring is not None:
        return prev.ring.moved_fraction(new.ring)
    from solvers.hashing import hash64_array
    pos = hash64_array(np.arange(1 << 18, dtype=np.uint64), 0x5EED)
    return float(np.mean(prev.base_lookup(pos) != new.base_lookup(pos)))


def estimate_metrics(new: PartitionFunction, prev: PartitionFunction | None, s: Spec, cfg: Config,
                      keys: list[str], f: np.ndarray, pos: np.ndarray, o_keys: list[str],
                      prev_f: dict[str, float]) -> dict[str, Any]:
    """Balance (Eq. 11) and migration (Eq. 12) metrics of a built function from what its spec knows: keys with a
    frequency are placed exactly, the rest of the domain shares the remaining frequency evenly (§4.1.3) and follows
    the consistent hash's arc shares; migration of those keys is the fraction of the ring whose owner changed."""
    n = new.channels
    known_ch = new.route_positions(pos) if len(keys) else np.empty(0, dtype=np.int32)
    rest_n = max(s.domain_size - len(keys), 0)
    rest_f = max(1.0 - float(f.sum()), 0.0)
    q = rest_f / rest_n if rest_n else 0.0
    shares = _shares(new)
    loads = np.zeros((3, n))
    for k in range(3):
        fn = cfg.resources[k]
        if len(keys):
            loads[k] += np.bincount(known_ch, weights=beta(fn, f), minlength=n)
        loads[k] += rest_n * float(beta(fn, np.array([q]))[0]) * shares
    out = balance_metrics(loads, cfg.alpha)
    bs = cfg.resources[0]
    ideal = (float(beta(bs, f).sum()) + rest_n * float(beta(bs, np.array([q]))[0])) / n
    out["model"] = ("keys with a frequency placed exactly; the other domain_size - #keys keys share the remaining "
                    "frequency evenly and follow the consistent hash's arc shares")
    if prev is None:
        out["m"] = None
        out["migration"] = {"moved": None, "ideal": ideal, "tracked_moved": None, "untracked_moved_expected": None}
        return out
    # keys known now or explicit before: exact; their frequency from the spec, else from the previous document
    extra = [k for k in o_keys if k not in s.frequencies]
    all_keys = list(keys) + extra
    all_f = np.concatenate([f, np.array([prev_f.get(k, 0.0) for k in extra])])
    old_ch = prev.route_keys(all_keys) if all_keys else np.empty(0)
    new_ch = new.route_keys(all_keys) if all_keys else np.empty(0)
    tracked_moved = float(beta(bs, all_f)[old_ch != new_ch].sum()) if all_keys else 0.0
    untracked = rest_n * float(beta(bs, np.array([q]))[0]) * _moved_fraction(prev, new)
    moved = tracked_moved + untracked
    out["m"] = moved / ideal if ideal > 0 else None
    out["migration"] = {"moved": moved, "ideal": ideal, "tracked_moved": tracked_moved,
                        "untracked_moved_expected": untracked}
    return out
