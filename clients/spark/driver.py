"""The driver side of the integration: one object that a ``foreachBatch`` sink calls per micro-batch.

:class:`RebalancingDriver` owns the routing table, the keyed state (:class:`clients.spark.state.KeyedState`), its
durable versions (:class:`clients.spark.store.StateStore`) and, through :class:`clients.spark.control.ControllerLink`,
the conversation with the controller. Per micro-batch ``batch_id``:

1. **recovery** (first batch after a start): the last committed state version is loaded and placed under the
   routing it was committed with; a batch whose version is already committed (Spark replays the batch it had
   not committed when the driver died) is *not* applied again — its output is rewritten from the stored delta;
2. **batch boundary** — a plan that arrived earlier switches the routing now (only moved key groups' state
   changes partition); from this batch on the driver runs under the plan's epoch;
3. route, place and aggregate the batch into the keyed state (JVM only, one shuffle of the batch);
4. **commit** the state version ``batch_id``: the rows the batch changed (Parquet), a snapshot every
   ``snapshot_every`` versions, and the routing epoch + assignment; then the optional ``output`` sink gets the
   changed rows (update mode, read back from the version's delta; :class:`clients.spark.sink.BatchIdSink` makes it
   exactly once). Steps 3 and 4 are **one Spark job** (aggregations and the function API alike): the new state is
   checkpointed lazily and filled by the job that writes the delta, which also measures the batch's records and
   bytes per key group (and, for the aggregations, the change of each key group's state bytes) with a Spark
   ``Observation``; with the output sink that is two jobs per batch in steady state (plus the moves of a
   migration; the function API measures its state size in a job of its own every ``state_stats_every`` batches);
5. statistics (records/bytes per key group, state bytes per key group) go to the controller with the batch id
   and the epoch; plans come back with the answer (``auto``) or from a proposal, for the next boundary.

An executor lost mid-stream takes the cached state blocks with it; the driver then rebuilds the state from the
last committed version and runs the batch again. Without ``state_dir``/``checkpoint_location`` the state lives
on the executors only (as before issue 15): a driver restart loses it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from clients.python import RebalancerClient
from clients.spark.control import ConfigurationError, ControllerLink
from clients.spark.functions import FunctionState, KeyedFunction
from clients.spark.reports import BatchReport, StateMismatchError
from clients.spark.routing import DEFAULT_KEY_GROUPS, RoutingTable, key_group_ids
from clients.spark.state import KeyedState, MigrationReport
from clients.spark.stats import max_over_mean, partition_record_counts
from clients.spark.store import StateStore

log = logging.getLogger("rebalancer.spark")

__all__ = ["BatchReport", "ConfigurationError", "RebalancingDriver", "StateMismatchError"]

_LOST_BLOCKS = ("Checkpoint block", "ExecutorLostFailure", "FetchFailed", "BlockMissingException")


class RebalancingDriver(ControllerLink):
    """Keyed aggregation in ``foreachBatch`` with durable state and controller-driven rebalancing.

    Args:
        spark: the SparkSession.
        key: key column name(s) of the stream.
        aggregations: ``{output: (count|sum|min|max, input column or None)}``; default ``{"count": ("count", None)}``.
        function: instead of ``aggregations``, any per-key logic: a :class:`clients.spark.functions.KeyedFunction`
            (``fn(key, rows, state) -> (output rows, new state)`` on pandas DataFrames, optional timeouts); the
            ``output`` sink then gets the rows ``fn`` emitted.
        client: a :class:`RebalancerClient` (short timeouts recommended), or ``None`` to run without controller.
        job_id: the controller job id. operator: the operator name (key group ids ``<operator>/<k>``).
        key_groups: G, key groups of the operator (default 120; fewer than ``partitions`` leaves some empty).
        partitions: n, the number of Spark partitions (= controller nodes ``p0..p{n-1}``, fixed for a query).
        checkpoint_location: the query's checkpoint location; the state goes to ``<it>/rebalancer-state``.
        state_dir: the state directory (any Hadoop path), overriding the default under ``checkpoint_location``.
        snapshot_every, retain_versions: a snapshot every N versions (Spark's default 10); keep the last M
            versions (Spark's ``minBatchesToRetain``, 100).
        output: ``f(changed_rows_df, batch_id)`` called after each commit (and on a replayed batch, from the
            stored delta), e.g. :class:`clients.spark.sink.BatchIdSink`.
        algorithm, params, budget, window_batches, time_limit_s: the job's planner settings (issue 7).
        auto: let the controller decide and execute rounds itself; when False the driver requests proposals.
        cooldown_batches: batches between two rebalancing rounds.
        load_distance_threshold: do not rebalance while the windowed load distance is at or below it.
        min_gain: execute a proposal only when it lowers the load distance by at least this share of the mean
            partition load (default 2%): hysteresis against chasing sampling noise with migrations.
        noise_sigmas: with record loads, leave an imbalance below this many √(mean node load) alone (Poisson
            sampling noise of the counts; ``None`` disables; see :func:`clients.spark.control.worth_executing`).
        load: what a key group's load is: ``"records"`` (default) or ``"bytes"`` of its records in the batch.
        communication: optional ``f(batch_df) -> [{"src", "dst", "rate"}]`` posted with the statistics
            (:func:`clients.spark.stats.communication_stats`); the other operator must be in ``extra_operators``.
        extra_operators: more operators of the job (``[{"id": "split", "key_groups": 120}]``).
        measure_hash: also measure Spark's hash partitioning of each batch (one more shuffle; the demo uses it).
        state_stats: send state bytes per key group. Mergeable aggregations measure it once (one aggregation
            over the whole state, after a start with stored state or a recovery) and then keep it exact from each
            batch's changes; the function API repeats the aggregation every ``state_stats_every`` batches
            (default ``window_batches``) and after each migration.
        send_bytes: send each key group's record ``bytes`` with the statistics (default; ``False`` for a controller
            older than the optional ``bytes`` field, which answers 422 to it).
        async_plans: request and execute proposals on a background thread (the plan is applied at the first
            boundary after it arrived); ``False``: within the batch that filled the window.
        backoff_s, max_backoff_s: after a controller failure, wait 1, 2, 4, … × ``backoff_s`` seconds (at most
            ``max_backoff_s``) before calling it again.
        on_batch: callback called with each :class:`BatchReport`.
        on_store_event: test hook passed to :class:`StateStore` (``f(point, version)``).
    """

    def __init__(
        self,
        spark,
        *,
        key: str | Sequence[str],
        aggregations: Mapping[str, tuple[str, str | None]] | None = None,
        function: KeyedFunction | None = None,
        client: RebalancerClient | None = None,
        job_id: str = "spark-job",
        operator: str = "agg",
        key_groups: int = DEFAULT_KEY_GROUPS,
        partitions: int = 8,
        checkpoint_location: str | None = None,
        state_dir: str | None = None,
        snapshot_every: int = 10,
        retain_versions: int = 100,
        output: Callable[[Any, int], None] | None = None,
        algorithm: str | None = None,
        params: Mapping[str, Any] | None = None,
        budget: Mapping[str, Any] | None = None,
        window_batches: int = 3,
        time_limit_s: float = 1.0,
        auto: bool = False,
        cooldown_batches: int = 1,
        load_distance_threshold: float | None = None,
        min_gain: float = 0.02,
        noise_sigmas: float | None = 3.0,
        load: str = "records",
        communication: Callable[[Any], list[dict[str, Any]]] | None = None,
        extra_operators: Sequence[Mapping[str, Any]] = (),
        measure_hash: bool = False,
        state_stats: bool = True,
        state_stats_every: int | None = None,
        send_bytes: bool = True,
        async_plans: bool = True,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        on_batch: Callable[[BatchReport], None] | None = None,
        on_store_event: Callable[[str, int], None] | None = None,
    ):
        if int(key_groups) < 1 or int(partitions) < 1:
            raise ValueError("key_groups and partitions must be >= 1")
        self._init_link(client=client, job_id=job_id, partitions=partitions, algorithm=algorithm, params=params,
                        budget=budget, window_batches=window_batches, time_limit_s=time_limit_s, auto=auto,
                        cooldown_batches=cooldown_batches, load_distance_threshold=load_distance_threshold,
                        min_gain=min_gain, noise_sigmas=noise_sigmas, load=load, extra_operators=extra_operators,
                        async_plans=async_plans, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        self.spark = spark
        self.keys = [key] if isinstance(key, str) else list(key)
        self.operator = operator
        self.G = int(key_groups)
        if self.G < self.n:
            log.warning("key_groups=%d < partitions=%d: %d partition(s) will never hold a key (use key_groups "
                        ">= partitions, ideally a multiple such as 120)", self.G, self.n, self.n - self.G)
        self.communication = communication
        self.measure_hash = measure_hash
        self.state_stats = state_stats
        self.state_stats_every = max(1, int(state_stats_every or window_batches))
        self._state_b: tuple[int, np.ndarray] | None = None   # (batch measured at, bytes per key group)
        self.send_bytes = bool(send_bytes)
        self.on_batch = on_batch
        self.output = output

        self.kg_ids = key_group_ids(operator, self.G)
        self.routing = RoutingTable.contiguous(operator, self.G, self.n)
        if function is not None and aggregations is not None:
            raise ValueError("give either aggregations or function, not both")
        self.state = (KeyedState(spark, self.keys, aggregations or {"count": ("count", None)}, self.routing)
                      if function is None else FunctionState(spark, self.keys, function, self.routing))
        root = state_dir or (checkpoint_location.rstrip("/") + "/rebalancer-state" if checkpoint_location else None)
        self.store = None if root is None else StateStore(spark, root, snapshot_every=snapshot_every,
                                                          retain_versions=retain_versions,
                                                          on_event=on_store_event)
        if self.store is None:
            log.info("no state_dir/checkpoint_location: the keyed state is not durable (lost on a driver restart)")
        self.committed: int | None = None        # the last committed state version
        self._recovered = False
        self.reports: list[BatchReport] = []
        self.last_stats: list[dict[str, Any]] = []   # the statistics of the latest batch (one per key group)
        self._batch_id = -1

    # ------------------------------------------------------------------ hooks of ControllerLink
    def _has_layout(self) -> bool:
        return self.state.df is not None or bool(self.reports) or self.committed is not None

    def _boundary_switch_allowed(self) -> bool:
        return self.state.df is None and not self.reports

    @property
    def epoch_start_batches(self) -> dict[int, int]:
        """epoch → the first batch id that ran under it."""
        out: dict[int, int] = {}
        for r in self.reports:
            out.setdefault(r.epoch, r.batch_id)
        return out

    def start(self) -> bool:
        """Load the last committed state (durable mode), then register with the controller (see
        :meth:`ControllerLink.start`): a controller that is down is not an error, a refused configuration
        raises :class:`ConfigurationError`."""
        self._recover()
        return super().start()

    def _switch(self, epoch: int, assignment: Mapping[str, str]) -> MigrationReport:
        new = RoutingTable.from_assignment(self.operator, self.G, assignment, self.node_ids, epoch=epoch,
                                           fallback=self.routing)
        report = self.state.apply_routing(new)
        self.routing = new
        self.epoch = int(epoch)
        self.batches_since_change = 0
        return report

    # ------------------------------------------------------------------ durability
    def _recover(self, force: bool = False) -> None:
        """Load the last committed version and place it under the routing it was committed with (once)."""
        if self.store is None or (self._recovered and not force):
            return
        self._recovered = True
        t0 = time.perf_counter()
        if force:
            self.store._latest_read = False
        df, rec = self.store.load(dedup=False)
        if rec is None:
            if force:
                self.state.unpersist()
            return
        if len(rec.partition_of) != self.G or max(rec.partition_of) >= self.n or rec.keys != self.keys:
            raise StateMismatchError(
                f"the state in {self.store.root} was written with keys {rec.keys}, {len(rec.partition_of)} key "
                f"groups and {max(rec.partition_of) + 1}+ partitions; this driver has keys {self.keys}, "
                f"key_groups={self.G}, partitions={self.n}")
        routing = RoutingTable(self.operator, np.asarray(rec.partition_of), self.n, rec.epoch, self.node_ids)
        self.state.restore_extra(rec.extra)
        self.state.restore(df, routing, dedup=True)
        self.routing, self.epoch, self.committed = routing, int(rec.epoch), int(rec.version)
        log.info("state version %d (epoch %d) loaded from %s in %.2f s", rec.version, rec.epoch, self.store.root,
                 time.perf_counter() - t0)

    def _check_version(self, batch_id: int) -> None:
        expected = 0 if self.committed is None else self.committed + 1
        if self.store is not None and batch_id > expected:
            raise StateMismatchError(
                f"batch {batch_id} arrived but the state in {self.store.root} is committed up to "
                f"{'no version' if self.committed is None else f'version {self.committed}'}: the state of "
                f"batches {expected}..{batch_id - 1} is missing (was the state directory changed or removed "
                f"while the query's checkpoint was kept?)")

    def _output_frame(self, df):
        return self.state.output_frame(df)

    def _replay(self, batch_id: int, t0: float) -> BatchReport:
        log.warning("batch %d is a replay: state version %d is committed, not applied again", batch_id,
                    self.committed)
        if self.output is not None and self.store is not None:
            self.output(self._output_frame(self.store.read_delta(batch_id)), batch_id)
        report = BatchReport(batch_id=batch_id, epoch=self.epoch, records=0, partition_records=[],
                             rebalanced_max_over_mean=math.nan, controller="replayed", state_version=self.committed,
                             replayed=True, seconds=time.perf_counter() - t0)
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    # ------------------------------------------------------------------ per batch
    def foreach_batch(self, df, batch_id: int) -> None:
        """The ``foreachBatch`` function: ``query = stream.writeStream.foreachBatch(driver.foreach_batch)``."""
        self.process(df, batch_id)

    def process(self, df, batch_id: int) -> BatchReport:
        """Process one micro-batch (see the module docstring) and return its report."""
        t0 = time.perf_counter()
        batch_id = int(batch_id)
        self._batch_id = batch_id
        self._recover()
        if self.committed is not None and batch_id <= self.committed:
            return self._replay(batch_id, t0)
        self._check_version(batch_id)
        self.state.check_columns(df)
        try:
            return self._run(df, batch_id, t0)
        except Exception as exc:
            if self.store is None or not any(s in str(exc) for s in _LOST_BLOCKS):
                raise
            log.warning("batch %d: state blocks lost (%s); rebuilding the state from committed version %s",
                        batch_id, str(exc).splitlines()[0][:200], self.committed)
            self._recover(force=True)
            if self.committed is not None and batch_id <= self.committed:
                return self._replay(batch_id, t0)
            report = self._run(df, batch_id, t0)
            report.recovered = True
            return report

    def _run(self, df, batch_id: int, t0: float) -> BatchReport:
        mig = None
        if self.pending is not None:
            epoch, assignment = self.pending
            mig = self._switch(epoch, assignment)
            self.pending = None

        had_state = self.state.df is not None
        part, kg_n, kg_b, kg_d, rec = self._update(df, batch_id)
        state_b = (self._tracked_state_bytes(batch_id, kg_d, had_state) if kg_d is not None else
                   self._state_bytes(batch_id, mig is not None))
        edges = None
        if self.communication is not None:
            try:
                edges = self.communication(df)
            except Exception as exc:  # noqa: BLE001 - statistics are best effort, the batch goes on
                log.warning("communication statistics failed: %s", exc)
        hash_part = None
        if self.measure_hash:
            hash_part = partition_record_counts(df.repartition(self.n, *self.keys), self.n)
        if self.output is not None and self.state.df is not None:
            if self.store is not None:  # the version's delta, just written: a small read, not a scan of the state
                self.output(self._output_frame(self.store.read_delta(batch_id)), batch_id)
            else:
                self.output(self._output_frame(self.state.df.filter(self.state.changed_rows())), batch_id)

        report = BatchReport(
            batch_id=batch_id, epoch=self.epoch, records=int(part.sum()),
            partition_records=[int(x) for x in part], rebalanced_max_over_mean=max_over_mean(part),
            hash_partition_records=None if hash_part is None else [int(x) for x in hash_part],
            hash_max_over_mean=None if hash_part is None else max_over_mean(hash_part),
            migrations=mig.migrations if mig else 0,
            moved_key_groups=mig.moved_key_groups if mig else [],
            moved_rows=mig.moved_rows if mig else 0, moved_bytes=mig.moved_bytes if mig else 0,
            state_bytes=int(state_b.sum()), state_version=None if rec is None else rec.version,
            written_bytes=0 if rec is None else rec.written_bytes, commit_seconds=0.0 if rec is None else rec.seconds,
        )
        load = kg_n if self.load == "records" else kg_b
        stats = [{"id": self.kg_ids[k], "load": float(load[k]), "state_bytes": float(state_b[k])}
                 for k in range(self.G)]
        if self.send_bytes:
            for k, s in enumerate(stats):
                s["bytes"] = float(kg_b[k])
        self.last_stats = stats
        t_talk = time.perf_counter()
        report.controller = self._talk(batch_id, stats, edges, report)
        report.controller_seconds = time.perf_counter() - t_talk
        self.batches_since_change += 1
        report.seconds = time.perf_counter() - t0
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    def _update(self, df, batch_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, Any]:
        """Apply the batch to the state and commit its version; returns (records per partition, records, bytes and
        state bytes change per key group (None when the state does not track it), commit record or None).

        With a durable store this is one Spark job: the new state is checkpointed lazily and filled by the job that
        writes the version's delta, which also measures the batch statistics (``KeyedState.batch_observation``).
        Without one, the state is materialised and measured (two jobs). Records per partition follow from the
        records per key group and the routing: placement is exact (``KeyedState.merge`` checks the physical
        partitioning; the function API co-groups by the route)."""
        rec = None
        if self.store is None:
            self.state.step(df, batch_id, lazy=False)
            observed = self.state.observe()
            self.state.absorb(observed)
        else:
            self.state.step(df, batch_id, lazy=True)
            try:
                rec = self.store.commit(batch_id, self.state.df, changed=self.state.changed_rows(), keys=self.keys,
                                        columns=self.state.stored_columns(),
                                        epoch=self.epoch, partition_of=self.routing.partition_of.tolist(),
                                        extra=self.state.absorb, observe=self.state.batch_observation(),
                                        keep=self.state.stored_rows(), files=self._write_tasks())
            finally:
                self.state.release_previous()
            observed = rec.observed
            self.committed = batch_id
        kg_n, kg_b, kg_d = self.state.statistics(observed)
        part = np.bincount(self.routing.partition_of, weights=kg_n, minlength=self.n).astype(np.int64)
        return part, kg_n, kg_b, kg_d, rec

    def _write_tasks(self) -> int:
        """Tasks (and files) of a commit's writes: no more than the cores Spark has (``defaultParallelism``)."""
        try:
            return max(1, min(self.n, int(self.spark.sparkContext.defaultParallelism)))
        except Exception:  # noqa: BLE001 - no SparkContext (e.g. Spark Connect): one task per partition
            return self.n

    def _tracked_state_bytes(self, batch_id: int, change: np.ndarray, had_state: bool) -> np.ndarray:
        """State bytes per key group kept exact from the batches' changes (no job of its own): measured on the
        whole state only when there is no count yet with the state that this batch merged into (the first batch
        after a start or a recovery). A migration moves key groups, not bytes: the count stays."""
        if not self.state_stats:
            return np.zeros(self.G, dtype=np.int64)
        if self._state_b is not None and self._state_b[0] == batch_id - 1:
            self._state_b = (batch_id, self._state_b[1] + change)
        elif not had_state:
            self._state_b = (batch_id, change.copy())
        else:
            self._state_b = (batch_id, self.state.state_bytes_per_key_group())
        return self._state_b[1]

    def _state_bytes(self, batch_id: int, migrated: bool) -> np.ndarray:
        if not self.state_stats:
            return np.zeros(self.G, dtype=np.int64)
        if self._state_b is None or migrated or batch_id - self._state_b[0] >= self.state_stats_every:
            self._state_b = (batch_id, self.state.state_bytes_per_key_group())
        return self._state_b[1]

    # ------------------------------------------------------------------ results
    def state_frame(self):
        """The keyed state as a DataFrame (keys and aggregates)."""
        return self.state.state_frame()

    def wait_for_plan(self, timeout: float | None = None) -> None:
        """Wait until a background proposal (``async_plans``) has finished (tests, orderly shutdown)."""
        if self._inflight is not None:
            self._inflight.result(timeout)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.state.unpersist()
