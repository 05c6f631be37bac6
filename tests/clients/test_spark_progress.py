"""The driver's per-batch figures next to Spark's own streaming progress (a real StreamingQueryListener, a real
file-source stream, a real controller)."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pandas as pd
import pytest

from tests.helpers.streams import write_stream

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.progress import RebalancerProgressListener  # noqa: E402


def test_every_progress_event_carries_the_report_of_its_own_batch(spark, controller, tmp_path):
    rng = np.random.default_rng(4)
    src = tmp_path / "src"
    sizes = [300, 500, 700, 400]  # a different row count per batch: a report joined to the wrong batch shows
    write_stream(src, [pd.DataFrame({"key": [f"k{r}" for r in np.minimum(rng.zipf(1.2, n), 80)]}) for n in sizes],
                 "part-{}.parquet")
    client = RebalancerClient(controller.url, timeout=10, retries=1)
    driver = RebalancingDriver(spark, key="key", key_groups=12, partitions=3,
                               controller=ControllerConfig(client, "prog-" + uuid.uuid4().hex[:8], algorithm="flux",
                                                           budget={"max_migrations": 3}, window_batches=1,
                                                           policy={"noise_sigmas": None, "min_gain": 0.0}),
                               durability=DurabilityConfig(str(tmp_path / "chk")))
    driver.start()
    seen = []
    listener = RebalancerProgressListener(driver, sink=seen.append, query_name="progress-test")
    spark.streams.addListener(listener)
    try:
        stream = spark.readStream.schema("key string").option("maxFilesPerTrigger", 1).parquet(str(src))
        query = (stream.writeStream.queryName("progress-test").foreachBatch(driver.foreach_batch)
                 .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "chk")).start())
        query.awaitTermination()
        deadline = time.monotonic() + 30
        while len(seen) < len(sizes) and time.monotonic() < deadline:  # the listener bus is asynchronous
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
    assert [e["batchId"] for e in seen] == list(range(len(sizes)))
    for e, n in zip(seen, sizes, strict=True):
        reb = e["rebalancer"]
        assert e["numInputRows"] == n == reb["records"]        # Spark's count and ours, same batch
        assert reb["state_version"] == e["batchId"]
        assert reb["controller"] == "ok" and reb["controller_seconds"] > 0
        assert reb["written_bytes"] > 0 and "triggerExecution" in e["durationMs"]
    assert sum(e["rebalancer"]["migrations"] for e in seen) == sum(r.migrations for r in driver.reports)
    assert seen == listener.events
    driver.close()
