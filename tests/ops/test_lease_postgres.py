"""One server per database on PostgreSQL: the session advisory lock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "api"))
from test_api_postgres import pg_url  # noqa: E402,F401  (the throwaway cluster fixture)

from controller.lease import LeaseHeld, ServerLease  # noqa: E402
from controller.settings import Settings  # noqa: E402

pytestmark = pytest.mark.postgres


def test_second_lease_on_one_postgres_database_is_refused(pg_url: str) -> None:  # noqa: F811
    url = Settings(database_url=pg_url).sqlalchemy_url()
    first = ServerLease(url, None).acquire()
    try:
        with pytest.raises(LeaseHeld, match=r"in use by another rebalancer server \(rebalancer pid \d+"):
            ServerLease(url, None).acquire()
    finally:
        first.release()
    again = ServerLease(url, None).acquire()  # released: the next server takes it
    again.release()


def test_a_killed_holder_frees_the_postgres_lease(pg_url: str) -> None:  # noqa: F811
    import os
    import signal
    import subprocess
    import time

    url = Settings(database_url=pg_url).sqlalchemy_url()
    root = Path(__file__).parents[2]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from controller.lease import ServerLease; "
         "ServerLease(sys.argv[1], None).acquire(); print('held', flush=True); time.sleep(600)", url],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeld):
            ServerLease(url, None).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        deadline = time.time() + 30
        while True:  # the server notices the closed connection and ends the session (and its lock)
            try:
                ServerLease(url, None).acquire().release()
                break
            except LeaseHeld:
                assert time.time() < deadline, "the killed holder's lease was never released"
                time.sleep(0.2)
    finally:
        holder.kill()
