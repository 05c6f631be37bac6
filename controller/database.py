"""The database: tables, engines (SQLite in WAL mode or PostgreSQL through psycopg 3) and the schema, created or
brought up to date at startup.

Columns added after the first release are added to an existing database (``ALTER TABLE … ADD COLUMN``), and on
PostgreSQL the ids first created as 32-bit ``INTEGER`` are widened to ``BIGINT`` (batch ids and epochs are signed
64-bit integers; SQLite's INTEGER is 64-bit already).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.engine import Engine

metadata = MetaData()

jobs = Table(
    "jobs", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("spec", Text, nullable=False),          # JSON: JobConfig.as_dict()
    Column("registration", Text, nullable=False),  # JSON: the topology as registered (for idempotent PUT)
    Column("kgs", Text, nullable=False),           # JSON: {"ids": [...], "operators": [...], "state_bytes": [...]}
    Column("nodes", Text, nullable=False),         # JSON: [{"id", "capacity", "removing"}]
    Column("assignment", Text, nullable=False),    # JSON: [node id per key group, in kgs order]
    Column("epoch", BigInteger, nullable=False),
    Column("last_round_batch", BigInteger, nullable=True),  # batch id of the last auto round (cooldown)
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("generation", String(32), nullable=True),  # one registration of the job id (None: before issue 12)
)

epochs = Table(
    "epochs", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("epoch", BigInteger, primary_key=True),
    Column("kind", String(20), nullable=False),    # register | execute | auto | nodes
    Column("proposal_id", String(64), nullable=True),
    Column("nodes", Text, nullable=False),
    Column("assignment", Text, nullable=False),
    Column("plan", Text, nullable=True),           # JSON: moves, metrics, solver, algorithm
    Column("created_at", Float, nullable=False),
)

stats = Table(
    "stats_batches", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("batch_id", BigInteger, primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("kg_index", LargeBinary, nullable=False),   # int32 array: key group indices
    Column("load", LargeBinary, nullable=False),       # float64 array
    Column("state_bytes", LargeBinary, nullable=True),  # float64 array (NaN = not reported)
    Column("comm", LargeBinary, nullable=True),        # int32 src, int32 dst, float64 rate (concatenated)
    Column("received_at", Float, nullable=False),
)

proposals = Table(
    "proposals", metadata,
    Column("id", String(64), primary_key=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("base_epoch", BigInteger, nullable=False),
    Column("status", String(20), nullable=False),  # pending | ready | failed | executed
    Column("algorithm", String(100), nullable=False),
    Column("params", Text, nullable=False),
    Column("time_limit_s", Float, nullable=False),
    Column("window", Text, nullable=True),
    Column("plan", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("executed_epoch", BigInteger, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("generation", String(32), nullable=True),  # the job's generation when it was proposed
)

#: columns added after the first release: ``create_schema`` adds them to an existing database.
_ADDED_COLUMNS = {"jobs": ("generation", "VARCHAR(32)"), "proposals": ("generation", "VARCHAR(32)")}

#: 64-bit id columns that a PostgreSQL database of an earlier version has as INTEGER.
_WIDENED = {"jobs": ("epoch", "last_round_batch"), "epochs": ("epoch",), "stats_batches": ("batch_id", "epoch"),
            "proposals": ("base_epoch", "executed_epoch")}


def make_engine(url: str, sqlite_synchronous: str = "NORMAL") -> Engine:
    """An engine for ``url``; SQLite gets WAL, the chosen ``synchronous`` level and its directory created."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        sync = sqlite_synchronous.upper()
        if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            sync = "NORMAL"

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    return engine


def create_schema(engine: Engine) -> None:
    """Create the tables, and add the columns a database of an earlier version lacks."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        insp = inspect(conn)
        for table, (col, sql_type) in _ADDED_COLUMNS.items():
            if col not in {c["name"] for c in insp.get_columns(table)}:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {col} {sql_type}"))
        if conn.dialect.name == "postgresql":
            for table, cols in _WIDENED.items():
                types = {c["name"]: c["type"] for c in insp.get_columns(table)}
                for col in cols:
                    if isinstance(types.get(col), Integer) and not isinstance(types[col], BigInteger):
                        conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN {col} TYPE BIGINT"))


def database_kind(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else url.split(":", 1)[0]


def sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite") or "///" not in url:
        return None
    p = url.split("///", 1)[1]
    return None if p in ("", ":memory:") else os.path.abspath(p)
