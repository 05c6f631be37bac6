"""``benchmarks.bench_spark_state`` against the driver as it is: both sides of the aggregation on the same files, a
restart of each, and what the benchmark reports from them (a benchmark that no longer runs on the driver's API is
found here, not by the next person who runs ``make bench``). In the suite's session and controller, on a few
hundred rows: the numbers are not measured here, only that they are there and mean what the benchmark says."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark]


def test_the_aggregation_runs_on_both_sides_restarts_and_reports_its_ratios(spark, controller, tmp_path):
    from benchmarks import bench_spark_state as bench
    from rebalancer_client import RebalancerClient

    args = argparse.Namespace(batches=4, rows=400, keys=300, restarts=1, cold_restarts=0, controller_url=controller.url)
    with RebalancerClient(controller.url, timeout=10, retries=1) as client:
        doc = bench._workload(spark, args, tmp_path, client, "aggregate", 1.1)
    builtin, ours = doc["builtin"], doc["rebalancer"]
    for side in (builtin, ours):
        assert side["batches"] == args.batches and len(side["batch_s"]) == args.batches  # one per file
        assert 0 < side["p50_batch_s"] <= side["p95_batch_s"]
        assert side["spark_jobs_per_batch"] >= 1 and side["bytes_written_per_batch"] > 0
        assert len(side["recovery_runs_s"]) == args.restarts and side["recovery_s"] > 0
    # ours: the durable state under the checkpoint; Spark's: its state store's files
    assert ours["state_bytes"] > 0 and ours["state_dir_bytes"] > 0
    assert builtin["state_dir_bytes"] > 0
    assert doc["p50_ratio_rebalancer_over_builtin"] == pytest.approx(ours["p50_batch_s"] / builtin["p50_batch_s"],
                                                                     rel=1e-2)
    assert doc["recovery_ratio_rebalancer_over_builtin"] > 0 and doc["target_ratio"] == 1.25
