"""``rebalancer spark-stats``: turn an event log into a problem document with Spark (the statistics pipeline).

``rebalancer spark-stats --input events.parquet --key COLUMN --operator NAME --key-groups G [--nodes N]
[--master URL] --output problem.json``

Reads Parquet (a file or a directory) or CSV (with a header line), computes with Spark aggregations — the same
JVM key → key group function as the streaming integration, ``pmod(xxhash64(key), G)`` — per key group:

* ``load``: the number of records (``--load records``, default) or their estimated bytes (``--load bytes``);
* ``state_bytes``: the state a keyed count would hold, Σ over its distinct keys of (key bytes + 8);

and writes the problem document of docs/design.md: nodes ``p0..p{N-1}``, key groups ``<operator>/<k>`` on contiguous
ranges of nodes (as Flink assigns them), an optional budget. With ``--dst-key`` (and ``--dst-operator``,
``--dst-key-groups``) the records also count as communication from the ``--key`` stage to the ``--dst-key`` stage,
and the destination key groups join the problem. Runs on ``local[*]`` by default, on a cluster with ``--master``.
The document goes to ``--output`` (or stdout); progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cli.common import CLIError, write_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("spark-stats", help="event log (Parquet/CSV) -> problem document, with Spark",
                       description=plain(__doc__.split("\n\n")[0]))
    p.add_argument("--input", required=True, help="Parquet file or directory, or a CSV file with a header")
    p.add_argument("--format", choices=["auto", "parquet", "csv"], default="auto",
                   help="input format (auto: csv for a .csv or .tsv file, else parquet)")
    p.add_argument("--key", required=True, help="key column (comma-separated for a composite key)")
    p.add_argument("--operator", required=True, help="operator name (key group ids are <operator>/<k>)")
    p.add_argument("--key-groups", type=int, required=True, help="G, key groups of the operator")
    p.add_argument("--nodes", type=int, default=8, help="nodes p0..p{N-1} (default 8)")
    p.add_argument("--load", choices=["records", "bytes"], default="records",
                   help="a key group's load: its records or their estimated bytes")
    p.add_argument("--max-migrations", type=int, default=None, help="budget.max_migrations")
    p.add_argument("--max-migration-bytes", type=float, default=None, help="budget.max_migration_bytes")
    p.add_argument("--dst-key", default=None, help="key column of the next keyed stage (communication)")
    p.add_argument("--dst-operator", default=None, help="operator name of the next keyed stage")
    p.add_argument("--dst-key-groups", type=int, default=None, help="key groups of the next keyed stage")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    p.add_argument("--output", default=None, help="problem document path (default stdout)")
    p.set_defaults(func=run)


def plain(text: str) -> str:
    """A docstring paragraph as terminal text: reStructuredText's literal quotes (two backticks) removed."""
    return " ".join(text.replace("``", "").split())


def _check(args: argparse.Namespace) -> None:
    if args.key_groups < 1:
        raise CLIError("--key-groups must be >= 1")
    if args.nodes < 1:
        raise CLIError("--nodes must be >= 1")
    for name in ("max_migrations", "max_migration_bytes"):
        v = getattr(args, name)
        if v is not None and v < 0:
            raise CLIError(f"--{name.replace('_', '-')} must be >= 0")
    if args.dst_key and not (args.dst_operator and args.dst_key_groups):
        raise CLIError("--dst-key needs --dst-operator and --dst-key-groups")
    if args.dst_key and args.dst_operator == args.operator:
        raise CLIError("--dst-operator must differ from --operator")
    if args.dst_key_groups is not None and args.dst_key_groups < 1:
        raise CLIError("--dst-key-groups must be >= 1")
    if not Path(args.input).exists():
        raise CLIError(f"input not found: {args.input}")


def _read(spark: Any, args: argparse.Namespace) -> Any:
    fmt = args.format
    if fmt == "auto":
        path = Path(args.input)
        fmt = "csv" if path.suffix.lower() in (".csv", ".tsv") else "parquet"
    try:
        if fmt == "csv":
            return spark.read.option("header", "true").csv(args.input)
        return spark.read.parquet(args.input)
    except Exception as exc:  # noqa: BLE001 - any reader failure is a user error here
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CLIError(f"cannot read {args.input} as {fmt}: {first[:300]}") from None


def build_problem(df: Any, *, key: list[str], operator: str, key_groups: int, nodes: int, load: str = "records",
                  budget: dict[str, Any] | None = None, dst_key: list[str] | None = None,
                  dst_operator: str | None = None, dst_key_groups: int | None = None) -> dict[str, Any]:
    """The problem document of an event DataFrame (see the module docstring). Three Spark aggregations."""
    from pyspark.sql import functions as F

    from rebalancer_client.spark.routing import RoutingTable, key_group_column
    from rebalancer_client.spark.stats import communication_stats, row_bytes_column

    node_ids = [f"p{i}" for i in range(nodes)]

    def groups(keycols: list[str], op: str, G: int) -> list[dict[str, Any]]:
        kb = F.lit(0)
        for c in keycols:
            kb = kb + F.coalesce(F.octet_length(F.col(f"`{c}`").cast("string")), F.lit(0))
        per_key = (df.select(key_group_column(keycols, G).alias("kg"), *[F.col(f"`{c}`") for c in keycols],
                             row_bytes_column(df).alias("b"), kb.alias("kb"))
                   .groupBy("kg", *keycols).agg(F.count(F.lit(1)).alias("n"), F.sum("b").alias("b"),
                                                F.first("kb").alias("kb")))
        rows = (per_key.groupBy("kg").agg(F.sum("n").alias("n"), F.sum("b").alias("b"),
                                          F.sum(F.col("kb") + 8).alias("state")).collect())
        stats = {int(r["kg"]): r for r in rows}
        table = RoutingTable.contiguous(op, G, nodes)
        out = []
        for k in range(G):
            r = stats.get(k)
            value = 0.0 if r is None else float(r["n"] if load == "records" else (r["b"] or 0))
            out.append({"id": f"{op}/{k}", "operator": op, "node": node_ids[int(table.partition_of[k])],
                        "load": value, "state_bytes": 0 if r is None else int(r["state"] or 0)})
        return out

    doc: dict[str, Any] = {"nodes": [{"id": n, "capacity": 1.0, "removing": False} for n in node_ids],
                 "key_groups": groups(key, operator, key_groups)}
    if dst_key:
        assert dst_operator is not None and dst_key_groups is not None, "checked with the options"
        doc["key_groups"] += groups(dst_key, dst_operator, dst_key_groups)
        doc["communication"] = communication_stats(df, key, dst_key, src_operator=operator,
                                                   dst_operator=dst_operator, src_key_groups=key_groups,
                                                   dst_key_groups=dst_key_groups)
    if budget and any(v is not None for v in budget.values()):
        doc["budget"] = budget
    return doc


def run(args: argparse.Namespace) -> int:
    _check(args)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CLIError("pyspark is not installed (pip install 'rebalancer-server[spark]')") from None
    from solvers.model import Problem

    key = [c.strip() for c in args.key.split(",") if c.strip()]
    dst_key = [c.strip() for c in args.dst_key.split(",") if c.strip()] if args.dst_key else None
    active = SparkSession.getActiveSession()
    print(f"spark-stats: reading {args.input} on {args.master if active is None else 'the active session'}",
          file=sys.stderr)
    spark = active or (SparkSession.builder.master(args.master).appName("rebalancer spark-stats")
                       .config("spark.ui.enabled", "false").getOrCreate())
    if active is None:
        spark.sparkContext.setLogLevel("ERROR")
    try:
        df = _read(spark, args)
        missing = [c for c in key + (dst_key or []) if c not in df.columns]
        if missing:
            raise CLIError(f"column(s) {', '.join(missing)} not in {args.input} (columns: {', '.join(df.columns)})")
        doc = build_problem(df, key=key, operator=args.operator, key_groups=args.key_groups, nodes=args.nodes,
                            load=args.load, budget={"max_migrations": args.max_migrations,
                                                    "max_migration_bytes": args.max_migration_bytes},
                            dst_key=dst_key, dst_operator=args.dst_operator, dst_key_groups=args.dst_key_groups)
    finally:
        if active is None:
            spark.stop()
    Problem.from_dict(doc)  # the document is valid by construction; never write an invalid one
    total = sum(kg["load"] for kg in doc["key_groups"])
    print(f"spark-stats: {len(doc['key_groups'])} key groups on {args.nodes} nodes, total load {total:g}",
          file=sys.stderr)
    write_json(doc, args.output)
    return 0
