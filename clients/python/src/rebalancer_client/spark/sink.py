"""Exactly-once output for ``foreachBatch``: one directory per batch id, written by overwrite and renamed.

Spark replays the last micro-batch after a driver restart with the same ``batch_id``; an output written as
``<path>/batch_id=<id>/`` *by overwrite* is then idempotent, which together with the driver's versioned state
(:mod:`rebalancer_client.spark.store`) gives each batch's output exactly once — the scheme of Spark's own
``foreachBatch`` documentation ("use the batchId to deduplicate"). The files go to ``<path>/_tmp/…`` first and
the directory is renamed into place, so a reader (``spark.read.parquet(path)``, which ignores ``_``-prefixed
names and reads ``batch_id`` as a partition column) never sees half a batch. ``<path>/_tmp`` is removed after each
batch, so what a writer killed mid-batch left there goes with the batch that replaces it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rebalancer_client.spark.jvm import hadoop_conf, jvm

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class BatchIdSink:
    """``sink(df, batch_id)``: write ``df`` to ``<path>/batch_id=<batch_id>/`` (overwrite, temp dir + rename).

    Args:
        path: the output directory (any Hadoop path).
        fmt: a Spark data source format (default ``"parquet"``).
        options: writer options.
    """

    def __init__(self, path: str, fmt: str = "parquet", options: Mapping[str, str] | None = None):
        self.path = str(path).rstrip("/")
        self.fmt = fmt
        self.options = dict(options or {})

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        spark = df.sparkSession
        hadoop_path = jvm(spark).org.apache.hadoop.fs.Path

        def path(p: str) -> Any:
            return hadoop_path(p)

        fs = path(self.path).getFileSystem(hadoop_conf(spark))
        tmp = f"{self.path}/_tmp/{int(batch_id)}-{uuid.uuid4().hex}"
        final = f"{self.path}/batch_id={int(batch_id)}"
        df.write.format(self.fmt).options(**self.options).mode("overwrite").save(tmp)
        if fs.exists(path(final)):
            fs.delete(path(final), True)
        if not fs.rename(path(tmp), path(final)):
            raise OSError(f"cannot move {tmp} to {final}")
        fs.delete(path(f"{self.path}/_tmp"), True)  # one writer per path: nothing else is in flight there
