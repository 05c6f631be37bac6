"""A complete, runnable example of the Spark integration (the README's "Use it from Spark"); nothing runs on import.

Start the controller first (``make run``), then ``python -m rebalancer_client.spark.example [WORK_DIR]``;
``REBALANCER_URL`` overrides the controller address (default http://127.0.0.1:8000). It streams 8 files of Zipf(1.1)
clicks with durable keyed state under the query's checkpoint, stops after 4 files, and starts again — as a restarted
driver would — with a new driver on the same checkpoint: the state continues from the last committed version.
"""

from __future__ import annotations

import os
import sys
import tempfile


def main(work: str | None = None) -> None:
    import numpy as np
    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from rebalancer_client import RebalancerClient
    from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
    from rebalancer_client.spark.driver import RebalancingDriver
    from rebalancer_client.spark.sink import BatchIdSink

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers use this interpreter
    work = work or tempfile.mkdtemp(prefix="clicks-")
    os.makedirs(f"{work}/in", exist_ok=True)
    rng = np.random.default_rng(0)

    def clicks(i: int) -> None:  # one file of 20,000 clicks, users drawn from Zipf(1.1)
        users = rng.zipf(1.1, 40_000)
        users = users[users <= 1_000_000][:20_000]
        pd.DataFrame({"user": [f"u{u}" for u in users], "amount": rng.integers(1, 100, len(users))}) \
            .to_parquet(f"{work}/in/part-{i}.parquet", index=False)

    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = RebalancerClient(os.environ.get("REBALANCER_URL", "http://127.0.0.1:8000"),
                              token=os.environ.get("REBALANCER_TOKEN"), timeout=5, retries=2)

    def run_stream() -> RebalancingDriver:
        driver = RebalancingDriver(
            spark, key="user", aggregations={"clicks": ("count", None), "spent": ("sum", "amount")},
            key_groups=120, partitions=8,
            controller=ControllerConfig(client, "clicks", algorithm="albic-milp", budget={"max_migrations": 12},
                                        window_batches=2),      # automatic rounds, judged by the controller
            durability=DurabilityConfig(f"{work}/checkpoint"),  # state: <checkpoint>/rebalancer-state
            output=BatchIdSink(f"{work}/out"))                  # changed rows per batch, exactly once
        driver.start()  # reads the last commit record, PUT /v1/jobs/clicks, then loads the committed state
        print(f"driver started: state version {driver.committed} (epoch {driver.epoch}) loaded from the checkpoint"
              if driver.committed is not None else "driver started: no committed state yet")
        events = (spark.readStream.schema("user string, amount long").option("maxFilesPerTrigger", 1)
                  .parquet(f"{work}/in"))
        query = (events.writeStream.foreachBatch(driver.foreach_batch).trigger(availableNow=True)
                 .option("checkpointLocation", f"{work}/checkpoint").start())
        query.awaitTermination()
        for r in driver.reports:
            print(f"batch {r.batch_id} epoch {r.epoch}: max/mean {r.rebalanced_max_over_mean:.3f}, "
                  f"{r.migrations} key groups moved, state version {r.state_version} "
                  f"({r.written_bytes} bytes written), controller {r.controller}")
        return driver

    for i in range(4):
        clicks(i)
    run_stream().close()                 # the query stops here (or the driver dies) ...
    for i in range(4, 8):
        clicks(i)
    driver = run_stream()                # ... and a new driver continues from the committed state
    driver.state_frame().orderBy(F.desc("clicks")).show(3)
    direct = spark.read.parquet(f"{work}/in").count()
    total = driver.state_frame().agg(F.sum("clicks").alias("n")).collect()[0]["n"]
    print("clicks in the state:", total, "direct count:", direct)
    driver.close()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
