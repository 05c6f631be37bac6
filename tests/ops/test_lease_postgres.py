"""The replicas' lease on PostgreSQL (controller/leadership.py), without servers: one leader at a time, a standby
that knows where it is, and a leader whose session ends (kill -9) replaced at once, long before its lease expires."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "api"))
from test_api_postgres import pg_url  # noqa: E402,F401  (the throwaway cluster fixture)

from controller import repository as repo  # noqa: E402
from controller.leadership import ReplicaLeadership  # noqa: E402
from controller.lease import ServerLease  # noqa: E402
from controller.settings import Settings  # noqa: E402

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).parents[2]
#: an hour-long lease: whatever happens below happens without waiting for an expiry
SLOW = {"lease_ttl_s": 3600.0, "lease_renew_s": 1.0}


def settings(pg_url: str, name: str) -> Settings:  # noqa: F811
    return Settings(database_url=pg_url, advertised_url=f"http://{name}:8000", **SLOW)


def test_postgres_servers_are_replicas_and_one_leads(pg_url: str) -> None:  # noqa: F811
    s = settings(pg_url, "a")
    url = s.sqlalchemy_url()
    ServerLease(url, None).acquire().release()  # no one-server lock on PostgreSQL: replicas share the database
    engine = repo.make_engine(url)
    a, b = ReplicaLeadership(url, s), ReplicaLeadership(url, settings(pg_url, "b"))
    try:
        a.migrate(lambda: repo.create_schema(engine))
        first = a.step()
        assert first is not None and b.step() is None and b.leader_url == "http://a:8000"
        assert a.step() == first and b.step() is None  # renewed; still standing by
        a.stop()  # a graceful stop hands the lease over at once
        assert b.step() == first + 1 and b.leader_url == "http://b:8000"
    finally:
        a.stop()
        b.stop()
        engine.dispose()


def test_a_killed_leader_is_replaced_before_its_lease_expires(pg_url: str) -> None:  # noqa: F811
    s = settings(pg_url, "b")
    url = s.sqlalchemy_url()
    code = ("import sys, time; from controller.leadership import ReplicaLeadership; "
            "from controller.settings import Settings; from controller import repository as repo; "
            "s = Settings(database_url=sys.argv[1], advertised_url='http://a:8000', lease_ttl_s=3600, "
            "lease_renew_s=1); l = ReplicaLeadership(s.sqlalchemy_url(), s); "
            "l.migrate(lambda: repo.create_schema(repo.make_engine(s.sqlalchemy_url()))); "
            "print('term', l.step(), flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code, pg_url], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    b = ReplicaLeadership(url, s)
    try:
        assert holder.stdout is not None
        term = int(holder.stdout.readline().split()[1])
        assert b.step() is None and b.leader_url == "http://a:8000"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        deadline = time.monotonic() + 60
        while b.step() is None:  # the database ends the dead session (and its advisory lock) at once
            assert time.monotonic() < deadline, "the killed leader was not replaced"
            time.sleep(0.1)
        assert b.term == term + 1
    finally:
        holder.kill()
        b.stop()


def test_db_upgrade_waits_for_the_replicas_migration_lock(pg_url: str) -> None:  # noqa: F811
    """``rebalancer db upgrade`` beside replicas migrates under their lock: it waits while a replica migrates."""
    from sqlalchemy import text

    from controller.leadership import MIGRATE_KEYS

    engine = repo.make_engine(Settings(database_url=pg_url).sqlalchemy_url())
    cmd = [sys.executable, "-m", "cli.main", "db", "upgrade", "--database", pg_url]
    try:
        with engine.connect() as conn:  # a replica migrating
            conn.execute(text("SELECT pg_advisory_lock(:a, :b)"), {"a": MIGRATE_KEYS[0], "b": MIGRATE_KEYS[1]})
            conn.commit()
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                proc.wait(timeout=8)
                raise AssertionError(f"db upgrade did not wait for the migration lock: {proc.communicate()}")
            except subprocess.TimeoutExpired:
                pass
            conn.execute(text("SELECT pg_advisory_unlock(:a, :b)"), {"a": MIGRATE_KEYS[0], "b": MIGRATE_KEYS[1]})
            conn.commit()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "(head)" in out, (out, err)
    finally:
        engine.dispose()
