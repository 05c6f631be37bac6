"""Column expressions shared by every driver of a process.

Building a Column in classic PySpark is a few py4j round trips (``functions.col`` is looked up by reflection, then
called; an alias is one more), 0.1–0.4 ms each here. A driver's routing, partial aggregation, merge and restore
expressions are several hundred of them: ~0.1 s on a warm JVM, which a steady batch never pays again (each state
keeps what it built) but a new driver did. A query restarted in the same application — a supervisor's retry after
a failure, a notebook, a benchmark's restart — starts a new driver over the same definition, so the expressions are
kept here, per process, by what they depend on (names, types, aggregations, the routing table) and by the py4j
gateway they live in. Column expressions are immutable plan fragments: one object serves any number of queries.

The store is bounded (least recently used out): a long-lived process that changes its routing many times keeps
the newest :data:`CAPACITY` entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: entries kept (each a handful of Columns)
CAPACITY = 512

_LOCK = threading.Lock()
_BUILT: OrderedDict[tuple[Hashable, ...], Any] = OrderedDict()


def _gateway() -> int:
    """The identity of the py4j gateway the Columns live in (0 without one, e.g. Spark Connect)."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - the Spark extra is installed wherever this module is used
        return 0
    gw = getattr(SparkContext, "_gateway", None)
    return 0 if gw is None else id(gw)


def shared(key: tuple[Hashable, ...], build: Callable[[], T]) -> T:
    """``build()``'s result for ``key``, built once per process and gateway (see the module docstring). ``key``
    must name everything the result depends on."""
    full = (_gateway(), *key)
    with _LOCK:
        if full in _BUILT:
            _BUILT.move_to_end(full)
            return _BUILT[full]  # type: ignore[no-any-return]
    value = build()  # outside the lock: py4j calls (two threads may build the same entry; either serves)
    with _LOCK:
        _BUILT[full] = value
        _BUILT.move_to_end(full)
        while len(_BUILT) > CAPACITY:
            _BUILT.popitem(last=False)
    return value


def clear() -> None:
    """Forget every shared expression (the next driver builds its own)."""
    with _LOCK:
        _BUILT.clear()
