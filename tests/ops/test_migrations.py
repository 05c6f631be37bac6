"""Schema migrations: Alembic revisions in ``controller/migrations`` bring any database to head at
start — a new one, one at an older revision, and one made before the migrations existed (no ``alembic_version``),
keeping its rows; the model in ``controller/database.py`` and the migrations agree. SQLite and real PostgreSQL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from controller import database as db
from controller.settings import Settings
from tests.helpers.cli import run_cli
from tests.helpers.server import InProcessServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from test_api_postgres import pg_url  # noqa: E402,F401  (the throwaway cluster fixture)

SPEC = ('{"algorithm": "flux", "params": {}, "budget": {}, "window_batches": 2, "communication_cost": 0.0, '
        '"time_limit_s": 1.0, "auto": {}}')
KGS = '{"ids": ["k0", "k1"], "operators": ["", ""], "state_bytes": [0, 0]}'
NODES = ('[{"id": "a", "capacity": 1.0, "removing": false}, {"id": "b", "capacity": 1.0, "removing": false}]')


def first_release(conn: sa.Connection) -> None:
    """The first release's tables, as its ``metadata.create_all`` made them (raw DDL), with one job whose latest
    epoch (3) swapped its two key groups, and a proposal."""
    pg = conn.dialect.name == "postgresql"
    blob, dbl = ("BYTEA", "DOUBLE PRECISION") if pg else ("BLOB", "FLOAT")
    conn.exec_driver_sql(
        f"CREATE TABLE jobs (job_id VARCHAR(200) NOT NULL PRIMARY KEY, spec TEXT NOT NULL, registration TEXT NOT NULL, "
        f"kgs TEXT NOT NULL, nodes TEXT NOT NULL, assignment TEXT NOT NULL, epoch INTEGER NOT NULL, "
        f"last_round_batch INTEGER, created_at {dbl} NOT NULL, updated_at {dbl} NOT NULL)")
    conn.exec_driver_sql(
        f"CREATE TABLE epochs (job_id VARCHAR(200) NOT NULL, epoch INTEGER NOT NULL, kind VARCHAR(20) NOT NULL, "
        f"proposal_id VARCHAR(64), nodes TEXT NOT NULL, assignment TEXT NOT NULL, plan TEXT, "
        f"created_at {dbl} NOT NULL, PRIMARY KEY (job_id, epoch))")
    conn.exec_driver_sql(
        f"CREATE TABLE stats_batches (job_id VARCHAR(200) NOT NULL, batch_id INTEGER NOT NULL, epoch INTEGER NOT "
        f"NULL, kg_index {blob} NOT NULL, load {blob} NOT NULL, state_bytes {blob}, comm {blob}, "
        f"received_at {dbl} NOT NULL, PRIMARY KEY (job_id, batch_id))")
    conn.exec_driver_sql(
        f"CREATE TABLE proposals (id VARCHAR(64) NOT NULL PRIMARY KEY, job_id VARCHAR(200) NOT NULL, "
        f"base_epoch INTEGER NOT NULL, status VARCHAR(20) NOT NULL, algorithm VARCHAR(100) NOT NULL, "
        f"params TEXT NOT NULL, time_limit_s {dbl} NOT NULL, \"window\" TEXT, plan TEXT, error TEXT, "
        f"executed_epoch INTEGER, created_at {dbl} NOT NULL)")
    conn.exec_driver_sql("CREATE INDEX ix_proposals_job_id ON proposals (job_id)")
    conn.execute(sa.text(
        "INSERT INTO jobs (job_id, spec, registration, kgs, nodes, assignment, epoch, last_round_batch, created_at, "
        "updated_at) VALUES ('j', :spec, '{}', :kgs, :nodes, '[\"a\", \"b\"]', 3, NULL, 0, 0)"),
        {"spec": SPEC, "kgs": KGS, "nodes": NODES})
    conn.exec_driver_sql("INSERT INTO epochs VALUES ('j', 3, 'execute', NULL, '[]', '[\"b\", \"a\"]', NULL, 0)")
    conn.exec_driver_sql("INSERT INTO proposals VALUES ('p1', 'j', 2, 'executed', 'flux', '{}', 1.0, NULL, NULL, "
                         "NULL, 3, 0)")


def schema_differences(engine: sa.Engine) -> list:
    """What ``alembic``'s autogenerate would write to make the database equal ``controller.database.metadata``
    (SQLite's INTEGER is 64-bit whatever the declared width: BIGINT vs INTEGER is no difference there)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    def compare_type(_ctx, _insp, _meta_col, insp_type, meta_type):
        if engine.dialect.name == "sqlite" and isinstance(insp_type, sa.Integer) and isinstance(meta_type,
                                                                                                   sa.Integer):
            return False
        return None  # the default comparison

    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": compare_type})
        return compare_metadata(ctx, db.metadata)


def check_upgraded_and_served(url: str) -> None:
    engine = db.make_engine(url)
    with InProcessServer(database_url=url, warm=False) as srv, srv.client() as c:
        r = c.get("/v1/jobs/j")
        assert r.status_code == 200, r.text
        job = r.json()
        assert job["epoch"] == 3 and job["key_groups"] == ["k0", "k1"] and job["placement"] == [1, 0], job  # latest
        assert job["auto"] is False and job["policy"]["cooldown_batches"] == 3  # the first release's config read
        p1 = c.get("/v1/jobs/j/proposals/p1").json()
        assert p1["status"] == "executed" and p1["decision"] is None  # made before proposals had a verdict
        # the server writes into the upgraded tables: a new batch id beyond 32 bits and a new epoch
        body = {"batch_id": 2**40, "epoch": 3, "key_groups": [{"id": "k0", "load": 5.0}, {"id": "k1", "load": 1.0}]}
        assert c.post("/v1/jobs/j/stats", json=body).status_code in (200, 202)
    with engine.connect() as conn:
        assert db.current_revision(conn) == db.head_revision()
        assert conn.exec_driver_sql("SELECT batch_id FROM stats_batches").scalar() == 2**40
    assert schema_differences(engine) == []
    engine.dispose()


def test_a_new_sqlite_database_is_created_at_head_and_equals_the_model(tmp_path):
    engine = db.make_engine(f"sqlite:///{tmp_path}/new.db")
    assert db.create_schema(engine) == db.head_revision() == "0005"
    assert schema_differences(engine) == []
    assert db.create_schema(engine) == "0005"  # idempotent


def test_the_comparison_sees_a_model_change(tmp_path):
    """The guard above can fail: a column the migrations do not create shows up as a difference."""
    engine = db.make_engine(f"sqlite:///{tmp_path}/drift.db")
    db.create_schema(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE proposals DROP COLUMN generation")
    diffs = schema_differences(engine)
    assert any(d[0] == "add_column" and d[3].name == "generation" for d in diffs), diffs


def test_a_first_release_sqlite_database_is_stamped_upgraded_and_served(tmp_path):
    url = f"sqlite:///{tmp_path}/old.db"
    engine = db.make_engine(url)
    with engine.begin() as conn:
        first_release(conn)
        assert db.legacy_revision(conn) == "0001"
    engine.dispose()
    check_upgraded_and_served(url)


@pytest.mark.parametrize("revision", ["0001", "0003"])
def test_a_database_at_an_older_revision_is_upgraded(tmp_path, revision):
    from alembic import command

    url = f"sqlite:///{tmp_path}/r1.db"
    engine = db.make_engine(url)
    with engine.begin() as conn:
        command.upgrade(db.alembic_config(conn), revision)
    with engine.begin() as conn:
        assert db.current_revision(conn) == revision
        conn.execute(sa.text(
            "INSERT INTO jobs (job_id, spec, registration, kgs, nodes, assignment, epoch, last_round_batch, "
            "created_at, updated_at) VALUES ('j', :spec, '{}', :kgs, :nodes, '[\"a\", \"b\"]', 3, NULL, 0, 0)"),
            {"spec": SPEC, "kgs": KGS, "nodes": NODES})
        conn.exec_driver_sql("INSERT INTO epochs VALUES ('j', 3, 'execute', NULL, '[]', '[\"b\", \"a\"]', NULL, 0)")
        conn.exec_driver_sql("INSERT INTO proposals (id, job_id, base_epoch, status, algorithm, params, time_limit_s, "
                             "executed_epoch, created_at) VALUES ('p1', 'j', 2, 'executed', 'flux', '{}', 1.0, 3, 0)")
    engine.dispose()
    check_upgraded_and_served(url)


def test_db_cli_shows_and_upgrades_the_revision(tmp_path):
    url = f"sqlite:///{tmp_path}/cli.db"
    engine = db.make_engine(url)
    with engine.begin() as conn:
        first_release(conn)
    engine.dispose()
    r = run_cli("db", "current", "--database", url)
    assert r.returncode == 0 and "none" in r.stdout and "0001" in r.stdout, r  # no history yet; its columns say 0001
    r = run_cli("db", "upgrade", "--database", url)
    assert r.returncode == 0 and "0005" in r.stdout, r
    r = run_cli("db", "current", "--database", url)
    assert r.returncode == 0 and "0005 (head)" in r.stdout, r
    r = run_cli("db", "history")
    assert r.returncode == 0 and all(f"{n:04d}" in r.stdout for n in (1, 2, 3, 4)), r
    r = run_cli("db", "current", "--database", "nosuch://x")
    assert r.returncode == 2 and "database" in r.stderr and "Traceback" not in r.stderr, r


@pytest.mark.postgres
def test_a_first_release_postgres_database_is_widened_upgraded_and_served(pg_url):  # noqa: F811
    url = Settings(database_url=pg_url).sqlalchemy_url()
    engine = db.make_engine(url)
    with engine.begin() as conn:
        for t in ("alembic_version", "proposals", "stats_batches", "epochs", "jobs"):
            conn.exec_driver_sql(f"DROP TABLE IF EXISTS {t}")
        first_release(conn)
        assert db.legacy_revision(conn) == "0001"
        types = {c["name"]: c["type"] for c in sa.inspect(conn).get_columns("stats_batches")}
        assert not isinstance(types["batch_id"], sa.BigInteger)  # 32-bit: the test starts where users were
    engine.dispose()
    check_upgraded_and_served(url)
    engine = db.make_engine(url)
    with engine.connect() as conn:
        types = {c["name"]: c["type"] for c in sa.inspect(conn).get_columns("stats_batches")}
        assert isinstance(types["batch_id"], sa.BigInteger)
    engine.dispose()


def test_db_upgrade_refuses_while_a_server_holds_the_database(tmp_path):
    from controller.lease import lease_for

    url = f"sqlite:///{tmp_path}/held.db"
    lease = lease_for(Settings(database_url=url))
    lease.acquire()  # what a running server holds
    try:
        r = run_cli("db", "upgrade", "--database", url)
        assert r.returncode == 2 and "--database" in r.stderr and str(os.getpid()) in r.stderr, r
    finally:
        lease.release()
    assert run_cli("db", "upgrade", "--database", url).returncode == 0
