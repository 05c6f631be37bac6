"""Two keyed operators in one query, rebalanced as one controller job (the README's "Several operators"); nothing
runs on import.

Start the controller first (``make run``), then ``python -m rebalancer_client.spark.example_chain [WORK_DIR]``
(``REBALANCER_URL`` overrides the address). 6 files of 20,000 Zipf(1.1) clicks ``(user, region)``: stage
``users`` keeps per-user click counts, stage ``regions`` consumes the users it updated in each batch and keeps,
per region, the number of user updates and the most clicks of one user. The communication between the two stages
(user key group → region key group) goes to the controller with the statistics, so ``albic`` plans with it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import cast


def main(work: str | None = None) -> None:
    import numpy as np
    import pandas as pd
    from pyspark.sql import SparkSession

    from rebalancer_client import RebalancerClient
    from rebalancer_client.spark.chain import OperatorChain
    from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
    from rebalancer_client.spark.sink import BatchIdSink

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = work or tempfile.mkdtemp(prefix="chain-")
    os.makedirs(f"{work}/in", exist_ok=True)
    rng = np.random.default_rng(0)
    frames = []
    for i in range(6):
        users = rng.zipf(1.1, 40_000)
        users = users[users <= 100_000][:20_000]
        frames.append(pd.DataFrame({"user": [f"u{u}" for u in users], "region": [f"r{u % 40}" for u in users]}))
        frames[-1].to_parquet(f"{work}/in/part-{i}.parquet", index=False)

    spark = (SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "8")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    client = RebalancerClient(os.environ.get("REBALANCER_URL", "http://127.0.0.1:8000"),
                              token=os.environ.get("REBALANCER_TOKEN"), timeout=5, retries=2)
    chain = OperatorChain(
        spark, partitions=8,
        stages=[{"operator": "users", "key": "user", "key_groups": 120,
                 "aggregations": {"region": ("max", "region"), "clicks": ("count", None)}},
                {"operator": "regions", "key": "region", "key_groups": 40,
                 "aggregations": {"updates": ("count", None), "top_clicks": ("max", "clicks")}}],
        controller=ControllerConfig(client, "clicks-chain", algorithm="albic", budget={"max_migrations": 12},
                                    window_batches=2),
        durability=DurabilityConfig(f"{work}/checkpoint"),  # <checkpoint>/rebalancer-state/{users,regions}
        output=BatchIdSink(f"{work}/regions"))              # the last stage's output, exactly once per batch
    chain.start()  # PUT /v1/jobs/clicks-chain with both operators
    events = (spark.readStream.schema("user string, region string").option("maxFilesPerTrigger", 1)
              .parquet(f"{work}/in"))
    query = (events.writeStream.foreachBatch(chain.foreach_batch).trigger(availableNow=True)
             .option("checkpointLocation", f"{work}/checkpoint").start())
    query.awaitTermination()
    chain.wait_for_plan(30)
    for r in chain.reports:
        first, second = r.stages
        print(f"batch {r.batch_id} epoch {r.epoch}: users max/mean {first.rebalanced_max_over_mean:.3f} "
              f"({first.migrations} moved), regions max/mean {second.rebalanced_max_over_mean:.3f} "
              f"({second.migrations} moved), {len(r.communication)} user->region edges "
              f"({sum(e['rate'] for e in r.communication):.0f} records), controller {r.controller}")
    got = cast(pd.DataFrame, chain.stages[1].state_frame().toPandas()).set_index("region").sort_index()
    every = pd.concat(frames)
    top = every.groupby("user").size().groupby(every.groupby("user").region.first()).max()
    updates = sum(f.drop_duplicates("user").region.value_counts() for f in frames)
    print("regions in the state:", len(got), "| top clicks equal a direct count:",
          bool((got.top_clicks == top.loc[got.index]).all()), "| updates equal a direct count:",
          bool((got.updates == updates.loc[got.index]).all()))
    chain.close()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
