"""A complete, runnable example of the Spark integration (the README's "Use it from Spark").

Start the controller first (``make run``), then ``python -m clients.spark.example``; ``REBALANCER_URL`` overrides
the controller address (default http://127.0.0.1:8000).
"""
import os
import shutil
import sys

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from clients.python import RebalancerClient
from clients.spark.driver import RebalancingDriver

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers use this interpreter
shutil.rmtree("/tmp/clicks-checkpoint", ignore_errors=True)  # a fresh stream on every run

# 1. some skewed events: 8 files of 20,000 clicks, users drawn from Zipf(1.1)
os.makedirs("/tmp/clicks", exist_ok=True)
rng = np.random.default_rng(0)
for i in range(8):
    users = rng.zipf(1.1, 40_000)
    users = users[users <= 1_000_000][:20_000]
    pd.DataFrame({"user": [f"u{u}" for u in users], "amount": rng.integers(1, 100, 20_000)}) \
        .to_parquet(f"/tmp/clicks/part-{i}.parquet", index=False)

spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "8")
         .config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

# 2. the driver: key -> 120 key groups (xxhash64 in the JVM) -> 8 partitions by the controller's routing table
client = RebalancerClient(os.environ.get("REBALANCER_URL", "http://127.0.0.1:8000"), timeout=5, retries=2)
driver = RebalancingDriver(
    spark, key="user", aggregations={"clicks": ("count", None), "spent": ("sum", "amount")},
    client=client, job_id="clicks", key_groups=120, partitions=8,
    algorithm="albic-milp", budget={"max_migrations": 12}, window_batches=2)
driver.start()  # PUT /v1/jobs/clicks (a controller that is down is not an error)

# 3. the stream: keyed state lives in the driver's routed dataset, plans switch at batch boundaries
events = (spark.readStream.schema("user string, amount long").option("maxFilesPerTrigger", 1)
          .parquet("/tmp/clicks"))
query = (events.writeStream.foreachBatch(driver.foreach_batch).trigger(availableNow=True)
         .option("checkpointLocation", "/tmp/clicks-checkpoint").start())
query.awaitTermination()

for r in driver.reports:
    print(f"batch {r.batch_id} epoch {r.epoch}: max/mean {r.rebalanced_max_over_mean:.3f}, "
          f"{r.migrations} key groups moved ({r.moved_bytes} state bytes), controller {r.controller}")
driver.state_frame().orderBy(F.desc("clicks")).show(3)
