"""What the driver reports per micro-batch, and the error for a state directory that does not match the stream."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class StateMismatchError(RuntimeError):
    """The state directory does not hold the versions the stream's checkpoint expects."""


@dataclass
class BatchReport:
    """What happened in one micro-batch; every figure is measured on the partitions Spark produced."""

    batch_id: int
    epoch: int
    records: int
    partition_records: list[int]
    rebalanced_max_over_mean: float
    hash_partition_records: list[int] | None = None
    hash_max_over_mean: float | None = None
    migrations: int = 0
    moved_key_groups: list[int] = field(default_factory=list)
    moved_rows: int = 0
    moved_bytes: int = 0
    state_bytes: int = 0
    controller: str = "ok"            # ok | down | skipped | conflict | disabled | replayed
    controller_seconds: float = 0.0   # time the batch spent talking to the controller (statistics, answers)
    plan_received: bool = False       # a plan to apply at the next boundary arrived in this batch
    state_version: int | None = None  # the committed state version (durable mode)
    written_bytes: int = 0            # bytes the commit wrote (delta, and snapshot when due)
    commit_seconds: float = 0.0
    replayed: bool = False            # the batch's version was committed already: not applied again
    recovered: bool = False           # the state was rebuilt from the store during this batch
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
