"""Durable keyed state side by side: Spark's own stateful aggregation against the integration.

``python -m benchmarks.bench_spark_state [--quick] [--batches 24] [--rows 25000] [--restarts 5] [--passes 2]
[--output bench-results/spark_state.json]``

Workloads on the same stream (file source, one Parquet file per micro-batch, ``local[2]``, 8 partitions, users
``u<rank>`` over 100k ranks): **aggregate** — Zipf z = 1.1, ``groupBy(user).agg(count, sum, max)``; **uniform** —
the same aggregation on uniformly drawn users. Each runs twice in one process:

* ``builtin``: Spark's streaming aggregation (``outputMode("update")``, ``noop`` sink, default state store);
* ``rebalancer``: :class:`rebalancer_client.spark.driver.RebalancingDriver` with durable state under the checkpoint, the
  controller (``albic-milp``, 12 migrations per round, window 2) started as a subprocess.

Per batch the wall time is Spark's own ``durationMs.triggerExecution`` of the query progress for both sides;
p50 over the batches after the first three (warm-up, first plans), p95 over the same — of two runs of each side on
fresh checkpoints, the second pass in the reverse order (A B B A: :func:`both_passes`). Spark jobs per batch:
the jobs of the query's job group (``statusTracker``) / batches. Bytes written per batch: the state directory's
growth for ``builtin`` (its checkpoint ``state/`` folder), the commit records for ``rebalancer``. Recovery: one
more file, a new query (and a new driver) on the same checkpoint, seconds from ``start()`` to that batch's end;
the median of ``--restarts`` restarts per side, the sides taking turns (every other round in the reverse order),
and its ratio. A restart of the driver in the process takes over the state its closed predecessor kept in memory
(``DurabilityConfig.keep_s``, local recovery);
``recovery_from_files_s`` is the median of as many more restarts that read it from the store's files instead (what a
restart in a new process reads; ``--cold-restarts`` measures those in new processes). Besides the ratio of the
medians, ``recovery_paired_ratio_*`` is the median of the per-restart ratios (restart ``i`` of each side runs back to
back, so both meet the same spell of a noisy machine).

**sessions** — per-user sessions with a 30 s inactivity gap on the event time ``ts`` (batch ``b`` covers
``[100 b, 100 b + 100)`` s, the same Zipf 1.1 users): ``builtin`` is Spark's ``applyInPandasWithState`` with the
RocksDB state store provider, an event-time timeout and a 0 s watermark (append mode, ``noop`` sink); ``rebalancer``
the driver with :func:`rebalancer_client.spark.recipes.sessions` (the pandas function API) and durable state; ``tws``
Spark 4's ``transformWithStateInPandas`` (a value state and an event-time timer per key, RocksDB). All run the same
session logic per key, and Spark's sides emit a frame only when a session closes. A small stream run on all three
checks that they emit the same sessions (``same_sessions``). A baseline that cannot run is recorded with its error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.harness import scratch
from benchmarks.spark_demo import start_controller
from benchmarks.spark_state_cold import cold_restarts, session
from benchmarks.spark_state_sessions import GAP_S, SESSION_COLS, sessions_query
from cli.common import nonnegative_int, positive_int
from rebalancer_client.spark import handover
from tests.helpers.streams import write_stream

AGG_SCHEMA = "key string, v long"
SESSION_SCHEMA = "key string, ts double, v long"
FILES = "rebalancer-from-files"  # restarts of the rebalancer side that read the store's files (see _workload)
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def write_batches(out_dir: Path, *, batches: int, rows: int, keys: int, z: float | None, seed: int,
                  first: int = 0) -> None:
    """``batches`` Parquet files; users from Zipf(z) over ``keys`` ranks, or uniform when ``z`` is None; each
    record has an event time ``ts`` in ``[100 b, 100 b + 100)`` for batch ``b`` (counted from ``first``)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    if z is not None:
        p = np.arange(1, keys + 1, dtype=np.float64) ** -z
        cdf = np.cumsum(p / p.sum())
    frames = []
    for b in range(batches):
        ranks = (np.searchsorted(cdf, rng.random(rows), side="right") + 1) if z is not None \
            else rng.integers(1, keys + 1, rows)
        ts = np.sort(rng.uniform(100 * (first + b), 100 * (first + b) + 100, rows))
        frames.append(pd.DataFrame({"key": np.char.add("u", np.minimum(ranks, keys).astype(str)), "ts": ts,
                                    "v": rng.integers(0, 100, rows)}))
    write_stream(out_dir, frames, "b-{:04d}.parquet")  # read in file order, before any file added later


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _summary(times_ms: list[float], warmup: int = 3) -> dict:
    t = [x / 1000 for x in times_ms[warmup:]] or [x / 1000 for x in times_ms]
    return {"p50_batch_s": round(statistics.median(t), 3),
            "p95_batch_s": round(float(np.percentile(t, 95)), 3), "batches": len(times_ms),
            "batch_s": [round(x / 1000, 3) for x in times_ms]}


def both_passes(first: dict, again: dict, warmup: int = 3) -> dict:
    """A side's figures over its two runs: every side runs once, then once more in the reverse order (A B, B A), so
    that a drift of the machine over the runs weighs on every side alike (the sides of one pass run one after the
    other: a slow spell during one side's run moved the ratio by a quarter). p50 and p95 over the batches of both
    runs after the warm-up, Spark jobs per batch of both; the rest (bytes, state) of the first run."""
    times = first["batch_s"][warmup:] + again["batch_s"][warmup:] or first["batch_s"] + again["batch_s"]
    return {**first, "p50_batch_s": round(statistics.median(times), 3),
            "p95_batch_s": round(float(np.percentile(times, 95)), 3),
            "runs_p50_batch_s": [first["p50_batch_s"], again["p50_batch_s"]], "batch_s_again": again["batch_s"],
            "spark_jobs_per_batch": round((first["spark_jobs_per_batch"] + again["spark_jobs_per_batch"]) / 2, 2)}


def _run_query(spark, src: Path, chk: Path, side: str, driver=None, workload: str = "aggregate", sink=None):
    from pyspark.sql import functions as F

    schema = SESSION_SCHEMA if workload == "sessions" else AGG_SCHEMA
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
    if side in ("builtin", "tws") and workload == "sessions":
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        sess = sessions_query(stream, side)
        w = (sess.writeStream.outputMode("append").foreachBatch(sink) if sink is not None else
             sess.writeStream.outputMode("append").format("noop"))
    elif side == "builtin":
        agg = stream.groupBy("key").agg(F.count(F.lit(1)).alias("count"), F.sum("v").alias("total"),
                                        F.max("v").alias("top"))
        w = agg.writeStream.outputMode("update").format("noop")
    else:
        w = stream.writeStream.foreachBatch(driver.foreach_batch)
    t0 = time.perf_counter()
    q = w.trigger(availableNow=True).option("checkpointLocation", str(chk)).start()
    q.awaitTermination()
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(str(q.runId)))
    return q, progress, wall, jobs


def _driver(spark, client, chk: Path, job_id: str, workload: str = "aggregate", output=None):
    from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
    from rebalancer_client.spark.driver import RebalancingDriver
    from rebalancer_client.spark.recipes import sessions

    logic: dict = ({"function": sessions("key", "ts", GAP_S)} if workload == "sessions" else
                   {"aggregations": {"count": ("count", None), "total": ("sum", "v"), "top": ("max", "v")}})
    return RebalancingDriver(spark, key="key", **logic, key_groups=120, partitions=8,
                             controller=ControllerConfig(client, job_id, algorithm="albic-milp",
                                                         budget={"max_migrations": 12}, window_batches=2),
                             durability=DurabilityConfig(str(chk)), output=output)


def run_side(spark, side: str, src: Path, work: Path, client, job_id: str, workload: str = "aggregate") -> dict:
    """One side's run over every file of ``src`` on a fresh checkpoint: per-batch summary, jobs, bytes written."""
    chk = work / f"chk-{side}-{job_id}"
    driver = _driver(spark, client, chk, job_id, workload) if side == "rebalancer" else None
    if driver is not None:
        driver.start()
    _, progress, wall, jobs = _run_query(spark, src, chk, side, driver, workload)
    out = _summary([p["durationMs"]["triggerExecution"] for p in progress])
    out["wall_s"] = round(wall, 2)
    out["spark_jobs_per_batch"] = round(jobs / max(1, len(progress)), 2)
    if side != "rebalancer":
        out["state_store_provider"] = spark.conf.get("spark.sql.streaming.stateStore.providerClass", None)
        out["state_dir_bytes"] = _dir_bytes(chk / "state")
        out["bytes_written_per_batch"] = round(out["state_dir_bytes"] / max(1, len(progress)))
    else:
        reps = [r for r in driver.reports if not r.replayed]
        out["bytes_written_per_batch"] = round(statistics.mean(r.written_bytes for r in reps))
        out["commit_s_p50"] = round(statistics.median(r.commit_seconds for r in reps), 3)
        out["state_bytes"] = reps[-1].state_bytes
        out["state_dir_bytes"] = _dir_bytes(chk / "rebalancer-state")
        out["max_over_mean_p50"] = round(statistics.median(r.rebalanced_max_over_mean for r in reps[3:] or reps), 3)
        out["moved_key_groups"] = sum(r.migrations for r in reps)
        driver.close()
    return out


def restart_once(spark, side: str, src: Path, work: Path, client, job_id: str, workload: str = "aggregate",
                 recovered: Callable[[], None] | None = None) -> float:
    """Recovery: a new query (and a new driver) on the side's checkpoint, over the one more file just added to
    ``src``: seconds from the driver's ``start()`` (Spark's side: the query's) to that batch's end, when
    ``recovered`` is called (before the driver's close)."""
    chk = work / f"chk-{side}-{job_id}"
    driver = _driver(spark, client, chk, job_id, workload) if side == "rebalancer" else None
    t0 = time.perf_counter()
    if driver is not None:
        driver.start()
    _run_query(spark, src, chk, side, driver, workload)
    seconds = time.perf_counter() - t0
    if recovered is not None:
        recovered()
    if driver is not None:
        driver.close()
    return seconds


def _workload(spark, args, work: Path, client, name: str, z: float | None) -> dict:
    """Both sides (three for the sessions) of one workload on the same files, with their ratios; then
    ``args.restarts`` restarts of each, the sides alternating (each on one more file), whose median is the
    recovery (a single restart varies by ±30 % on this machine)."""
    workload = "sessions" if name == "sessions" else "aggregate"
    doc: dict = {}
    sides = ("builtin", "tws", "rebalancer") if workload == "sessions" else ("builtin", "rebalancer")
    for side in sides:
        src = work / f"src-{name}-{side}"  # the same files (same seed) for every side
        write_batches(src, batches=args.batches, rows=args.rows, keys=args.keys, z=z, seed=7)
        print(f"{name}: {side} ...", file=sys.stderr, flush=True)
        try:
            doc[side] = run_side(spark, side, src, work, client, f"{name}-{side}", workload)
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot run here is recorded with its error
            if side != "tws":
                raise
            doc[side] = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:400]}"}
    ran = [side for side in sides if "error" not in doc[side]]
    for side in reversed(ran if args.passes == 2 else []):  # the second pass, in the reverse order (both_passes)
        print(f"{name}: {side} again ...", file=sys.stderr, flush=True)
        again = run_side(spark, side, work / f"src-{name}-{side}", work, client, f"{name}-{side}-again", workload)
        doc[side] = both_passes(doc[side], again)
    # FILES: a restart of the driver that reads the committed state from the store's files, not from the memory of
    # the driver closed before it (local recovery, rebalancer_client.spark.handover): what a new process does
    restarting = [*ran, FILES]
    runs: dict[str, list[float]] = {side: [] for side in restarting}
    for i in range(args.restarts):
        # the same extra file (same seed) for every side in restart i
        write_batches(work / "tmp-extra", batches=1, rows=args.rows, keys=args.keys, z=z, seed=99 + i,
                      first=args.batches + i)
        # every other restart in the reverse order: no side always follows the same other one (what the one before
        # leaves behind — its garbage, its closing writes — falls on each side alike)
        for side in restarting if i % 2 == 0 else restarting[::-1]:
            own = "rebalancer" if side == FILES else side
            extra = work / "tmp-extra" / "b-0000.parquet"
            (work / f"src-{name}-{own}" / f"c-{i:04d}-{side}.parquet").write_bytes(extra.read_bytes())
            if side == FILES:
                handover.clear()
            runs[side].append(restart_once(spark, own, work / f"src-{name}-{own}", work, client,
                                           f"{name}-{own}", workload))
    for side in ran:
        doc[side]["recovery_s"] = round(statistics.median(runs[side]), 2)
        doc[side]["recovery_runs_s"] = [round(x, 2) for x in runs[side]]
    doc["rebalancer"]["recovery_from_files_s"] = round(statistics.median(runs[FILES]), 2)
    doc["rebalancer"]["recovery_from_files_runs_s"] = [round(x, 2) for x in runs[FILES]]
    if args.cold_restarts and workload == "aggregate":
        cold_restarts(args, work, name, z, ran, doc)
    r = doc["rebalancer"]["p50_batch_s"]
    for base in [b for b in ("builtin", "tws") if b in doc]:
        b = doc[base].get("p50_batch_s")
        key = "p50_ratio_rebalancer_over_" + base
        doc[key] = round(r / b, 3) if b else None
        if base in ran:
            for what, mine in (("recovery", "rebalancer"), ("recovery_from_files", FILES)):
                doc[f"{what}_ratio_rebalancer_over_{base}"] = round(
                    statistics.median(runs[mine]) / statistics.median(runs[base]), 3)
                # restart i of each side ran back to back: the median of their ratios (the ratio of the medians
                # swings with which of the machine's fast and slow spells the middle restart of a side fell in)
                doc[f"{what}_paired_ratio_rebalancer_over_{base}"] = round(
                    statistics.median(m / b for m, b in zip(runs[mine], runs[base], strict=True)), 3)
    doc["target_ratio"] = 0.8 if name == "sessions" else 1.25
    return doc


def check_sessions(spark, work: Path, client, batches: int = 5, rows: int = 3000, keys: int = 2000) -> dict:
    """The three sides of the sessions workload on a small stream, each writing what it emits: the sessions that
    end before the last batch's watermark (all sides have closed them) must be the same."""
    import pandas as pd

    src = work / "src-check"
    write_batches(src, batches=batches, rows=rows, keys=keys, z=1.1, seed=11)
    got: dict = {}
    for side in ("builtin", "tws", "rebalancer"):
        frames: list = []
        chk = work / f"chk-check-{side}"

        def sink(df, _batch_id, frames=frames):
            frames.append(df.toPandas())

        driver = _driver(spark, client, chk, f"check-{side}", "sessions", output=sink) if side == "rebalancer" else None
        try:
            if driver is not None:
                driver.start()
            _run_query(spark, src, chk, side, driver, "sessions", sink=None if driver else sink)
        except Exception as exc:  # noqa: BLE001 - recorded (the tws side may not run here)
            got[side] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            continue
        finally:
            if driver is not None:
                driver.close()
        every = pd.concat(frames) if frames else pd.DataFrame(columns=SESSION_COLS)
        done = every[every["end"] + GAP_S < 100 * (batches - 1) - 1]
        got[side] = sorted((str(a), round(float(b), 6), round(float(c), 6), int(d))
                           for a, b, c, d in done[SESSION_COLS].itertuples(index=False))
    ran = {k: v for k, v in got.items() if isinstance(v, list)}
    ref = ran.get("rebalancer")
    return {"sessions": {k: len(v) for k, v in ran.items()},
            "equal": {k: v == ref for k, v in ran.items() if k != "rebalancer"},
            "errors": {k: v for k, v in got.items() if isinstance(v, str)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_spark_state", description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=positive_int, default=24)
    ap.add_argument("--rows", type=positive_int, default=25_000)
    ap.add_argument("--keys", type=positive_int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="8 batches of 10k records")
    ap.add_argument("--restarts", type=positive_int, default=5, help="restarts of each side (recovery: their median)")
    ap.add_argument("--passes", type=int, choices=(1, 2), default=2,
                    help="runs of each side: 2 = A B then B A (the batch p50 over both), 1 = A B")
    ap.add_argument("--cold-restarts", type=nonnegative_int, default=0,
                    help="more restarts per side, each in a new process and JVM (aggregate and uniform)")
    ap.add_argument("--output", default="bench-results/spark_state.json")
    ap.add_argument("--only", nargs="+", default=["sessions", "aggregate", "uniform"],
                    choices=["sessions", "aggregate", "uniform"], help="workloads to run")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.rows = min(args.batches, 8), min(args.rows, 10_000)
    from rebalancer_client import RebalancerClient

    with scratch("bench-spark-state-") as work:
        proc = start_controller(work / "rebalancer.db")
        url = args.controller_url = proc.url
        spark = session()
        client = RebalancerClient(url, timeout=10, retries=1)
        doc: dict = {"config": {"batches": args.batches, "rows": args.rows, "keys": args.keys, "partitions": 8,
                                "key_groups": 120, "master": "local[2]", "algorithm": "albic-milp",
                                "budget": {"max_migrations": 12}, "window_batches": 2, "warmup_batches": 3,
                                "restarts": args.restarts, "cold_restarts": args.cold_restarts,
                                "passes": args.passes}}
        try:
            recovery = {}
            for name, z in (("sessions", 1.1), ("aggregate", 1.1), ("uniform", None)):
                if name not in args.only:
                    continue
                doc[name] = _workload(spark, args, work, client, name, z)
                if name == "aggregate":
                    recovery = {side: doc[name][side]["recovery_s"] for side in ("builtin", "rebalancer")}
                    recovery["ratio"] = doc[name]["recovery_ratio_rebalancer_over_builtin"]
                    recovery["paired_ratio"] = doc[name]["recovery_paired_ratio_rebalancer_over_builtin"]
                    files = "recovery_from_files_{}ratio_rebalancer_over_builtin"
                    recovery["from_files"] = {"rebalancer": doc[name]["rebalancer"]["recovery_from_files_s"],
                                              "ratio": doc[name][files.format("")],
                                              "paired_ratio": doc[name][files.format("paired_")]}
                    if args.cold_restarts:
                        recovery["cold"] = {side: doc[name][side]["cold_recovery_s"]
                                            for side in ("builtin", "rebalancer")}
                        recovery["cold"]["ratio"] = doc[name]["cold_recovery_ratio_rebalancer_over_builtin"]
                        recovery["cold"]["process"] = {side: doc[name][side]["cold_process_s"]
                                                       for side in ("builtin", "rebalancer")}
                        recovery["cold"]["process"]["ratio"] = doc[name]["cold_process_ratio_rebalancer_over_builtin"]
            if "sessions" in args.only:
                doc["sessions"]["same_sessions"] = check_sessions(spark, work, client)
            doc["recovery_s"] = recovery
        finally:
            spark.stop()
            proc.stop()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    for name in [n for n in ("sessions", "aggregate", "uniform") if n in doc]:
        b, r = doc[name]["builtin"], doc[name]["rebalancer"]
        print(f"{name:9s} p50 builtin {b['p50_batch_s']:.3f} s, rebalancer {r['p50_batch_s']:.3f} s "
              f"(ratio {doc[name]['p50_ratio_rebalancer_over_builtin']}, target <= {doc[name]['target_ratio']}); "
              f"p95 {b['p95_batch_s']:.3f} / {r['p95_batch_s']:.3f} s; "
              f"jobs/batch {b['spark_jobs_per_batch']} / {r['spark_jobs_per_batch']}; "
              f"bytes written/batch {b['bytes_written_per_batch']} / {r['bytes_written_per_batch']}")
        if "tws" in doc[name]:
            t = doc[name]["tws"]
            print(f"{'':9s} transformWithStateInPandas: " + (t["error"] if "error" in t else
                  f"p50 {t['p50_batch_s']:.3f} s (ratio {doc[name]['p50_ratio_rebalancer_over_tws']})") +
                  f"; same sessions: {doc[name].get('same_sessions')}")
    if recovery:
        print(f"recovery after a restart (median of {args.restarts}): builtin {recovery['builtin']} s, "
              f"rebalancer {recovery['rebalancer']} s (ratio {recovery['ratio']}, target <= 1.0; median of the "
              f"restarts' ratios {recovery['paired_ratio']}); reading the files, not the closed driver's memory: "
              f"{recovery['from_files']['rebalancer']} s (ratio {recovery['from_files']['ratio']}, paired "
              f"{recovery['from_files']['paired_ratio']})")
        if "cold" in recovery:
            cold = recovery["cold"]
            print(f"cold recovery, a new process per restart, from its start to the first batch's end (median of "
                  f"{args.cold_restarts}): builtin {cold['builtin']} s, rebalancer {cold['rebalancer']} s (ratio "
                  f"{cold['ratio']}); to the process's exit {cold['process']['builtin']} / "
                  f"{cold['process']['rebalancer']} s (ratio {cold['process']['ratio']})")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
