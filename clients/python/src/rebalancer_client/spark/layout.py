"""The layout of a job's key groups as the Spark side holds it: numbers, not ids.

A Spark job's nodes are its partitions, **by position**: node ``j`` of the job's node list (``JobState.nodes``,
``Placement.nodes``) is Spark partition ``j``, so a placement's node indices are partition numbers as they are and
any node the controller plans onto is one the driver can run — a placement with more or fewer nodes changes the
query's partition count at the next batch boundary. A :data:`Layout` maps each operator to the partition of each
of its key groups. :class:`JobOrder` relates the job's key-group order on the controller (``JobState.key_groups``)
to the operators the driver routes, once per registration, so that statistics go out and placements come back as
arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

#: operator id -> the partition of each of its key groups
Layout = dict[str, np.ndarray]


@dataclass(frozen=True)
class Target:
    """A placement to run at the next batch boundary: its epoch, the job's nodes (= the query's partitions, in
    order) and the partition of every key group of this side's operators."""

    epoch: int
    nodes: list[str]
    layout: Layout

    @property
    def partitions(self) -> int:
        return len(self.nodes)


class Routed(Protocol):
    """What the link needs of the side that routes the key groups (a driver, or a chain of them)."""

    @property
    def epoch(self) -> int: ...

    @property
    def partitions(self) -> int: ...

    def layout(self) -> Layout: ...

    def has_layout(self) -> bool: ...

    def may_switch_now(self) -> bool: ...

    def switch(self, target: Target) -> None: ...

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

    def layout(self, placement: Sequence[int]) -> Layout:
        """The partition (= node index) of every key group of this side's operators."""
        assert self.index is not None
        parts = np.asarray(placement, dtype=np.int64)
        return {op: parts[idx] for op, idx in self.index.items()}


def node_list(nodes: Sequence[str], n: int) -> list[str]:
    """``n`` nodes for a query of ``n`` partitions that keeps ``nodes`` where it can: the first ``n`` of them, or
    all of them and new ids ``p<i>`` (the smallest ``i`` not in use)."""
    out = list(nodes[:n])
    used = set(out)
    i = 0
    while len(out) < n:
        if f"p{i}" not in used:
            out.append(f"p{i}")
            used.add(f"p{i}")
        i += 1
    return out


def rescaled(parts: np.ndarray, n: int, weights: np.ndarray, slack: float = 0.05) -> np.ndarray:
    """A layout of ``parts``'s key groups on ``n`` partitions without a controller (a sticky greedy by
    ``weights``, e.g. the latest batch's loads): heaviest first, a key group stays on its partition while that
    stays within ``1 + slack`` of the balanced load, else goes to the least loaded partition."""
    old = np.asarray(parts, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    cap = (1.0 + slack) * float(w.sum()) / n
    out = np.empty_like(old)
    load = np.zeros(n, dtype=np.float64)
    for k in np.argsort(-w, kind="stable").tolist():
        j = int(old[k])
        if not (j < n and load[j] + w[k] <= cap):
            j = int(np.argmin(load))
        out[k] = j
        load[j] += w[k]
    return out
