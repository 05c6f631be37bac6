"""The driver's options, grouped: what the controller is told (:class:`ControllerConfig`) and where the state is
kept (:class:`DurabilityConfig`). The keyed logic itself (key, aggregations or function, key groups, partitions)
is given to :class:`rebalancer_client.spark.driver.RebalancingDriver` directly.

Example::

    driver = RebalancingDriver(
        spark, key="user", aggregations={"clicks": ("count", None)}, key_groups=120, partitions=8,
        controller=ControllerConfig(client, "clicks", algorithm="albic-milp", budget={"max_migrations": 12}),
        durability=DurabilityConfig("/chk/clicks"), output=BatchIdSink("/out/clicks"))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from rebalancer_client import RebalancerClient
from rebalancer_client.contract import Budget, Policy

#: ``f(batch_df) -> [{"src", "dst", "rate"}]``: communication statistics posted with a batch
Communication = Callable[[Any], list[dict[str, Any]]]


@dataclass
class ControllerConfig:
    """How the job talks to the controller.

    Args:
        client: a :class:`RebalancerClient` (short timeouts recommended), or ``None`` to run without controller.
        job_id: the controller job id.
        algorithm, params, budget, window_batches, time_limit_s: the job's planner settings (``JobSpec``).
        auto: the controller solves, judges and executes rounds itself and the answer to a batch's statistics
            carries the new placement (one round trip per batch; default). ``False``: the driver asks for a
            proposal when the answer says ``significant`` and executes it only when the controller judged it
            worth it.
        policy: when moving state is worth it (``Policy``: noise guard, minimum gain, cooldown, threshold, bytes
            per gain), judged by the controller for every round; default: the controller's defaults. ``budget``
            and ``policy`` may be documents or mappings of their fields; the controller validates them.
        scale_budget: the migration budget of a change of the partition count (a restart with another
            ``partitions``, :meth:`RebalancingDriver.scale <rebalancer_client.spark.driver.RebalancingDriver.scale>`);
            ``None``: a full rebalance (the key groups of partitions that go always move).
        load: what a key group's load is: ``"records"`` (default) or ``"bytes"`` of its records in the batch.
        communication: optional ``f(batch_df) -> [{"src", "dst", "rate"}]`` posted with the statistics
            (:func:`rebalancer_client.spark.stats.communication_stats`); the other operator must be in
        ``extra_operators``. extra_operators: more operators of the job (``[{"id": "split", "key_groups": 120}]``).
        state_stats: send state bytes per key group. Mergeable aggregations measure it once (after a start with
            stored state or a recovery) and then keep it exact from each batch's changes; the function API
            measures it every ``state_stats_every`` batches (default ``window_batches``) and after a migration.
        async_plans: in proposal mode, request and execute proposals on a background thread (the plan is applied
            at the first boundary after it arrived); ``False``: within the batch.
        backoff_s, max_backoff_s: after a controller failure, wait 1, 2, 4, … × ``backoff_s`` seconds (at most
            ``max_backoff_s``) before calling it again.
    """

    client: RebalancerClient | None
    job_id: str = "spark-job"
    algorithm: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    budget: Budget | Mapping[str, Any] | None = None
    window_batches: int = 3
    time_limit_s: float | None = 1.0
    auto: bool = True
    policy: Policy | Mapping[str, Any] | None = None
    scale_budget: Budget | Mapping[str, Any] | None = None
    load: Literal["records", "bytes"] = "records"
    communication: Communication | None = None
    extra_operators: Sequence[Mapping[str, Any]] = ()
    state_stats: bool = True
    state_stats_every: int | None = None
    async_plans: bool = True
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.load not in ("records", "bytes"):
            raise ValueError("load must be 'records' or 'bytes'")


@dataclass
class DurabilityConfig:
    """Where the keyed state's versions are kept (:class:`rebalancer_client.spark.store.StateStore`).

    Args:
        checkpoint_location: the query's checkpoint location; the state goes to ``<it>/rebalancer-state``.
        state_dir: the state directory (any Hadoop path), overriding the default under ``checkpoint_location``.
        snapshot_every: a snapshot every N versions (Spark's default 10).
        retain_versions: keep the last M versions (Spark's ``minBatchesToRetain``, 100).
        snapshot_on_close: a clean ``close()`` writes the latest version's state whole when versions were written
            since the last snapshot, so that the next start reads one directory instead of those versions (like
            Flink's stop-with-savepoint; a close then takes as long as a snapshot's write). False: it returns at once.
        read_ahead: at a restart (``start()`` before the query's), read and place the stored state in a job of its
            own while the query starts. ``None`` (default): only in a process whose drivers have not run a batch yet
            — a new JVM, whose query start takes seconds; in a JVM that has run one the query starts in a fraction
            of a second and the job only competes with it (measured: 6–9 % slower warm restarts with it, 2–6 %
            faster restarts in a new process). ``True``/``False``: always/never.
        keep_s: a clean ``close()`` keeps the committed state in executor memory this many seconds for the next
            driver of the process on the same state directory, which takes it over instead of reading the files
            (local recovery, like Flink's ``state.backend.local-recovery``; :mod:`rebalancer_client.spark.handover`).
            0: the blocks are freed at close.
        on_event: test hook ``f(point, version)`` of the store (see :class:`~rebalancer_client.spark.store.StateStore`).
    """

    checkpoint_location: str | None = None
    state_dir: str | None = None
    snapshot_every: int = 10
    retain_versions: int = 100
    snapshot_on_close: bool = True
    read_ahead: bool | None = None
    keep_s: float = 60.0
    on_event: Callable[[str, int], None] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.snapshot_on_close, bool):
            raise ValueError(f"snapshot_on_close must be True or False, not {self.snapshot_on_close!r}")
        if self.read_ahead is not None and not isinstance(self.read_ahead, bool):
            raise ValueError(f"read_ahead must be None, True or False, not {self.read_ahead!r}")
        seconds = self.keep_s
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < math.inf:
            raise ValueError(f"keep_s must be a finite number of seconds >= 0, not {self.keep_s!r}")

    @property
    def root(self) -> str | None:
        """The state directory, or ``None`` (the state is not durable)."""
        if self.state_dir:
            return str(self.state_dir)
        if self.checkpoint_location:
            return str(self.checkpoint_location).rstrip("/") + "/rebalancer-state"
        return None

    def under(self, name: str) -> DurabilityConfig:
        """The same settings for a sub-directory ``<root>/<name>`` (a stage of an operator chain)."""
        root = self.root
        return replace(self, checkpoint_location=None,
                       state_dir=None if root is None else f"{root.rstrip('/')}/{name}")
