"""Gedik's partitioning function p = ⟨H_p, H_c⟩ as a document: build (spec → document), load, route (Alg. 1).

The function document (JSON; what ``rebalancer partition build`` prints and ``POST /v1/partitioning`` returns)
---------------------------------------------------------------------------------------------------------------
``format``            "rebalancer.gedik-function/1"
``algorithm``         scan | redist | readj | uniform | consistent (how it was built)
``lookup``            "explicit+consistent" (scan/redist/readj), "consistent" or "uniform"
``channels``          N; channels are 0-based integers 0..N-1
``hash``              ``{"function": "solvers.hashing.hash64", "seed": S, "key_encoding": "utf-8"}``: a key's
                      position is ``hash64(key.encode("utf-8"), S)``, an unsigned 64-bit integer (see
                      ``solvers/hashing.py`` for the exact, documented bit-level definition)
``consistent_hash``   ``{"replicas": R, "seed": S, "point": "hash64(channel * 2**32 + replica, seed)"}`` or null
                      (uniform). The ring holds R points per channel, ``hash64`` of the *integer*
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

import math
import time
from collections.abc import Iterable
from typing import Any, TypeGuard

import numpy as np

from solvers.errors import InvalidInput
from solvers.gedik._hash import hash_spans, hash_strings, split_lines
from solvers.gedik.construct import ALGORITHMS as CONSTRUCTIONS
from solvers.gedik.construct import Instance, construct
from solvers.gedik.estimate import estimate_metrics
from solvers.gedik.model import FUNCTIONS, RESOURCES, UTILITIES, Config, select_tracked
from solvers.gedik.ring import DEFAULT_REPLICAS, DEFAULT_SEED, ConsistentHash, uniform_lookup

__all__ = ["FORMAT", "ALGORITHMS", "PartitionFunction", "build_document", "route_keys", "validate_spec",
           "load_function"]

FORMAT = "rebalancer.gedik-function/1"
ALGORITHMS = ("scan", "redist", "readj", "uniform", "consistent")
SPEC_FIELDS = {"algorithm", "channels", "previous", "frequencies", "domain_size", "resources",
               "imbalance_tolerance", "sigma", "utility", "seed", "replicas", "move_limit"}
DEFAULT_DOMAIN_SIZE = 10**6  # Table 1
FREQ_TOLERANCE = 1e-6
MAX_CHANNELS = 4096
HASH_NAME = "solvers.hashing.hash64"
POINT_RULE = "hash64(channel * 2**32 + replica, seed)"


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
# validation
def _num(x: object) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_seed(seed: object, path: str) -> int:
    if not _int(seed) or not (0 <= seed < 2**64):
        raise InvalidInput(path, "must be an integer in [0, 2**64)")
    return seed


def _check_replicas(replicas: object, path: str) -> int:
    if not _int(replicas) or not (1 <= replicas <= 100_000):
        raise InvalidInput(path, "must be an integer in [1, 100000]")
    return replicas


def load_function(doc: Any, where: str = "function") -> PartitionFunction:
    """Validate a function document and load it (InvalidInput with a field path when malformed)."""
    if isinstance(doc, PartitionFunction):
        return doc
    if not isinstance(doc, dict):
        raise InvalidInput(where, "must be a function document (an object)")
    n = doc.get("channels")
    if not _int(n) or n < 1 or n > MAX_CHANNELS:
        raise InvalidInput(f"{where}.channels", f"must be an integer in [1, {MAX_CHANNELS}]")
    lookup = doc.get("lookup", "explicit+consistent")
    if lookup not in ("explicit+consistent", "consistent", "uniform"):
        raise InvalidInput(f"{where}.lookup", "must be explicit+consistent, consistent or uniform")
    h = doc.get("hash", {})
    if not isinstance(h, dict):
        raise InvalidInput(f"{where}.hash", "must be an object")
    if h.get("function", HASH_NAME) != HASH_NAME:
        raise InvalidInput(f"{where}.hash.function", f"unsupported hash function (only {HASH_NAME})")
    seed = _check_seed(h.get("seed", DEFAULT_SEED), f"{where}.hash.seed")
    replicas = None
    if lookup != "uniform":
        ch = doc.get("consistent_hash")
        if not isinstance(ch, dict):
            raise InvalidInput(f"{where}.consistent_hash", "must be an object with replicas and seed")
        replicas = _check_replicas(ch.get("replicas", DEFAULT_REPLICAS), f"{where}.consistent_hash.replicas")
        if ch.get("seed", seed) != seed:
            raise InvalidInput(f"{where}.consistent_hash.seed", "must equal hash.seed")
    explicit = doc.get("explicit", {}) or {}
    if not isinstance(explicit, dict):
        raise InvalidInput(f"{where}.explicit", "must be an object {key: channel}")
    if explicit and lookup != "explicit+consistent":
        raise InvalidInput(f"{where}.explicit", f"must be empty for lookup {lookup!r}")
    for k, c in explicit.items():
        if not _int(c) or not (0 <= c < n):
            raise InvalidInput(f"{where}.explicit.{k}", f"must be a channel in [0, {n})")
    freqs = doc.get("frequencies", {}) or {}
    if not isinstance(freqs, dict):
        raise InvalidInput(f"{where}.frequencies", "must be an object {key: frequency}")
    for k, f in freqs.items():
        if not _num(f) or not math.isfinite(f) or f < 0:
            raise InvalidInput(f"{where}.frequencies.{k}", "must be a finite number >= 0")
    fn = PartitionFunction(n, lookup, seed, replicas, explicit)
    fn.frequencies = {str(k): float(v) for k, v in freqs.items()}
    return fn


def _given(spec: dict[str, Any], name: str, default: Any) -> Any:
    """``spec[name]``, or ``default`` when it is missing or null."""
    value = spec.get(name, default)
    return default if value is None else value


def _spec_channels(spec: dict[str, Any]) -> int:
    n = spec.get("channels")
    if not _int(n) or n < 1:
        raise InvalidInput("channels", "must be an integer >= 1")
    if n > MAX_CHANNELS:
        raise InvalidInput("channels", f"must be <= {MAX_CHANNELS}")
    return n


def _spec_frequencies(spec: dict[str, Any]) -> dict[str, float]:
    """The tracked relative frequencies: each in [0, 1], summing to at most 1."""
    freqs = _given(spec, "frequencies", {})
    if not isinstance(freqs, dict):
        raise InvalidInput("frequencies", "must be an object {key: relative frequency}")
    total = 0.0
    for k, f in freqs.items():
        if not _num(f) or not math.isfinite(f):
            raise InvalidInput(f"frequencies.{k}", "must be a finite number")
        if f < 0:
            raise InvalidInput(f"frequencies.{k}", "must be >= 0")
        if f > 1:
            raise InvalidInput(f"frequencies.{k}", "must be <= 1 (relative frequency)")
        total += float(f)
    if total > 1 + FREQ_TOLERANCE:
        raise InvalidInput("frequencies", f"relative frequencies sum to {total:.6g} > 1")
    return {str(k): float(v) for k, v in freqs.items()}


def _spec_domain_size(spec: dict[str, Any]) -> int:
    known = len(_given(spec, "frequencies", {}))
    dom = _given(spec, "domain_size", DEFAULT_DOMAIN_SIZE)
    if not _num(dom) or not math.isfinite(dom) or dom < 1 or dom != int(dom):
        raise InvalidInput("domain_size", "must be an integer >= 1")
    if dom < known:
        raise InvalidInput("domain_size", f"must be >= the number of keys with a frequency ({known})")
    return int(dom)


def _spec_resources(spec: dict[str, Any]) -> dict[str, str]:
    """The resource function of state, computation and communication, defaults filled in."""
    res = spec.get("resources", {}) or {}
    if not isinstance(res, dict):
        raise InvalidInput("resources", "must be an object {state|computation|communication: function}")
    defaults = dict(zip(RESOURCES, Config().resources, strict=False))
    for k, v in res.items():
        if k not in RESOURCES:
            raise InvalidInput(f"resources.{k}", f"unknown resource (one of {', '.join(RESOURCES)})")
        if v not in FUNCTIONS:
            raise InvalidInput(f"resources.{k}", f"unknown resource function {v!r} (one of {', '.join(FUNCTIONS)})")
    return {k: res.get(k, defaults[k]) for k in RESOURCES}


def _spec_tolerances(spec: dict[str, Any]) -> dict[str, float]:
    """α_k of each resource (Eq. 2): one number for all, or one per resource (1.2 where not given)."""
    tol = _given(spec, "imbalance_tolerance", 1.2)
    if isinstance(tol, dict):
        for k in tol:
            if k not in RESOURCES:
                raise InvalidInput(f"imbalance_tolerance.{k}", "unknown resource")
        alphas = {k: tol.get(k, 1.2) for k in RESOURCES}
        paths = {k: f"imbalance_tolerance.{k}" for k in RESOURCES}
    else:
        alphas = {k: tol for k in RESOURCES}
        paths = {k: "imbalance_tolerance" for k in RESOURCES}
    for k, a in alphas.items():
        if not _num(a) or not math.isfinite(a) or a <= 1:
            raise InvalidInput(paths[k], "must be a finite number > 1 (α_k, Eq. 2)")
    return {k: float(a) for k, a in alphas.items()}


def _spec_sigma(spec: dict[str, Any]) -> float:
    sigma = _given(spec, "sigma", 0.1)
    if not _num(sigma) or not math.isfinite(sigma) or not (0 < sigma <= 1):
        raise InvalidInput("sigma", "must be in (0, 1] (§4.1.3)")
    return float(sigma)


def _spec_utility(spec: dict[str, Any]) -> str:
    util = _given(spec, "utility", "APM")
    if isinstance(util, str) and util.upper().removeprefix("U^") in UTILITIES:
        return util.upper().removeprefix("U^")
    raise InvalidInput("utility", f"unknown utility {util!r} (one of {', '.join(UTILITIES)})")


def validate_spec(spec: Any) -> dict[str, Any]:
    """Check a build spec (the format of ``partition build``) and return it normalised with defaults."""
    if not isinstance(spec, dict):
        raise InvalidInput("", "the spec must be a JSON object")
    for k in spec:
        if k not in SPEC_FIELDS:
            raise InvalidInput(str(k), f"unknown field (expected one of {', '.join(sorted(SPEC_FIELDS))})")
    alg = spec.get("algorithm", "readj")
    if alg not in ALGORITHMS:
        raise InvalidInput("algorithm", f"unknown algorithm {alg!r} (one of {', '.join(ALGORITHMS)})")
    out: dict[str, Any] = {"algorithm": alg, "channels": _spec_channels(spec)}
    out["frequencies"] = _spec_frequencies(spec)
    out["domain_size"] = _spec_domain_size(spec)
    out["resources"] = _spec_resources(spec)
    out["imbalance_tolerance"] = _spec_tolerances(spec)
    out["sigma"] = _spec_sigma(spec)
    out["utility"] = _spec_utility(spec)
    ml = spec.get("move_limit", 5)
    if not _int(ml) or ml < 1:
        raise InvalidInput("move_limit", "must be an integer >= 1")
    out["move_limit"] = ml
    prev = spec.get("previous")
    out["previous"] = p = None if prev is None else load_function(prev, "previous")
    # the consistent hash's seed and replicas: the spec's, else the previous function's, else the defaults
    out["seed"] = _check_seed(_given(spec, "seed", p.seed if p is not None else DEFAULT_SEED), "seed")
    out["replicas"] = _check_replicas(_given(spec, "replicas", p.replicas if (p is not None and p.replicas)
                                             else DEFAULT_REPLICAS), "replicas")
    return out


# ----------------------------------------------------------------------------------------------------------
def _config(s: dict[str, Any]) -> Config:
    return Config(resources=tuple(s["resources"][k] for k in RESOURCES),
                  alpha=tuple(s["imbalance_tolerance"][k] for k in RESOURCES),
                  sigma=s["sigma"], utility=s["utility"], move_limit=s["move_limit"])


def build_document(spec: dict[str, Any]) -> dict[str, Any]:
    """Validate ``spec`` and build the partitioning function document (see the module docstring).

    Spec (``partition build --input``): ``{"algorithm": "readj", "channels": 10, "previous": null | document,
    "frequencies": {"k0": 0.0772, ...}, "domain_size": 1000000, "resources": {"state": "linear", "computation":
    "constant", "communication": "linear"}, "imbalance_tolerance": 1.2 | {resource: α}, "sigma": 0.1,
    "utility": "APM"}``; optional ``seed`` and ``replicas`` of the consistent hash (default: the previous
    function's, else 0 and 1000) and ``move_limit`` (readj's c, default 5). The frequencies are the relative
    frequencies tracked by the caller; the function keeps those ≥ δ (Eq. 17, §4.1.3) in the explicit hash.
    Raises :class:`solvers.errors.InvalidInput` on bad input.
    """
    s = validate_spec(spec)
    cfg = _config(s)
    n, alg, prev = s["channels"], s["algorithm"], s["previous"]
    t0 = time.perf_counter()
    keys = list(s["frequencies"])
    f = np.array([s["frequencies"][k] for k in keys], dtype=np.float64)
    delta, dk, mask = select_tracked(f, n, cfg, s["domain_size"])
    if alg not in CONSTRUCTIONS:
        mask = np.zeros(len(keys), dtype=bool)
    lookup = {"uniform": "uniform", "consistent": "consistent"}.get(alg, "explicit+consistent")
    new = PartitionFunction(n, lookup, s["seed"], s["replicas"] if lookup != "uniform" else None, {})
    pos = hash_strings(keys, s["seed"])
    tracked = np.flatnonzero(mask)
    # D_o: explicit keys of the previous function that are not tracked now
    prev_f = getattr(prev, "frequencies", {}) if prev is not None else {}
    tracked_now = {keys[i] for i in np.flatnonzero(mask).tolist()}
    o_keys = [k for k in prev.explicit if k not in tracked_now] if prev is not None else []
    assign = np.empty(0, dtype=np.int64)
    stats: dict[str, Any] = {}
    if alg in CONSTRUCTIONS and len(tracked):
        tpos = pos[tracked]
        hc_new = new.base_lookup(tpos)
        old = prev.route_positions(hash_strings([keys[i] for i in tracked], prev.seed)) if prev is not None \
            else np.full(len(tracked), -1)
        o_f = np.array([s["frequencies"].get(k, prev_f.get(k, 0.0)) for k in o_keys], dtype=np.float64)
        o_pos_new = hash_strings(o_keys, s["seed"])
        o_old = prev.route_positions(hash_strings(o_keys, prev.seed)) if o_keys else np.empty(0, np.int64)
        inst = Instance(channels=n, freqs=f[tracked], old=old, hc_new=hc_new, o_freqs=o_f, o_old=o_old,
                        o_hc_new=new.base_lookup(o_pos_new) if o_keys else np.empty(0, np.int64),
                        has_previous=prev is not None)
        assign = construct(alg, inst, cfg, stats)
    explicit = {keys[i]: int(c) for i, c in zip(tracked.tolist(), assign.tolist(), strict=False)}
    new = PartitionFunction(n, lookup, s["seed"], new.replicas, explicit)
    seconds = time.perf_counter() - t0
    metrics = estimate_metrics(new, prev, s, cfg, keys, f, pos, o_keys, prev_f)
    metrics["explicit_entries"] = len(explicit)
    metrics["construction_seconds"] = seconds
    if "readj_steps" in stats:
        metrics["readj_steps"] = stats["readj_steps"]
    return {
        "format": FORMAT,
        "algorithm": alg,
        "lookup": lookup,
        "channels": n,
        "hash": {"function": HASH_NAME, "seed": s["seed"], "key_encoding": "utf-8"},
        "consistent_hash": None if lookup == "uniform" else
        {"replicas": new.replicas, "seed": s["seed"], "point": POINT_RULE},
        "explicit": explicit,
        "frequencies": {keys[i]: float(f[i]) for i in tracked.tolist()},
        "delta": float(delta),
        "delta_k": {k: float(v) for k, v in dk.items()},
        "params": {"resources": s["resources"], "imbalance_tolerance": s["imbalance_tolerance"],
                   "sigma": s["sigma"], "utility": s["utility"], "domain_size": s["domain_size"],
                   "move_limit": s["move_limit"]},
        "metrics": metrics,
    }


def route_keys(function: Any, keys: Iterable[str | bytes]) -> np.ndarray:
    """Channels (``np.int32``) of ``keys`` (list of str/bytes) under a function document or
    :class:`PartitionFunction` — vectorised Algorithm 1 (for the Spark adapter and the controller)."""
    return load_function(function).route_keys(keys)
