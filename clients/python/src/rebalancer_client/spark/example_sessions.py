"""A runnable example of the pandas function API (the README's "Any per-key logic"); nothing runs on import.

Start the controller first (``make run``), then ``python -m rebalancer_client.spark.example_sessions [WORK_DIR]``
(``REBALANCER_URL`` overrides http://127.0.0.1:8000). It streams 6 files of Zipf(1.1) clicks with an event time
(file ``i`` covers ``[100 i, 100 i + 100)`` s) through :func:`rebalancer_client.spark.recipes.sessions` (30 s inactivity
gap, event-time timeout) with durable state and exactly-once output, and checks the sessions against pandas.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import pandas as pd

GAP_S = 30.0


def reference_sessions(clicks: pd.DataFrame) -> pd.DataFrame:
    """The same sessions computed with pandas on the whole input: ``(user, start, end, events)``."""
    import pandas as pd

    rows = []
    for user, g in clicks.sort_values(["user", "ts"], kind="stable").groupby("user"):
        n, start, end = 0, 0.0, 0.0
        for t in g.ts:
            if n and t - end > GAP_S:
                rows.append((user, start, end, n))
                n = 0
            start, end, n = (t if n == 0 else start), t, n + 1
        rows.append((user, start, end, n))
    return pd.DataFrame(rows, columns=["user", "start", "end", "events"])


def main(work: str | None = None) -> None:
    import numpy as np
    import pandas as pd
    from pyspark.sql import SparkSession

    from rebalancer_client import RebalancerClient
    from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
    from rebalancer_client.spark.driver import RebalancingDriver
    from rebalancer_client.spark.recipes import sessions
    from rebalancer_client.spark.sink import BatchIdSink

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = work or tempfile.mkdtemp(prefix="sessions-")
    os.makedirs(f"{work}/in", exist_ok=True)
    rng = np.random.default_rng(1)
    base = time.time() - 600
    for i in range(6):  # 5,000 clicks per file, users from Zipf(1.1) over 2,000 ranks, in event-time order
        users = np.minimum(rng.zipf(1.1, 5_000), 2_000)
        pd.DataFrame({"user": [f"u{u}" for u in users], "ts": np.sort(rng.uniform(100 * i, 100 * i + 100, 5_000))}) \
            .to_parquet(f"{work}/in/part-{i}.parquet", index=False)
        # the file source reads files by modification time (in milliseconds: small files written one after the
        # other often share one), and an event-time stream must read them in order
        os.utime(f"{work}/in/part-{i}.parquet", (base + i, base + i))

    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = RebalancerClient(os.environ.get("REBALANCER_URL", "http://127.0.0.1:8000"),
                              token=os.environ.get("REBALANCER_TOKEN"), timeout=5, retries=2)
    driver = RebalancingDriver(
        spark, key="user", function=sessions("user", "ts", gap_s=GAP_S),   # fn(key, rows, state) per user
        key_groups=120, partitions=8,
        controller=ControllerConfig(client, "sessions", algorithm="albic-milp", budget={"max_migrations": 12},
                                    window_batches=2),
        durability=DurabilityConfig(f"{work}/checkpoint"), output=BatchIdSink(f"{work}/sessions"))
    driver.start()
    events = spark.readStream.schema("user string, ts double").option("maxFilesPerTrigger", 1).parquet(f"{work}/in")
    query = (events.writeStream.foreachBatch(driver.foreach_batch).trigger(availableNow=True)
             .option("checkpointLocation", f"{work}/checkpoint").start())
    query.awaitTermination()
    for r in driver.reports:
        print(f"batch {r.batch_id} epoch {r.epoch}: {r.records} clicks, max/mean {r.rebalanced_max_over_mean:.3f}, "
              f"{r.migrations} key groups moved, state version {r.state_version}")
    print(f"watermark after the last batch: {driver.watermark or 0.0:.1f} s "
          f"(a session stays open while its end + {GAP_S:.0f} s is beyond it)")
    closed = cast(pd.DataFrame, spark.read.parquet(f"{work}/sessions").toPandas())
    still_open = cast(pd.DataFrame, driver.state_frame().toPandas())
    print(closed.sort_values("events", ascending=False).head(3).to_string(index=False))
    ref = reference_sessions(spark.read.parquet(f"{work}/in").toPandas())
    print(f"sessions closed (emitted): {len(closed)}, open (in the state): {len(still_open)}, "
          f"pandas reference: {len(ref)}; events in sessions: {int(closed.events.sum() + still_open.events.sum())} "
          f"of {int(ref.events.sum())}")
    driver.close()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
