"""The state bytes per key group that a driver posts with its statistics
(:attr:`~rebalancer_client.spark.config.ControllerConfig.state_stats`): the controller weighs the bytes a plan
moves against the load distance it gains."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class StateBytes:
    """State bytes per key group, as of a batch.

    Mergeable aggregations keep the count exact from each batch's change (:meth:`tracked`, no job of its own): the
    whole state is measured only when there is no count yet with the state the batch merged into (the first batch
    after a start without a commit record's sizes, or after a recovery). The function API measures it every
    ``every`` batches and after a migration (:meth:`sampled`). A restart starts from the sizes its commit record
    keeps (:meth:`restored`): it measures nothing. ``measure()`` is the measurement (a Spark job over the state);
    ``enabled=False`` reports zeros and measures nothing."""

    def __init__(self, key_groups: int, every: int, enabled: bool, measure: Callable[[], np.ndarray]):
        self.key_groups = key_groups
        self.every = max(1, int(every))
        self.enabled = enabled
        self.measure = measure
        self.at: tuple[int, np.ndarray] | None = None   # (batch measured at, bytes per key group)

    def restored(self, version: int, sizes: list[int] | None) -> None:
        """The sizes a commit record kept for ``version`` (None: an earlier release's record, measured later)."""
        self.at = None if sizes is None else (int(version), np.asarray(sizes, dtype=np.int64))

    def tracked(self, batch_id: int, change: np.ndarray, had_state: bool) -> np.ndarray:
        """After batch ``batch_id`` changed each key group's bytes by ``change`` (``had_state``: it merged into an
        existing state). A migration moves key groups, not bytes: the count stays."""
        if not self.enabled:
            return np.zeros(self.key_groups, dtype=np.int64)
        if self.at is not None and self.at[0] == batch_id - 1:
            self.at = (batch_id, self.at[1] + change)
        elif not had_state:
            self.at = (batch_id, change.copy())
        else:
            self.at = (batch_id, self.measure())
        return self.at[1]

    def sampled(self, batch_id: int, migrated: bool) -> np.ndarray:
        """After batch ``batch_id``: the last measurement, measured again every ``every`` batches and after a
        migration (``migrated``)."""
        if not self.enabled:
            return np.zeros(self.key_groups, dtype=np.int64)
        if self.at is None or migrated or batch_id - self.at[0] >= self.every:
            self.at = (batch_id, self.measure())
        return self.at[1]
