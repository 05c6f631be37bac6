"""Keyed state managed by the integration inside ``foreachBatch``, partitioned by the routing table.

Spark's built-in stateful operators fix the partition of a key (a hash you cannot choose, and
``spark.sql.shuffle.partitions`` cannot change after the first run — ``docs/design.md``, "Spark facts"). So the
integration keeps keyed state itself: a DataFrame with one row per key, ``(_rb_route, _rb_kg, key...,
aggregates...)``, hash-partitioned by ``_rb_route`` into ``n`` partitions, so row ``r`` sits on partition
``routing.partition_of[r._rb_kg]`` exactly (see :mod:`rebalancer_client.spark.routing`). After every batch the state is
materialised as a *local checkpoint* (lineage cut; the blocks stay on the executors) whose recorded output
partitioning is that hash partitioning — planned without adaptive execution, whose root node would hide it.

Per micro-batch (:meth:`KeyedState.update`):

1. the batch is routed (key → key group → route value, JVM expressions) and placed (``repartition(n, route)``:
   the only shuffle of the batch);
2. it is pre-aggregated per key inside its partitions (``groupBy(route, key)`` is satisfied by the hash
   partitioning on ``route``, so no further shuffle; the key group is ``pmod(route, G)``), with the batch's record
   and byte counts per key;
3. the partials are merged with the state: ``union`` of two children with the same hash partitioning keeps it
   (``spark.sql.unionOutputPartitioning``, Spark ≥ 4), so the state is *not* shuffled; the merge is checked on
   the physical plan and falls back to an explicit ``repartition(n, route)`` (counted in ``fallback_merges``)
   when a Spark version would shuffle otherwise — placement stays exact either way.

When a plan arrives (:meth:`KeyedState.apply_routing`, at a batch boundary) only the rows of moved key groups are
re-routed and shuffled; the other rows keep their partition (and their cached blocks). The method measures,
from ``spark_partition_id()`` before and after, which key groups changed partition and how many state bytes
moved.

Every state row carries ``_rb_t``, true when the latest batch changed it: those rows are the delta a durable store
(:mod:`rebalancer_client.spark.store`) writes as the batch's version, and :meth:`KeyedState.restore` rebuilds the state
from stored rows after a restart or a lost executor (keeping the newest version per key). The plan of a batch holds no
batch-specific literal (no batch id), so Spark compiles its generated code once per query, not once per batch.

Aggregations are mergeable ones: ``count``, ``sum``, ``min``, ``max`` (``{"clicks": ("count", None),
"amount": ("sum", "amount")}``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rebalancer_client.spark.exprs import shared
from rebalancer_client.spark.jvm import joined, text_pieces
from rebalancer_client.spark.merge_sql import MERGE, combinable, combined, kept
from rebalancer_client.spark.partials import BatchPartials
from rebalancer_client.spark.placement import (
    MigrationReport,
    StateBase,
    no_adaptive,
    release_checkpoint,
)
from rebalancer_client.spark.routing import (
    B_COL,
    D_COL,
    KG_COL,
    N_COL,
    ROUTE_COL,
    TOUCHED_COL,
    RoutingTable,
    key_group_column,
    key_group_of_route,
)
from rebalancer_client.spark.stats import row_bytes_column
from rebalancer_client.spark.stats import sql_name as _q
from rebalancer_client.spark.store import VERSION_COL

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("rebalancer.spark")

__all__ = ["B_COL", "D_COL", "N_COL", "TOUCHED_COL", "BatchPartials", "KeyedState", "MigrationReport",
           "release_checkpoint"]


class KeyedState(StateBase):
    """Per-key aggregation state partitioned by a :class:`RoutingTable`.

    Args:
        spark: the SparkSession.
        key: key column name(s).
        aggregations: ``{output column: (function, input column or None)}``, function in count/sum/min/max.
        routing: the initial routing table.
    """

    def __init__(self, spark: SparkSession, key: str | Sequence[str],
                 aggregations: Mapping[str, tuple[str, str | None]], routing: RoutingTable):
        super().__init__(spark, key, routing)
        for out, (fn, col) in aggregations.items():
            if fn not in MERGE:
                raise ValueError(f"aggregation {out!r}: unsupported function {fn!r} (count, sum, min, max)")
            if fn != "count" and not col:
                raise ValueError(f"aggregation {out!r}: {fn} needs an input column")
        self.aggregations = dict(aggregations)
        self._merge_placed = False        # the merge's plan was seen to keep the placement (checked once)
        self._exprs: dict[str, list[Column]] = {}  # column expressions built once (see _merge_exprs)
        # (stream schema and routing, a batch's withColumns): see _routed_exprs
        self._routed: tuple[Any, dict[str, Column]] | None = None
        # a lazy restore's placed stored rows, every version of a key (_rb_v), and the state planned from them: the
        # next merge keeps the newest version per key itself (see _merge_exprs and _take_versions)
        self._versions: tuple[DataFrame, DataFrame, bool] | None = None  # (..., read ahead)
        self._versioned = False  # the merge keeps the newest state row per key (see _merge_exprs)

    # ------------------------------------------------------------------ helpers
    def value_columns(self) -> list[str]:
        """The state's columns besides the keys (:class:`rebalancer_client.spark.functions.FunctionState` has
        others)."""
        return list(self.aggregations)

    def _batch_columns(self) -> list[str]:
        """Columns kept in memory (never stored) with the latest batch's record and byte counts of a key and the
        change of its state row's size (:func:`rebalancer_client.spark.stats.row_bytes_column`): the rows the latest
        batch changed carry what it did, which :meth:`batch_observation` sums per key group."""
        return [N_COL, B_COL, D_COL]

    def batch_observation(self) -> list[Column]:
        """Aggregate columns over the rows the latest batch changed (the delta): ``(key group, records, bytes, state
        bytes change)`` of each key the batch touched, as one text of comma-separated numbers (read without py4j's
        per-byte decoding of a pickled row, which cost ~0.15 s for 25,000 keys; each key's part is formatted in the
        tasks, so the driver's scheduler thread only joins the parts: formatting the numbers there when the job
        ended cost ~30 ms a batch for 22,000 keys) and read in pieces (:func:`~rebalancer_client.spark.jvm.text_pieces`:
        one py4j answer of 32,000 characters took 44 ms), and the number of keys — the batch statistics, measured
        while the delta is written instead of in a job of their own (:meth:`statistics` sums them per key group)."""
        from pyspark.sql import functions as F

        if "observation" not in self._exprs:  # built once per process (a JVM call per part)
            columns = [KG_COL, *self._batch_columns()]
            parts = ", ".join(f"cast(coalesce({_q(c)}, 0) as string)" for c in columns)
            rows = f"array_join(collect_list(concat_ws(',', {parts})), ',')"  # "kg,n,b,d,kg,n,b,d,..."
            self._exprs["observation"] = shared(("observation", *columns), lambda: [
                text_pieces(F.expr(rows)).alias("rows"), F.expr("count(1)").alias("keys")])
        return self._exprs["observation"]

    def output_frame(self, df: DataFrame) -> DataFrame:
        """What the ``output`` sink gets of the rows of one version (``df``): keys and aggregates (update mode)."""
        return df.select(*self.keys, *self.aggregations)

    def state_frame(self) -> DataFrame | None:
        """The keyed state as a DataFrame (keys and aggregates), None before the first batch."""
        return None if self.df is None else self.df.select(*self.keys, *self.aggregations)

    # ------------------------------------------------------------------ one micro-batch, one job
    def step(self, batch_df: DataFrame, version: int, lazy: bool) -> None:
        """Apply one micro-batch as version ``version``: the rows of the batch's keys are marked changed
        (:meth:`changed_rows`) and carry what :meth:`batch_observation` measures. ``lazy``: the new state is
        filled by the next job that reads it (the durable store's delta write), so that the batch is one Spark job."""
        self.merge(self.partials(batch_df, persist=False), version=version, lazy=lazy)

    def statistics(self, observed: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(records, bytes, change of the state bytes or None) per key group, shape (G,) each, from
        :meth:`batch_observation`'s values."""
        # numpy's text parser: a third of the time of json.loads on 25,000 keys
        rows = np.fromstring(joined(observed.get("rows")), dtype=np.int64, sep=",").reshape(-1, 4)
        G = self.routing.key_groups
        n, b, d = (np.bincount(rows[:, 0], weights=rows[:, i], minlength=G).astype(np.int64) for i in (1, 2, 3))
        return n, b, d

    # ------------------------------------------------------------------ per batch
    def check_columns(self, batch_df: DataFrame) -> None:
        """Raise ValueError naming the user's key or aggregation column missing from ``batch_df``."""
        super().check_columns(batch_df)
        have = set(batch_df.columns)
        for out, (fn, col) in self.aggregations.items():
            if col is not None and col not in have:
                raise ValueError(f"aggregation {out!r}: {fn} input column {col!r} is not in the stream (columns: "
                                 f"{', '.join(batch_df.columns)})")

    def partials(self, batch_df: DataFrame, persist: bool = True) -> BatchPartials:
        """Route, place and pre-aggregate one micro-batch (cached unless ``persist=False``; release with
        :meth:`release`)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        # foreachBatch hands over DataFrames of the stream's own (cloned) session: plan in that session
        self.session = batch_df.sparkSession
        G = self.routing.key_groups
        routed = batch_df.withColumns(self._routed_exprs(batch_df))
        # only the route value travels; the key group is pmod(route, G)
        placed = routed.repartition(self.n_partitions, *self._cols([ROUTE_COL]))
        if "partials" not in self._exprs:
            def build() -> dict[str, list[Column]]:
                aggs = [F.expr(f"{fn}({'1' if col is None else _q(col)})").alias(out)
                        for out, (fn, col) in self.aggregations.items()]
                # (grouping by the route and the key group pmod(route, G) as well: the placement satisfies both)
                return {"partials": [*aggs, F.expr("count(1)").alias(N_COL), F.expr(f"sum({_q(B_COL)})").alias(B_COL)],
                        "partials_by": [*self._cols([ROUTE_COL]), key_group_of_route(ROUTE_COL, G).alias(KG_COL),
                                        *self._cols(self.keys)]}

            self._exprs.update(shared(("partials", G, *self.keys, *self.aggregations.items()), build))
        with no_adaptive(self.session):  # a cached adaptive plan would hide the hash partitioning on the route
            part = placed.groupBy(*self._exprs["partials_by"]).agg(*self._exprs["partials"])
            if persist:
                part = part.persist(StorageLevel.MEMORY_AND_DISK)
        return BatchPartials(part, self.n_partitions)

    def _routed_exprs(self, batch_df: DataFrame) -> dict[str, Column]:
        """``withColumns`` of a batch: its record bytes and its route value, built once per stream schema and
        routing table (a routing change builds them anew)."""
        G = self.routing.key_groups
        cache_key = (tuple(batch_df.dtypes), G, self.n_partitions, tuple(self.routing.partition_of.tolist()))
        if self._routed is None or self._routed[0] != cache_key:
            def build() -> dict[str, Column]:
                return {B_COL: row_bytes_column(batch_df),
                        ROUTE_COL: self.routing.route_column(key_group_column(self.keys, G))}

            self._routed = (cache_key, shared(("routed", *self.keys, cache_key), build))
        return self._routed[1]

    def merge(self, partials: BatchPartials, version: int = 0, lazy: bool = False) -> None:
        """Merge a batch's partials into the state (the state is not shuffled; see the module docstring).

        The rows of the batch's keys are marked changed (the delta a durable store writes; ``version`` is not in
        the plan, see the module docstring). ``lazy``: the new state is materialised by the next job that reads it
        (the durable store's delta write) instead of a job of its own; the previous state is kept until
        :meth:`release_previous`. The first merge after a lazy restore reads the stored rows of every version
        instead of the restored state (:meth:`restore`)."""

        with no_adaptive(self.session):  # (expressions as SQL text: one JVM call each, see row_bytes_column)
            x = self._merge_exprs(partials.df)
            new_rows = partials.df.select(*x["new_rows"])
            taken = self._take_versions(new_rows)
            versions = None if taken is None else taken[0]
            if self.df is None:
                self._replace(new_rows, lazy=lazy)
            else:
                def merged_of(union: DataFrame) -> DataFrame:
                    return union.groupBy(*x["merge_by"]).agg(*x["merge"]).select(*x["merged"])

                # the batch's rows first: a union plans in its first child's session, the batch's (in which adaptive
                # execution is off); a restored state belongs to the session that restored it, where adaptive
                # execution would run the batch's shuffle in a job of its own while the merge is planned
                state = self.df.select(*x["state"]) if versions is None else versions
                if taken is not None and taken[1]:  # a read-ahead checkpoint: released after the job that reads it
                    self._previous.append(taken[0])
                # the merge's plan has the same shape every batch: its placement is checked until it holds once, and
                # on the stored versions
                placed = self._replace_placed(
                    merged_of(new_rows.unionByName(state)),
                    lambda: merged_of(new_rows.unionByName(state).repartition(self.n_partitions, ROUTE_COL)),
                    lazy=lazy, check=versions is not None or not self._merge_placed)
                self._merge_placed = self._merge_placed or (placed and versions is None)
        self.updates += 1

    def _merge_exprs(self, partials_df: DataFrame) -> dict[str, list[Column]]:
        """The column expressions of :meth:`merge`, built once (they do not change from batch to batch; each is
        a JVM call): ``new_rows`` (the batch's rows, marked changed, with their size as the change ``D_COL``),
        ``state`` (the state's rows, unmarked), ``merge_by`` and ``merge`` (the aggregation of their union per key)
        and ``merged`` (the state's columns of its result).

        When every aggregate's value combines by an expression of the same type (fixed-width values, sums of
        ``bigint`` or ``double``), the aggregation takes per key the value of the state row with the highest
        ``N_COL`` (``max_by``; the batch's row is skipped) and combines it with the batch's: the same result as
        merging the union (a state has one row per key), and one aggregation also when the state side holds every
        stored version of a key — so that the first batch after a restart runs the code of every other batch."""
        if "merge" not in self._exprs:  # what they depend on: the aggregations and the partials' types
            key = ("merge", *self.keys, *self.aggregations.items(), *partials_df.dtypes)
            self._versioned, exprs = shared(key, lambda: self._build_merge(partials_df))
            self._exprs.update(exprs)
        return self._exprs

    def _build_merge(self, partials_df: DataFrame) -> tuple[bool, dict[str, list[Column]]]:
        """(whether the merge keeps the newest state row per key, :meth:`_merge_exprs`'s expressions)."""
        from pyspark.sql import functions as F

        size = self._row_bytes(partials_df)  # keys and values: the same types in the batch and the state
        this = _q(TOUCHED_COL)  # in the union: the batch's row of a key (the state's rows are not)
        front = self._cols([ROUTE_COL, KG_COL, *self.keys, *self.value_columns()])
        types = dict(partials_df.dtypes)
        versioned = all(combinable(fn, types.get(out, "")) for out, (fn, _) in self.aggregations.items())
        order = f"if({this}, null, coalesce({_q(N_COL)}, 0))"  # the state rows' (a restore's: their version)
        merge = [F.expr(combined(out, fn, order, this) if versioned else kept(out, fn, types.get(out, "")))
                 .alias(out) for out, (fn, _) in self.aggregations.items()]
        merge.append(F.expr(f"bool_or({this})").alias(TOUCHED_COL))
        merge += [F.expr(f"cast(sum(if({this}, {_q(c)}, 0)) as bigint)").alias(c) for c in (N_COL, B_COL)]
        # the state row's size before the batch (null for a new key): its change is the delta's D_COL
        merge.append((F.max_by(size, F.expr(order)) if versioned else F.sum(F.when(~F.expr(this), size)))
                     .alias("_rb_old"))
        return versioned, dict(
            new_rows=[*front, F.expr("true").alias(TOUCHED_COL), *self._cols([N_COL, B_COL]), size.alias(D_COL)],
            state=[*front, F.expr("false").alias(TOUCHED_COL), *self._cols(self._batch_columns())],
            merge_by=self._cols([ROUTE_COL, KG_COL, *self.keys]),
            merge=merge,
            merged=[*front, *self._cols([TOUCHED_COL, N_COL, B_COL]),
                    (size - F.expr("coalesce(_rb_old, 0)")).cast("long").alias(D_COL)])

    # ------------------------------------------------------------------ the first merge after a restore
    def restore(self, stored_df: DataFrame, routing: RoutingTable, *, dedup: bool = False, lazy: bool = False) -> None:
        """:meth:`StateBase.restore`; a lazy restore also keeps the placed stored rows of every version, which the
        next merge reads instead of the restored state: its aggregation keeps the newest stored row of a key
        itself (see :meth:`_merge_exprs`), so the stored rows are aggregated once, by the code of every batch."""
        self._drop_versions()
        if not (dedup and lazy):
            super().restore(stored_df, routing, dedup=dedup, lazy=lazy)
            return
        from pyspark.sql import functions as F

        self.routing = routing
        self.session = stored_df.sparkSession

        def as_merged() -> list[Column]:
            zero = F.lit(0).cast("long")
            return [routing.route_column(KG_COL).alias(ROUTE_COL), *self._cols([KG_COL, *self.keys]),
                    *self._cols(self.value_columns()), F.lit(False).alias(TOUCHED_COL),
                    self._cols([VERSION_COL])[0].alias(N_COL), zero.alias(B_COL), zero.alias(D_COL)]

        key = ("restored rows", *self.keys, *self.value_columns(), routing.n_partitions,
               tuple(routing.partition_of.tolist()))
        with no_adaptive(self.session):
            # the rows as the merge's union takes them, the version in N_COL (see _merge_exprs), computed before the
            # shuffle: after it, no projection — the merge's plan then has the stages (and code) of every batch's
            stored = stored_df.select(*self._cols([*self.stored_columns(), VERSION_COL]))
            rows = self._restorable(stored).select(*shared(key, as_merged))
            placed = routing.place(rows)
            self._replace(self._restored(self._newest(placed, N_COL)), lazy=True, checkpoint=False)
        assert self.df is not None
        self._versions = (placed, self.df, False)

    def prefetch(self) -> None:
        """Read and place the stored rows of a lazy restore now, in the background (a restart's
        :meth:`~rebalancer_client.spark.driver.RebalancingDriver.start`: the query starts meanwhile): they become a
        lazily filled local checkpoint (its hash partitioning on the route kept), which a job in a thread of its own
        fills; the next merge reads it without waiting — its job reuses what that job read and placed, or computes
        the rest itself."""
        if self._versions is None or self._versions[2]:
            return
        placed, restored, _ = self._versions
        with no_adaptive(self.session):  # planned here: the background thread must not change the session's conf
            ahead = placed.localCheckpoint(eager=False)
        self._versions = (ahead, restored, True)
        threading.Thread(target=_fill, args=(ahead,), name="rebalancer-restore", daemon=True).start()

    def _take_versions(self, new_rows: DataFrame) -> tuple[DataFrame, bool] | None:
        """The placed stored rows of a lazy restore (read ahead by :meth:`prefetch`) when the merge keeps the newest
        row per key itself, the state is still the one planned from them (no routing change since) and each value
        column has the batch's type, with whether they were read ahead; None otherwise (the restored state is
        merged)."""
        versions, self._versions = self._versions, None
        if versions is None:
            return None
        placed, restored, ahead = versions
        have, want = dict(placed.dtypes), dict(new_rows.dtypes)
        if self._versioned and restored is self.df and all(have.get(c) == want[c] for c in self.aggregations):
            return placed, ahead
        if ahead:
            release_checkpoint(placed)
        return None

    def _drop_versions(self) -> None:
        """Forget the placed stored rows of a lazy restore, freeing their read-ahead checkpoint if there is one."""
        versions, self._versions = self._versions, None
        if versions is not None and versions[2]:
            release_checkpoint(versions[0])

    def unpersist(self) -> None:
        self._drop_versions()
        super().unpersist()

    def update(self, batch_df: DataFrame, version: int = 0) -> BatchPartials:
        """:meth:`partials` then :meth:`merge`; returns the (cached) partials for statistics."""
        p = self.partials(batch_df)
        self.merge(p, version)
        return p

    @staticmethod
    def release(partials: BatchPartials) -> None:
        partials.df.unpersist()

    # ------------------------------------------------------------------ reading
    def to_pandas(self) -> pd.DataFrame:
        """The state as a pandas DataFrame (keys and aggregates; small states only)."""
        frame = self.state_frame()
        if frame is None:
            import pandas as pd

            return pd.DataFrame(columns=[*self.keys, *self.aggregations])
        return frame.toPandas()


def _fill(ahead: DataFrame) -> None:
    """Compute a lazily filled local checkpoint (its blocks stay cached) by counting the rows of its RDD (a job
    without a query plan of its own: no code to generate); a failure is left to the job that needs the rows (it
    computes them again, and fails the batch if it fails too)."""
    try:
        ahead._jdf.queryExecution().analyzed().rdd().count()
    except Exception as exc:  # noqa: BLE001 - see above
        log.info("reading the committed state ahead failed (%s); the first batch reads it", exc)
