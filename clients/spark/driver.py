"""The driver side of the integration: one object that a ``foreachBatch`` sink calls per micro-batch.

:class:`RebalancingDriver` owns the routing table, the keyed state (:class:`clients.spark.state.KeyedState`) and
the conversation with the controller (issue 7's /v1 API through :class:`clients.python.RebalancerClient`):

per micro-batch ``batch_id``

1. **batch boundary** — if a plan arrived during the previous batch, switch the routing table now: only the moved
   key groups' state changes partition; from this batch on the driver runs under the plan's epoch (the first batch
   posted with the new epoch is the acknowledgement the controller expects);
2. route, place and aggregate the batch into the keyed state (JVM only, one shuffle of the batch);
3. statistics with Spark aggregations: records and bytes per key group, records per partition as Spark placed
   them, state bytes per key group;
4. post the statistics with the batch id and the epoch the batch ran under (idempotent per batch id, retried);
   the answer may carry a plan the controller executed (``auto`` mode). Without ``auto`` the driver itself asks
   for a proposal once the window is full and the cooldown has passed, and executes it; a 409 (another driver or an
   operator changed the epoch) makes the driver fetch the job and adopt its assignment at the next boundary.

**The controller can never fail a batch.** Every call has a short timeout; a failure is logged, the driver keeps
its last routing, and backs off (skips the controller for 1, 2, 4, … up to ``max_skip_batches`` batches) so a
dead controller costs one connection attempt now and then, not a timeout per batch. Registration is retried the
same way when the controller was down at start.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from clients.python import ConflictError, NotFoundError, RebalancerClient, RebalancerError
from clients.spark.routing import DEFAULT_KEY_GROUPS, RoutingTable, key_group_ids, partition_ids
from clients.spark.state import KeyedState, MigrationReport
from clients.spark.stats import max_over_mean, partition_record_counts

log = logging.getLogger("rebalancer.spark")


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
    controller: str = "ok"            # ok | down | skipped | conflict | disabled
    plan_received: bool = False       # a plan to apply at the next boundary arrived in this batch
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RebalancingDriver:
    """Keyed aggregation in ``foreachBatch`` with controller-driven rebalancing.

    Args:
        spark: the SparkSession.
        key: key column name(s) of the stream.
        aggregations: ``{output: (count|sum|min|max, input column or None)}``; default ``{"count": ("count", None)}``.
        client: a :class:`RebalancerClient` (short timeouts recommended), or ``None`` to run without controller.
        job_id: the controller job id.
        operator: the operator name (key group ids ``<operator>/<k>``).
        key_groups: G, key groups of the operator (default 120).
        partitions: n, the number of Spark partitions (= controller nodes ``p0..p{n-1}``).
        algorithm, params, budget, window_batches, time_limit_s: the job's planner settings (issue 7).
        auto: let the controller decide and execute rounds itself (returned with the stats answer); when False
            the driver requests and executes proposals.
        cooldown_batches: batches between two rebalancing rounds.
        load_distance_threshold: do not rebalance while the windowed load distance is at or below it.
        min_gain: execute a proposal only when it lowers the load distance by at least this share of the mean
            partition load (default 2%): hysteresis against chasing sampling noise with migrations.
        load: what a key group's load is: ``"records"`` (default) or ``"bytes"`` of its records in the batch.
        communication: optional ``f(batch_df) -> [{"src", "dst", "rate"}]`` posted with the statistics, e.g.
            ``lambda df: communication_stats(df, "user", "region", src_operator="split", dst_operator="agg", ...)``
            (:func:`clients.spark.stats.communication_stats`); the other operator must be in ``extra_operators``.
        extra_operators: more operators of the job (``[{"id": "split", "key_groups": 120}]``), registered with
            the controller so that communication edges can name their key groups (this driver routes
            ``operator`` only).
        measure_hash: also measure Spark's plain hash partitioning of each batch (``repartition(n, key)``) for
            comparison (costs one more shuffle per batch; the demo uses it).
        state_stats: send state bytes per key group (one aggregation over the state per batch).
        max_skip_batches: cap of the back-off while the controller is unreachable.
        on_batch: callback called with each :class:`BatchReport`.
    """

    def __init__(
        self,
        spark,
        *,
        key: str | Sequence[str],
        aggregations: Mapping[str, tuple[str, str | None]] | None = None,
        client: RebalancerClient | None = None,
        job_id: str = "spark-job",
        operator: str = "agg",
        key_groups: int = DEFAULT_KEY_GROUPS,
        partitions: int = 8,
        algorithm: str | None = None,
        params: Mapping[str, Any] | None = None,
        budget: Mapping[str, Any] | None = None,
        window_batches: int = 3,
        time_limit_s: float = 1.0,
        auto: bool = False,
        cooldown_batches: int = 1,
        load_distance_threshold: float | None = None,
        min_gain: float = 0.02,
        load: str = "records",
        communication: Callable[[Any], list[dict]] | None = None,
        extra_operators: Sequence[Mapping[str, Any]] = (),
        measure_hash: bool = False,
        state_stats: bool = True,
        max_skip_batches: int = 16,
        on_batch: Callable[[BatchReport], None] | None = None,
    ):
        self.spark = spark
        self.keys = [key] if isinstance(key, str) else list(key)
        self.client = client
        self.job_id = job_id
        self.operator = operator
        self.G = int(key_groups)
        self.n = int(partitions)
        self.algorithm = algorithm
        self.params = dict(params or {})
        self.budget = dict(budget or {})
        self.window_batches = int(window_batches)
        self.time_limit_s = float(time_limit_s)
        self.auto = bool(auto)
        self.cooldown_batches = int(cooldown_batches)
        self.load_distance_threshold = load_distance_threshold
        self.min_gain = float(min_gain)
        if load not in ("records", "bytes"):
            raise ValueError("load must be 'records' or 'bytes'")
        self.load = load
        self.communication = communication
        self.extra_operators = [dict(o) for o in extra_operators]
        self.measure_hash = measure_hash
        self.state_stats = state_stats
        self.max_skip_batches = int(max_skip_batches)
        self.on_batch = on_batch

        self.node_ids = partition_ids(self.n)
        self.kg_ids = key_group_ids(operator, self.G)
        self.routing = RoutingTable.contiguous(operator, self.G, self.n)
        self.state = KeyedState(spark, self.keys, aggregations or {"count": ("count", None)}, self.routing)
        self.epoch = 0
        self.registered = False
        self.pending: tuple[int, dict[str, str]] | None = None   # (epoch, assignment) for the next boundary
        self.batches_since_change = 0
        self.reports: list[BatchReport] = []
        self._failures = 0
        self._skip_until = -1
        self._batch_id = -1

    # ------------------------------------------------------------------ controller plumbing
    @property
    def epoch_start_batches(self) -> dict[int, int]:
        """epoch → the first batch id that ran under it."""
        out: dict[int, int] = {}
        for r in self.reports:
            out.setdefault(r.epoch, r.batch_id)
        return out

    def _controller_available(self) -> bool:
        return self.client is not None and self._batch_id >= self._skip_until

    def _ok(self) -> None:
        self._failures = 0
        self._skip_until = -1

    def _down(self, what: str, exc: BaseException) -> None:
        self._failures += 1
        skip = min(self.max_skip_batches, 2 ** (self._failures - 1))
        self._skip_until = self._batch_id + skip
        log.warning("controller %s failed (%s: %s); keeping the routing of epoch %d, next try in %d batch(es)",
                    what, type(exc).__name__, exc, self.epoch, skip)

    def _job_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "nodes": self.node_ids,
            "operators": [{"id": self.operator, "key_groups": self.G}, *self.extra_operators],
            "budget": self.budget,
            "window_batches": self.window_batches,
            "time_limit_s": self.time_limit_s,
            "auto": {"enabled": self.auto, "cooldown_batches": self.cooldown_batches,
                     "load_distance_threshold": self.load_distance_threshold},
        }
        if self.algorithm:
            spec["algorithm"] = self.algorithm
        if self.params:
            spec["params"] = self.params
        return spec

    def start(self) -> bool:
        """Register the job with the controller (idempotent). Returns True when registered.

        A controller that is down is not an error (the driver runs on the default routing and retries later).
        """
        if self.client is None:
            return False
        try:
            job = self.client.put_job(self.job_id, **self._job_spec())
        except ConflictError:
            raise  # another topology under this job id: a configuration error the user must see
        except RebalancerError as exc:
            self._down("registration", exc)
            return False
        self.registered = True
        self._ok()
        self._adopt(job.epoch, job.assignment)
        return True

    def _own(self, assignment: Mapping[str, str]) -> dict[str, str]:
        """The part of a job assignment that belongs to this driver's operator."""
        prefix = self.operator + "/"
        return {k: v for k, v in assignment.items() if k.startswith(prefix)}

    def _adopt(self, epoch: int, assignment: Mapping[str, str]) -> None:
        """Take the controller's (epoch, assignment): at once before any state exists, else at the next boundary."""
        assignment = self._own(assignment)
        if epoch == self.epoch and self.routing.assignment() == assignment:
            return
        if self.state.df is None and not self.reports:
            self._switch(epoch, assignment)
        else:
            self.pending = (int(epoch), dict(assignment))

    def _switch(self, epoch: int, assignment: Mapping[str, str]) -> MigrationReport:
        new = RoutingTable.from_assignment(self.operator, self.G, assignment, self.node_ids, epoch=epoch,
                                           fallback=self.routing)
        report = self.state.apply_routing(new)
        self.routing = new
        self.epoch = int(epoch)
        self.batches_since_change = 0
        return report

    def _resync(self) -> None:
        """Fetch the job and adopt its epoch and assignment at the next batch boundary."""
        try:
            job = self.client.get_job(self.job_id)
        except NotFoundError:
            self.registered = False  # deleted (or a fresh controller database): register again
            return
        own = self._own(job.assignment)
        if job.epoch != self.epoch or own != self.routing.assignment():
            self.pending = (job.epoch, own)

    # ------------------------------------------------------------------ per batch
    def foreach_batch(self, df, batch_id: int) -> None:
        """The ``foreachBatch`` function: ``query = stream.writeStream.foreachBatch(driver.foreach_batch)``."""
        self.process(df, batch_id)

    def process(self, df, batch_id: int) -> BatchReport:
        """Process one micro-batch (see the module docstring) and return its report."""
        t0 = time.perf_counter()
        self._batch_id = int(batch_id)
        mig = None
        if self.pending is not None:
            epoch, assignment = self.pending
            self.pending = None
            mig = self._switch(epoch, assignment)
        if self.client is not None and not self.registered and self._controller_available():
            try:
                self.start()
            except ConflictError as exc:
                self._down("registration", exc)

        partials = self.state.update(df)
        part, kg_n, kg_b = partials.summary(self.G)
        state_b = self.state.state_bytes_per_key_group() if self.state_stats else np.zeros(self.G, dtype=np.int64)
        edges = None
        if self.communication is not None:
            try:
                edges = self.communication(df)
            except Exception as exc:  # noqa: BLE001 - statistics are best effort, the batch goes on
                log.warning("communication statistics failed: %s", exc)
        hash_part = None
        if self.measure_hash:
            hash_part = partition_record_counts(df.repartition(self.n, *self.keys), self.n)
        KeyedState.release(partials)

        report = BatchReport(
            batch_id=int(batch_id), epoch=self.epoch, records=int(part.sum()),
            partition_records=[int(x) for x in part], rebalanced_max_over_mean=max_over_mean(part),
            hash_partition_records=None if hash_part is None else [int(x) for x in hash_part],
            hash_max_over_mean=None if hash_part is None else max_over_mean(hash_part),
            migrations=mig.migrations if mig else 0,
            moved_key_groups=mig.moved_key_groups if mig else [],
            moved_rows=mig.moved_rows if mig else 0, moved_bytes=mig.moved_bytes if mig else 0,
            state_bytes=int(state_b.sum()),
        )
        report.controller = self._talk(batch_id, kg_n, kg_b, state_b, report, edges)
        self.batches_since_change += 1
        report.seconds = time.perf_counter() - t0
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    def _talk(self, batch_id: int, kg_n: np.ndarray, kg_b: np.ndarray, state_b: np.ndarray,
              report: BatchReport, edges: list[dict] | None = None) -> str:
        """All controller traffic of one batch; never raises."""
        if self.client is None:
            return "disabled"
        if not self.registered or not self._controller_available():
            return "skipped"
        load = kg_n if self.load == "records" else kg_b
        stats = [{"id": self.kg_ids[k], "load": float(load[k]), "state_bytes": float(state_b[k])}
                 for k in range(self.G)]
        try:
            ack = self.client.post_stats(self.job_id, batch_id=batch_id, epoch=self.epoch, key_groups=stats,
                                         communication=edges)
        except ConflictError as exc:  # our epoch is ahead of the job (a new controller database?)
            log.warning("statistics refused (%s); fetching the job", exc.detail)
            return self._guarded("resync", self._resync, conflict=True)
        except NotFoundError:
            self.registered = False
            return "skipped"
        except Exception as exc:  # noqa: BLE001 - the controller never fails a batch
            self._down("statistics", exc)
            return "down"
        self._ok()
        if ack.apply is not None:
            self.pending = (ack.apply.epoch, self._own(ack.apply.assignment))
            report.plan_received = True
            return "ok"
        if ack.epoch != self.epoch:  # someone else executed a plan: adopt the job's assignment
            status = self._guarded("resync", self._resync, conflict=True)
            report.plan_received = self.pending is not None
            return status
        if not self.auto and ack.window_ready and self.batches_since_change + 1 >= self.cooldown_batches:
            status = self._guarded("proposal", self._propose_and_execute)
            report.plan_received = self.pending is not None
            return status
        return "ok"

    def _guarded(self, what: str, fn: Callable[[], None], conflict: bool = False) -> str:
        try:
            fn()
            return "conflict" if conflict else "ok"
        except ConflictError as exc:
            log.info("%s: conflict (%s); adopting the controller's epoch", what, exc.detail)
            try:
                self._resync()
            except Exception as exc2:  # noqa: BLE001
                self._down("resync", exc2)
                return "down"
            return "conflict"
        except Exception as exc:  # noqa: BLE001
            self._down(what, exc)
            return "down"

    def _propose_and_execute(self) -> None:
        prop = self.propose()
        if prop is not None:
            self.execute(prop)

    def apply_proposal(self, prop) -> str:
        """Execute ``prop`` and never raise: ``"ok"`` (applied at the next boundary), ``"conflict"`` (the job had
        moved on: its current assignment is adopted at the next boundary instead) or ``"down"``."""
        return self._guarded("execute", lambda: self.execute(prop))

    def propose(self):
        """Ask the controller for a proposal from the current window; ``None`` when it would not improve."""
        prop = self.client.create_proposal(self.job_id, wait_s=max(2.0, 2 * self.time_limit_s))
        if prop.plan is None or not prop.plan.moves:
            return None
        if prop.base_epoch is not None and prop.base_epoch != self.epoch:
            self._resync()
            return None
        before_m = prop.plan.metrics.get("before", {})
        before = float(before_m.get("load_distance", 0.0))
        after = float(prop.plan.metrics.get("after", {}).get("load_distance", 0.0))
        mean_load = float(before_m.get("total_load", 0.0) or 0.0) / self.n
        if after >= before or (before - after) < self.min_gain * mean_load:
            return None
        if self.load_distance_threshold is not None and before <= self.load_distance_threshold:
            return None
        return prop

    def execute(self, prop) -> bool:
        """Execute a proposal; on success its assignment is applied at the next batch boundary.

        Raises ConflictError when the job moved past the proposal's base epoch (callers in a batch go through
        the guarded path, which then adopts the job's current assignment instead).
        """
        ex = self.client.execute_proposal(self.job_id, prop.id)
        assignment = ex.assignment if ex.assignment is not None else prop.plan.assignment
        self.pending = (ex.epoch, self._own(assignment))
        return True

    # ------------------------------------------------------------------ results
    def state_frame(self):
        """The keyed state as a DataFrame (keys and aggregates)."""
        if self.state.df is None:
            return None
        return self.state.df.select(*self.keys, *self.state.aggregations)

    def close(self) -> None:
        self.state.unpersist()
