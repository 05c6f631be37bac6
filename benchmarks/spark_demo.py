"""``make demo``: a skewed streaming aggregation on local Spark, rebalanced by the controller, batch after batch.

``python -m benchmarks.spark_demo [--quick] [--batches 20] [--rows 50000] [--keys 1000000] [--zipf 1.1] ...``

1. starts the controller (``python -m cli.main serve`` on a free port, a temporary SQLite database);
2. writes ``--batches`` Parquet files of Zipf(z = 1.1) keys and streams them (file source, one file per
   micro-batch, ``trigger(availableNow=True)``);
3. a :class:`rebalancer_client.spark.driver.RebalancingDriver` keeps a keyed count/sum per key in ``foreachBatch``,
   routed by the controller's routing table (8 partitions, 120 key groups); the controller plans with ``--algorithm``
   under the budget, the driver applies each plan at the next batch boundary;
4. per batch it prints max/mean records per partition for Spark's hash partitioning (the same batch,
   ``repartition(8, key)``) and for the routing, the migrations and the state bytes moved — every figure measured
   on the partitions Spark produced (``spark_partition_id()``);
5. measures the routing overhead against plain hash repartitioning on a uniform stream
   (:func:`benchmarks.bench_spark_routing.measure_overhead`);
6. writes ``bench-results/spark_demo.json`` and ``bench-results/spark_demo.png``.

The table goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import scratch
from tests.helpers.server import ServerProcess


def start_controller(db_path: Path, port: int | None = None) -> ServerProcess:
    """``rebalancer serve`` on ``port`` (default: a free one) of 127.0.0.1 with the SQLite file ``db_path``, once
    ``/healthz`` answers (:class:`tests.helpers.server.ServerProcess`, the one way tests and benchmarks start a
    server; its ``stop()`` ends the server and its solver workers)."""
    return ServerProcess(f"sqlite:///{db_path}", test_settings=False, port=port).start()


def zipf_batches(out_dir: Path, *, batches: int, rows: int, keys: int, z: float, seed: int = 1) -> list[Path]:
    """Write ``batches`` Parquet files of ``rows`` records each; keys ``u<rank>`` drawn from Zipf(z) over ``keys``
    ranks (exact discrete distribution, truncated at ``keys``), values uniform in [0, 100)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    p = np.arange(1, keys + 1, dtype=np.float64) ** -z
    cdf = np.cumsum(p / p.sum())
    files = []
    for b in range(batches):
        ranks = np.searchsorted(cdf, rng.random(rows), side="right") + 1
        ranks = np.minimum(ranks, keys)
        pdf = pd.DataFrame({"key": np.char.add("u", ranks.astype(str)), "v": rng.integers(0, 100, rows)})
        path = out_dir / f"batch-{b:04d}.parquet"
        pdf.to_parquet(path, index=False)
        files.append(path)
    return files


def figure(doc: dict, plt) -> object:
    """The demo's figure: max/mean records per partition per batch (hash vs routing) and the migrations, with a
    caption saying why the routing starts where it does."""
    from matplotlib.ticker import MaxNLocator

    cfg = doc["config"]
    b = [r["batch_id"] for r in doc["batches"]]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6.6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax1.plot(b, [r["hash_max_over_mean"] for r in doc["batches"]], "o-", label="Spark hash partitioning")
    ax1.plot(b, [r["rebalanced_max_over_mean"] for r in doc["batches"]], "s-", label="Rebalancer routing")
    ax1.axhline(1.10, color="grey", ls="--", lw=1, label="1.10")
    ax1.set_ylabel("max / mean records per partition")
    ax1.set_title(f"Zipf z={cfg['zipf']}, {cfg['partitions']} partitions, {cfg['key_groups']} key groups, "
                  f"{cfg['algorithm']}")
    ax1.legend(loc="upper right")
    ax1.grid(alpha=0.3)
    ax2.bar(b, [r["migrations"] for r in doc["batches"]], color="tab:orange")
    ax2.set_ylabel("migrations")
    ax2.set_xlabel("micro-batch")
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.grid(alpha=0.3)
    first = next((r["batch_id"] for r in doc["batches"] if r["epoch"] > 0), None)
    per = cfg["key_groups"] // cfg["partitions"]
    applied = f"the first plan is applied from batch {first}" if first is not None else "no plan was applied"
    fig.text(0.01, 0.01,
             f"Until the first plan the routing is the initial layout: the {cfg['key_groups']} key groups (keys hashed "
             f"to key groups) in contiguous ranges of {per} per partition,\na hash placement of its own, no better "
             f"than Spark's by design. The controller plans once its window holds {cfg['window_batches']} batches; "
             f"{applied}.", fontsize=7.5, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = figure(doc, plt)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(args: argparse.Namespace, reports: list[Any], *, budget: dict[str, Any], overhead: dict[str, Any] | None,
              state_ok: bool, fallback_merges: int, seconds: float) -> dict[str, Any]:
    """The demo's JSON document: per batch figures, the summary after convergence and the targets."""
    rows = [{"batch_id": r.batch_id, "epoch": r.epoch, "records": r.records,
             "hash_max_over_mean": round(r.hash_max_over_mean, 4),
             "rebalanced_max_over_mean": round(r.rebalanced_max_over_mean, 4),
             "migrations": r.migrations, "moved_bytes": r.moved_bytes, "moved_rows": r.moved_rows,
             "state_bytes": r.state_bytes, "hash_partition_records": r.hash_partition_records,
             "partition_records": r.partition_records, "controller": r.controller,
             "seconds": round(r.seconds, 3)} for r in reports]
    tail = rows[-5:] if len(rows) >= 5 else rows
    conv_reb = statistics.mean(r["rebalanced_max_over_mean"] for r in tail)
    conv_hash = statistics.mean(r["hash_max_over_mean"] for r in tail)
    first_ok = next((r["batch_id"] for r in rows if r["rebalanced_max_over_mean"] <= 1.10), None)
    within = all(r["migrations"] <= args.max_migrations and
                 (args.max_migration_bytes is None or r["moved_bytes"] <= args.max_migration_bytes)
                 for r in rows)
    doc = {
        "config": {"batches": args.batches, "rows_per_batch": args.rows, "keys": args.keys, "zipf": args.zipf,
                   "partitions": args.partitions, "key_groups": args.key_groups, "algorithm": args.algorithm,
                   "window_batches": args.window, "time_limit_s": args.time_limit, "quick": args.quick,
                   "auto": args.auto},
        "budget": budget,
        "batches": rows,
        "summary": {
            "converged_over_last_batches": len(tail),
            "hash_max_over_mean": round(conv_hash, 4),
            "rebalanced_max_over_mean": round(conv_reb, 4),
            "first_batch_at_or_below_1_10": first_ok,
            "total_migrations": sum(r["migrations"] for r in rows),
            "total_moved_bytes": sum(r["moved_bytes"] for r in rows),
            "every_round_within_budget": within,
            "state_equals_input": state_ok,
            "state_fallback_merges": fallback_merges,
            "controller_statuses": sorted({r["controller"] for r in rows}),
            "mean_batch_seconds": round(statistics.mean(r["seconds"] for r in rows), 3),
        },
        "targets": {
            "rebalanced_max_over_mean_le_1_10": conv_reb <= 1.10,
            "hash_max_over_mean_ge_1_5": conv_hash >= 1.5,
            "state_moved_within_budget": within,
            "routing_overhead_le_15pct": None if overhead is None else overhead["routing_overhead"] <= 0.15,
        },
        "overhead": overhead,
        "seconds": round(seconds, 1),
    }
    return doc


def run_driver(args: argparse.Namespace, spark: Any, client: Any, budget: dict[str, Any], src: Path,
               checkpoint: Path) -> tuple[Any, bool]:
    """The demo's stream through a :class:`RebalancingDriver` (one line per batch on stdout); returns the driver and
    whether its state equals the input (sum of counts = records, one row per key)."""
    from pyspark.sql import functions as F

    from rebalancer_client.spark.config import ControllerConfig
    from rebalancer_client.spark.driver import RebalancingDriver

    header = (f"{'batch':>5} {'epoch':>5} {'records':>8} {'hash max/mean':>14} {'rebalanced':>11} "
              f"{'migrations':>10} {'moved bytes':>12} {'controller':>10} {'seconds':>8}")
    print(header, flush=True)

    def on_batch(r) -> None:
        print(f"{r.batch_id:>5} {r.epoch:>5} {r.records:>8} {r.hash_max_over_mean:>14.3f} "
              f"{r.rebalanced_max_over_mean:>11.3f} {r.migrations:>10} {r.moved_bytes:>12} "
              f"{r.controller:>10} {r.seconds:>8.2f}", flush=True)

    driver = RebalancingDriver(
        spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")}, operator="agg",
        key_groups=args.key_groups, partitions=args.partitions, measure_hash=True, on_batch=on_batch,
        controller=ControllerConfig(client, "spark-demo", algorithm=args.algorithm, budget=budget,
                                    window_batches=args.window, time_limit_s=args.time_limit, auto=args.auto,
                                    policy={"cooldown_batches": 1}))
    driver.start()
    stream = (spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1)
              .parquet(str(src)))
    query = (stream.writeStream.foreachBatch(driver.foreach_batch).trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint)).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"streaming query failed: {query.exception()}")

    st = driver.state_frame().agg(F.sum("count").alias("n"), F.count(F.lit(1)).alias("keys"),
                                  F.countDistinct("key").alias("distinct")).collect()[0]
    state_ok = int(st["n"]) == args.batches * args.rows and int(st["keys"]) == int(st["distinct"])
    return driver, state_ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.spark_demo", description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--rows", type=int, default=50_000, help="records per micro-batch")
    ap.add_argument("--keys", type=int, default=1_000_000, help="key domain (Zipf ranks)")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--key-groups", type=int, default=120)
    ap.add_argument("--algorithm", default="albic-milp")
    ap.add_argument("--max-migrations", type=int, default=12, help="budget: key groups moved per round")
    ap.add_argument("--max-migration-bytes", type=float, default=None, help="budget: state bytes per round")
    ap.add_argument("--window", type=int, default=2, help="statistics window in batches")
    ap.add_argument("--auto", action="store_true",
                    help="let the controller decide rounds itself (auto mode: the plan comes with the stats answer)")
    ap.add_argument("--time-limit", type=float, default=1.0, help="solver time limit per round (s)")
    ap.add_argument("--overhead-rows", type=int, default=1_000_000)
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--quick", action="store_true", help="10 batches of 20k records, a smaller overhead run")
    ap.add_argument("--controller", default=None, help="use a running controller at this URL instead")
    ap.add_argument("--port", type=int, default=None,
                    help="port of the controller the demo starts (default: a free one; make demo DEMO_PORT=N)")
    ap.add_argument("--output", default="bench-results/spark_demo.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.rows, args.overhead_rows = min(args.batches, 10), min(args.rows, 20_000), 200_000

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    from benchmarks.bench_spark_routing import measure_overhead, spark_session
    from rebalancer_client import RebalancerClient

    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with scratch("rebalancer-demo-") as tmp:
        proc = None
        t_start = time.perf_counter()
        try:
            if args.controller:
                url = args.controller
            else:
                say("starting the controller ...")
                proc = start_controller(tmp / "rebalancer.db", args.port)
                url = proc.url
            say(f"controller at {url}; writing {args.batches} batches of {args.rows} Zipf(z={args.zipf}) records ...")
            src = tmp / "events"
            src.mkdir()
            zipf_batches(src, batches=args.batches, rows=args.rows, keys=args.keys, z=args.zipf)

            spark = spark_session(args.partitions)
            client = RebalancerClient(url, timeout=max(5.0, 3 * args.time_limit), retries=2, backoff=0.1)
            budget = {"max_migrations": args.max_migrations, "max_migration_bytes": args.max_migration_bytes}
            driver, state_ok = run_driver(args, spark, client, budget, src, tmp / "checkpoint")

            overhead = None
            if not args.skip_overhead:
                say(f"routing overhead on a uniform stream ({args.overhead_rows} records) ...")
                overhead = measure_overhead(spark, rows=args.overhead_rows, partitions=args.partitions,
                                            key_groups=args.key_groups, repeats=3 if args.quick else 7, log=say)

            doc = summarise(args, driver.reports, budget=budget, overhead=overhead, state_ok=state_ok,
                            fallback_merges=driver.state.fallback_merges, seconds=time.perf_counter() - t_start)
            within, tail = doc["summary"]["every_round_within_budget"], doc["summary"]["converged_over_last_batches"]
            out.write_text(json.dumps(doc, indent=2) + "\n")
            png = out.with_suffix(".png")
            plot(doc, png)
            s = doc["summary"]
            print(f"\nafter convergence (mean of the last {tail} batches): hash {s['hash_max_over_mean']:.3f}, "
                  f"rebalanced {s['rebalanced_max_over_mean']:.3f}; migrations {s['total_migrations']} "
                  f"({s['total_moved_bytes']} state bytes), every round within budget: {within}; "
                  f"state equals input: {state_ok}")
            if overhead is not None:
                print(f"routing overhead vs plain hash repartitioning (uniform stream, {overhead['rows']} records, "
                      f"median of {overhead['repeats']} paired runs): {100 * overhead['routing_overhead']:+.1f}% "
                      f"(median times: hash {overhead['seconds']['hash']:.2f}s, routed "
                      f"{overhead['seconds']['routed']:.2f}s; fastest runs: "
                      f"{100 * overhead['routing_overhead_min']:+.1f}%)")
            print(f"wrote {out} and {png}")
            driver.close()
            spark.stop()
            return 0
        finally:
            if proc is not None:
                proc.stop()


if __name__ == "__main__":
    sys.exit(main())
