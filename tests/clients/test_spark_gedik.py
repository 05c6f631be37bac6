"""The Gedik adapter: explicit map in the JVM + consistent hash in Arrow batches, equal to the function document."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark  # starts a local Spark session (make test-fast skips it)
pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

from rebalancer_client import RebalancerClient  # noqa: E402
from rebalancer_client.spark.gedik import CHANNEL_COL, GedikPartitioner, build_spec  # noqa: E402
from solvers.gedik import route_keys  # noqa: E402


def test_gedik_adapter_routes_like_the_document_and_places_exactly(spark, controller):
    rng = np.random.default_rng(9)
    pdf = pd.DataFrame({"key": [f"k{i}" for i in np.minimum(rng.zipf(1.2, 3000), 2000)]})
    df = spark.createDataFrame(pdf)
    spec = build_spec(df, "key", 4, algorithm="redist", top=200)
    assert abs(sum(spec["frequencies"].values()) - min(1.0, sum(spec["frequencies"].values()))) < 1e-9
    with RebalancerClient(controller.url, timeout=30) as rc:
        doc = rc.partitioning(spec)  # the controller builds the function (POST /v1/partitioning)
    assert doc.channels == 4 and doc.explicit, "a Zipf stream must have heavy keys in the explicit map"

    part = GedikPartitioner(doc)
    placed = part.partition(df, "key")
    rows = placed.select("key", CHANNEL_COL, F.spark_partition_id().alias("p")).distinct().collect()
    keys = [r["key"] for r in rows]
    expected = dict(zip(keys, route_keys(doc, keys).tolist(), strict=True))
    assert all(r[CHANNEL_COL] == expected[r["key"]] for r in rows)  # Algorithm 1 exactly
    assert all(r["p"] == r[CHANNEL_COL] for r in rows)  # every record on its channel's partition
    assert {r[CHANNEL_COL] for r in rows if r["key"] in doc.explicit} <= set(range(4))
