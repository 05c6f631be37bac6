"""Key → key group → partition in the JVM, and exact placement of every record on its routing entry's partition.

Three steps, none of which runs Python per record:

1. **key → key group**: ``pmod(xxhash64(key columns), G)`` with Spark's own ``xxhash64`` (seed 42, fixed by
   Spark). ``G`` defaults to 120 (many divisors; Flink's autoscaler recommends such maximum parallelisms so that
   key groups spread evenly over any divisor of G).
2. **key group → partition**: the routing table (G entries) becomes a column expression
   ``element_at(array(<G literals>), kg + 1)``: the whole table travels inside the query plan (a broadcast of a
   few hundred bytes) — or, with ``method="broadcast"``, a broadcast hash join with a (kg, pid, route) frame.
3. **exact placement**: ``DataFrame.repartition(n, col)`` places a row on ``pmod(murmur3_32(col, seed 42), n)``
   (Spark's ``HashPartitioning``). So the integration repartitions by a *route value* chosen so that its hash
   lands where the routing entry says: for key group ``k`` on partition ``p`` the route value is the smallest
   ``v = k + G·j`` (j = 0, 1, …) with ``pmod(hash(v), n) == p`` (a Python port of Spark's
   ``Murmur3_x86_32.hashInt``, checked against Spark in the tests). The key group stays recoverable as
   ``pmod(v, G)``, so a routed row carries one extra int column, not two, and ``repartition(n, route)`` lands every
   record on exactly the partition its routing entry names, at the cost of a plain hash repartitioning (one
   shuffle, no sampling, no Python). An explicit ``repartition(n, ...)`` is never coalesced by adaptive query
   execution. A downstream ``groupBy(route, key)`` needs no further shuffle (``HashPartitioning(route)``
   satisfies its clustering), which is how :mod:`rebalancer_client.spark.state` aggregates.

Why not the alternatives (measured in :mod:`benchmarks.bench_spark_routing`): ``repartitionByRange(n, pid)`` samples the
column to choose bounds, so a skewed or missing pid shifts the bounds and pid i does not land on partition i;
``rdd.partitionBy(n, lambda pid: pid)`` is exact but runs a Python function per record (and converts rows to
Python objects), which is many times slower.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: default number of key groups per operator (divisible by 1..6, 8, 10, 12, 15, 20, 24, 30, 40, 60)
DEFAULT_KEY_GROUPS = 120

#: column names the integration adds to a routed DataFrame
KG_COL = "_rb_kg"
PID_COL = "_rb_pid"
ROUTE_COL = "_rb_route"
#: columns of the keyed state: the latest batch's records, bytes and change of a row's size, and whether the
#: latest batch changed the row (in memory; never stored)
N_COL = "_rb_n"
B_COL = "_rb_b"
D_COL = "_rb_d"
TOUCHED_COL = "_rb_t"

_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an ``int`` column value (``Murmur3_x86_32.hashInt``), as a signed 32-bit int."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl32(k1, 15)
    k1 = k1 * 0x1B873593 & _M32
    h1 = (seed & _M32) ^ k1
    h1 = _rotl32(h1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


_PREIMAGES: dict[int, list[int]] = {}
_ROUTES: dict[tuple[int, int], np.ndarray] = {}


def hash_preimages(n: int) -> list[int]:
    """``out[p]`` = the smallest int v ≥ 0 with ``pmod(spark_hash_int(v), n) == p``, for p in [0, n)."""
    if n < 1:
        raise ValueError("the number of partitions must be >= 1")
    cached = _PREIMAGES.get(n)
    if cached is not None:
        return cached
    out: list[int | None] = [None] * n
    missing = n
    v = 0
    while missing:
        p = spark_hash_int(v) % n  # Python's % is non-negative for n > 0, like Spark's pmod
        if out[p] is None:
            out[p] = v
            missing -= 1
        v += 1
    _PREIMAGES[n] = out  # type: ignore[assignment]
    return out  # type: ignore[return-value]


def route_value_table(key_groups: int, n: int) -> np.ndarray:
    """(G, n) int table: ``out[k, p]`` = the smallest ``v = k + G·j`` with ``pmod(spark_hash_int(v), n) == p``.

    Expected cost O(G · n · log n) hash evaluations, computed once per (G, n) and cached.
    """
    if key_groups < 1 or n < 1:
        raise ValueError("key_groups and n must be >= 1")
    cached = _ROUTES.get((key_groups, n))
    if cached is not None:
        return cached
    out = np.full((key_groups, n), -1, dtype=np.int64)
    for k in range(key_groups):
        missing, j = n, 0
        while missing:
            v = k + key_groups * j
            p = spark_hash_int(v) % n
            if out[k, p] < 0:
                out[k, p] = v
                missing -= 1
            j += 1
            if v > 2**31 - 1 - key_groups:
                raise ValueError("no int route value found")  # cannot happen for sane G, n
    _ROUTES[(key_groups, n)] = out
    return out


def key_group_of_route(route_col: str | Column, key_groups: int) -> Column:
    """Column: the key group encoded in a route value (``pmod(route, G)``)."""
    from pyspark.sql import functions as F

    return F.pmod(_col(route_col), F.lit(key_groups)).cast("int")


def key_group_column(key: str | Column | Sequence[str | Column], key_groups: int = DEFAULT_KEY_GROUPS) -> Column:
    """Column expression ``pmod(xxhash64(key...), G)`` (int): the key group of a key, computed in the JVM.

    ``key`` is a column name, a Column, or a list of them (composite keys hash all columns).
    """
    from pyspark.sql import functions as F

    if key_groups < 1:
        raise ValueError("key_groups must be >= 1")
    cols = cast("list[str | Column]", list(key) if isinstance(key, (list, tuple)) else [key])
    return F.pmod(F.xxhash64(*cols), F.lit(key_groups)).cast("int")


def key_group_ids(operator: str, key_groups: int) -> list[str]:
    """The key group ids the controller knows: ``"<operator>/<k>"``."""
    return [f"{operator}/{k}" for k in range(key_groups)]


def contiguous(key_groups: int, n: int) -> np.ndarray:
    """Contiguous ranges of key groups per partition, as Flink assigns them: ``k → k * n // G``
    (``KeyGroupRangeAssignment.computeOperatorIndexForKeyGroup``)."""
    return np.arange(key_groups, dtype=np.int64) * n // key_groups


def partition_ids(n: int) -> list[str]:
    """The node ids of a Spark job's partitions: ``p0 .. p{n-1}``."""
    return [f"p{i}" for i in range(n)]


@dataclass
class RoutingTable:
    """The routing of one keyed operator: key group ``k`` → partition ``partition_of[k]`` of ``n_partitions``.

    Attributes:
        operator: the operator name (key group ids are ``"<operator>/<k>"``).
        partition_of: (G,) int array.
        n_partitions: the number of Spark partitions (= controller nodes ``p0..p{n-1}``).
        epoch: the controller epoch this routing belongs to.
    """

    operator: str
    partition_of: np.ndarray
    n_partitions: int
    epoch: int = 0

    def __post_init__(self) -> None:
        self.partition_of = np.asarray(self.partition_of, dtype=np.int64)
        if self.n_partitions < 1:
            raise ValueError("n_partitions must be >= 1")
        if self.partition_of.ndim != 1 or len(self.partition_of) == 0:
            raise ValueError("partition_of must be a non-empty 1-d array")
        if self.partition_of.min() < 0 or self.partition_of.max() >= self.n_partitions:
            raise ValueError("partition_of entries must be in [0, n_partitions)")

    # ------------------------------------------------------------------ construction
    @property
    def key_groups(self) -> int:
        return len(self.partition_of)

    @classmethod
    def contiguous(cls, operator: str, key_groups: int, n_partitions: int, epoch: int = 0) -> RoutingTable:
        """Contiguous ranges of key groups per partition, as Flink assigns them (:func:`contiguous`)."""
        return cls(operator, contiguous(key_groups, n_partitions), n_partitions, epoch)

    def moved(self, other: RoutingTable) -> np.ndarray:
        """Indices of the key groups whose partition differs between this table and ``other``."""
        return np.flatnonzero(self.partition_of != other.partition_of)

    # ------------------------------------------------------------------ JVM expressions
    def route_values(self) -> list[int]:
        """Per key group k, its route value: ``k + G·j`` hashing to its partition (what ``repartition`` hashes)."""
        table = route_value_table(self.key_groups, self.n_partitions)
        return [int(table[k, int(p)]) for k, p in enumerate(self.partition_of)]

    def partition_column(self, kg_col: str | Column = KG_COL) -> Column:
        """Column: the partition id of a row's key group (``element_at`` on a literal array; no Python)."""
        from pyspark.sql import functions as F

        return F.element_at(_int_array(self.partition_of), _col(kg_col) + 1)

    def route_column(self, kg_col: str | Column = KG_COL) -> Column:
        """Column: the route value of a row's key group (repartition by it to land exactly)."""
        from pyspark.sql import functions as F

        return F.element_at(_int_array(self.route_values()), _col(kg_col) + 1)

    def frame(self, spark: SparkSession) -> DataFrame:
        """The routing table as a small DataFrame ``(_rb_kg, _rb_pid, _rb_route)`` (for broadcast joins)."""
        pairs = zip(self.partition_of, self.route_values(), strict=True)
        rows = [(k, int(p), int(v)) for k, (p, v) in enumerate(pairs)]
        return spark.createDataFrame(rows, f"{KG_COL} int, {PID_COL} int, {ROUTE_COL} int")

    def route(self, df: DataFrame, key: str | Sequence[str], *, method: str = "expr", with_pid: bool = True,
              with_kg: bool = True) -> DataFrame:
        """Add ``_rb_route`` (and ``_rb_kg``, ``_rb_pid`` when asked) to ``df``.

        ``method="expr"`` uses literal-array lookups; ``"broadcast"`` joins the broadcast routing frame.
        """
        from pyspark.sql import functions as F

        if method == "expr":
            kg = key_group_column(key, self.key_groups)
            out = df
            if with_kg or with_pid:
                out = out.withColumn(KG_COL, kg)
                kg = F.col(KG_COL)
            if with_pid:
                out = out.withColumn(PID_COL, self.partition_column(kg))
            out = out.withColumn(ROUTE_COL, self.route_column(kg))
            return out if with_kg or not with_pid else out.drop(KG_COL)
        if method == "broadcast":
            table = self.frame(df.sparkSession)
            if not with_pid:
                table = table.drop(PID_COL)
            out = df.withColumn(KG_COL, key_group_column(key, self.key_groups))
            out = out.join(F.broadcast(table), on=KG_COL, how="left")
            return out if with_kg else out.drop(KG_COL)
        raise ValueError(f"unknown routing method {method!r}; expected 'expr' or 'broadcast'")

    def place(self, routed_df: DataFrame) -> DataFrame:
        """Repartition a routed DataFrame so that every row sits on partition ``partition_of[kg]`` exactly."""
        return routed_df.repartition(self.n_partitions, ROUTE_COL)

    def route_and_place(self, df: DataFrame, key: str | Sequence[str], *, method: str = "expr",
                        with_pid: bool = False, with_kg: bool = False) -> DataFrame:
        """:meth:`route` then :meth:`place` (by default only ``_rb_route`` travels through the shuffle)."""
        return self.place(self.route(df, key, method=method, with_pid=with_pid, with_kg=with_kg))


def _col(c: str | Column) -> Column:
    from pyspark.sql import functions as F

    return F.col(c) if isinstance(c, str) else c


def _int_array(values: Iterable[Any]) -> Column:
    """Column: a literal ``array<int>`` of ``values``, built by one SQL expression (one JVM call instead of one
    ``lit`` per element: ~0.15 s per batch for 120 key groups through py4j)."""
    from pyspark.sql import functions as F

    return F.expr("array(" + ",".join(str(int(v)) for v in values) + ")")
