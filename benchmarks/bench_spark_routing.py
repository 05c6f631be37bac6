"""What exact placement costs: routed placement vs Spark's plain hash repartitioning on a uniform stream.

``python -m benchmarks.bench_spark_routing [--rows N] [--repeats R] [--quick]`` writes
``bench-results/spark_routing.json``.

Measured (median of ``repeats`` interleaved runs, each a full execution to a ``noop`` sink, from a cached input):

* ``hash``:   ``df.repartition(n, key).groupBy(key).agg(count, sum)`` — what Spark does by itself;
* ``routed``: key → key group (``xxhash64``) → route value (literal routing table) → ``repartition(n, route)``
  → ``groupBy(route, key).agg(count, sum)`` — the integration's path (no extra shuffle);
* ``routed_broadcast``: the same with a broadcast-joined routing frame instead of the literal array;
* ``rdd_partitionBy`` (smaller input, Python per record): ``rdd.map(row → (pid, row)).partitionBy(n, identity)``;
* exactness of ``repartitionByRange(n, pid)`` under a skewed routing table with a drained partition (share of rows
  not on partition pid).

``routing_overhead`` = the median over repeats of routed/hash − 1, each pair run back to back (robust to other
processes on a shared machine); ``routing_overhead_of_medians`` = median(routed)/median(hash) − 1 and
``routing_overhead_min`` = fastest(routed)/fastest(hash) − 1 are reported beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def _run(df) -> float:
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def measure_overhead(spark, *, rows: int = 1_000_000, keys: int = 100_000, partitions: int = 8,
                     key_groups: int = 120, repeats: int = 5, rdd_rows: int = 100_000, log=None) -> dict:
    """Run the comparison on ``spark``; returns the result document (times in seconds)."""
    from pyspark.sql import functions as F

    from rebalancer_client.spark.routing import PID_COL, ROUTE_COL, RoutingTable

    say = log or (lambda *a: None)
    rng = np.random.default_rng(0)
    table = RoutingTable("agg", rng.integers(0, partitions, key_groups), partitions)
    src = (spark.range(0, rows, numPartitions=partitions)
           .select(F.concat(F.lit("u"), (F.xxhash64("id") % keys).cast("string")).alias("key"),
                   (F.col("id") % 100).alias("v"))
           .persist())
    src.count()

    def hash_q():
        return src.repartition(partitions, "key").groupBy("key").agg(F.count(F.lit(1)).alias("n"),
                                                                     F.sum("v").alias("s"))

    def routed_q(method="expr"):
        placed = table.route_and_place(src, "key", method=method)
        return placed.groupBy(ROUTE_COL, "key").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"))

    variants = {"hash": hash_q, "routed": routed_q, "routed_broadcast": lambda: routed_q("broadcast")}
    for q in variants.values():  # warm-up (code generation, JIT)
        _run(q())
    times: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(repeats):
        for name, q in variants.items():
            times[name].append(_run(q()))
        say(f"overhead repeat {r + 1}/{repeats}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items()))
    med = {k: statistics.median(v) for k, v in times.items()}

    # RDD partitionBy with an identity partition function: exact, but Python per record
    small = src.limit(rdd_rows).persist()
    small.count()
    routed_small = table.route(small, "key")

    def rdd_run() -> float:
        t0 = time.perf_counter()
        (routed_small.rdd.map(lambda row: (row[PID_COL], row)).partitionBy(partitions, lambda pid: pid)
         .map(lambda kv: 1).count())
        return time.perf_counter() - t0

    def routed_small_run() -> float:
        return _run(table.place(table.route(small, "key", with_pid=False)))

    rdd_run()
    rdd_t = statistics.median([rdd_run() for _ in range(max(1, repeats // 2))])
    rs_t = statistics.median([routed_small_run() for _ in range(max(1, repeats // 2))])
    rdd_ok = (routed_small.rdd.map(lambda row: (row[PID_COL], row)).partitionBy(partitions, lambda pid: pid)
              .mapPartitionsWithIndex(lambda i, it: [sum(1 for kv in it if kv[0] != i)]).sum()) == 0

    # repartitionByRange on the pid column under a skewed table — half the key groups on partition 0, none on
    # partition 1 (a drained node), the rest on 2..n-1: does pid i land on partition i? A range partitioner's bounds
    # are values of its sample, so pid 2 lands on partition 0 or 1 whatever the sample (with a pid on every
    # partition the bounds can come out as the identity: the sample's seed is the RDD's id, which depends on what
    # ran before in the application)
    skewed = RoutingTable("agg", np.where(np.arange(key_groups) < key_groups // 2, 0,
                                          rng.integers(2, partitions, key_groups)), partitions)
    by_range = skewed.route(src, "key").repartitionByRange(partitions, PID_COL)
    wrong = by_range.select((F.col(PID_COL) != F.spark_partition_id()).cast("int").alias("w")).agg(
        F.sum("w"), F.count(F.lit(1))).collect()[0]
    exact = skewed.place(skewed.route(src, "key"))
    wrong_exact = exact.select((F.col(PID_COL) != F.spark_partition_id()).cast("int").alias("w")).agg(
        F.sum("w")).collect()[0][0]
    small.unpersist()
    src.unpersist()
    return {
        "rows": rows, "keys": keys, "partitions": partitions, "key_groups": key_groups, "repeats": repeats,
        "seconds": {k: round(v, 4) for k, v in med.items()},
        "all_seconds": {k: [round(x, 4) for x in v] for k, v in times.items()},
        "routing_overhead": round(statistics.median(
            r / h for r, h in zip(times["routed"], times["hash"], strict=True)) - 1, 4),
        "routing_overhead_of_medians": round(med["routed"] / med["hash"] - 1, 4),
        "routing_overhead_min": round(min(times["routed"]) / min(times["hash"]) - 1, 4),
        "routing_overhead_broadcast": round(statistics.median(
            r / h for r, h in zip(times["routed_broadcast"], times["hash"], strict=True)) - 1, 4),
        "rdd_partitionBy": {"rows": rdd_rows, "seconds": round(rdd_t, 4), "routed_seconds": round(rs_t, 4),
                            "slowdown_vs_routed": round(rdd_t / rs_t, 2), "exact": bool(rdd_ok)},
        "repartitionByRange_skewed": {"rows_on_wrong_partition": int(wrong[0] or 0), "rows": int(wrong[1]),
                                      "share_wrong": round(float(wrong[0] or 0) / float(wrong[1]), 4)},
        "routed_skewed_rows_on_wrong_partition": int(wrong_exact or 0),
    }


def spark_session(partitions: int = 8, app: str = "rebalancer-spark", arrow: bool = True):
    """The benchmarks' local SparkSession: ``local[2]``, no UI, 2 GB of driver memory, ``partitions`` shuffle
    partitions, Arrow for pandas conversions unless ``arrow`` is False (``bench_spark_state`` measures without)."""
    import os

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers run in this interpreter's env
    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", str(partitions))
               .config("spark.driver.memory", "2g"))
    if arrow:
        builder = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_spark_routing", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="200k rows, 3 repeats")
    ap.add_argument("--output", default="bench-results/spark_routing.json")
    args = ap.parse_args(argv)
    rows, repeats = (200_000, 3) if args.quick else (args.rows, args.repeats)
    spark = spark_session()
    res = measure_overhead(spark, rows=rows, repeats=repeats, log=lambda m: print(m, file=sys.stderr))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
