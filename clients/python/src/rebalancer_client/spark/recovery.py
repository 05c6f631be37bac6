"""A driver's durable side: what a restart finds in the state store, the routing it resumes with (another
partition count included), restoring the committed state, and a replayed batch.

A commit record holds the routing epoch, the partition of every key group, the query's nodes (its partitions, in
order), and each key group's state bytes and latest load. A restart reads the record first — no Spark job — so
that the controller can place the key groups for the query's partition count before the state is read; the stored
rows are then placed under that routing in the one shuffle a restore costs anyway (the record keeps the stored
schema, so reading them plans without a job): by a job in the background that ``start()`` leaves running while the
query starts, else by the first batch's job, whose merge keeps the newest stored row of each key in its own
aggregation (:meth:`rebalancer_client.spark.state.KeyedState.restore`). With another partition count
and no controller to ask, the key groups are placed by the latest loads
(:func:`rebalancer_client.spark.layout.rescaled`). The number of key groups is fixed for a state directory (like Flink's
maximum parallelism). A restart in the process whose driver closed cleanly takes over the state that driver kept in
executor memory instead of reading the files (:mod:`rebalancer_client.spark.handover`, ``DurabilityConfig.keep_s``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from rebalancer_client.spark import handover
from rebalancer_client.spark.commit_record import Commit
from rebalancer_client.spark.control import ControllerLink
from rebalancer_client.spark.layout import node_list, rescaled
from rebalancer_client.spark.reports import BatchReport, StateMismatchError
from rebalancer_client.spark.routing import RoutingTable, partition_ids
from rebalancer_client.spark.store import StateStore

if TYPE_CHECKING:
    from rebalancer_client.spark.functions import FunctionState
    from rebalancer_client.spark.state import KeyedState
    from rebalancer_client.spark.state_bytes import StateBytes

log = logging.getLogger("rebalancer.spark")


class Durable:
    """Restart and replay of :class:`rebalancer_client.spark.driver.RebalancingDriver` (see the module docstring)."""

    spark: Any
    store: StateStore | None
    state: KeyedState | FunctionState
    link: ControllerLink | None
    routing: RoutingTable
    keys: list[str]
    operator: str
    G: int
    n: int
    committed: int | None
    reports: list[BatchReport]
    output: Callable[[Any, int], None] | None
    on_batch: Callable[[BatchReport], None] | None
    state_bytes: StateBytes
    _local_nodes: list[str]
    _prepared: bool = False
    _recovered: bool = False
    _ahead: threading.Thread | None = None
    _ahead_error: BaseException | None = None
    read_ahead: bool | None = None  # DurabilityConfig.read_ahead
    keep_s: float = 0.0  # DurabilityConfig.keep_s
    #: a driver of this process has committed a batch (its JVM has compiled a query's code): see :meth:`_reads_ahead`
    process_ran_a_batch: ClassVar[bool] = False
    #: the version whose state ``state.df`` holds, once a batch of this driver committed it (None before, and while a
    #: batch runs: a batch that fails before its commit leaves the state ahead of the store)
    in_memory: int | None = None

    @property
    def epoch(self) -> int:
        return int(self.routing.epoch)

    def _prepare(self) -> None:
        """Read the latest commit record (once) and route as it did, for this query's partition count."""
        if self.store is None or self._prepared:
            return
        self._prepared = True
        rec = self._read_commit()
        if rec is not None:
            self._committed_routing(rec)

    def _read_commit(self) -> Commit | None:
        """The latest commit record, checked against this driver; sets ``committed``."""
        assert self.store is not None
        rec = self.store.latest()
        if rec is None:
            return None
        if len(rec.partition_of) != self.G:
            raise StateMismatchError(
                f"the state in {self.store.root} has {len(rec.partition_of)} key groups; this driver has "
                f"key_groups={self.G}. The number of key groups is fixed for a state directory (like Flink's maximum "
                f"parallelism): change the partition count instead, or start the query on a new checkpoint")
        if rec.keys != self.keys:
            raise StateMismatchError(f"the state in {self.store.root} was written with keys {rec.keys}; this driver "
                                     f"has keys {self.keys}")
        self.committed = int(rec.version)
        return rec

    def _committed_routing(self, rec: Commit) -> None:
        """The routing of version ``rec``, or — with another partition count — its key groups placed on this
        query's partitions by the latest loads until the controller places them."""
        parts = np.asarray(rec.partition_of, dtype=np.int64)
        before = rec.partitions or int(parts.max()) + 1
        nodes = list(rec.nodes or partition_ids(before))
        if before != self.n or int(parts.max()) >= self.n:
            weights = np.asarray(rec.extra.get("load") or np.ones(self.G), dtype=np.float64) + 1e-9
            parts = rescaled(parts, self.n, weights)
            nodes = node_list(nodes, self.n)
            log.info("state version %d ran on %d partitions, this query runs %d: key groups placed by the latest "
                     "loads until the controller places them", rec.version, before, self.n)
        self.routing = RoutingTable(self.operator, parts, self.n, int(rec.epoch))
        self._local_nodes = nodes
        if self.link is not None:
            self.link.nodes = list(nodes)

    def _recover_ahead(self) -> None:
        """A start before the query's: check the stored schemas against the declared ones here (a clear error from
        ``start()``), then plan the committed state (:meth:`_restore`) in a thread while the query starts — that
        planning is 0.15–0.4 s of the driver's calls into Spark on a 2-core machine (~1.5 s in a new JVM), which the
        query's own start (about as long) overlaps — and read it ahead when :meth:`_reads_ahead`. The first batch,
        :meth:`state_frame` and ``close()`` wait for it (:meth:`_recover`); an error it met is raised there."""
        if self.store is None or self._recovered or self._ahead is not None:
            return
        self._prepare()
        rec = self.store.latest()
        if rec is None:
            return
        self.state.restore_extra(rec.extra)

        def run() -> None:
            try:
                self._restore(prefetch=self._reads_ahead())
            except BaseException as exc:  # noqa: BLE001 - raised again by the thread that waits for it
                self._ahead_error, self._recovered = exc, False

        self._ahead = threading.Thread(target=run, name="rebalancer-recover", daemon=True)
        self._ahead.start()

    def _reads_ahead(self) -> bool:
        """Whether a start reads and places the stored state in a job of its own while the query starts
        (``DurabilityConfig.read_ahead``; by default only in a process none of whose drivers has committed a batch:
        in a new JVM the query takes seconds to hand over its first batch, which the read overlaps; in a warm one it
        takes a fraction of a second, and the job slows Spark's own offset and log steps beside it)."""
        return (not Durable.process_ran_a_batch) if self.read_ahead is None else self.read_ahead

    def _await_ahead(self, closing: bool = False) -> None:
        """Wait for :meth:`_recover_ahead`'s thread; raise what it met (``closing``: log it, the next start will
        meet it again)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        ahead.join()
        error, self._ahead_error = self._ahead_error, None
        if error is not None and closing:
            log.info("the restore started ahead failed: %s", error)
        elif error is not None:
            raise error

    def _recover(self, force: bool = False, prefetch: bool = False) -> None:
        """:meth:`_restore`, once a restore started ahead (:meth:`_recover_ahead`) has finished."""
        self._await_ahead()
        self._restore(force, prefetch)

    def _restore(self, force: bool = False, prefetch: bool = False) -> None:
        """Plan the last committed version placed under the routing in force (once; ``force``: again, after lost
        blocks). The files are read with the record's schema (no inference job) and the placed state is filled by
        the first job that reads it — the next batch's, which merges the batch into it; ``prefetch`` (a start
        before the query's): the stored rows are read and placed meanwhile, in the background
        (``KeyedState.prefetch``). The state bytes per key group come from the record (no job to measure them)."""
        if self.store is None or (self._recovered and not force):
            return
        self._prepare()
        self._recovered = True
        t0 = time.perf_counter()
        if force:
            self.store._latest_read = False
            self._read_commit()
        elif self._take_over():
            return
        df, rec = self.store.load(dedup=False)
        if rec is None or df is None:
            if force:
                self.state.unpersist()
            return
        self.state.restore_extra(rec.extra)
        self.state.restore(df, self.routing, dedup=True, lazy=True)
        if prefetch:
            self.state.prefetch()
        self.state_bytes.restored(rec.version, rec.extra.get("state_bytes"))
        log.info("state version %d (epoch %d) of %s planned in %.2f s, placed on %d partitions (epoch %d)",
                 rec.version, rec.epoch, self.store.root, time.perf_counter() - t0, self.n, self.epoch)

    def _kept_as(self, rec: Commit) -> tuple[Any, ...]:
        """What a state kept in memory for version ``rec`` must match to be this driver's (:mod:`handover`): the
        commit record (its time and stored schema), the kind of state and its columns, the routing."""
        return (rec.committed_at, rec.schema, type(self.state).__name__, tuple(self.state.state_columns()),
                self.routing.n_partitions, tuple(self.routing.partition_of.tolist()))

    def _take_over(self) -> bool:
        """Take over the latest version's state that a closed driver of this process kept in executor memory
        (:mod:`rebalancer_client.spark.handover`) instead of reading the files; False when there is none to take."""
        assert self.store is not None
        rec = self.store.latest()
        df = None if rec is None else handover.take(self.store.root, rec.version, self._kept_as(rec),
                                                     self.spark.sparkContext)
        if rec is None or df is None:
            return False
        self.state.restore_extra(rec.extra)  # (what the record keeps besides the rows: a function's watermark)
        self.state.adopt(df, self.routing)
        self.in_memory = rec.version
        self.state_bytes.restored(rec.version, rec.extra.get("state_bytes"))
        log.info("state version %d of %s taken over from the driver closed before (in memory)", rec.version,
                 self.store.root)
        return True

    def _hand_over(self) -> None:
        """A clean close: keep the state in executor memory for the next driver of the process on the same state
        directory (``DurabilityConfig.keep_s``) when it is the latest committed version's."""
        rec = None if self.store is None else self.store.latest()
        if self.store is None or rec is None or self.keep_s <= 0 or self.in_memory != rec.version:
            return
        df = self.state.detach()
        if df is not None:
            handover.keep(self.store.root, rec.version, self._kept_as(rec), df, self.keep_s)

    def _compact(self, files: int) -> None:
        """A clean close: the latest version's state written whole as its snapshot (:meth:`StateStore.compact`) —
        only when the state in memory is that version's. A failure is logged: the next start reads the versions
        since the last snapshot instead."""
        df = self.state.df
        if self.store is None or df is None or self.in_memory is None or self.in_memory != self.committed:
            return
        t0 = time.perf_counter()
        try:
            if self.store.compact(df, keep=self.state.stored_rows(), files=files):
                log.info("state version %d of %s written whole on close in %.2f s", self.in_memory, self.store.root,
                         time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - see above
            log.warning("writing state version %s whole on close failed (%s); the next start reads the versions "
                        "since the last snapshot", self.in_memory, exc)

    def _check_version(self, batch_id: int) -> None:
        expected = 0 if self.committed is None else self.committed + 1
        if self.store is not None and batch_id > expected:
            raise StateMismatchError(
                f"batch {batch_id} arrived but the state in {self.store.root} is committed up to "
                f"{'no version' if self.committed is None else f'version {self.committed}'}: the state of "
                f"batches {expected}..{batch_id - 1} is missing (was the state directory changed or removed "
                f"while the query's checkpoint was kept?)")

    def _replay(self, batch_id: int, t0: float) -> BatchReport:
        log.warning("batch %d is a replay: state version %d is committed, not applied again", batch_id,
                    self.committed)
        if self.output is not None and self.store is not None:
            self.output(self.state.output_frame(self.store.read_delta(batch_id)), batch_id)
        report = BatchReport(batch_id=batch_id, epoch=self.epoch, records=0, partition_records=[],
                             rebalanced_max_over_mean=math.nan, controller="replayed", state_version=self.committed,
                             replayed=True, seconds=time.perf_counter() - t0)
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report
