"""A streaming job the recovery tests run as a child process and kill -9 at chosen points.

``python tests/spark/stream_job.py --src DIR --chk DIR --out DIR --result FILE [--kill POINT:BATCH]
[--controller URL --job-id ID]``

File source (one Parquet file per micro-batch, ``availableNow``), a :class:`RebalancingDriver` with durable
state under ``<chk>/rebalancer-state`` and a :class:`BatchIdSink` output. ``--kill`` names where the whole process
group (this Python and its JVM) gets SIGKILL: ``between`` (entering batch B, B-1 fully done), ``during-commit``
(batch B's Parquet renamed, its commit record not written), ``after-commit`` (B committed, Spark's own commit
not yet), ``migration`` (every key group moved to the next partition at batch B's boundary: the switch done in
memory, nothing committed), ``during-compaction`` (the clean close after the last batch B: version B's snapshot
files written, its marker not; the result is written before the close).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _die(marker: Path, what: str) -> None:
    marker.write_text(what)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def _kill_one_executor() -> int:
    """SIGKILL one executor JVM of this application (same session id as this process)."""
    sid = os.getsid(0)
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"CoarseGrainedExecutorBackend" in cmd and os.getsid(pid) == sid:
                os.kill(pid, signal.SIGKILL)
                return pid
        except (OSError, ProcessLookupError):
            continue
    raise RuntimeError("no executor JVM found")


def main() -> int:
    ap = argparse.ArgumentParser()
    for a in ("--src", "--chk", "--out", "--result"):
        ap.add_argument(a, required=True)
    ap.add_argument("--kill", default=None)
    ap.add_argument("--controller", default=None)
    ap.add_argument("--job-id", default="recovery")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--kill-executor-after", type=int, default=-1, help="SIGKILL one executor JVM after batch B")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from rebalancer_client import RebalancerClient
    from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
    from rebalancer_client.spark.driver import RebalancingDriver
    from rebalancer_client.spark.sink import BatchIdSink

    spark = (SparkSession.builder.master(args.master).appName("recovery-job").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "3").config("spark.driver.memory", "768m")
             # local-cluster's executor JVMs get the driver's JVM options (the suite's, tests/conftest.py)
             .config("spark.executor.extraJavaOptions", os.environ.get("SPARK_SUBMIT_OPTS", "")).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    point, at = (args.kill.split(":")[0], int(args.kill.split(":")[1])) if args.kill else (None, -1)
    marker = Path(args.result).with_suffix(".killed")

    events = {"during-commit": "data-written", "after-commit": "committed", "during-compaction": "compacted-written"}

    def store_event(what: str, version: int) -> None:
        if events.get(point or "") == what and version == at:
            _die(marker, f"{point}:{version}")

    client = RebalancerClient(args.controller, timeout=3, connect_timeout=1, retries=0) if args.controller else None
    # every window is worth a round (no noise guard, no minimum gain, no cooldown): migrations in every run
    policy = {"noise_sigmas": None, "min_gain": 0.0, "cooldown_batches": 0}
    driver = RebalancingDriver(
        spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")}, key_groups=12,
        partitions=3, output=BatchIdSink(args.out),
        controller=ControllerConfig(client, args.job_id, algorithm="flux", budget={"max_migrations": 3},
                                    window_batches=1, policy=policy, auto=False, backoff_s=0.5, async_plans=False),
        durability=DurabilityConfig(args.chk, snapshot_every=3, on_event=store_event))
    if point == "migration":
        original = driver.state.apply_routing

        def migrate(routing):
            report = original(routing)
            if driver._batch_id >= at and report.migrations:
                _die(marker, f"migration:{driver._batch_id}:{report.migrations}")
            return report

        driver.state.apply_routing = migrate  # type: ignore[method-assign]
    driver.start()
    killed_executors: list[int] = []

    def foreach(df, batch_id):
        if point == "between" and batch_id == at:
            _die(marker, f"between:{batch_id}")
        if point == "migration" and batch_id == at:  # a routing change at this boundary, whatever the controller says
            driver.place((driver.routing.partition_of + 1) % driver.partitions)
        driver.foreach_batch(df, batch_id)
        if batch_id == args.kill_executor_after and not killed_executors:
            killed_executors.append(_kill_one_executor())

    stream = spark.readStream.schema("key string, v long").option("maxFilesPerTrigger", 1).parquet(args.src)
    query = (stream.writeStream.foreachBatch(foreach).trigger(availableNow=True)
             .option("checkpointLocation", args.chk).start())
    query.awaitTermination()
    state = driver.state_frame().toPandas()
    Path(args.result).write_text(json.dumps({
        "state": {k: [int(c), int(t)] for k, c, t in zip(state["key"], state["count"], state["total"], strict=True)},
        "reports": [r.as_dict() for r in driver.reports],
        "committed": driver.committed, "epoch": driver.epoch, "killed_executors": killed_executors,
    }, default=str))
    driver.close()  # (writes the last version whole when a batch ran: see during-compaction)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
