"""Per-micro-batch statistics with Spark aggregations (no Python per record).

* :func:`row_bytes_column`: an estimate of a row's serialized size in the JVM (``octet_length`` of strings and
  binaries, the type's fixed width for numbers), used for "bytes per key group" and for state sizes.
* :func:`key_group_stats`: records and bytes per key group of a (routed) DataFrame — one ``groupBy``.
* :func:`partition_record_counts`: records per Spark partition as Spark actually placed them
  (``spark_partition_id()``), the figure the demo's max/mean is computed from.
* :func:`communication_stats`: the communication between two consecutive keyed stages as
  ``(source key group, destination key group)`` counts — one ``groupBy`` over both key group columns.
* :func:`max_over_mean`: the imbalance figure of the demo (max records per partition / mean).

The per-key-group results are ``{"id": "agg/5", "load": 123.0, "bytes": 4096.0}``; communication edges are the
controller's ``{"src": "split/3", "dst": "agg/17", "rate": 12.0}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from rebalancer_client.spark.exprs import shared
from rebalancer_client.spark.routing import KG_COL, key_group_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_FIXED_WIDTH = {
    "boolean": 1, "tinyint": 1, "byte": 1, "smallint": 2, "short": 2, "int": 4, "integer": 4, "bigint": 8,
    "long": 8, "float": 4, "double": 8, "date": 4, "timestamp": 8, "timestamp_ntz": 8,
}


def sql_name(name: str) -> str:
    """A column name quoted for SQL text (backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


class NamedColumns:
    """Columns by name, each built once per process (``F.expr`` of the quoted name,
    :func:`rebalancer_client.spark.exprs.shared`): a column given by name costs three JVM calls every time it is
    used (``functions.col`` looked up by reflection), ~1 ms per name and DataFrame operation. ``cols(["a", "b"])``
    → the Columns of ``a`` and ``b``."""

    def __init__(self) -> None:
        self._built: dict[str, Column] = {}

    def __call__(self, names: Sequence[str]) -> list[Column]:
        from pyspark.sql import functions as F

        for n in names:
            if n not in self._built:
                self._built[n] = shared(("column", n), partial(F.expr, sql_name(n)))
        return [self._built[n] for n in names]


def row_bytes_column(df: DataFrame, columns: Sequence[str] | None = None) -> Column:
    """Column: the estimated size in bytes of a row's ``columns`` (default: all but the ``_rb_*`` columns).

    Strings and binaries count their byte length (``octet_length``), fixed-width types their width, decimals
    16, anything else (arrays, maps, structs) the byte length of its JSON text. Nulls count 0. Built as one SQL
    expression (one JVM call; a Column per part cost ~0.08 s per call through py4j).
    """
    from pyspark.sql import functions as F

    names = list(columns) if columns is not None else [c for c in df.columns if not c.startswith("_rb_")]
    types = dict(df.dtypes)
    parts = []
    for c in names:
        t = types[c]
        col = sql_name(c)
        if t in ("string", "binary") or t.startswith("varchar") or t.startswith("char"):
            parts.append(f"coalesce(octet_length({col}), 0)")
        elif t in _FIXED_WIDTH:
            parts.append(f"if({col} is null, 0, {_FIXED_WIDTH[t]})")
        elif t.startswith("decimal"):
            parts.append(f"if({col} is null, 0, 16)")
        else:
            parts.append(f"coalesce(octet_length(to_json(struct({col}))), 0)")
    return F.expr("cast(" + (" + ".join(parts) if parts else "0") + " as bigint)")


def key_group_stats(df: DataFrame, operator: str, *, key: str | Sequence[str] | None = None,
                    key_groups: int | None = None, bytes_col: Column | None = None,
                    kg_col: str = KG_COL) -> list[dict[str, Any]]:
    """Records (``load``) and bytes per key group: ``[{"id": "<op>/<k>", "load": n, "bytes": b}]``.

    ``df`` either already has the key group column ``kg_col`` or is given ``key`` and ``key_groups``.
    ``bytes_col``: a Column with each row's size (default :func:`row_bytes_column` of the row).
    Only key groups with at least one record are listed. One Spark aggregation.
    """
    from pyspark.sql import functions as F

    if kg_col not in df.columns:
        if key is None or key_groups is None:
            raise ValueError("df has no key group column: pass key= and key_groups=")
        df = df.withColumn(kg_col, key_group_column(key, key_groups))
    b = bytes_col if bytes_col is not None else row_bytes_column(df)
    rows = (df.groupBy(kg_col).agg(F.count(F.lit(1)).alias("n"), F.sum(b).alias("b"))
            .orderBy(kg_col).collect())
    return [{"id": f"{operator}/{int(r[0])}", "load": float(r["n"]), "bytes": float(r["b"] or 0)} for r in rows]


def partition_record_counts(df: DataFrame, n_partitions: int, weight_col: str | None = None) -> np.ndarray:
    """Records per Spark partition of ``df`` as Spark produced them (``spark_partition_id()``), shape (n,).

    With ``weight_col`` the rows' weights are summed instead (e.g. a pre-aggregated count column).
    """
    from pyspark.sql import functions as F

    agg = F.sum(weight_col) if weight_col else F.count(F.lit(1))
    rows = df.groupBy(F.spark_partition_id().alias("p")).agg(agg.alias("n")).collect()
    out = np.zeros(n_partitions, dtype=np.int64)
    for r in rows:
        out[int(r["p"])] += int(r["n"] or 0)
    return out


def communication_stats(df: DataFrame, src_key: str | Sequence[str], dst_key: str | Sequence[str], *,
                        src_operator: str, dst_operator: str, src_key_groups: int,
                        dst_key_groups: int) -> list[dict[str, Any]]:
    """Communication between two consecutive keyed stages: ``[{"src": "<op1>/<i>", "dst": "<op2>/<j>", "rate": n}]``.

    Each row of ``df`` is one record sent from the stage keyed by ``src_key`` to the stage keyed by ``dst_key``
    (e.g. a click keyed by user feeding a per-region aggregation). One Spark aggregation over both key groups.
    """
    from pyspark.sql import functions as F

    rows = (df.select(key_group_column(src_key, src_key_groups).alias("s"),
                      key_group_column(dst_key, dst_key_groups).alias("d"))
            .groupBy("s", "d").agg(F.count(F.lit(1)).alias("n")).orderBy("s", "d").collect())
    return [{"src": f"{src_operator}/{int(r['s'])}", "dst": f"{dst_operator}/{int(r['d'])}", "rate": float(r["n"])}
            for r in rows]


def max_over_mean(counts: Any) -> float:
    """max / mean of per-partition counts (1.0 = perfectly even; NaN for an empty batch)."""
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0 or c.sum() <= 0:
        return float("nan")
    return float(c.max() / c.mean())
