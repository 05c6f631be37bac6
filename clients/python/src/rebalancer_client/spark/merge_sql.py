"""How a state value and a batch's partial of one mergeable aggregation combine, as Spark SQL
(:meth:`rebalancer_client.spark.state.KeyedState.merge`; the aggregations and their merge functions, ``MERGE``)."""

from __future__ import annotations

from rebalancer_client.spark.stats import sql_name as _q

#: the aggregation that merges partial values of each mergeable aggregation
MERGE = {"count": "sum", "sum": "sum", "min": "min", "max": "max"}


FIXED = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean", "date", "timestamp", "timestamp_ntz")


def combinable(fn: str, dtype: str) -> bool:
    """True when a state value of aggregation ``fn`` and type ``dtype`` (the batch's partial) combines with the
    batch's by an expression of that type: a sum of ``bigint`` or ``double``, a minimum or maximum of a fixed-width
    type (a decimal sum widens its type; strings would not aggregate in a hash map)."""
    return dtype in (("bigint", "double") if MERGE[fn] == "sum" else FIXED)


def combined(out: str, fn: str, order: str, this: str) -> str:
    """SQL: the merged value of ``out``: the value of the state row with the highest ``order`` (``max_by``, which
    skips rows whose order is null: the batch's) combined with the batch's (``fn`` over the batch's row only)."""
    old, new = f"max_by({_q(out)}, {order})", f"{MERGE[fn]}(if({this}, {_q(out)}, null))"
    if MERGE[fn] == "sum":
        return f"coalesce({old} + {new}, {old}, {new})"
    return f"{'least' if MERGE[fn] == 'min' else 'greatest'}({old}, {new})"


def kept(out: str, fn: str, dtype: str) -> str:
    """SQL: the classic merge of ``out`` over the union, in the type of the batch's partial ``dtype``: a sum of
    decimals widens its type by 10 digits (as ``groupBy().sum()`` does once), which merged every batch would change
    the stored type each time — and a restart would then read files of different types."""
    merged = f"{MERGE[fn]}({_q(out)})"
    return f"cast({merged} as {dtype})" if MERGE[fn] == "sum" and dtype.startswith("decimal") else merged
