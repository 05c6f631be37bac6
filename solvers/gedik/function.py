"""Gedik's partitioning function p = ⟨H_p, H_c⟩ as a document: build (spec → document), load, route (Alg. 1).

The function document (JSON; what ``rebalancer partition build`` prints and ``POST /v1/partitioning`` returns)
---------------------------------------------------------------------------------------------------------------
Its fields and the build spec's (fields, ranges, defaults) are the contract's
(:mod:`rebalancer_client.contract.partitioning`: ``PartitionFunction``, ``PartitioningSpec``); what they mean:

``format``            "rebalancer.gedik-function/1"
``algorithm``         scan | redist | readj | uniform | consistent (how it was built)
``lookup``            "explicit+consistent" (scan/redist/readj), "consistent" or "uniform"
``channels``          N; channels are 0-based integers 0..N-1
``hash``              ``{"function": "solvers.hashing.hash64", "seed": S, "key_encoding": "utf-8"}``: a key's
                      position is ``hash64(key.encode("utf-8"), S)``, an unsigned 64-bit integer (see
                      ``solvers/hashing.py`` for the exact, documented bit-level definition)
``consistent_hash``   ``{"replicas": R, "seed": S, "point": "hash64(channel * 2**32 + replica, seed)"}`` or null
                      (uniform; in a ``previous`` written by hand, null is R = 1000 seeded like ``hash``).
                      The ring holds R points per channel, ``hash64`` of the *integer*
                      ``c·2^32 + r`` (r = 0..R−1); a key goes to the owner of the smallest point ≥ its position,
                      wrapping around to the smallest point; equal points ordered by (channel, replica).
``explicit``          ``{key: channel}`` — H_p, the keys with f ≥ δ. A key whose position equals the position of an
                      explicit key takes that key's channel (64-bit hashes; a collision has probability about
                      |H_p|/2^64 per key and keeps routing deterministic).
``frequencies``       ``{key: f}`` of the explicit keys, as used for the construction (feeds the next ``previous``)
``delta``, ``delta_k``  the frequency threshold δ = min_k δ_k (Eq. 17 and the post-processing step of §4.1.3)
``params``            resources, imbalance_tolerance (α_k), sigma, utility, domain_size, move_limit
``metrics``           ``b`` and ``b_k``/``r_k`` per resource (Eq. 11; ``null`` = a channel with zero load),
                      ``m`` (Eq. 12, ``null`` without previous), ``migration`` {moved, ideal, tracked_moved,
                      untracked_moved_expected}, ``explicit_entries``, ``construction_seconds`` and ``model``.

Lookup (Algorithm 1) of key k: h = hash64(k, S); if h is the position of an explicit key → its channel; else
``uniform``: h mod N; otherwise the consistent-hash owner of h. :func:`route_keys` does this for many keys at once
(numpy; about 10 M keys/s for short keys, the CLI adds reading and printing).

Metrics are computed from what the spec knows: keys with a given frequency are placed exactly; the rest of the
domain (``domain_size`` − #known keys, sharing the remaining frequency mass evenly — the assumption of §4.1.3) is
spread by the consistent hash in proportion to each channel's arc of the ring; its migration is the exact fraction
of the ring whose owner changed. ``metrics.model`` says so.
"""

from __future__ import annotations

import dataclasses
import math
import time
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from rebalancer_client import contract as c
from rebalancer_client.contract.partitioning import FUNCTION_FORMAT as FORMAT
from rebalancer_client.contract.partitioning import PARTITIONING_ALGORITHMS as ALGORITHMS
from rebalancer_client.contract.partitioning import GedikAlgorithm, Lookup, Utility
from rebalancer_client.wire import dump
from solvers.documents import read_document
from solvers.errors import InvalidInput
from solvers.gedik._hash import hash_spans, hash_strings, split_lines
from solvers.gedik.construct import ALGORITHMS as CONSTRUCTIONS
from solvers.gedik.construct import Instance, construct
from solvers.gedik.estimate import estimate_metrics
from solvers.gedik.model import Config, select_tracked
from solvers.gedik.ring import DEFAULT_REPLICAS, DEFAULT_SEED, ConsistentHash, uniform_lookup

__all__ = ["FORMAT", "ALGORITHMS", "PartitionFunction", "Spec", "build_document", "route_keys", "validate_spec",
           "load_function"]

T = TypeVar("T")
FREQ_TOLERANCE = 1e-6


class PartitionFunction:
    """A loaded partitioning function: explicit positions (sorted) + consistent hash or uniform hash."""

    def __init__(self, channels: int, lookup: str, seed: int, replicas: int | None, explicit: dict[str, int]):
        self.channels = int(channels)
        self.lookup_mode = lookup
        self.seed = int(seed)
        self.replicas = replicas
        self.explicit = dict(explicit)
        self.frequencies: dict[str, float] = {}
        self.ring = ConsistentHash(self.channels, DEFAULT_REPLICAS if replicas is None else replicas, self.seed) \
            if lookup != "uniform" else None
        keys = list(self.explicit)
        pos = hash_strings(keys, self.seed)
        order = np.argsort(pos, kind="stable")
        self._exp_pos = pos[order]
        self._exp_ch = np.array([self.explicit[k] for k in keys], dtype=np.int32)[order] if keys else \
            np.empty(0, dtype=np.int32)
        # prefilter: which top-16-bit prefixes hold an explicit key (most keys skip the binary search)
        self._exp_prefix = np.zeros(1 << 16, dtype=bool)
        self._exp_prefix[(self._exp_pos >> np.uint64(48)).astype(np.int64)] = True

    # -- lookups -------------------------------------------------------------------------------------------
    def base_lookup(self, positions: np.ndarray) -> np.ndarray:
        """H_c (or the uniform hash) of key positions."""
        if self.ring is None:
            return uniform_lookup(positions, self.channels)
        return self.ring.lookup(positions)

    def route_positions(self, positions: np.ndarray) -> np.ndarray:
        """Algorithm 1 on key positions (``np.uint64``): explicit hash first, then H_c. int32 channels."""
        out = self.base_lookup(positions)
        if len(self._exp_pos):
            cand = np.flatnonzero(self._exp_prefix[(positions >> np.uint64(48)).astype(np.int64)])
            pc = positions[cand]
            idx = np.searchsorted(self._exp_pos, pc)
            idx[idx == len(self._exp_pos)] = 0
            hit = self._exp_pos[idx] == pc
            out[cand[hit]] = self._exp_ch[idx[hit]]
        return out

    def route_keys(self, keys: Iterable[str | bytes]) -> np.ndarray:
        """Channels of a list of str/bytes keys."""
        return self.route_positions(hash_strings(list(keys), self.seed))

    def route_buffer(self, data: bytes) -> np.ndarray:
        """Channels of the lines of ``data`` (one key per line), without a Python object per key."""
        starts, lengths = split_lines(data)
        return self.route_positions(hash_spans(data, starts, lengths, self.seed))


# ----------------------------------------------------------------------------------------------------------
# the documents: shapes and ranges are the contract's (rebalancer_client.contract.partitioning); here what it
# cannot check alone
def _document(cls: type[T], doc: Any, where: str) -> T:
    """``doc`` as the contract document ``cls``: as it is (the API and the CLI parse the bytes with
    :func:`controller.edge.parse`), or read from a library caller's decoded JSON with the contract's bounds."""
    return doc if isinstance(doc, cls) else typing.cast(T, read_document(cls, dump(doc), where, checked=True))


def load_function(doc: Any, where: str = "function") -> PartitionFunction:
    """Load a function document (a :class:`c.PartitionFunction`, or its decoded JSON) for lookups (Algorithm 1,
    §4.1), after the rules its fields cannot state alone (InvalidInput with the field path under ``where``)."""
    if isinstance(doc, PartitionFunction):
        return doc
    d = _document(c.PartitionFunction, doc, where)
    n, ring = d.channels, d.consistent_hash or c.HashRing()  # null: the defaults, as the builder's
    if d.lookup != "uniform" and ring.seed is not None and ring.seed != d.hash.seed:
        raise InvalidInput(f"{where}.consistent_hash.seed", "must equal hash.seed")
    if d.explicit and d.lookup != "explicit+consistent":
        raise InvalidInput(f"{where}.explicit", f"must be empty for lookup {d.lookup!r}")
    for k, ch in d.explicit.items():
        if ch >= n:
            raise InvalidInput(f"{where}.explicit.{k}", f"must be a channel in [0, {n})")
    fn = PartitionFunction(n, d.lookup, d.hash.seed, None if d.lookup == "uniform" else ring.replicas, d.explicit)
    fn.frequencies = {k: float(v) for k, v in d.frequencies.items()}
    return fn


@dataclass(frozen=True)
class Spec:
    """A build spec with its defaults filled in and its previous function loaded (:func:`validate_spec`)."""

    algorithm: GedikAlgorithm
    channels: int
    frequencies: dict[str, float]
    domain_size: int
    resources: c.ResourceFunctions
    tolerances: c.Tolerances
    sigma: float
    utility: Utility
    move_limit: int
    previous: PartitionFunction | None
    seed: int
    replicas: int


def _given(doc: Any, name: str) -> Any:
    """A document's field, or its default where it is null."""
    value = getattr(doc, name)
    if value is not None:
        return value
    f = next(f for f in dataclasses.fields(doc) if f.name == name)
    return f.default if f.default_factory is dataclasses.MISSING else f.default_factory()


def validate_spec(spec: Any) -> Spec:
    """A build spec (:class:`c.PartitioningSpec`, or its decoded JSON) with defaults (Table 1), after the rules its
    fields cannot state alone: the relative frequencies sum to at most 1 and ``domain_size`` (|D| of §4.1.3) counts
    every key with one."""
    s = _document(c.PartitioningSpec, spec, "")
    freqs = {k: float(f) for k, f in _given(s, "frequencies").items()}
    total = math.fsum(freqs.values())
    if total > 1 + FREQ_TOLERANCE:
        raise InvalidInput("frequencies", f"relative frequencies sum to {total:.6g} > 1")
    domain = _given(s, "domain_size")
    if domain < len(freqs):
        raise InvalidInput("domain_size", f"must be >= the number of keys with a frequency ({len(freqs)})")
    tol = _given(s, "imbalance_tolerance")
    prev = None if s.previous is None else load_function(s.previous, "previous")
    # the consistent hash's seed and replicas: the spec's, else the previous function's, else the defaults
    return Spec(
        algorithm=s.algorithm, channels=s.channels, frequencies=freqs, domain_size=int(domain),
        resources=_given(s, "resources"),
        tolerances=tol if isinstance(tol, c.Tolerances) else c.Tolerances(
            state=float(tol), computation=float(tol), communication=float(tol)),
        sigma=float(_given(s, "sigma")), utility=typing.cast(Utility, _given(s, "utility").upper().removeprefix("U^")),
        move_limit=s.move_limit, previous=prev,
        seed=s.seed if s.seed is not None else prev.seed if prev is not None else DEFAULT_SEED,
        replicas=s.replicas if s.replicas is not None else prev.replicas if prev is not None and prev.replicas
        else DEFAULT_REPLICAS)


# ----------------------------------------------------------------------------------------------------------
def _config(s: Spec) -> Config:
    r, t = s.resources, s.tolerances
    return Config(resources=(r.state, r.computation, r.communication),
                  alpha=(t.state, t.computation, t.communication), sigma=s.sigma, utility=s.utility,
                  move_limit=s.move_limit)


def build_document(spec: Any) -> c.PartitionFunction:
    """Build the partitioning function document of a spec (:class:`c.PartitioningSpec`, or its decoded JSON;
    fields and defaults: :mod:`rebalancer_client.contract.partitioning`).

    The frequencies are the relative frequencies tracked by the caller; the function keeps those ≥ δ (Eq. 17,
    §4.1.3) in the explicit hash H_p, placed by scan, redist or readj (Algorithms 2-4, §4.2) against the previous
    function; the other keys follow the consistent hash H_c (§4.1.1) or, for ``uniform``, h mod N.
    Raises :class:`solvers.errors.InvalidInput` on bad input.
    """
    s = validate_spec(spec)
    cfg = _config(s)
    n, alg, prev = s.channels, s.algorithm, s.previous
    t0 = time.perf_counter()
    keys = list(s.frequencies)
    f = np.array([s.frequencies[k] for k in keys], dtype=np.float64)
    delta, dk, mask = select_tracked(f, n, cfg, s.domain_size)
    if alg not in CONSTRUCTIONS:
        mask = np.zeros(len(keys), dtype=bool)
    lookup: Lookup = "uniform" if alg == "uniform" else "consistent" if alg == "consistent" else \
        "explicit+consistent"
    new = PartitionFunction(n, lookup, s.seed, s.replicas if lookup != "uniform" else None, {})
    pos = hash_strings(keys, s.seed)
    tracked = np.flatnonzero(mask)
    # D_o: explicit keys of the previous function that are not tracked now
    prev_f = prev.frequencies if prev is not None else {}
    tracked_now = {keys[i] for i in tracked.tolist()}
    o_keys = [k for k in prev.explicit if k not in tracked_now] if prev is not None else []
    assign = np.empty(0, dtype=np.int64)
    stats: dict[str, Any] = {}
    if alg in CONSTRUCTIONS and len(tracked):
        tpos = pos[tracked]
        hc_new = new.base_lookup(tpos)
        old = prev.route_positions(hash_strings([keys[i] for i in tracked], prev.seed)) if prev is not None \
            else np.full(len(tracked), -1)
        o_f = np.array([s.frequencies.get(k, prev_f.get(k, 0.0)) for k in o_keys], dtype=np.float64)
        o_pos_new = hash_strings(o_keys, s.seed)
        o_old = prev.route_positions(hash_strings(o_keys, prev.seed)) if o_keys and prev is not None \
            else np.empty(0, np.int64)
        inst = Instance(channels=n, freqs=f[tracked], old=old, hc_new=hc_new, o_freqs=o_f, o_old=o_old,
                        o_hc_new=new.base_lookup(o_pos_new) if o_keys else np.empty(0, np.int64),
                        has_previous=prev is not None)
        assign = construct(alg, inst, cfg, stats)
    explicit = {keys[i]: int(ch) for i, ch in zip(tracked.tolist(), assign.tolist(), strict=False)}
    new = PartitionFunction(n, lookup, s.seed, new.replicas, explicit)
    seconds = time.perf_counter() - t0
    metrics = estimate_metrics(new, prev, s, cfg, keys, f, pos, o_keys, prev_f)
    metrics["explicit_entries"] = len(explicit)
    metrics["construction_seconds"] = seconds
    if "readj_steps" in stats:
        metrics["readj_steps"] = stats["readj_steps"]
    return c.PartitionFunction(
        format=FORMAT, algorithm=s.algorithm, lookup=lookup, channels=n, hash=c.KeyHash(seed=s.seed),
        consistent_hash=None if new.replicas is None else c.HashRing(replicas=new.replicas, seed=s.seed),
        explicit=explicit, frequencies={keys[i]: float(f[i]) for i in tracked.tolist()}, delta=float(delta),
        delta_k={k: float(v) for k, v in dk.items()},
        params=c.PartitionParams(resources=s.resources, imbalance_tolerance=s.tolerances, sigma=s.sigma,
                                 utility=s.utility, domain_size=s.domain_size, move_limit=s.move_limit),
        metrics=metrics)


def route_keys(function: Any, keys: Iterable[str | bytes]) -> np.ndarray:
    """Channels (``np.int32``) of ``keys`` (list of str/bytes) under a function document (or its decoded JSON) or a
    loaded :class:`PartitionFunction` — vectorised Algorithm 1 (for the Spark adapter and the controller)."""
    return load_function(function).route_keys(keys)
