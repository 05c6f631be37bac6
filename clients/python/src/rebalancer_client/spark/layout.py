"""The layout of a job's key groups as the Spark side holds it: numbers, not ids.

A :data:`Layout` maps each operator to the partition of each of its key groups. :class:`JobOrder` relates the
job's key-group order on the controller (``JobState.key_groups``) to the operators the driver routes, once per
registration, so that statistics go out and placements come back as arrays; :func:`node_partitions` maps the job's
nodes to Spark partitions (``p<i>`` is partition ``i``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from rebalancer_client.spark.routing import partition_ids

#: operator id -> the partition of each of its key groups
Layout = dict[str, np.ndarray]


class Routed(Protocol):
    """What the link needs of the side that routes the key groups (a driver, or a chain of them)."""

    @property
    def epoch(self) -> int: ...

    def layout(self) -> Layout: ...

    def has_layout(self) -> bool: ...

    def may_switch_now(self) -> bool: ...

    def switch(self, epoch: int, layout: Layout) -> None: ...

    def relabel(self, epoch: int) -> None: ...


def same_layout(a: Layout, b: Layout) -> bool:
    if a.keys() != b.keys():
        return False
    for op, parts in a.items():
        if not np.array_equal(parts, b[op]):
            return False
    return True


class JobOrder:
    """The job's key-group order as positions of this side's key groups: ``index[op][k]`` is where key group ``k``
    of operator ``op`` stands in ``JobState.key_groups``; ``None`` when the job's key groups are not exactly
    ``expected``."""

    def __init__(self, key_groups: Sequence[str], operators: Sequence[tuple[str, int]], expected: set[str]):
        self.size = len(key_groups)
        self.index: dict[str, np.ndarray] | None = None
        if len(key_groups) == len(expected) and set(key_groups) == expected:
            pos = {k: i for i, k in enumerate(key_groups)}
            self.index = {op: np.fromiter((pos[f"{op}/{k}"] for k in range(g)), dtype=np.int64, count=g)
                          for op, g in operators}
        only = next(iter(self.index.values())) if self.index is not None and len(self.index) == 1 else None
        self.identity = only is not None and self.size == len(only) and bool((only == np.arange(self.size)).all())

    def arrays(self, load: Mapping[str, np.ndarray], state_bytes: Mapping[str, np.ndarray] | None
               ) -> tuple[list[float], list[float | None] | None]:
        """The statistics in the job's order: one load per key group (0 for the key groups of other operators)
        and one state size (``None`` for those of other operators: not measured here)."""
        assert self.index is not None
        if self.identity:
            only = next(iter(self.index))
            return (load[only].astype(np.float64).tolist(),
                    None if state_bytes is None else state_bytes[only].astype(np.float64).tolist())
        out = np.zeros(self.size, dtype=np.float64)
        sizes = None if state_bytes is None else np.full(self.size, np.nan)
        for op, idx in self.index.items():
            out[idx] = load[op]
            if sizes is not None and state_bytes is not None:
                sizes[idx] = state_bytes[op]
        return out.tolist(), None if sizes is None else [None if x != x else x for x in sizes.tolist()]

    def layout(self, placement: Sequence[int], node_partition: np.ndarray) -> Layout:
        """Partition of every key group of this side's operators (``-1``: a node that is no partition)."""
        assert self.index is not None
        parts = node_partition[np.asarray(placement, dtype=np.int64)]
        return {op: parts[idx] for op, idx in self.index.items()}


def node_partitions(nodes: Sequence[str], n: int) -> np.ndarray:
    """The Spark partition of each node (``p<i>`` → i for i < n), -1 for any other node."""
    own = {nid: i for i, nid in enumerate(partition_ids(n))}
    return np.array([own.get(nid, -1) for nid in nodes], dtype=np.int64)
