"""A routed, placed and pre-aggregated micro-batch of the mergeable aggregations (:class:`KeyedState.partials
<rebalancer_client.spark.state.KeyedState.partials>`), and what it measures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rebalancer_client.spark.routing import B_COL, KG_COL, N_COL


@dataclass
class BatchPartials:
    """A routed, placed and pre-aggregated micro-batch (cached until :meth:`KeyedState.release`)."""

    df: Any                              # DataFrame (_rb_route, _rb_kg, key..., aggregates..., _rb_n, _rb_b)
    n_partitions: int

    keys: int = 0                        # distinct keys of the batch (set by :meth:`summary`)

    def summary(self, key_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One Spark job: (records per partition (n,), records per key group (G,), bytes per key group (G,)),
        the partition measured with ``spark_partition_id()``; also counts the batch's distinct keys."""
        from pyspark.sql import functions as F

        rows = (self.df.select(F.spark_partition_id().alias("p"), KG_COL, N_COL, B_COL)
                .groupBy("p", KG_COL).agg(F.sum(N_COL).alias("n"), F.sum(B_COL).alias("b"),
                                          F.count(F.lit(1)).alias("k")).collect())
        part = np.zeros(self.n_partitions, dtype=np.int64)
        n = np.zeros(key_groups, dtype=np.int64)
        b = np.zeros(key_groups, dtype=np.int64)
        keys = 0
        for r in rows:
            c = int(r["n"] or 0)
            part[int(r["p"])] += c
            n[int(r[KG_COL])] += c
            b[int(r[KG_COL])] += int(r["b"] or 0)
            keys += int(r["k"])
        self.keys = keys
        return part, n, b

    def partition_records(self) -> np.ndarray:
        """Records of the batch per Spark partition, measured with ``spark_partition_id()``."""
        from pyspark.sql import functions as F

        rows = (self.df.groupBy(F.spark_partition_id().alias("p")).agg(F.sum(N_COL).alias("n")).collect())
        out = np.zeros(self.n_partitions, dtype=np.int64)
        for r in rows:
            out[int(r["p"])] += int(r["n"] or 0)
        return out

    def key_group_records(self, key_groups: int) -> tuple[np.ndarray, np.ndarray]:
        """(records, bytes) per key group of the batch, shape (G,) each."""
        from pyspark.sql import functions as F

        rows = self.df.groupBy(KG_COL).agg(F.sum(N_COL).alias("n"), F.sum(B_COL).alias("b")).collect()
        n = np.zeros(key_groups, dtype=np.int64)
        b = np.zeros(key_groups, dtype=np.int64)
        for r in rows:
            n[int(r[KG_COL])] = int(r["n"] or 0)
            b[int(r[KG_COL])] = int(r["b"] or 0)
        return n, b
