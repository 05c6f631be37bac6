"""Routing, placement, statistics and keyed state on a real local Spark (session-scoped SparkSession)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark  # starts a local Spark session (make test-fast skips it)
pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

from rebalancer_client.spark.routing import (  # noqa: E402
    KG_COL,
    ROUTE_COL,
    RoutingTable,
    hash_preimages,
    key_group_column,
    partition_ids,
    spark_hash_int,
)
from rebalancer_client.spark.state import KeyedState  # noqa: E402
from rebalancer_client.spark.stats import communication_stats, key_group_stats, partition_record_counts  # noqa: E402


def _zipf_frame(spark, rng, rows, keys=400, z=1.3):
    ranks = np.minimum(rng.zipf(z, rows), keys)
    pdf = pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 100, rows).astype("int64")})
    return spark.createDataFrame(pdf), pdf


def test_hash_preimages_match_spark_hash(spark):
    ns = (1, 3, 8, 13)
    data = [(n, p, int(v)) for n in ns for p, v in enumerate(hash_preimages(n))]
    rows = (spark.createDataFrame(data, "n int, p int, v int")
            .select("n", "p", "v", F.pmod(F.hash("v"), F.col("n")).alias("spark_p"), F.hash("v").alias("h"))
            .collect())
    assert len(rows) == sum(ns)
    for r in rows:
        assert r["spark_p"] == r["p"], r
        assert r["h"] == spark_hash_int(r["v"])


@pytest.mark.parametrize("method", ["expr", "broadcast"])
def test_routing_table_places_each_key_group_on_its_partition(spark, method):
    rng = np.random.default_rng(7)
    G, n = 30, 5
    table = RoutingTable("agg", rng.integers(0, n, G), n)
    table.partition_of[:4] = 4  # a skewed table: partition 4 holds more key groups
    df, _ = _zipf_frame(spark, rng, 3000)
    placed = table.route_and_place(df, "key", method=method, with_kg=True)
    assert placed.rdd.getNumPartitions() == n
    rows = placed.select(KG_COL, ROUTE_COL, F.spark_partition_id().alias("p")).distinct().collect()
    seen = {}
    for r in rows:
        assert r[ROUTE_COL] % G == r[KG_COL]  # the route value encodes the key group
        seen.setdefault(r[KG_COL], set()).add(r["p"])
    assert len(seen) >= 20  # most key groups occur
    for kg, parts in seen.items():
        assert parts == {int(table.partition_of[kg])}, f"key group {kg} on {parts}"


def test_statistics_equal_a_direct_count(spark):
    rng = np.random.default_rng(11)
    G, n = 24, 4
    table = RoutingTable.contiguous("agg", G, n)
    df, pdf = _zipf_frame(spark, rng, 2500)
    # the key group of each distinct key, computed once with a SQL expression, then counted in Python
    kg_of = {r["key"]: r["kg"] for r in
             df.select("key").distinct().select("key", F.expr(f"pmod(xxhash64(key), {G})").alias("kg")).collect()}
    direct = Counter(kg_of[k] for k in pdf["key"])
    direct_bytes = Counter()
    for k in pdf["key"]:
        direct_bytes[kg_of[k]] += len(k.encode()) + 8  # string bytes + a bigint

    stats = key_group_stats(df, "agg", key="key", key_groups=G)
    assert {s["id"]: s["load"] for s in stats} == {f"agg/{k}": float(c) for k, c in direct.items()}
    assert {s["id"]: s["bytes"] for s in stats} == {f"agg/{k}": float(c) for k, c in direct_bytes.items()}

    state = KeyedState(spark, "key", {"count": ("count", None), "total": ("sum", "v")}, table)
    partials = state.update(df)
    recs, nbytes = partials.key_group_records(G)
    assert {k: int(recs[k]) for k in range(G) if recs[k]} == dict(direct)
    assert {k: int(nbytes[k]) for k in range(G) if nbytes[k]} == dict(direct_bytes)
    per_partition = np.zeros(n, dtype=int)
    for kg, c in direct.items():
        per_partition[table.partition_of[kg]] += c
    assert partials.partition_records().tolist() == per_partition.tolist()
    part2, recs2, bytes2 = partials.summary(G)
    assert part2.tolist() == per_partition.tolist() and (recs2 == recs).all() and (bytes2 == nbytes).all()
    placed = table.route_and_place(df, "key")
    assert partition_record_counts(placed, n).tolist() == per_partition.tolist()
    KeyedState.release(partials)
    state.unpersist()


def test_communication_between_stages_equals_a_direct_count(spark):
    rng = np.random.default_rng(3)
    pdf = pd.DataFrame({"user": [f"u{i}" for i in rng.integers(0, 50, 800)],
                        "region": [f"r{i}" for i in rng.integers(0, 6, 800)]})
    df = spark.createDataFrame(pdf)
    kg = df.select("user", "region", key_group_column("user", 10).alias("s"),
                   key_group_column("region", 4).alias("d")).distinct().collect()
    su = {r["user"]: r["s"] for r in kg}
    dr = {r["region"]: r["d"] for r in kg}
    direct = Counter((su[u], dr[r]) for u, r in zip(pdf["user"], pdf["region"], strict=True))
    edges = communication_stats(df, "user", "region", src_operator="split", dst_operator="agg",
                                src_key_groups=10, dst_key_groups=4)
    assert {(e["src"], e["dst"]): e["rate"] for e in edges} == \
        {(f"split/{s}", f"agg/{d}"): float(c) for (s, d), c in direct.items()}


def _flux_routing(table, loads, state_bytes, budget, epoch):
    """A plan computed locally with the project's Flux planner from the batch statistics."""
    from solvers import registry
    from solvers.model import Problem

    problem = Problem.from_arrays(load=loads, current=table.partition_of, capacity=np.ones(table.n_partitions),
                                  state_bytes=state_bytes, max_migrations=budget,
                                  node_ids=partition_ids(table.n_partitions),
                                  kg_ids=[f"agg/{k}" for k in range(table.key_groups)])
    plan = registry.solve("flux", problem)
    return RoutingTable("agg", plan.assignment, table.n_partitions, epoch=epoch)


@pytest.fixture(params=[True, False], ids=["union keeps placement", "union loses placement"])
def union_placement(spark, request):
    """Spark ≥ 4 keeps the hash partitioning of a union of two children that have the same one; with that off (as
    on earlier versions) every merge and move must fall back to an explicit repartition and stay exact."""
    key = "spark.sql.unionOutputPartitioning"
    before = spark.conf.get(key, "true")
    spark.conf.set(key, str(request.param).lower())
    yield request.param
    spark.conf.set(key, before)


def test_keyed_state_survives_migrations(spark, union_placement):
    rng = np.random.default_rng(5)
    G, n = 24, 4
    table = RoutingTable.contiguous("agg", G, n)
    state = KeyedState(spark, "key", {"count": ("count", None), "total": ("sum", "v")}, table)
    inputs = []
    migrations = 0
    for b in range(4):
        df, pdf = _zipf_frame(spark, rng, 1500)
        inputs.append(pdf)
        partials = state.update(df)
        loads, _ = partials.key_group_records(G)
        KeyedState.release(partials)
        if b in (1, 2):  # switch routing between batches, as a plan would
            old = state.routing
            new = _flux_routing(old, loads, state.state_bytes_per_key_group(), budget=4, epoch=b)
            if b == 2:  # and force one more move so that something moves even if Flux is content
                new.partition_of[0] = (new.partition_of[0] + 1) % n
            report = state.apply_routing(new)
            moved = set(old.moved(new).tolist())
            assert set(report.moved_key_groups) == moved and moved
            assert set(report.changed_key_groups) <= moved  # only moved key groups change partition
            assert report.moved_bytes > 0
            migrations += report.migrations
    # 3 merges into a state and 2 moves: without the union's placement each falls back
    assert state.fallback_merges == (0 if union_placement else 3 + 2)

    # placement still exact after the migrations
    rows = state.df.select(KG_COL, F.spark_partition_id().alias("p")).distinct().collect()
    assert all(int(state.routing.partition_of[r[KG_COL]]) == r["p"] for r in rows)
    # and the measure of what a move changes sees the same: each key group on its partition, every row counted
    measured = state._kg_partitions()
    assert {k: (lo, hi) for k, (lo, hi, _, _) in measured.items()} == \
        {r[KG_COL]: (r["p"], r["p"]) for r in rows}
    assert sum(n for _, _, n, _ in measured.values()) == state.df.count()

    # no key lost or doubled, and every key's state equals the input
    every = pd.concat(inputs)
    expected = every.groupby("key").agg(count=("v", "size"), total=("v", "sum"))
    got = state.to_pandas().set_index("key").sort_index()
    assert got.index.is_unique
    assert got.index.tolist() == sorted(expected.index.tolist())
    assert (got["count"] == expected.loc[got.index, "count"]).all()
    assert (got["total"] == expected.loc[got.index, "total"]).all()
    assert int(got["count"].sum()) == len(every)
    assert migrations >= 2
    state.unpersist()
