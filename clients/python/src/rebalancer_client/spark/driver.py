"""The driver side of the integration: one object that a ``foreachBatch`` sink calls per micro-batch.

:class:`RebalancingDriver` owns the routing table, the keyed state (:class:`rebalancer_client.spark.state.KeyedState`),
its durable versions (:class:`rebalancer_client.spark.store.StateStore`) and, through
:class:`rebalancer_client.spark.control.ControllerLink`, the conversation with the controller. Per micro-batch
``batch_id``:

1. **recovery** (at ``start()`` or the first batch, :mod:`rebalancer_client.spark.recovery`): the last committed state
   version is planned under the routing in force — the committed one, or the controller's placement for another
   partition count — and read and placed while the query starts (or by the first batch's job); a batch whose version
   is already committed (Spark replays the batch it had not committed when the driver died) is *not* applied again —
   its output is rewritten from the stored delta;
2. **batch boundary** — a placement that arrived earlier switches the routing now (only moved key groups' state
   changes partition; a new partition count re-places the whole state in one shuffle); from this batch on the
   driver runs under the placement's epoch;
3. route, place and aggregate the batch into the keyed state (JVM only, one shuffle of the batch);
4. **commit** the state version ``batch_id``: the rows the batch changed (Parquet), a snapshot every
   ``snapshot_every`` versions, and the routing (epoch, partitions, placement); then the optional ``output`` sink
   gets the changed rows (update mode, read back from the version's delta;
   :class:`rebalancer_client.spark.sink.BatchIdSink` makes it exactly once). Steps 3 and 4 are **one Spark job**
   (aggregations and the function API alike): the new state is checkpointed lazily and filled by the job that writes the
   delta, which also measures the batch's records and bytes per key group (and, for the aggregations, the change of each
   key group's state bytes) with a Spark ``Observation``; with the output sink that is two jobs per batch in steady
   state (plus the moves of a migration; the function API measures its state size in a job of its own every
   ``state_stats_every`` batches);
5. **statistics** (the load and the state bytes of every key group, as arrays in the job's order,
   :class:`rebalancer_client.spark.state_bytes.StateBytes`) go to the controller with the batch id and the epoch
   (:class:`rebalancer_client.spark.control.ControllerLink`); a new placement comes back with the answer (automatic
   mode) or from a proposal the controller judged worth it, for the next boundary.

An executor lost mid-stream takes the cached state blocks with it; the driver then rebuilds the state from the
last committed version and runs the batch again. Without ``state_dir``/``checkpoint_location`` the state lives
on the executors only: a driver restart loses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rebalancer_client import contract as c
from rebalancer_client.spark.commit_record import Commit
from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
from rebalancer_client.spark.control import ConfigurationError, ControllerLink, LinkOwner
from rebalancer_client.spark.functions import FunctionState, KeyedFunction
from rebalancer_client.spark.group_state import GroupStateFunction
from rebalancer_client.spark.group_state_run import function_state
from rebalancer_client.spark.layout import Layout, Target, node_list, rescaled
from rebalancer_client.spark.recovery import Durable
from rebalancer_client.spark.reports import BatchReport, StateMismatchError
from rebalancer_client.spark.routing import DEFAULT_KEY_GROUPS, RoutingTable, partition_ids
from rebalancer_client.spark.state import KeyedState, MigrationReport
from rebalancer_client.spark.state_bytes import StateBytes
from rebalancer_client.spark.stats import max_over_mean, partition_record_counts
from rebalancer_client.spark.store import StateStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("rebalancer.spark")

__all__ = ["BatchReport", "ConfigurationError", "ControllerConfig", "DurabilityConfig", "RebalancingDriver",
           "StateMismatchError"]

_LOST_BLOCKS = ("Checkpoint block", "ExecutorLostFailure", "FetchFailed", "BlockMissingException")

#: ``f(rows_df, batch_id)``: where each batch's output goes (e.g. :class:`rebalancer_client.spark.sink.BatchIdSink`)
Output = Callable[[Any, int], None]


class RebalancingDriver(Durable, LinkOwner):
    """Keyed state in ``foreachBatch``, durable and rebalanced by the controller.

    Args:
        spark: the SparkSession.
        key: key column name(s) of the stream.
        aggregations: ``{output: (count|sum|min|max, input column or None)}``; default ``{"count": ("count", None)}``.
        function: instead of ``aggregations``, any per-key logic: a
            :class:`rebalancer_client.spark.functions.KeyedFunction` (``fn(key, rows, state) -> (output rows, new
            state)`` on pandas DataFrames, optional timeouts), or a
            :class:`rebalancer_client.spark.group_state.GroupStateFunction` (a function written against Spark's
            ``applyInPandasWithState`` interface, with a ``GroupState`` and per-key timeouts); the ``output`` sink
            then gets the rows the function emitted.
        operator: the operator id (key group ids ``<operator>/<k>``).
        key_groups: G, key groups of the operator (default 120; fewer than ``partitions`` leaves some empty).
        partitions: n, the number of Spark partitions (= controller nodes ``p0..p{n-1}``).
        controller: how the job talks to the controller (:class:`~rebalancer_client.spark.config.ControllerConfig`);
            ``None`` runs without one.
        durability: where the state's versions go (:class:`~rebalancer_client.spark.config.DurabilityConfig`); ``None``:
            the state lives on the executors only.
        output: ``f(changed_rows_df, batch_id)`` called after each commit (and on a replayed batch, from the
            stored delta), e.g. :class:`rebalancer_client.spark.sink.BatchIdSink`.
        on_batch: callback called with each :class:`BatchReport`.
        measure_hash: also measure Spark's hash partitioning of each batch (one more shuffle; the demo uses it).
    """

    def __init__(self, spark: Any, *, key: str | Sequence[str],
                 aggregations: Mapping[str, tuple[str, str | None]] | None = None,
                 function: KeyedFunction | GroupStateFunction | None = None, operator: str = "agg",
                 key_groups: int = DEFAULT_KEY_GROUPS, partitions: int = 8,
                 controller: ControllerConfig | None = None, durability: DurabilityConfig | None = None,
                 output: Output | None = None, on_batch: Callable[[BatchReport], None] | None = None,
                 measure_hash: bool = False):
        if int(key_groups) < 1 or int(partitions) < 1:
            raise ValueError("key_groups and partitions must be >= 1")
        if function is not None and aggregations is not None:
            raise ValueError("give either aggregations or function, not both")
        self.spark = spark
        self.keys = [key] if isinstance(key, str) else list(key)
        self.operator = operator
        self.G = int(key_groups)
        self.n = int(partitions)
        if self.G < self.n:
            log.warning("key_groups=%d < partitions=%d: %d partition(s) will never hold a key (use key_groups "
                        ">= partitions, ideally a multiple such as 120)", self.G, self.n, self.n - self.G)
        self.config = controller if controller is not None else ControllerConfig(None)
        self.link = (ControllerLink(self.config, self.n, [(operator, self.G)], self)
                     if self.config.client is not None else None)
        self.measure_hash = measure_hash
        self.on_batch = on_batch
        self.output = output
        self.routing = RoutingTable.contiguous(operator, self.G, self.n)
        self.state = (KeyedState(spark, self.keys, aggregations or {"count": ("count", None)}, self.routing)
                      if function is None else function_state(spark, self.keys, function, self.routing))
        self.state_bytes = StateBytes(self.G, self.config.state_stats_every or self.config.window_batches,
                                      self.config.state_stats, self.state.state_bytes_per_key_group)
        dur = durability if durability is not None else DurabilityConfig()
        root = dur.root
        self.store = None if root is None else StateStore(spark, root, snapshot_every=dur.snapshot_every,
                                                          retain_versions=dur.retain_versions,
                                                          snapshot_on_close=dur.snapshot_on_close,
                                                          on_event=dur.on_event)
        self.read_ahead = dur.read_ahead
        self.keep_s = float(dur.keep_s)
        if self.store is None:
            log.info("no durability configured: the keyed state is not durable (lost on a driver restart)")
        self.pending: Target | None = None       # a routing for the next batch boundary
        self.committed: int | None = None        # the last committed state version
        self._local_nodes = partition_ids(self.n)  # the query's partitions as nodes (the link's when there is one)
        self.reports: list[BatchReport] = []
        self.last_stats: tuple[np.ndarray, np.ndarray | None] | None = None  # the latest batch's load, state bytes
        self._batch_id = -1

    # ------------------------------------------------------------------ what the controller link sees (Routed)
    @property
    def partitions(self) -> int:
        return self.n

    @property
    def nodes(self) -> list[str]:
        """The query's partitions as the job's nodes, in order (partition ``j`` is node ``j``)."""
        return list(self.link.nodes) if self.link is not None else list(self._local_nodes)

    def layout(self) -> Layout:
        return {self.operator: self.routing.partition_of}

    def has_layout(self) -> bool:
        """State exists, batches ran, or a version is committed: the controller must not reset the placement."""
        return self.state.df is not None or bool(self.reports) or self.committed is not None

    def may_switch_now(self) -> bool:
        """Nothing has run yet: a placement can be taken at once instead of at a batch boundary."""
        return self.state.df is None and not self.reports

    def switch(self, target: Target) -> None:
        self._switch(target)

    def relabel(self, epoch: int) -> None:
        self.routing.epoch = int(epoch)

    @property
    def epoch_start_batches(self) -> dict[int, int]:
        """epoch → the first batch id that ran under it."""
        out: dict[int, int] = {}
        for r in self.reports:
            out.setdefault(r.epoch, r.batch_id)
        return out

    def start(self) -> bool:
        """Read the last commit record, register with the controller (:meth:`ControllerLink.start`: with another
        partition count it places the key groups on them), then read the committed state under that routing while
        the query starts (:meth:`Durable._recover_ahead`). A controller that is down is not an error; a refused
        configuration raises :class:`ConfigurationError`, a stored schema unlike the declared one ``ValueError``."""
        self._prepare()
        registered = self.link.start() if self.link is not None else False
        self._recover_ahead()
        return registered

    def _switch(self, target: Target) -> MigrationReport:
        new = RoutingTable(self.operator, np.asarray(target.layout[self.operator], dtype=np.int64),
                           target.partitions, int(target.epoch))
        report = self.state.apply_routing(new)
        self.routing, self.n = new, new.n_partitions
        if self.link is None:
            self._local_nodes = list(target.nodes)
        return report

    def _boundary(self) -> Target | None:
        """The routing to switch to at this batch boundary: one the controller link received, or one given."""
        if self.link is not None:
            taken = self.link.take()
            if taken is not None:
                self.pending = taken
        pending, self.pending = self.pending, None
        return pending

    # ------------------------------------------------------------------ changing the layout between batches
    def place(self, partition_of: np.ndarray, *, partitions: int | None = None, epoch: int | None = None) -> None:
        """Run the key groups on ``partition_of`` (over ``partitions``, default the current count) from the next
        batch boundary, without the controller (a local layout keeps the current epoch unless one is given)."""
        n = self.n if partitions is None else int(partitions)
        self.pending = Target(self.epoch if epoch is None else int(epoch), node_list(self.nodes, n),
                              {self.operator: np.asarray(partition_of, dtype=np.int64)})

    def scale(self, partitions: int, *, budget: c.Budget | Mapping[str, Any] | None = None) -> c.Scaled | None:
        """Change the query's partition count from the next batch boundary: the controller places the key groups
        on the new partitions by load (within ``budget``; default ``ControllerConfig.scale_budget``, None: a full
        rebalance) and the state of the key groups that change place moves. Without a controller (or with one
        that is down) the key groups are placed by the latest batch's loads
        (:func:`~rebalancer_client.spark.layout.rescaled`) and None is returned; the controller is asked again when it
        is back."""
        if self.link is not None and self.link.registered and self.link.available():
            try:
                return self.link.scale(int(partitions), budget=budget)
            except Exception as exc:  # noqa: BLE001 - a scale the controller cannot plan falls back to the local one
                log.warning("the controller did not scale job %r (%s); placing the key groups locally",
                            self.link.job_id, exc)
        load = self.last_stats[0] if self.last_stats is not None else np.ones(self.G)
        self.place(rescaled(self.routing.partition_of, int(partitions), load + 1e-9), partitions=int(partitions))
        return None

    def what_if(self, candidates: Sequence[int | Mapping[str, Any]], **kw: Any) -> c.WhatIfReport:
        """What the job's own window says of other partition counts (``candidates``: e.g. ``[6, 12]``), answered
        by the controller (:meth:`ControllerLink.what_if`); apply one with :meth:`scale`."""
        if self.link is None:
            raise RuntimeError("what-if needs a controller (ControllerConfig.client)")
        return self.link.what_if(candidates, **kw)

    # ------------------------------------------------------------------ per batch
    def foreach_batch(self, df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` function: ``query = stream.writeStream.foreachBatch(driver.foreach_batch)``."""
        self.process(df, batch_id)

    def process(self, df: DataFrame, batch_id: int) -> BatchReport:
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

    def _run(self, df: DataFrame, batch_id: int, t0: float) -> BatchReport:
        boundary = self._boundary()
        mig = self._switch(boundary) if boundary is not None else None

        part, load, state_b, rec = self._update(df, batch_id, had_state=self.state.df is not None,
                                                migrated=mig is not None)
        edges = None
        if self.config.communication is not None:
            try:
                edges = self.config.communication(df)
            except Exception as exc:  # noqa: BLE001 - statistics are best effort, the batch goes on
                log.warning("communication statistics failed: %s", exc)
        hash_part = None
        if self.measure_hash:
            hash_part = partition_record_counts(df.repartition(self.n, *self.keys), self.n)
        if self.output is not None and self.state.df is not None:
            if self.store is not None:  # the version's delta, just written: a small read, not a scan of the state
                self.output(self.state.output_frame(self.store.read_delta(batch_id)), batch_id)
            else:
                self.output(self.state.output_frame(self.state.df.filter(self.state.changed_rows())), batch_id)

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
        self.last_stats = (load, state_b if self.config.state_stats else None)
        sizes = None if self.last_stats[1] is None else {self.operator: self.last_stats[1]}
        report.controller, report.plan_received, report.controller_seconds = self._talk(
            batch_id, {self.operator: self.last_stats[0]}, sizes, edges)
        report.seconds = time.perf_counter() - t0
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    def _update(self, df: DataFrame, batch_id: int, *, had_state: bool, migrated: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Commit | None]:
        """Apply the batch to the state and commit its version; returns (records per partition, load and state
        bytes per key group, commit record or None).

        With a durable store this is one Spark job: the new state is checkpointed lazily and filled by the job that
        writes the version's delta, which also measures the batch statistics (``KeyedState.batch_observation``);
        the commit record keeps the loads and state bytes per key group (a restart measures nothing). Without one,
        the state is materialised and measured (two jobs). Records per partition follow from the records per key
        group and the routing: placement is exact (``KeyedState.merge`` checks the physical partitioning; the
        function API co-groups by the route)."""
        rec = None
        if self.store is None:
            self.state.step(df, batch_id, lazy=False)
            observed = self.state.observe()
            self.state.absorb(observed)
            kg_n, load, state_b = self._statistics(observed, batch_id, had_state, migrated)
        else:
            self.in_memory = None  # (until the batch's version is committed)
            self.state.step(df, batch_id, lazy=True)
            assert self.state.df is not None
            measured: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

            def extra(observed: dict[str, Any]) -> dict[str, Any]:
                measured.append(self._statistics(observed, batch_id, had_state, migrated))
                return {**self.state.absorb(observed), "load": measured[0][1].tolist(),
                        "state_bytes": measured[0][2].tolist()}

            try:
                rec = self.store.commit(batch_id, self.state.df, changed=self.state.changed_rows(), keys=self.keys,
                                        columns=self.state.stored_columns(),
                                        epoch=self.epoch, partition_of=self.routing.partition_of.tolist(),
                                        extra=extra, observe=self.state.batch_observation(),
                                        keep=self.state.stored_rows(), files=self._write_tasks(), nodes=self.nodes)
            finally:
                self.state.release_previous()
            self.committed = self.in_memory = batch_id
            Durable.process_ran_a_batch = True
            kg_n, load, state_b = measured[0]
        part = np.bincount(self.routing.partition_of, weights=kg_n, minlength=self.n).astype(np.int64)
        return part, load, state_b, rec

    def _statistics(self, observed: Mapping[str, Any], batch_id: int, had_state: bool, migrated: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(records, load, state bytes) per key group of the batch from its observation."""
        kg_n, kg_b, kg_d = self.state.statistics(observed)
        state_b = (self.state_bytes.tracked(batch_id, kg_d, had_state) if kg_d is not None else
                   self.state_bytes.sampled(batch_id, migrated))
        return kg_n, kg_n if self.config.load == "records" else kg_b, state_b

    def _write_tasks(self) -> int:
        """Tasks (and files) of a commit's writes: no more than the cores Spark has (``defaultParallelism``)."""
        try:
            return max(1, min(self.n, int(self.spark.sparkContext.defaultParallelism)))
        except Exception:  # noqa: BLE001 - no SparkContext (e.g. Spark Connect): one task per partition
            return self.n

    # ------------------------------------------------------------------ results
    def state_frame(self) -> DataFrame:
        """The keyed state as a DataFrame (keys and aggregates, or keys and state columns of a function)."""
        self._await_ahead()
        frame = self.state.state_frame()
        if frame is None:
            raise RuntimeError("the state is empty: no batch has run and no version was loaded")
        return frame

    @property
    def watermark(self) -> float | None:
        """The event-time watermark the next batch runs under (a function with ``event_time``), else None."""
        return self.state.watermark if isinstance(self.state, FunctionState) else None

    def _release(self) -> None:
        self._await_ahead(closing=True)
        self._compact(self._write_tasks())
        self._hand_over()
        self.state.unpersist()
