"""Gedik's partitioning functions for stateful data parallelism (scan, redist, readj; lossy counting; consistent
hashing) — B. Gedik, "Partitioning functions for stateful data parallelism in stream processing".

Public entry points:

* :func:`build_document` (spec → function document; the CLI ``partition build`` and ``POST /v1/partitioning``)
* :func:`route_keys` (function document or :class:`PartitionFunction`, keys → channels; vectorised Algorithm 1)
* :class:`LossyCounter`, :class:`SlidingLossyCounter` (§4.1.2), :class:`ConsistentHash` (§4.1.1)
* :func:`construct` with :class:`Instance` / :class:`Config` (Algorithms 2–4 on arrays)

The document's fields, enough to reproduce lookups elsewhere (e.g. a Spark adapter), are documented in
:mod:`solvers.gedik.function`.
"""

from solvers.gedik.construct import Instance, construct, readj, redist, scan
from solvers.gedik.counting import LossyCounter, SlidingLossyCounter
from solvers.gedik.function import (
                                    ALGORITHMS,
                                    FORMAT,
                                    PartitionFunction,
                                    build_document,
                                    load_function,
                                    route_keys,
                                    validate_spec,
)
from solvers.gedik.model import Config, select_tracked
from solvers.gedik.ring import ConsistentHash, uniform_lookup

__all__ = [
    "ALGORITHMS", "FORMAT", "Config", "ConsistentHash", "Instance", "LossyCounter", "PartitionFunction",
    "SlidingLossyCounter", "build_document", "construct", "load_function", "readj", "redist", "route_keys",
    "scan", "select_tracked", "uniform_lookup", "validate_spec",
]
