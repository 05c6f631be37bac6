"""The database: tables, engines (SQLite in WAL mode or PostgreSQL through psycopg 3) and the schema, created or
brought up to date at startup by the Alembic migrations in :mod:`controller.migrations` (:func:`create_schema`).

A database of a version before the migrations (no ``alembic_version`` table) is recognised by its columns and
stamped with the revision it has, then upgraded like any other.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
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
)
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger("rebalancer.database")

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
    Column("generation", String(32), nullable=True),  # one registration of the job id (None: rows of the first release)
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
    Column("decision", Text, nullable=True),  # JSON: the policy's verdict on the plan
)

#: the leader of the replicas on one PostgreSQL database (controller/leadership.py): one row per lease name
leader_lease = Table(
    "leader_lease", metadata,
    Column("name", String(64), primary_key=True),
    Column("epoch", BigInteger, nullable=False),        # fencing token: + 1 at every change of leader
    Column("holder", String(200), nullable=False),      # host:pid:nonce of the leader
    Column("url", Text, nullable=True),                 # the leader's advertised URL (REBALANCER_ADVERTISED_URL)
    Column("expires_at", Float, nullable=False),        # seconds since 1970 on the database's clock
    Column("renewed_at", Float, nullable=False),
    Column("holder_pid", Integer, nullable=True),       # the backend of the leader's lease session
)

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


MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Any:
    """The Alembic configuration of :mod:`controller.migrations`, built in code (no ``alembic.ini``), running on
    ``connection`` (or on ``url``)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@contextlib.contextmanager
def quiet_alembic() -> Iterator[None]:
    """Alembic's INFO lines ("Context impl SQLiteImpl.", "setup plugin …", one per step) held back: every start
    runs the migrations, and the server logs the one line that matters (the revision) itself. Warnings still pass."""
    logger = logging.getLogger("alembic")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with quiet_alembic():
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def legacy_revision(connection: Connection) -> str | None:
    """The revision a database made before the migrations has (None: no tables of ours, a new database)."""
    insp = inspect(connection)
    tables = set(insp.get_table_names())
    if "jobs" not in tables:
        return None
    if "generation" not in {c["name"] for c in insp.get_columns("jobs")}:
        return "0001"
    if connection.dialect.name == "postgresql":
        epoch = {c["name"]: c["type"] for c in insp.get_columns("jobs")}["epoch"]
        if isinstance(epoch, Integer) and not isinstance(epoch, BigInteger):
            return "0002"
    return "0003"


def create_schema(engine: Engine) -> str:
    """Bring the database to the newest revision (``alembic upgrade head``) and return it; a database of a
    version before the migrations is stamped with the revision its columns show first."""
    with quiet_alembic():  # importing alembic.command logs its plugins
        from alembic import command

    with engine.begin() as conn, quiet_alembic():
        cfg = alembic_config(conn)
        if current_revision(conn) is None:
            legacy = legacy_revision(conn)
            if legacy is not None:
                log.info("database without migration history: its columns are revision %s; stamping it", legacy)
                command.stamp(cfg, legacy)
        command.upgrade(cfg, "head")
        return current_revision(conn) or ""


def database_kind(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else url.split(":", 1)[0]


def sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite") or "///" not in url:
        return None
    p = url.split("///", 1)[1]
    return None if p in ("", ":memory:") else os.path.abspath(p)
