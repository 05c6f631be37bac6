"""Keyed state placed by a routing table (:class:`StateBase`, the base of both kinds of state): the physical-plan
check that a DataFrame sits on its routing's partitions, planning without adaptive execution, local checkpoints,
restoring from stored rows, and a routing change that moves the rows of the moved key groups only.

A routing change measures, from ``spark_partition_id()`` before and after, which key groups changed partition and
how many state bytes moved (:class:`MigrationReport`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rebalancer_client.spark.exprs import shared
from rebalancer_client.spark.routing import KG_COL, ROUTE_COL, TOUCHED_COL, RoutingTable
from rebalancer_client.spark.stats import NamedColumns, row_bytes_column
from rebalancer_client.spark.store import VERSION_COL

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("rebalancer.spark")


@dataclass
class MigrationReport:
    """What applying a new routing moved, measured on the partitions Spark produced."""

    moved_key_groups: list[int]          # key groups whose routing entry changed
    changed_key_groups: list[int]        # key groups whose state rows actually changed partition
    moved_rows: int
    moved_bytes: int
    seconds: float

    @property
    def migrations(self) -> int:
        return len(self.moved_key_groups)


def placed_by_route(df: DataFrame, n: int) -> bool:
    """True when ``df``'s physical output partitioning is ``hashpartitioning(_rb_route, n)``."""
    try:
        plan = df._jdf.queryExecution().executedPlan()
        if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
            plan = plan.executedPlan()  # the current physical plan, exchanges included
        p = plan.outputPartitioning()
        if p.getClass().getSimpleName() != "HashPartitioning" or p.numPartitions() != n:
            return False
        exprs = p.expressions()
        return exprs.size() == 1 and str(exprs.apply(0).toString()).startswith(ROUTE_COL + "#")
    except Exception:  # noqa: BLE001 - internal API changed: be safe
        return False


@contextlib.contextmanager
def no_adaptive(spark: Any) -> Iterator[None]:
    """Plan without adaptive query execution inside the block (restores the previous setting)."""
    key = "spark.sql.adaptive.enabled"
    prev = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, prev)


def release_checkpoint(df: DataFrame) -> None:
    """Free the blocks of a locally checkpointed DataFrame (best effort; Spark's cleaner frees them anyway)."""
    try:
        df._jdf.queryExecution().analyzed().rdd().unpersist(False)
    except Exception:  # noqa: BLE001
        pass


class StateBase:
    """What both kinds of keyed state share (:class:`rebalancer_client.spark.state.KeyedState`, the mergeable
    aggregations, and :class:`rebalancer_client.spark.functions.FunctionState`, the function API): the state DataFrame,
    one row per key ``(_rb_route, _rb_kg, key..., values..., _rb_t, batch columns...)`` placed on its routing's
    partitions, the delta of each version, restoring from stored rows, checkpoints, and routing changes that move the
    moved key groups only.

    A kind of state defines its :meth:`value_columns`, what a batch does (:meth:`step`), what it measures
    (:meth:`batch_observation`, :meth:`statistics`) and what it shows (:meth:`output_frame`, :meth:`state_frame`).
    """

    def __init__(self, spark: SparkSession, key: str | Sequence[str], routing: RoutingTable):
        self.spark = spark
        self.keys = [key] if isinstance(key, str) else list(key)
        if not self.keys:
            raise ValueError("at least one key column is needed")
        self.routing = routing
        self.session = spark              # the session of the latest batch (a stream runs in a cloned session)
        self.df: DataFrame | None = None  # the state DataFrame (local checkpoint), None before the first batch
        self.updates = 0
        self.fallback_merges = 0          # merges or moves that needed an explicit repartition (should stay 0)
        self._previous: list[DataFrame] = []  # states a lazily checkpointed state still reads (release_previous)
        self._cols = NamedColumns()       # columns by name, built once per query

    @property
    def n_partitions(self) -> int:
        return self.routing.n_partitions

    # ------------------------------------------------------------------ what a kind of state defines
    def value_columns(self) -> list[str]:
        """The state's columns besides the keys."""
        raise NotImplementedError

    def _batch_columns(self) -> list[str]:
        """Columns kept in memory (never stored) with what the latest batch did to a row."""
        return []

    def step(self, batch_df: DataFrame, version: int, lazy: bool) -> None:
        """Apply one micro-batch as version ``version`` (``lazy``: the next job that reads the new state fills
        it)."""
        raise NotImplementedError

    def batch_observation(self) -> list[Column]:
        """Aggregate columns over the rows the latest batch changed: the batch statistics."""
        raise NotImplementedError

    def statistics(self, observed: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(records, bytes, change of the state bytes or None) per key group from :meth:`batch_observation`."""
        raise NotImplementedError

    def output_frame(self, df: DataFrame) -> DataFrame:
        """What the ``output`` sink gets of the rows of one version."""
        raise NotImplementedError

    def state_frame(self) -> DataFrame | None:
        """The state as the user sees it, None before the first batch."""
        raise NotImplementedError

    def check_columns(self, batch_df: DataFrame) -> None:
        """Raise ValueError naming the user's key column missing from ``batch_df``."""
        for k in self.keys:
            if k not in batch_df.columns:
                raise ValueError(f"key column {k!r} is not in the stream (columns: {', '.join(batch_df.columns)})")

    # ------------------------------------------------------------------ rows, versions and restores
    def state_columns(self) -> list[str]:
        """The columns of the state DataFrame, in order (what a restart checks a state kept in memory against)."""
        return [ROUTE_COL, KG_COL, *self.keys, *self.value_columns(), TOUCHED_COL, *self._batch_columns()]

    def changed_rows(self) -> Column:
        """Predicate (Column) of the rows the latest batch changed (what a durable store writes as its delta)."""
        return self._cols([TOUCHED_COL])[0]

    def _row_bytes(self, df: DataFrame) -> Column:
        """Column: the state bytes of a row (keys and values), as :meth:`state_bytes_per_key_group` counts them."""
        return row_bytes_column(df, [*self.keys, *self.value_columns()])

    def stored_columns(self) -> list[str]:
        """The columns a durable store keeps (the route is derived from the key group and the routing)."""
        return [KG_COL, *self.keys, *self.value_columns()]

    def commit_extra(self) -> dict[str, Any]:
        """What the state needs besides its rows after a restart (stored in the commit record)."""
        return {}

    def stored_rows(self) -> Column | None:
        """Predicate (Column) of the rows of a version that a durable store keeps, or None for all of them."""
        return None

    def observe(self) -> dict[str, Any]:
        """:meth:`batch_observation` over the rows the latest batch changed, in a job of its own (no durable
        store)."""
        assert self.df is not None
        return self.df.filter(self.changed_rows()).agg(*self.batch_observation()).collect()[0].asDict()

    def absorb(self, observed: Mapping[str, Any]) -> dict[str, Any]:
        """Take what the batch's observation says that the state keeps (e.g. a watermark); returns
        :meth:`commit_extra` as it is after the batch."""
        return self.commit_extra()

    def restore_extra(self, extra: Mapping[str, Any]) -> None:
        """The counterpart of :meth:`commit_extra`, called before :meth:`restore`."""

    def _restorable(self, stored_df: DataFrame) -> DataFrame:
        """Stored rows that take part in a restore (all of them here)."""
        return stored_df

    def restore(self, stored_df: DataFrame, routing: RoutingTable, *, dedup: bool = False, lazy: bool = False) -> None:
        """Replace the state by ``stored_df`` (the :meth:`stored_columns` of a durable store and ``_rb_v``, the
        version that wrote a row), placed under ``routing`` (one shuffle of the state; recovery only). ``dedup``:
        ``stored_df`` may hold several rows per key (a snapshot and deltas); the one with the highest ``_rb_v`` is
        kept, in the same shuffle. ``lazy``: the placed state is filled by the first job that reads it (the next
        batch's) instead of a job of its own."""
        self.routing = routing
        self.session = stored_df.sparkSession
        with no_adaptive(self.session):
            placed = self._placed_versions(stored_df, routing)
            self._replace(self._restored(self._newest(placed) if dedup else placed), lazy=lazy, checkpoint=not lazy)

    def prefetch(self) -> None:
        """Read the rows of a lazy restore ahead of the first batch, in the background (nothing here)."""

    def _placed_versions(self, stored_df: DataFrame, routing: RoutingTable) -> DataFrame:
        """The restorable stored rows with their route under ``routing``, placed (one shuffle), ``_rb_v`` kept."""
        key = ("route of the key group", routing.n_partitions, tuple(routing.partition_of.tolist()))
        df = (self._restorable(stored_df.select(*self._cols([*self.stored_columns(), VERSION_COL])))
              .withColumn(ROUTE_COL, shared(key, lambda: routing.route_column(KG_COL))))
        return routing.place(df)

    def _newest(self, placed: DataFrame, version: str = VERSION_COL) -> DataFrame:
        """Per key, the placed stored row with the highest ``version`` (one aggregation, no shuffle: the rows are
        placed by the route). A version writes at most one row per key, so ``max_by`` of each column picks that
        row's values (nulls included); fixed-width columns aggregate in a hash map (a ``max_by`` of a struct would
        sort the rows)."""
        from pyspark.sql import functions as F

        rest = [*self.value_columns(), version]
        newest = shared(("newest", *rest), lambda: [F.max_by(F.col(c), F.col(version)).alias(c) for c in rest])
        return placed.groupBy(*self._cols([ROUTE_COL, KG_COL, *self.keys])).agg(*newest)

    def _restored(self, newest: DataFrame) -> DataFrame:
        """State rows (unchanged by the latest batch) of the placed newest stored rows."""
        from pyspark.sql import functions as F

        columns = self._batch_columns()
        batch = shared(("unchanged", *columns), lambda: {TOUCHED_COL: F.lit(False),
                                                         **{c: F.lit(0).cast("long") for c in columns}})
        return self._live(newest.withColumns(batch)).select(*self._cols(self.state_columns()))

    def _replace(self, new_df: DataFrame, lazy: bool = False, checkpoint: bool = True) -> None:
        """Materialise ``new_df`` as a local checkpoint (lineage cut, hash partitioning on the route kept: the
        plan was made without adaptive execution, whose root hides the partitioning) and drop the old state.
        ``lazy``: the checkpoint is filled by the next job that computes it; the old state, which that job still
        reads, is dropped by :meth:`release_previous`. ``checkpoint=False`` (a lazy restore): ``new_df`` itself,
        planned into the next batch's job, whose new state is checkpointed (no plan of its own to make: planning a
        checkpoint plans the whole restore)."""
        cp = new_df.localCheckpoint(eager=not lazy) if checkpoint else new_df
        old, self.df = self.df, cp
        if old is not None:
            self._previous.append(old)
        if not lazy:
            self.release_previous()

    def _replace_placed(self, new_df: DataFrame, fallback: Callable[[], DataFrame], *, lazy: bool = False,
                        check: bool = True) -> bool:
        """:meth:`_replace`, ``new_df``'s placement checked (``check``) on its checkpoint: a local checkpoint records
        the output partitioning of the plan it was made from, so checking it costs no second physical planning of
        ``new_df`` (~0.1 s of JVM calls for a merge over stored rows on a 2-core machine). A plan that would not
        keep the placement is replaced by ``fallback()``'s (an explicit ``repartition(n, route)``; counted in
        ``fallback_merges``). Returns whether ``new_df`` kept it."""
        cp = new_df.localCheckpoint(eager=False)
        placed = not check or placed_by_route(cp, self.n_partitions)
        if not placed:
            self.fallback_merges += 1
            cp = fallback().localCheckpoint(eager=False)
        if not lazy:  # what localCheckpoint(eager=True) does: compute the checkpointed RDD once
            cp._jdf.queryExecution().analyzed().rdd().count()
        self._replace(cp, lazy=lazy, checkpoint=False)
        return placed

    def detach(self) -> DataFrame | None:
        """The state DataFrame, which the caller now owns (its blocks are not freed here); the state is empty."""
        self.release_previous()
        df, self.df = self.df, None
        return df

    def adopt(self, df: DataFrame, routing: RoutingTable) -> None:
        """Take ``df``, a state DataFrame :meth:`detach` gave up (placed under ``routing``), as the state."""
        self.unpersist()
        self.routing, self.session, self.df = routing, self.spark, df

    def release_previous(self) -> None:
        """Drop the states that a lazily checkpointed state was computed from (after the job that filled it)."""
        while self._previous:
            release_checkpoint(self._previous.pop())

    def unpersist(self) -> None:
        self.release_previous()
        if self.df is not None:
            release_checkpoint(self.df)
            self.df = None

    def _live(self, placed_df: DataFrame) -> DataFrame:
        """Restored rows that are state (all of them here)."""
        return placed_df

    # ------------------------------------------------------------------ routing changes
    def _kg_partitions(self) -> dict[int, tuple[int, int, int, int]]:
        """Per key group with state: (min partition, max partition, rows, bytes) measured on the state. Grouped by
        the route value too, which the state's hash partitioning satisfies: one stage, no shuffle (a key group's rows
        share one route value; groups of one key group found in several partitions are combined here)."""
        from pyspark.sql import functions as F

        if self.df is None:
            return {}
        live = self._live(self.df)
        b = self._row_bytes(live)
        rows = (live.select(ROUTE_COL, KG_COL, F.spark_partition_id().alias("p"), b.alias("b"))
                .groupBy(ROUTE_COL, KG_COL)
                .agg(F.min("p").alias("lo"), F.max("p").alias("hi"), F.count(F.lit(1)).alias("n"),
                     F.sum("b").alias("b")).collect())
        out: dict[int, tuple[int, int, int, int]] = {}
        for r in rows:
            lo, hi, n, nb = int(r["lo"]), int(r["hi"]), int(r["n"]), int(r["b"] or 0)
            k = int(r[KG_COL])
            if k in out:
                lo0, hi0, n0, b0 = out[k]
                lo, hi, n, nb = min(lo, lo0), max(hi, hi0), n + n0, nb + b0
            out[k] = (lo, hi, n, nb)
        return out

    def apply_routing(self, new_routing: RoutingTable) -> MigrationReport:
        """Switch to ``new_routing`` (call between micro-batches); only moved key groups change partition. With
        another partition count the whole state is placed anew in one shuffle (a hash-partitioned DataFrame cannot
        gain or lose a partition otherwise); the key groups that keep their partition number are not counted as
        moved."""
        from pyspark.sql import functions as F

        if new_routing.key_groups != self.routing.key_groups:
            raise ValueError("a routing change must keep the number of key groups")
        t0 = time.perf_counter()
        moved = self.routing.moved(new_routing)
        old_routing = self.routing
        self.routing = new_routing
        rescale = new_routing.n_partitions != old_routing.n_partitions
        if self.df is None or (len(moved) == 0 and not rescale):
            return MigrationReport([int(k) for k in moved], [], 0, 0, time.perf_counter() - t0)
        moved_list = [int(k) for k in moved]
        cols = self.state_columns()
        state = self.df
        with no_adaptive(self.session):
            def everything() -> DataFrame:
                return (state.withColumn(ROUTE_COL, new_routing.route_column(KG_COL)).select(*cols)
                        .repartition(self.n_partitions, ROUTE_COL))

            # the new state is a lazy checkpoint that the measuring job fills: one job for the move and its measure
            if rescale:
                self._replace(everything(), lazy=True)
            else:
                kept = state.filter(~F.col(KG_COL).isin(moved_list))
                movers = (state.filter(F.col(KG_COL).isin(moved_list))
                          .withColumn(ROUTE_COL, new_routing.route_column(KG_COL)).select(*cols)
                          .repartition(self.n_partitions, ROUTE_COL))
                self._replace_placed(kept.select(*cols).unionByName(movers), everything, lazy=True)
        report = self._measured(old_routing, moved_list, t0)
        self.release_previous()  # (not when the job failed: the new state can still be computed from the old one)
        return report

    def _measured(self, old_routing: RoutingTable, moved_list: list[int], t0: float) -> MigrationReport:
        """What a routing change moved, measured on the new state."""
        # placement before the change is exact (every merge and restore keeps it: :mod:`rebalancer_client.spark.state`),
        # so the old routing says where each key group was; where it is now is measured on the new state
        after = self._kg_partitions()
        changed, rows, nbytes = [], 0, 0
        for k, (lo, hi, n, b) in after.items():
            was = int(old_routing.partition_of[k])
            if (lo, hi) != (was, was):
                changed.append(k)
                rows += n
                nbytes += b
        unexpected = sorted(set(changed) - set(moved_list))
        if unexpected:  # cannot happen with exact placement; reported, never silent
            log.warning("key groups %s changed partition without a routing change (old routing epoch %s)",
                        unexpected, old_routing.epoch)
        return MigrationReport(moved_list, sorted(changed), rows, nbytes, time.perf_counter() - t0)

    def state_bytes_per_key_group(self) -> np.ndarray:
        """(G,) estimated state bytes per key group (keys + aggregates), one aggregation."""
        out = np.zeros(self.routing.key_groups, dtype=np.int64)
        for k, (_, _, _, b) in self._kg_partitions().items():
            out[k] = b
        return out
