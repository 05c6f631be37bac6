"""What the Spark driver reads from the JVM through py4j per batch: a batch's statistics of thousands of keys are
exact and come back in answers short enough not to stall (``rebalancer_client.spark.jvm.PY4J_PIECE``: a py4j answer
longer than ~8,000 characters waited ~44 ms for a delayed acknowledgement, on every batch)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("pyspark")

from rebalancer_client.spark.config import DurabilityConfig  # noqa: E402
from rebalancer_client.spark.driver import RebalancingDriver  # noqa: E402
from rebalancer_client.spark.jvm import PY4J_PIECE  # noqa: E402
from rebalancer_client.spark.routing import key_group_column  # noqa: E402

pytestmark = pytest.mark.spark

G = 12


def _frame(rng: np.random.Generator, keys: int) -> pd.DataFrame:
    return pd.DataFrame({"key": [f"key-{i}" for i in rng.permutation(keys)], "v": rng.integers(0, 50, keys)})


def _answers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the py4j answers from now on (until ``monkeypatch.undo()``)."""
    import py4j.clientserver as cs

    lengths: list[int] = []
    send = cs.ClientServerConnection.send_command

    def recording(self: object, command: str) -> object:
        answer = send(self, command)
        lengths.append(len(answer) if isinstance(answer, str) else 0)
        return answer

    monkeypatch.setattr(cs.ClientServerConnection, "send_command", recording)
    return lengths


def test_a_batch_of_thousands_of_keys_is_measured_exactly_in_short_py4j_answers(spark, tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    d = RebalancingDriver(spark, key="key", aggregations={"count": ("count", None), "total": ("sum", "v")},
                          key_groups=G, partitions=3,
                          durability=DurabilityConfig(state_dir=str(tmp_path / "s"), keep_s=0))
    d.process(spark.createDataFrame(_frame(rng, 300)), 0)
    batch = spark.createDataFrame(_frame(rng, 4000))  # ~40,000 characters of statistics: one per touched key
    lengths = _answers(monkeypatch)
    d.process(batch, 1)
    monkeypatch.undo()
    d.close()
    assert max(lengths) <= PY4J_PIECE + 8, max(lengths)  # a piece and the answer's own few characters
    record = json.loads((tmp_path / "s" / "_commits" / f"{1:020d}.json").read_text())
    expected = (batch.groupBy(key_group_column("key", G).alias("kg")).count().toPandas()
                .set_index("kg")["count"].reindex(range(G), fill_value=0))
    assert record["extra"]["load"] == expected.tolist() and sum(expected) == 4000


def test_a_restart_reads_long_listings_and_records_in_short_answers(spark, tmp_path, monkeypatch):
    """3,000 key groups make a commit record of ~20,000 characters and 130 versions a listing of ~13,000; a restart
    reads both (and the state) in answers of at most a piece each."""
    aggs = {"count": ("count", None), "total": ("sum", "v")}
    state_dir = tmp_path / "s"

    def driver() -> RebalancingDriver:
        return RebalancingDriver(spark, key="key", aggregations=aggs, key_groups=3000, partitions=2,
                                 durability=DurabilityConfig(state_dir=str(state_dir), keep_s=0, snapshot_every=200,
                                                             retain_versions=200, snapshot_on_close=False))

    rng = np.random.default_rng(6)
    frame = _frame(rng, 500)
    d = driver()
    d.process(spark.createDataFrame(frame), 0)
    d.close()
    commits = state_dir / "_commits"
    record = (commits / f"{0:020d}.json").read_text()
    assert len(record) > 2 * PY4J_PIECE
    for v in range(1, 130):  # versions with no change: the same record under the next numbers (a long run's listing)
        (commits / f"{v:020d}.json").write_text(record.replace('"version": 0', f'"version": {v}', 1))
        (state_dir / f"v{v:020d}" / "delta").mkdir(parents=True)
    assert len(",".join(str(p) for p in commits.iterdir())) > PY4J_PIECE
    lengths = _answers(monkeypatch)
    d2 = driver()
    d2.start()
    got = d2.state_frame().toPandas()
    monkeypatch.undo()
    d2.close()
    assert d2.committed == 129 and max(lengths) <= PY4J_PIECE + 8, (d2.committed, max(lengths))
    exp = frame.groupby("key")["v"].agg(["size", "sum"])
    got = got.set_index("key").sort_index()
    assert got.index.tolist() == sorted(exp.index) and (got["count"] == exp["size"].sort_index()).all()
