"""Keyed state managed by the integration inside ``foreachBatch``, partitioned by the routing table.

Spark's built-in stateful operators fix the partition of a key (a hash you cannot choose, and
``spark.sql.shuffle.partitions`` cannot change after the first run — docs/design.md, "Spark facts"). So the
integration keeps keyed state itself: a DataFrame with one row per key, ``(_rb_route, _rb_kg, key...,
aggregates...)``, hash-partitioned by ``_rb_route`` into ``n`` partitions, so row ``r`` sits on partition
``routing.partition_of[r._rb_kg]`` exactly (see :mod:`clients.spark.routing`). After every batch the state is
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
(:mod:`clients.spark.store`) writes as the batch's version, and :meth:`KeyedState.restore` rebuilds the state from
stored rows after a restart or a lost executor (keeping the newest version per key). The plan of a batch holds no
batch-specific literal (no batch id), so Spark compiles its generated code once per query, not once per batch.

Aggregations are mergeable ones: ``count``, ``sum``, ``min``, ``max`` (``{"clicks": ("count", None),
"amount": ("sum", "amount")}``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from clients.spark.routing import KG_COL, ROUTE_COL, RoutingTable, key_group_column, key_group_of_route
from clients.spark.stats import NamedColumns, row_bytes_column
from clients.spark.stats import sql_name as _q
from clients.spark.store import VERSION_COL

log = logging.getLogger("rebalancer.spark")

N_COL = "_rb_n"
B_COL = "_rb_b"
D_COL = "_rb_d"
TOUCHED_COL = "_rb_t"   # the latest batch changed the row (in memory; never stored)
_MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}


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


@dataclass
class BatchPartials:
    """A routed, placed and pre-aggregated micro-batch (cached until :meth:`KeyedState.release`)."""

    df: object                           # DataFrame (_rb_route, _rb_kg, key..., aggregates..., _rb_n, _rb_b)
    n_partitions: int

    keys: int = 0                        # distinct keys of the batch (set by :meth:`summary`)

    def summary(self, key_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One Spark job: (records per partition (n,), records per key group (G,), bytes per key group (G,)),
        the partition measured with ``spark_partition_id()``; also counts the batch's distinct keys."""
        from pyspark.sql import functions as F

        rows = (self.df.select(F.spark_partition_id().alias("p"), KG_COL, N_COL, B_COL)
                .groupBy("p", KG_COL).agg(F.sum(N_COL).alias("n"), F.sum(B_COL).alias("b"),
                                          F.count(F.lit(1)).alias("k")).collect())
        part = np.zeros(self.n_partitions, dtype=np.int64)
        n = np.zeros(key_groups, dtype=np.int64)
        b = np.zeros(key_groups, dtype=np.int64)
        keys = 0
        for r in rows:
            c = int(r["n"] or 0)
            part[int(r["p"])] += c
            n[int(r[KG_COL])] += c
            b[int(r[KG_COL])] += int(r["b"] or 0)
            keys += int(r["k"])
        self.keys = keys
        return part, n, b

    def partition_records(self) -> np.ndarray:
        """Records of the batch per Spark partition, measured with ``spark_partition_id()``."""
        from pyspark.sql import functions as F

        rows = (self.df.groupBy(F.spark_partition_id().alias("p")).agg(F.sum(N_COL).alias("n")).collect())
        out = np.zeros(self.n_partitions, dtype=np.int64)
        for r in rows:
            out[int(r["p"])] += int(r["n"] or 0)
        return out

    def key_group_records(self, key_groups: int) -> tuple[np.ndarray, np.ndarray]:
        """(records, bytes) per key group of the batch, shape (G,) each."""
        from pyspark.sql import functions as F

        rows = self.df.groupBy(KG_COL).agg(F.sum(N_COL).alias("n"), F.sum(B_COL).alias("b")).collect()
        n = np.zeros(key_groups, dtype=np.int64)
        b = np.zeros(key_groups, dtype=np.int64)
        for r in rows:
            n[int(r[KG_COL])] = int(r["n"] or 0)
            b[int(r[KG_COL])] = int(r["b"] or 0)
        return n, b


class KeyedState:
    """Per-key aggregation state partitioned by a :class:`RoutingTable`.

    Args:
        spark: the SparkSession.
        key: key column name(s).
        aggregations: ``{output column: (function, input column or None)}``, function in count/sum/min/max.
        routing: the initial routing table.
    """

    def __init__(self, spark, key: str | Sequence[str], aggregations: Mapping[str, tuple[str, str | None]],
                 routing: RoutingTable):
        self.spark = spark
        self.keys = [key] if isinstance(key, str) else list(key)
        if not self.keys:
            raise ValueError("at least one key column is needed")
        for out, (fn, col) in aggregations.items():
            if fn not in _MERGE:
                raise ValueError(f"aggregation {out!r}: unsupported function {fn!r} (count, sum, min, max)")
            if fn != "count" and not col:
                raise ValueError(f"aggregation {out!r}: {fn} needs an input column")
        self.aggregations = dict(aggregations)
        self.routing = routing
        self.session = spark              # the session of the latest batch (a stream runs in a cloned session)
        self.df = None                    # the state DataFrame (local checkpoint), None before the first batch
        self.updates = 0
        self.fallback_merges = 0          # merges that needed an explicit repartition (should stay 0)
        self._previous: list = []         # states a lazily checkpointed state still reads (release_previous)
        self._merge_placed = False        # the merge's plan was seen to keep the placement (checked once)
        self._exprs: dict[str, list] = {}  # column expressions built once (see _merge_exprs)
        self._cols = NamedColumns()        # columns by name, built once per query
        self._routed: tuple | None = None   # (stream schema and routing, a batch's withColumns) (_routed_exprs)

    # ------------------------------------------------------------------ helpers
    @property
    def n_partitions(self) -> int:
        return self.routing.n_partitions

    def value_columns(self) -> list[str]:
        """The state's columns besides the keys (:class:`clients.spark.functions.FunctionState` has others)."""
        return list(self.aggregations)

    def _state_columns(self) -> list[str]:
        return [ROUTE_COL, KG_COL, *self.keys, *self.value_columns(), TOUCHED_COL, *self._batch_columns()]

    def _batch_columns(self) -> list[str]:
        """Columns kept in memory (never stored) with the latest batch's record and byte counts of a key and the
        change of its state row's size (:func:`clients.spark.stats.row_bytes_column`): the rows the latest batch
        changed carry what it did, which :meth:`batch_observation` sums per key group."""
        return [N_COL, B_COL, D_COL]

    def batch_observation(self) -> list:
        """Aggregate columns over the rows the latest batch changed (the delta): ``(key group, records, bytes, state
        bytes change)`` of each key the batch touched, as one text of comma-separated numbers (read without py4j's
        per-byte decoding of a pickled row, which cost ~0.15 s for 25,000 keys; each key's part is formatted in the
        tasks, so the driver's scheduler thread only joins the parts: formatting the numbers there when the job
        ended cost ~30 ms a batch for 22,000 keys), and the number of keys — the batch
        statistics, measured while the delta is written instead of in a job of their own (:meth:`statistics` sums
        them per key group)."""
        from pyspark.sql import functions as F

        if "observation" not in self._exprs:  # built once per query (a JVM call per part)
            parts = ", ".join(f"cast(coalesce({_q(c)}, 0) as string)" for c in [KG_COL, *self._batch_columns()])
            rows = f"array_join(collect_list(concat_ws(',', {parts})), ',')"  # "kg,n,b,d,kg,n,b,d,..."
            self._exprs["observation"] = [F.expr(rows).alias("rows"),
                                          F.expr("count(1)").alias("keys")]
        return self._exprs["observation"]

    def changed_rows(self):
        """Predicate (Column) of the rows the latest batch changed (what a durable store writes as its delta)."""
        return self._cols([TOUCHED_COL])[0]

    def _row_bytes(self, df):
        """Column: the state bytes of a row (keys and values), as :meth:`state_bytes_per_key_group` counts them."""
        return row_bytes_column(df, [*self.keys, *self.value_columns()])

    def stored_columns(self) -> list[str]:
        """The columns a durable store keeps (the route is derived from the key group and the routing)."""
        return [KG_COL, *self.keys, *self.value_columns()]

    def output_frame(self, df):
        """What the ``output`` sink gets of the rows of one version (``df``): keys and aggregates (update mode)."""
        return df.select(*self.keys, *self.aggregations)

    def state_frame(self):
        """The keyed state as a DataFrame (keys and aggregates), None before the first batch."""
        return None if self.df is None else self.df.select(*self.keys, *self.aggregations)

    def commit_extra(self) -> dict:
        """What the state needs besides its rows after a restart (stored in the commit record)."""
        return {}

    # ------------------------------------------------------------------ one micro-batch, one job
    def step(self, batch_df, version: int, lazy: bool) -> None:
        """Apply one micro-batch as version ``version``: the rows of the batch's keys are marked changed
        (:meth:`changed_rows`) and carry what :meth:`batch_observation` measures. ``lazy``: the new state is
        filled by the next job that reads it (the durable store's delta write), so that the batch is one Spark job."""
        self.merge(self.partials(batch_df, persist=False), version=version, lazy=lazy)

    def stored_rows(self):
        """Predicate (Column) of the rows of a version that a durable store keeps, or None for all of them."""
        return None

    def observe(self) -> dict:
        """:meth:`batch_observation` over the rows the latest batch changed, in a job of its own (no durable
        store)."""
        return self.df.filter(self.changed_rows()).agg(*self.batch_observation()).collect()[0].asDict()

    def absorb(self, observed: Mapping) -> dict:
        """Take what the batch's observation says that the state keeps (e.g. a watermark); returns
        :meth:`commit_extra` as it is after the batch."""
        return self.commit_extra()

    def statistics(self, observed: Mapping) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(records, bytes, change of the state bytes or None) per key group, shape (G,) each, from
        :meth:`batch_observation`'s values."""
        # numpy's text parser: a third of the time of json.loads on 25,000 keys
        rows = np.fromstring(observed.get("rows") or "", dtype=np.int64, sep=",").reshape(-1, 4)
        G = self.routing.key_groups
        n, b, d = (np.bincount(rows[:, 0], weights=rows[:, i], minlength=G).astype(np.int64) for i in (1, 2, 3))
        return n, b, d

    def restore_extra(self, extra: Mapping) -> None:
        """The counterpart of :meth:`commit_extra`, called before :meth:`restore`."""

    def _restorable(self, stored_df):
        """Stored rows that take part in a restore (all of them here)."""
        return stored_df

    def _live(self, placed_df):
        """Restored rows that are state (all of them here)."""
        return placed_df

    def _placed_by_route(self, df) -> bool:
        """True when ``df``'s physical output partitioning is ``hashpartitioning(_rb_route, n)``."""
        try:
            plan = df._jdf.queryExecution().executedPlan()
            if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":
                plan = plan.executedPlan()  # the current physical plan, exchanges included
            p = plan.outputPartitioning()
            if p.getClass().getSimpleName() != "HashPartitioning" or p.numPartitions() != self.n_partitions:
                return False
            exprs = p.expressions()
            return exprs.size() == 1 and str(exprs.apply(0).toString()).startswith(ROUTE_COL + "#")
        except Exception:  # noqa: BLE001 - internal API changed: be safe
            return False

    # ------------------------------------------------------------------ per batch
    def check_columns(self, batch_df) -> None:
        """Raise ValueError naming the user's key or aggregation column missing from ``batch_df``."""
        have = set(batch_df.columns)
        for k in self.keys:
            if k not in have:
                raise ValueError(f"key column {k!r} is not in the stream (columns: {', '.join(batch_df.columns)})")
        for out, (fn, col) in self.aggregations.items():
            if col is not None and col not in have:
                raise ValueError(f"aggregation {out!r}: {fn} input column {col!r} is not in the stream (columns: "
                                 f"{', '.join(batch_df.columns)})")

    def partials(self, batch_df, persist: bool = True) -> BatchPartials:
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
            aggs = [F.expr(f"{fn}({'1' if col is None else _q(col)})").alias(out)
                    for out, (fn, col) in self.aggregations.items()]
            self._exprs["partials"] = [*aggs, F.expr("count(1)").alias(N_COL), F.expr(f"sum({_q(B_COL)})").alias(B_COL)]
            # (grouping by the route and the key group pmod(route, G) as well: the placement satisfies both)
            self._exprs["partials_by"] = [*self._cols([ROUTE_COL]), key_group_of_route(ROUTE_COL, G).alias(KG_COL),
                                          *self._cols(self.keys)]
        with _no_adaptive(self.session):  # a cached adaptive plan would hide the hash partitioning on the route
            part = placed.groupBy(*self._exprs["partials_by"]).agg(*self._exprs["partials"])
            if persist:
                part = part.persist(StorageLevel.MEMORY_AND_DISK)
        return BatchPartials(part, self.n_partitions)

    def _routed_exprs(self, batch_df) -> dict:
        """``withColumns`` of a batch: its record bytes and its route value, built once per stream schema and
        routing table (a routing change builds them anew)."""
        G = self.routing.key_groups
        cache_key = (tuple(batch_df.dtypes), G, self.n_partitions, tuple(self.routing.partition_of.tolist()))
        if self._routed is None or self._routed[0] != cache_key:
            self._routed = (cache_key, {B_COL: row_bytes_column(batch_df),
                                        ROUTE_COL: self.routing.route_column(key_group_column(self.keys, G))})
        return self._routed[1]

    def merge(self, partials: BatchPartials, version: int = 0, lazy: bool = False) -> None:
        """Merge a batch's partials into the state (the state is not shuffled; see the module docstring).

        The rows of the batch's keys are marked changed (the delta a durable store writes; ``version`` is not in
        the plan, see the module docstring). ``lazy``: the new state is materialised by the next job that reads it
        (the durable store's delta write) instead of a job of its own; the previous state is kept until
        :meth:`release_previous`."""

        with _no_adaptive(self.session):  # (expressions as SQL text: one JVM call each, see row_bytes_column)
            x = self._merge_exprs(partials.df)
            new_rows = partials.df.select(*x["new_rows"])
            if self.df is None:
                merged = new_rows
            else:
                def merged_of(union):
                    return union.groupBy(*x["merge_by"]).agg(*x["merge"]).select(*x["merged"])

                state = self.df.select(*x["state"])
                merged = merged_of(state.unionByName(new_rows))
                # the merge's plan has the same shape every batch: its partitioning is checked until it holds once
                # (inspecting the physical plan costs ~0.1 s of JVM calls per batch)
                if not self._merge_placed and self._placed_by_route(merged):
                    self._merge_placed = True
                if not self._merge_placed:
                    self.fallback_merges += 1
                    merged = merged_of(state.unionByName(new_rows).repartition(self.n_partitions, ROUTE_COL))
            self._replace(merged, lazy=lazy)
        self.updates += 1

    def _merge_exprs(self, partials_df) -> dict[str, list]:
        """The column expressions of :meth:`merge`, built once (they do not change from batch to batch; each is
        a JVM call): ``new_rows`` (the batch's rows, marked changed, with their size as the change ``D_COL``),
        ``state`` (the state's rows, unmarked), ``merge_by`` and ``merge`` (the aggregation of their union per key)
        and ``merged`` (the state's columns of its result)."""
        from pyspark.sql import functions as F

        if "merge" not in self._exprs:
            size = self._row_bytes(partials_df)  # keys and values: the same types in the batch and the state
            this = _q(TOUCHED_COL)  # in the union: the batch's row of a key (the state's rows are not)
            front = self._cols([ROUTE_COL, KG_COL, *self.keys, *self.value_columns()])
            merge = [F.expr(f"{_MERGE[fn]}({_q(out)})").alias(out) for out, (fn, _) in self.aggregations.items()]
            merge.append(F.expr(f"bool_or({this})").alias(TOUCHED_COL))
            merge += [F.expr(f"cast(sum(if({this}, {_q(c)}, 0)) as bigint)").alias(c) for c in (N_COL, B_COL)]
            # the state row's size before the batch (null for a new key): its change is the delta's D_COL
            merge.append(F.sum(F.when(~F.expr(this), size)).alias("_rb_old"))
            self._exprs.update(
                new_rows=[*front, F.expr("true").alias(TOUCHED_COL), *self._cols([N_COL, B_COL]), size.alias(D_COL)],
                state=[*front, F.expr("false").alias(TOUCHED_COL), *self._cols(self._batch_columns())],
                merge_by=self._cols([ROUTE_COL, KG_COL, *self.keys]),
                merge=merge,
                merged=[*front, *self._cols([TOUCHED_COL, N_COL, B_COL]),
                        (size - F.expr("coalesce(_rb_old, 0)")).cast("long").alias(D_COL)])
        return self._exprs

    def update(self, batch_df, version: int = 0) -> BatchPartials:
        """:meth:`partials` then :meth:`merge`; returns the (cached) partials for statistics."""
        p = self.partials(batch_df)
        self.merge(p, version)
        return p

    def restore(self, stored_df, routing: RoutingTable, *, dedup: bool = False) -> None:
        """Replace the state by ``stored_df`` (the :meth:`stored_columns` of a durable store and ``_rb_v``, the
        version that wrote a row), placed under ``routing`` (one shuffle of the state; recovery only). ``dedup``:
        ``stored_df`` may hold several rows per key (a snapshot and deltas); the one with the highest ``_rb_v`` is
        kept, in the same shuffle."""
        from pyspark.sql import functions as F

        self.routing = routing
        self.session = stored_df.sparkSession
        with _no_adaptive(self.session):
            df = (self._restorable(stored_df.select(*self.stored_columns(), VERSION_COL))
                  .withColumn(ROUTE_COL, routing.route_column(F.col(KG_COL))))
            placed = routing.place(df)
            if dedup:
                rest = [*self.value_columns(), VERSION_COL]
                newest = F.max_by(F.struct(*[F.col(c) for c in rest]), F.col(VERSION_COL)).alias("_rb_row")
                placed = (placed.groupBy(ROUTE_COL, KG_COL, *self.keys).agg(newest)
                          .select(ROUTE_COL, KG_COL, *self.keys, *[F.col("_rb_row." + c).alias(c) for c in rest]))
            placed = placed.withColumn(TOUCHED_COL, F.lit(False))
            for c in self._batch_columns():
                placed = placed.withColumn(c, F.lit(0).cast("long"))
            self._replace(self._live(placed).select(*self._state_columns()))

    @staticmethod
    def release(partials: BatchPartials) -> None:
        partials.df.unpersist()

    def _replace(self, new_df, lazy: bool = False) -> None:
        """Materialise ``new_df`` as a local checkpoint (lineage cut, hash partitioning on the route kept: the
        plan was made without adaptive execution, whose root hides the partitioning) and drop the old state.
        ``lazy``: the checkpoint is filled by the next job that computes it; the old state, which that job still
        reads, is dropped by :meth:`release_previous`."""
        cp = new_df.localCheckpoint(eager=not lazy)
        old, self.df = self.df, cp
        if old is not None:
            self._previous.append(old)
        if not lazy:
            self.release_previous()

    def release_previous(self) -> None:
        """Drop the states that a lazily checkpointed state was computed from (after the job that filled it)."""
        while self._previous:
            _release_checkpoint(self._previous.pop())

    # ------------------------------------------------------------------ routing changes
    def _kg_partitions(self) -> dict[int, tuple[int, int, int, int]]:
        """Per key group with state: (min partition, max partition, rows, bytes) measured on the state."""
        from pyspark.sql import functions as F

        if self.df is None:
            return {}
        live = self._live(self.df)
        b = self._row_bytes(live)
        rows = (live.select(KG_COL, F.spark_partition_id().alias("p"), b.alias("b"))
                .groupBy(KG_COL)
                .agg(F.min("p").alias("lo"), F.max("p").alias("hi"), F.count(F.lit(1)).alias("n"),
                     F.sum("b").alias("b")).collect())
        return {int(r[KG_COL]): (int(r["lo"]), int(r["hi"]), int(r["n"]), int(r["b"] or 0)) for r in rows}

    def apply_routing(self, new_routing: RoutingTable) -> MigrationReport:
        """Switch to ``new_routing`` (call between micro-batches); only moved key groups change partition."""
        import time

        from pyspark.sql import functions as F

        if new_routing.n_partitions != self.n_partitions or new_routing.key_groups != self.routing.key_groups:
            raise ValueError("a routing change must keep the number of partitions and key groups")
        t0 = time.perf_counter()
        moved = self.routing.moved(new_routing)
        old_routing = self.routing
        self.routing = new_routing
        if self.df is None or len(moved) == 0:
            return MigrationReport([int(k) for k in moved], [], 0, 0, time.perf_counter() - t0)
        moved_list = [int(k) for k in moved]
        cols = self._state_columns()
        with _no_adaptive(self.session):
            kept = self.df.filter(~F.col(KG_COL).isin(moved_list))
            movers = (self.df.filter(F.col(KG_COL).isin(moved_list))
                      .withColumn(ROUTE_COL, new_routing.route_column(KG_COL)).select(*cols)
                      .repartition(self.n_partitions, ROUTE_COL))
            new_df = kept.select(*cols).unionByName(movers)
            if not self._placed_by_route(new_df):
                self.fallback_merges += 1
                new_df = (self.df.withColumn(ROUTE_COL, new_routing.route_column(KG_COL)).select(*cols)
                          .repartition(self.n_partitions, ROUTE_COL))
            self._replace(new_df)
        # placement before the change is exact (every merge and restore keeps it, see the module docstring), so
        # the old routing says where each key group was; where it is now is measured on the new state
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

    # ------------------------------------------------------------------ reading
    def state_bytes_per_key_group(self) -> np.ndarray:
        """(G,) estimated state bytes per key group (keys + aggregates), one aggregation."""
        out = np.zeros(self.routing.key_groups, dtype=np.int64)
        for k, (_, _, _, b) in self._kg_partitions().items():
            out[k] = b
        return out

    def to_pandas(self):
        """The state as a pandas DataFrame (keys and aggregates; small states only)."""
        frame = self.state_frame()
        if frame is None:
            import pandas as pd

            return pd.DataFrame(columns=[*self.keys, *self.aggregations])
        return frame.toPandas()

    def unpersist(self) -> None:
        self.release_previous()
        if self.df is not None:
            _release_checkpoint(self.df)
            self.df = None


@contextlib.contextmanager
def _no_adaptive(spark):
    """Plan without adaptive query execution inside the block (restores the previous setting)."""
    key = "spark.sql.adaptive.enabled"
    prev = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, prev)


def _release_checkpoint(df) -> None:
    """Free the blocks of a locally checkpointed DataFrame (best effort; Spark's cleaner frees them anyway)."""
    try:
        df._jdf.queryExecution().analyzed().rdd().unpersist(False)
    except Exception:  # noqa: BLE001
        pass
