"""Gedik's partitioning functions (``POST /v1/partitioning``, ``rebalancer partition build``): the build spec and the
function document (B. Gedik, "Partitioning functions for stateful data parallelism in stream processing").

:class:`PartitioningSpec` asks for a function p = ⟨H_p, H_c⟩ over ``channels`` channels; :class:`PartitionFunction`
is the answer, which a later spec passes back as its ``previous`` (so it is a request document too, like ``Budget``:
every field a built document has is declared, and all but ``channels`` may be left out of a ``previous``). How a
key is routed under a function document (Algorithm 1) is documented in :mod:`solvers.gedik.function`.

The value lists (algorithms, resources, resource functions, utilities, lookups) are defined here, once;
:mod:`solvers.gedik` imports them. What the documents cannot say alone is checked by the builder
(``solvers.gedik.function``): frequencies summing to at most 1, ``domain_size`` at least the number of keys with a
frequency, a function's explicit channels below its ``channels``, its consistent hash seeded like its hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, get_args

from rebalancer_client.contract.common import MAX_INT64
from rebalancer_client.wire import REQUEST, Check

GedikAlgorithm = Literal["scan", "redist", "readj", "uniform", "consistent"]
Resource = Literal["state", "computation", "communication"]
ResourceFunction = Literal["constant", "linear", "quadratic"]
Utility = Literal["A", "APM", "APLM", "ATM", "ATLM"]
Lookup = Literal["explicit+consistent", "consistent", "uniform"]
Format = Literal["rebalancer.gedik-function/1"]
HashName = Literal["solvers.hashing.hash64"]
PointRule = Literal["hash64(channel * 2**32 + replica, seed)"]

#: how a function is built: Algorithms 2-4 (scan, redist, readj; §4.2) or the hashes alone (uniform, consistent)
PARTITIONING_ALGORITHMS: tuple[str, ...] = get_args(GedikAlgorithm)
#: the resources k of §3.1 (s, c, n)
RESOURCES: tuple[str, ...] = get_args(Resource)
#: the resource functions β_k of §3.1
RESOURCE_FUNCTIONS: tuple[str, ...] = get_args(ResourceFunction)
#: the utility functions U of §4.3
UTILITIES: tuple[str, ...] = get_args(Utility)
LOOKUPS: tuple[str, ...] = get_args(Lookup)

FUNCTION_FORMAT: Format = get_args(Format)[0]
HASH_FUNCTION: HashName = get_args(HashName)[0]
#: the ring's points: ``hash64`` of the integer c·2^32 + r of channel c's replica r
RING_POINT: PointRule = get_args(PointRule)[0]
MAX_CHANNELS = 4096
MAX_REPLICAS = 100_000
DEFAULT_REPLICAS = 1000  # the paper's setting (§5.5: "we use 1000 replicas and 100 buckets")
DEFAULT_SEED = 0
DEFAULT_DOMAIN_SIZE = 10**6  # Table 1
DEFAULT_TOLERANCE = 1.2  # α_k, Table 1

Channels = Annotated[int, Check("N, the number of channels (0-based: 0..N-1)", ge=1, le=MAX_CHANNELS)]
Seed = Annotated[int, Check("an unsigned 64-bit seed of hash64", ge=0, lt=2**64)]
Replicas = Annotated[int, Check("points of each channel on the consistent-hash ring", ge=1, le=MAX_REPLICAS)]
DomainSize = Annotated[int, Check("|D|, the number of distinct keys", ge=1, le=MAX_INT64)]
Tolerance = Annotated[float, Check("α_k > 1 (Eq. 2)", gt=1, finite=True)]
Sigma = Annotated[float, Check("σ of the frequency threshold δ (Eq. 17, §4.1.3)", gt=0, le=1, finite=True)]
MoveLimit = Annotated[int, Check("readj: c, the moves allowed per item (§4.2.4)", ge=1)]
UtilityText = Annotated[str, Check(
    f"U of §4.3: one of {', '.join(UTILITIES)}, any case, with or without a U^ prefix",
    pattern=f"(?i)^(U\\^)?({'|'.join(UTILITIES)})$")]


@dataclass(kw_only=True, slots=True)
class ResourceFunctions:
    """β_k of each resource (§3.1); the default is Table 1's LCL."""

    __pydantic_config__ = REQUEST
    state: ResourceFunction = "linear"
    computation: ResourceFunction = "constant"
    communication: ResourceFunction = "linear"


@dataclass(kw_only=True, slots=True)
class Tolerances:
    """α_k of each resource (Eq. 2)."""

    __pydantic_config__ = REQUEST
    state: Tolerance = DEFAULT_TOLERANCE
    computation: Tolerance = DEFAULT_TOLERANCE
    communication: Tolerance = DEFAULT_TOLERANCE


@dataclass(kw_only=True, slots=True)
class KeyHash:
    """A key's position: ``hash64(key.encode("utf-8"), seed)``, an unsigned 64-bit integer (``solvers/hashing.py``)."""

    __pydantic_config__ = REQUEST
    function: HashName = HASH_FUNCTION
    seed: Seed = DEFAULT_SEED
    key_encoding: Literal["utf-8"] = "utf-8"


@dataclass(kw_only=True, slots=True)
class HashRing:
    """H_c, the consistent hash (§4.1.1): ``replicas`` points per channel; a key goes to the owner of the smallest
    point ≥ its position, wrapping around."""

    __pydantic_config__ = REQUEST
    replicas: Replicas = DEFAULT_REPLICAS
    seed: Annotated[Seed | None, Check("must equal hash.seed (default: hash.seed)")] = None
    point: PointRule = RING_POINT


@dataclass(kw_only=True, slots=True)
class PartitionParams:
    """The spec's parameters the function was built with, defaults filled in."""

    __pydantic_config__ = REQUEST
    resources: ResourceFunctions = field(default_factory=ResourceFunctions)
    imbalance_tolerance: Tolerances = field(default_factory=Tolerances)
    sigma: Sigma = 0.1
    utility: Utility = "APM"
    domain_size: DomainSize = DEFAULT_DOMAIN_SIZE
    move_limit: MoveLimit = 5


@dataclass(kw_only=True, slots=True)
class PartitionFunction:
    """A partitioning function p = ⟨H_p, H_c⟩ (Algorithm 1): the answer of ``POST /v1/partitioning`` and the
    ``previous`` of the next spec."""

    __pydantic_config__ = REQUEST
    format: Format = FUNCTION_FORMAT
    algorithm: Annotated[GedikAlgorithm | None, Check("how the function was built")] = None
    lookup: Annotated[Lookup, Check(
        "explicit+consistent (scan, redist, readj), consistent or uniform (h mod N)")] = "explicit+consistent"
    channels: Channels
    hash: KeyHash = field(default_factory=KeyHash)
    consistent_hash: Annotated[HashRing | None, Check(
        "null: 1000 replicas seeded like the hash; not used by the uniform lookup")] = None
    explicit: Annotated[dict[str, Annotated[int, Check(ge=0, lt=MAX_CHANNELS)]], Check(
        "H_p: {key: channel} of the keys with f ≥ δ; empty unless the lookup is explicit+consistent")] = \
        field(default_factory=dict)
    frequencies: Annotated[dict[str, Annotated[float, Check(ge=0, finite=True)]], Check(
        "{key: f} of the explicit keys, as used for the construction")] = field(default_factory=dict)
    delta: Annotated[float | None, Check("the frequency threshold δ = min_k δ_k (Eq. 17, §4.1.3)")] = None
    delta_k: Annotated[dict[str, float] | None, Check("δ_k of each resource")] = None
    params: PartitionParams | None = None
    metrics: Annotated[dict[str, Any] | None, Check(
        "estimated from the spec: b and b_k, r_k per resource (Eq. 11; null: a channel with zero load), m (Eq. 12; "
        "null without previous), migration {moved, ideal, tracked_moved, untracked_moved_expected}, "
        "explicit_entries, construction_seconds, readj_steps (readj) and model (how they were estimated)")] = None


@dataclass(kw_only=True, slots=True)
class PartitioningSpec:
    """``POST /v1/partitioning`` and ``rebalancer partition build``: build a function for ``channels`` channels from
    the keys' tracked relative frequencies; the keys with f ≥ δ (Eq. 17, §4.1.3) get an explicit channel. A null
    field takes its default."""

    __pydantic_config__ = REQUEST
    algorithm: GedikAlgorithm = "readj"
    channels: Channels
    frequencies: Annotated[dict[str, Annotated[float, Check(ge=0, le=1, finite=True)]] | None, Check(
        "{key: relative frequency}, summing to at most 1")] = field(default_factory=dict)
    domain_size: Annotated[DomainSize | None, Check(
        "|D|, at least the number of keys with a frequency")] = DEFAULT_DOMAIN_SIZE
    resources: ResourceFunctions | None = field(default_factory=ResourceFunctions)
    imbalance_tolerance: Annotated[Tolerance | Tolerances | None, Check(
        "α_k (Eq. 2): one number for every resource, or one per resource")] = DEFAULT_TOLERANCE
    sigma: Sigma | None = 0.1
    utility: UtilityText | None = "APM"
    seed: Annotated[Seed | None, Check("the hashes' seed (default: the previous function's, else 0)")] = None
    replicas: Annotated[Replicas | None, Check(
        "the consistent hash's points per channel (default: the previous function's, else 1000)")] = None
    move_limit: MoveLimit = 5
    previous: Annotated[PartitionFunction | None, Check(
        "the function in use (p^t): the new one limits migration from it (Eq. 12, §4.2)")] = None
