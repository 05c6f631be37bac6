"""Local recovery: a clean close leaves its committed state in executor memory for the next driver of the same
process on the same state directory.

A restart normally reads the committed state from the store's files and places it in a shuffle
(:meth:`rebalancer_client.spark.recovery.Durable._restore`). When the new driver runs in the process whose driver
committed that state — a query restarted after a failure, a notebook cell run again — the state is still on the
executors as that driver's local checkpoint. ``close()`` keeps it here for ``DurabilityConfig.keep_s`` seconds; a
start that finds it, for the version the store's latest commit record names, under the same routing, the same state
columns and the same SparkContext, takes it over instead of reading the files: Flink's *local recovery*
(``state.backend.local-recovery``, a task-local copy of the state used before the remote one), here for a
restart in the same JVM. Anything else (another version, another routing, a new SparkContext, the time run out) frees
the blocks, and the start reads the files. Blocks lost since (an executor gone) fail the first batch's job with a
missing checkpoint block, which the driver answers as for any lost state: by reading the committed version from
the store (``RebalancingDriver.process``).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rebalancer_client.spark.placement import release_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["clear", "keep", "take"]


@dataclass
class _Kept:
    version: int
    what: Hashable  # what the state must match: routing, keys, state columns (see keep)
    context: Any    # the SparkContext the blocks belong to
    df: DataFrame
    timer: threading.Timer


_lock = threading.Lock()
_kept: dict[str, _Kept] = {}


def keep(root: str, version: int, what: Hashable, df: DataFrame, seconds: float) -> None:
    """Keep ``df`` (the committed state of ``version`` in the store at ``root``, a local checkpoint) for
    ``seconds``; it replaces (and frees) what was kept for ``root``. ``what``: everything the next driver's state must
    have for the rows to be its own (routing, keys, columns)."""
    timer = threading.Timer(min(seconds, threading.TIMEOUT_MAX), _expire, args=(root, df))
    timer.daemon = True
    kept = _Kept(int(version), what, df.sparkSession.sparkContext, df, timer)
    with _lock:
        old, _kept[root] = _kept.get(root), kept
    if old is not None:
        _free(old)
    timer.start()


def take(root: str, version: int, what: Hashable, context: Any) -> DataFrame | None:
    """The state kept for ``root`` if it is ``version``'s with the same ``what`` in SparkContext ``context`` (the
    caller then owns its blocks), else None (what was kept is freed)."""
    with _lock:
        kept = _kept.pop(root, None)
    if kept is None:
        return None
    kept.timer.cancel()
    if kept.version == int(version) and kept.what == what and kept.context is context:
        return kept.df
    _free(kept)
    return None


def clear() -> None:
    """Free everything kept (tests; a process about to stop its SparkContext)."""
    with _lock:
        kept = list(_kept.values())
        _kept.clear()
    for k in kept:
        _free(k)


def _expire(root: str, df: DataFrame) -> None:
    with _lock:
        kept = _kept.get(root)
        if kept is None or kept.df is not df:
            return
        del _kept[root]
    release_checkpoint(df)


def _free(kept: _Kept) -> None:
    kept.timer.cancel()
    release_checkpoint(kept.df)
