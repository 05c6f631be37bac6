"""``rebalancer spark-stats`` on the session's local Spark: the problem document equals a direct count."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark  # starts a local Spark session (make test-fast skips it)
pytest.importorskip("pyspark")
from pyspark.sql import functions as F  # noqa: E402

from cli.main import main  # noqa: E402
from solvers.model import Problem  # noqa: E402


def test_spark_stats_parquet_and_csv_equal_a_direct_count(spark, tmp_path, capsys):
    rng = np.random.default_rng(4)
    pdf = pd.DataFrame({"user": [f"u{i}" for i in np.minimum(rng.zipf(1.3, 1200), 300)],
                        "region": [f"r{i}" for i in rng.integers(0, 5, 1200)]})
    pq = tmp_path / "events.parquet"
    pdf.to_parquet(pq, index=False)
    csv = tmp_path / "events.csv"
    pdf.to_csv(csv, index=False)
    G = 16
    kg_of = {r["user"]: r["kg"] for r in spark.createDataFrame(pdf[["user"]].drop_duplicates())
             .select("user", F.expr(f"pmod(xxhash64(user), {G})").alias("kg")).collect()}
    loads = Counter(kg_of[u] for u in pdf["user"])
    state = Counter()
    for u in pdf["user"].unique():
        state[kg_of[u]] += len(u.encode()) + 8

    for src in (pq, csv):
        out = tmp_path / f"problem-{src.suffix[1:]}.json"
        rc = main(["spark-stats", "--input", str(src), "--key", "user", "--operator", "agg", "--key-groups",
                   str(G), "--nodes", "4", "--max-migrations", "3", "--output", str(out)])
        assert rc == 0
        doc = json.loads(out.read_text())
        problem = Problem.from_dict(doc)
        assert problem.n_nodes == 4 and problem.n_key_groups == G and problem.max_migrations == 3
        assert {kg["id"]: kg["load"] for kg in doc["key_groups"]} == \
            {f"agg/{k}": float(loads.get(k, 0)) for k in range(G)}
        assert {kg["id"]: kg["state_bytes"] for kg in doc["key_groups"]} == \
            {f"agg/{k}": state.get(k, 0) for k in range(G)}

    # communication to a second keyed stage
    out = tmp_path / "comm.json"
    assert main(["spark-stats", "--input", str(pq), "--key", "user", "--operator", "split", "--key-groups", "8",
                 "--dst-key", "region", "--dst-operator", "agg", "--dst-key-groups", "4", "--output",
                 str(out)]) == 0
    doc = json.loads(out.read_text())
    Problem.from_dict(doc)
    assert sum(e["rate"] for e in doc["communication"]) == len(pdf)
    assert len(doc["key_groups"]) == 12


def test_spark_stats_errors_are_one_line_exit_2(spark, tmp_path, capsys):
    pq = tmp_path / "e.parquet"
    pd.DataFrame({"a": ["x", "y"]}).to_parquet(pq, index=False)
    assert main(["spark-stats", "--input", str(pq), "--key", "user", "--operator", "agg",
                 "--key-groups", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "user" in err and "columns: a" in err
    assert main(["spark-stats", "--input", str(tmp_path / "missing.parquet"), "--key", "a", "--operator", "agg",
                 "--key-groups", "4"]) == 2
