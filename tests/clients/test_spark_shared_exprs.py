"""Column expressions shared by the drivers of one process (``rebalancer_client.spark.exprs``): what is shared is
keyed by everything it depends on, so drivers over other types or another routing get their own."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest

from rebalancer_client.spark import exprs


def test_one_build_per_key_and_the_least_recently_used_out(monkeypatch):
    monkeypatch.setattr(exprs, "CAPACITY", 2)
    exprs.clear()
    built: list[str] = []

    def make(name: str):
        return lambda: built.append(name) or [name]

    a = exprs.shared(("a",), make("a"))
    assert exprs.shared(("a",), make("a again")) is a          # the same object, not built again
    exprs.shared(("b",), make("b"))
    exprs.shared(("a",), make("a again"))                       # a is now the most recently used
    exprs.shared(("c",), make("c"))                             # b goes
    exprs.shared(("a",), make("a again"))
    exprs.shared(("b",), make("b again"))
    assert built == ["a", "b", "c", "b again"]
    exprs.clear()


@pytest.mark.spark
def test_drivers_of_one_process_with_other_types_and_routings_compute_their_own_results(spark):
    """Three drivers one after the other with the same key and aggregation names: decimal sums of another scale,
    then the first's types on another partition count. The second's totals keep their four decimals (a merge built
    for the first's types casts to decimal(20,2)); the third's rows sit on its own routing's partitions."""
    pytest.importorskip("pyspark")
    from pyspark.sql import functions as F

    from rebalancer_client.spark.driver import RebalancingDriver
    from rebalancer_client.spark.routing import KG_COL

    rng = np.random.default_rng(5)
    for partitions, scale in ((2, 2), (3, 4), (3, 2)):
        schema = f"key string, v decimal({8 + scale},{scale})"
        frames = [[(f"k{int(r)}", Decimal(int(x)).scaleb(-scale)) for r, x in
                   zip(rng.integers(0, 30, 120), rng.integers(0, 10**6, 120), strict=True)] for _ in range(3)]
        d = RebalancingDriver(spark, key="key", aggregations={"total": ("sum", "v"), "n": ("count", None)},
                              key_groups=12, partitions=partitions)
        for b, rows in enumerate(frames):
            d.process(spark.createDataFrame(rows, schema), b)
        every = spark.createDataFrame([r for f in frames for r in f], schema)
        exp = every.groupBy("key").agg(F.sum("v").alias("total"), F.count(F.lit(1)).alias("n")).toPandas()
        frame = d.state_frame()
        assert frame is not None and dict(frame.dtypes)["total"] == f"decimal({18 + scale},{scale})"
        got = frame.toPandas().set_index("key").sort_index()
        exp = exp.set_index("key").sort_index()
        assert got.index.tolist() == exp.index.tolist()
        assert got["total"].tolist() == exp["total"].tolist() and got["n"].tolist() == exp["n"].tolist()
        assert d.state is not None and d.state.df is not None
        placed = d.state.df.select(KG_COL, F.spark_partition_id().alias("p")).distinct().collect()
        assert all(int(r["p"]) == int(d.routing.partition_of[r[KG_COL]]) for r in placed)
        assert d.state.fallback_merges == 0
        d.close()
