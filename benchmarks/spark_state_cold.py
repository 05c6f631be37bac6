"""Cold recovery for :mod:`benchmarks.bench_spark_state`: a restart in a fresh process, as a restarted job meets it.

``bench_spark_state`` restarts each side in its own (warm) JVM; a user's job that died restarts in a new driver
process, with a new JVM, on both sides. ``--cold-restarts N`` adds N such restarts per side, the sides
alternating, each on one more file: this module's :func:`cold_restart` runs
``python -m benchmarks.spark_state_cold SIDE SRC WORK JOB WORKLOAD URL``, which starts a SparkSession
(:func:`session`, the benchmark's own settings), runs :func:`benchmarks.bench_spark_state.restart_once` and prints
one JSON line. Reported per side: the recovery, seconds from the process's start to the end of its first batch
(``recovered_s``; what a user waits for, and what the warm restarts time from the driver's ``start()``), the
process's wall time from its start to its exit (``process_s``: also the driver's close, which writes the state
whole for the next start, and the session's stop), the session's start (``session_s``) and the restart itself as
the warm runs time it (``restart_s``).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def session() -> Any:
    """The SparkSession of ``bench_spark_state`` (warm and cold sides alike): 8 shuffle partitions, no Arrow."""
    from benchmarks.bench_spark_routing import spark_session

    return spark_session(8, app="bench_spark_state", arrow=False)


def cold_restart(side: str, src: Path, work: Path, job_id: str, workload: str, url: str) -> dict[str, float]:
    """One restart of ``side`` in a new Python process (and JVM); its timings."""
    started = time.time()  # (the wall clock: the child's is the same)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "benchmarks.spark_state_cold", side, str(src), str(work), job_id,
                          workload, url], capture_output=True, text=True, timeout=600, check=False)
    wall = time.perf_counter() - t0
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"cold restart of {side} failed ({out.returncode}): {out.stderr[-2000:]}")
    got = json.loads(lines[-1])
    return {"recovered_s": round(got.pop("recovered_at") - started, 2), "process_s": round(wall, 2), **got}


def cold_restarts(args: Any, work: Path, name: str, z: float | None, sides: list[str], doc: dict[str, Any]) -> None:
    """``args.cold_restarts`` more restarts per side of the workload ``name``, each in a new process, the sides
    alternating, each restart on one more file (the warm restarts' files come first); medians and ratio into
    ``doc``."""
    from benchmarks.bench_spark_state import write_batches

    cold: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    for i in range(args.restarts, args.restarts + args.cold_restarts):
        write_batches(work / "tmp-extra", batches=1, rows=args.rows, keys=args.keys, z=z, seed=99 + i,
                      first=args.batches + i)
        for side in sides:
            src = work / f"src-{name}-{side}"
            (src / f"c-{i:04d}.parquet").write_bytes((work / "tmp-extra" / "b-0000.parquet").read_bytes())
            print(f"{name}: cold restart {i - args.restarts + 1} of {side} ...", file=sys.stderr, flush=True)
            cold[side].append(cold_restart(side, src, work, f"{name}-{side}", "aggregate", args.controller_url))
    for side in sides:
        doc[side]["cold_recovery_runs"] = cold[side]
        doc[side]["cold_recovery_s"] = round(statistics.median(r["recovered_s"] for r in cold[side]), 2)
        doc[side]["cold_process_s"] = round(statistics.median(r["process_s"] for r in cold[side]), 2)
    for what in ("recovery", "process"):
        doc[f"cold_{what}_ratio_rebalancer_over_builtin"] = round(
            doc["rebalancer"][f"cold_{what}_s"] / doc["builtin"][f"cold_{what}_s"], 3)


def main(argv: list[str]) -> int:
    from benchmarks.bench_spark_state import restart_once
    from rebalancer_client import RebalancerClient

    side, src, work, job_id, workload, url = argv
    t0 = time.perf_counter()
    spark = session()
    started = time.perf_counter() - t0
    recovered: list[float] = []
    try:
        seconds = restart_once(spark, side, Path(src), Path(work), RebalancerClient(url, timeout=10, retries=1),
                               job_id, workload, recovered=lambda: recovered.append(time.time()))
    finally:
        spark.stop()
    print(json.dumps({"session_s": round(started, 2), "restart_s": round(seconds, 2), "recovered_at": recovered[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
