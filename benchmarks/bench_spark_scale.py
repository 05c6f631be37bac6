"""Changing a running Spark query's parallelism with its state placed by load: 8 → 12 partitions at a restart, then
12 → 6 between two batches, side by side with what Spark itself does.

``python -m benchmarks.bench_spark_scale [--quick] [--batches 5] [--rows 25000] [--output
bench-results/spark_scale.json]``

One stream (file source, one Parquet file per micro-batch, ``local[2]``; users ``u<rank>`` from Zipf(0.9) over
200k ranks, 120 key groups) runs through :class:`rebalancer_client.spark.driver.RebalancingDriver` with durable state
and a controller (``albic-milp``, automatic mode) started as a subprocess:

1. ``--batches`` batches on 8 partitions;
2. the query is restarted on the same checkpoint with 12 partitions: the controller places the key groups on the
   new node set by load (a full rebalance: ``POST /v1/jobs/{id}/scale``) before the state is read;
3. after ``--batches`` more batches, ``driver.scale(6)`` between two batches; ``--batches`` more batches.

Per change: max/mean records per partition of the first batch after it (target ≤ 1.10), Spark's hash
partitioning of the same batch at the same partition count (what a re-hash would give), the state bytes moved
(the key groups that change place: the controller's count, and for the change between batches the bytes measured
on the partitions Spark produced) against a full reshuffle (the state bytes of the keys whose hash partition
changes from the old count to the new one: what Spark's offline repartitioning moves), and the state of the whole
run against a direct count of the input. Spark's own stateful aggregation runs on the same files with 8 shuffle
partitions and is restarted with ``spark.sql.shuffle.partitions=12``: its state keeps the checkpoint's 8
partitions (reported from its progress). Writes JSON and a PNG (max/mean per batch, bytes moved per change).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import scratch
from benchmarks.spark_demo import start_controller, zipf_batches

AGGS = {"count": ("count", None), "total": ("sum", "v")}


def full_reshuffle_bytes(state: Any, keys: str, before: int, after: int) -> tuple[int, int]:
    """(state bytes of the keys whose Spark hash partition ``pmod(hash(key), n)`` changes from ``before`` to
    ``after`` partitions, all state bytes): what re-hashing the state to the new count moves."""
    from pyspark.sql import functions as F

    from rebalancer_client.spark.stats import row_bytes_column

    size = row_bytes_column(state, [keys, *AGGS])
    moved = F.when(F.expr(f"pmod(hash({keys}), {before}) != pmod(hash({keys}), {after})"), size).otherwise(0)
    row = state.agg(F.sum(moved).alias("moved"), F.sum(size).alias("all")).collect()[0]
    return int(row["moved"] or 0), int(row["all"] or 0)


def builtin_partitions(spark: Any, src: Path, chk: Path, partitions: int) -> int:
    """Spark's streaming aggregation over ``src`` with ``spark.sql.shuffle.partitions=partitions`` on checkpoint
    ``chk``: the number of state partitions its last batch ran with."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    stream = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(str(src))
    agg = stream.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("total"))
    q = (agg.writeStream.outputMode("update").format("noop").trigger(availableNow=True)
         .option("checkpointLocation", str(chk)).start())
    q.awaitTermination()
    ops = [p["stateOperators"] for p in q.recentProgress if p.get("stateOperators")]
    return int(ops[-1][0]["numShufflePartitions"]) if ops else -1


def run_phase(spark: Any, driver: Any, src: Path, chk: Path) -> None:
    stream = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(str(src))
    q = (stream.writeStream.foreachBatch(driver.foreach_batch).trigger(availableNow=True)
         .option("checkpointLocation", str(chk)).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise RuntimeError(f"streaming query failed: {q.exception()}")


def state_exact(driver: Any, src: Path) -> bool:
    """The driver's state equals a direct count of every input file (count and sum per key)."""
    import pandas as pd

    exp = pd.read_parquet(src).groupby("key")["v"].agg(["size", "sum"]).sort_index()
    got = driver.state_frame().toPandas().set_index("key").sort_index()
    return bool(got.index.equals(exp.index) and (got["count"].to_numpy() == exp["size"].to_numpy()).all()
                and (got["total"].to_numpy() == exp["sum"].to_numpy()).all())


def plot(doc: dict[str, Any], path: Path) -> None:
    from benchmarks.plotting import pyplot

    plt = pyplot()
    if plt is None:
        return
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [2, 1]})
    rows = doc["batches"]
    xs = [r["batch_id"] for r in rows]
    ax.plot(xs, [r["rebalanced_max_over_mean"] for r in rows], "o-", label="placed by load (Rebalancer)")
    ax.plot(xs, [r["hash_max_over_mean"] for r in rows], "s--", label="Spark hash partitioning, same count")
    for ch in doc["changes"]:
        ax.axvline(ch["first_batch"] - 0.5, color="grey", lw=1)
        ax.annotate(f"{ch['before']}→{ch['after']} ({ch['when']})", (ch["first_batch"] - 0.45, 1.02),
                    fontsize=8, color="grey")
    ax.axhline(1.10, color="red", lw=0.8, ls=":", label="target 1.10")
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("max / mean records per partition")
    ax.legend(fontsize=8)
    labels = [f"{c['before']}→{c['after']}" for c in doc["changes"]]
    width = 0.38
    pos = range(len(labels))
    bx.bar([p - width / 2 for p in pos], [c["moved_bytes"] / 1e6 for c in doc["changes"]], width,
           label="moved (key groups that change place)")
    bx.bar([p + width / 2 for p in pos], [c["full_reshuffle_bytes"] / 1e6 for c in doc["changes"]], width,
           label="Spark re-hash of the state")
    bx.set_xticks(list(pos), labels)
    bx.set_ylabel("state MB")
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def change(when: str, before: int, after: int, first: Any, moved: float, reshuffle: tuple[int, int],
           measured: int | None = None) -> dict[str, Any]:
    """One change's figures: the first batch after it, the bytes moved against a full reshuffle."""
    return {"when": when, "before": before, "after": after, "first_batch": first.batch_id,
            "first_max_over_mean": round(first.rebalanced_max_over_mean, 4),
            "first_hash_max_over_mean": round(first.hash_max_over_mean, 4), "moved_bytes": int(moved),
            "moved_bytes_measured": measured, "full_reshuffle_bytes": reshuffle[0], "state_bytes": reshuffle[1],
            "moved_share_of_reshuffle": round(moved / reshuffle[0], 4) if reshuffle[0] else None}


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Run the three phases and Spark's own aggregation; returns the reports and the figures of each change."""
    from benchmarks.bench_spark_routing import spark_session
    from rebalancer_client import RebalancerClient
    from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
    from rebalancer_client.spark.driver import RebalancingDriver

    proc = start_controller(work / "rebalancer.db")
    spark = spark_session(8)
    client = RebalancerClient(proc.url, timeout=30, retries=1)
    P = args.batches
    src, chk = work / "src", work / "chk"
    (work / "all").mkdir()
    every = zipf_batches(work / "all", batches=3 * P, rows=args.rows, keys=args.keys, z=args.zipf, seed=5)
    src.mkdir()
    out: dict[str, Any] = {}
    try:
        def driver(partitions: int, on_batch: Any = None) -> Any:
            d = RebalancingDriver(spark, key="key", aggregations=AGGS, key_groups=120, partitions=partitions,
                                  measure_hash=True, on_batch=on_batch, durability=DurabilityConfig(str(chk)),
                                  controller=ControllerConfig(client, "scale", algorithm="albic-milp",
                                                              window_batches=2, time_limit_s=2.0))
            d.start()
            return d

        for f in every[:P]:
            f.rename(src / f.name)
        print(f"phase 1: {P} batches on 8 partitions ...", file=sys.stderr, flush=True)
        d8 = driver(8)
        run_phase(spark, d8, src, chk)
        out["restart"] = full_reshuffle_bytes(d8.state_frame(), "key", 8, 12)
        out["reports"] = list(d8.reports)
        d8.close()

        def on_batch(r: Any) -> None:
            if r.batch_id == 2 * P - 1:  # between this batch and the next: 12 -> 6
                out["between"] = full_reshuffle_bytes(d12.state_frame(), "key", 12, 6)
                out["scaled"] = d12.scale(6)

        for f in every[P:]:
            f.rename(src / f.name)
        print(f"phase 2-3: restart on 12 partitions, {P} batches, scale to 6, {P} batches ...", file=sys.stderr,
              flush=True)
        d12 = driver(12, on_batch)
        out["restart_epoch"] = next(e for e in client.history("scale").epochs if e.kind == "scale")
        run_phase(spark, d12, src, chk)
        out["reports"] += d12.reports
        out["exact"] = state_exact(d12, src)
        d12.close()
        print("Spark's own aggregation: 8 partitions, restarted with 12 ...", file=sys.stderr, flush=True)
        builtin_src = work / "builtin-src"
        builtin_src.mkdir()
        files = sorted(src.iterdir())
        for f in files[:P]:
            (builtin_src / f.name).write_bytes(f.read_bytes())
        out["spark_before"] = builtin_partitions(spark, builtin_src, work / "builtin-chk", 8)
        for f in files[P:2 * P]:
            (builtin_src / f.name).write_bytes(f.read_bytes())
        out["spark_after"] = builtin_partitions(spark, builtin_src, work / "builtin-chk", 12)
    finally:
        spark.stop()
        proc.stop()
    return out


def document(args: argparse.Namespace, m: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The benchmark's JSON document from :func:`measure`'s results."""
    P = args.batches
    by_id = {r.batch_id: r for r in m["reports"] if not r.replayed}
    restart, scaled, between = m["restart_epoch"], m["scaled"], by_id[2 * P]
    changes = [change("restart", 8, 12, by_id[P], restart.metrics.migration_bytes if restart.metrics else 0,
                      m["restart"]),
               change("between batches", 12, 6, between, scaled.metrics.migration_bytes if scaled else 0,
                      m["between"], measured=between.moved_bytes)]
    return {
        "config": {"batches_per_phase": P, "rows": args.rows, "keys": args.keys, "zipf": args.zipf,
                   "key_groups": 120, "master": "local[2]", "algorithm": "albic-milp", "budget": None,
                   "window_batches": 2, "quick": args.quick},
        "batches": [{"batch_id": r.batch_id, "partitions": len(r.partition_records), "epoch": r.epoch,
                     "rebalanced_max_over_mean": round(r.rebalanced_max_over_mean, 4),
                     "hash_max_over_mean": round(r.hash_max_over_mean or float("nan"), 4),
                     "migrations": r.migrations, "moved_bytes": r.moved_bytes, "seconds": round(r.seconds, 3)}
                    for r in sorted(by_id.values(), key=lambda r: r.batch_id)],
        "changes": changes,
        "state_exact": m["exact"],
        "spark_builtin": {"state_partitions_first_run": m["spark_before"],
                          "state_partitions_after_restart_with_12": m["spark_after"]},
        "targets": {"first_batch_max_over_mean_le_1_10": all(c["first_max_over_mean"] <= 1.10 for c in changes),
                    "state_exact": m["exact"],
                    "moved_less_than_full_reshuffle": all(c["moved_bytes"] < c["full_reshuffle_bytes"]
                                                          for c in changes)},
        "mean_batch_seconds": round(statistics.mean(r.seconds for r in by_id.values()), 3),
        "seconds": round(seconds, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_spark_scale", description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=5, help="batches per phase (three phases)")
    ap.add_argument("--rows", type=int, default=25_000)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--zipf", type=float, default=0.9)
    ap.add_argument("--quick", action="store_true", help="3 batches per phase of 12k records")
    ap.add_argument("--output", default="bench-results/spark_scale.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.rows = min(args.batches, 3), min(args.rows, 12_000)
    t_start = time.perf_counter()
    with scratch("bench-spark-scale-") as work:
        doc = document(args, measure(args, work), time.perf_counter() - t_start)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    plot(doc, out.with_suffix(".png"))
    for c in doc["changes"]:
        print(f"{c['before']:>2} -> {c['after']:<2} ({c['when']}): first batch max/mean {c['first_max_over_mean']} "
              f"(Spark hash {c['first_hash_max_over_mean']}); moved {c['moved_bytes']} bytes vs a re-hash "
              f"{c['full_reshuffle_bytes']} of {c['state_bytes']}")
    sb = doc["spark_builtin"]
    print(f"state exact: {doc['state_exact']}; Spark's own state: {sb['state_partitions_first_run']} partitions, "
          f"after a restart with 12: {sb['state_partitions_after_restart_with_12']}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
