"""One server per SQLite database, whatever path names the file: the lock is on the file's identity (device,
inode), so a hard link to a served database does not start a second server beside the first."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from controller.lease import LeaseHeld, ServerLease
from tests.helpers.server import ServerProcess, ThreadServer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock, /proc/locks")


def test_a_hard_link_to_a_held_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    db = tmp_path / "a" / "reb.db"
    first = ServerLease(f"sqlite:///{db}", db).acquire()
    try:
        os.link(db, tmp_path / "hard.db")
        with pytest.raises(LeaseHeld, match=rf"in use by another rebalancer server \(pid {os.getpid()} "):
            ServerLease(f"sqlite:///{tmp_path / 'hard.db'}", tmp_path / "hard.db").acquire()
    finally:
        first.release()
    ServerLease(f"sqlite:///{tmp_path / 'hard.db'}", tmp_path / "hard.db").acquire().release()  # free again


def test_serve_refuses_a_hard_link_to_the_database_another_server_serves(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    db = tmp_path / "a" / "reb.db"
    with ThreadServer(f"sqlite:///{db}") as first:  # this process holds the lease, as a server process would
        with first.client() as c:  # the first server has a job: a second one must never serve it
            assert c.put("/v1/jobs/j", json={"nodes": ["n0", "n1"], "operators": [{"id": "op", "key_groups": 4}],
                                             "algorithm": "flux"}).status_code in (200, 201)
        os.link(db, tmp_path / "hard.db")
        second = ServerProcess(f"sqlite:///{tmp_path / 'hard.db'}", log_path=tmp_path / "second.log").spawn()
        try:
            deadline = time.monotonic() + 120
            while second.proc is not None and second.proc.poll() is None:  # refused at once, or serving
                assert not second.healthy(), "a second server serves the same database through a hard link"
                assert time.monotonic() < deadline, "the second server neither exited nor served"
                time.sleep(0.1)
        finally:
            second.kill9()
        assert second.proc is not None and second.proc.returncode == 2, second.log_text()[-2000:]
        last = second.log_text().strip().splitlines()[-1]
        assert f"is in use by another rebalancer server (pid {os.getpid()} " in last, last
