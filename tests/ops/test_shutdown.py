"""``rebalancer serve`` leaves no process behind: SIGTERM (after and during warm-up) and kill -9 of the server pid
alone end the forkserver, the resource tracker and every solver worker."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from procs import Serve, cmdline, unix_sockets, wait_gone  # noqa: E402

from controller.lifeline import SUN_PATH_MAX  # noqa: E402

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"), pytest.mark.slow]


def _describe(pids: list[int]) -> list[str]:
    return [f"{p}: {cmdline(p)[:100]}" for p in pids]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_no_child_outlives_the_server(tmp_path: Path, sig: signal.Signals) -> None:
    """Nothing of the server's processes is left; after SIGTERM (a stop that was asked for) nothing of its files
    either — multiprocessing's ``pymp-*`` folder of the forkserver's socket is removed at exit — and the status is 0.
    Before kill -9, the server was started with a ``TMPDIR`` too long for a Unix socket's path (pytest-xdist's
    folders are): it starts all the same, its socket under ``/tmp``."""
    if sig == signal.SIGTERM:  # short enough for the socket's path whatever pytest's folders are
        scratch = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))
    else:
        scratch = tmp_path / ("t" * (SUN_PATH_MAX - len("/pymp-12345678/listener-12345678")))
        scratch.mkdir()
    srv = Serve(tmp_path, env={"TMPDIR": str(scratch)})
    kids: list[int] = []
    sockets: list[str] = []
    try:
        srv.wait_healthy()
        kids = srv.wait_children(4)  # resource tracker, forkserver, 2 workers
        with httpx.Client(base_url=srv.url, timeout=60) as c:  # the workers have solved something
            doc = {"problem": {"nodes": [{"id": "a"}, {"id": "b"}],
                               "key_groups": [{"id": "k1", "node": "a", "load": 3}, {"id": "k2", "node": "a",
                                                                                      "load": 1}]},
                   "algorithm": "flux"}
            assert c.post("/v1/plans", json=doc).status_code == 200
        assert bool(list(scratch.iterdir())) == (sig == signal.SIGTERM), list(scratch.iterdir())  # the socket
        # what a kill -9 leaves: the folder of the forkserver's socket (removed below)
        sockets = [s for k in kids if "forkserver" in cmdline(k) for s in unix_sockets(k) if "/pymp-" in s]
        assert sig == signal.SIGTERM or [s for s in sockets if s.startswith("/tmp/pymp-")], sockets
        srv.proc.send_signal(sig)
        status = srv.proc.wait(timeout=30)
        left = wait_gone(kids, timeout=10)
        assert not left, _describe(left)
        log = srv.text()
        assert "leaked semaphore" not in log, log[-2000:]
        if sig == signal.SIGTERM:
            assert "Traceback" not in log, log[-3000:]
            assert status == 0, (status, log[-2000:])
            assert not list(scratch.iterdir()), [p.name for p in scratch.rglob("*")]
    finally:
        srv.cleanup(kids)
        shutil.rmtree(scratch, ignore_errors=True)
        for path in sockets:  # (after SIGTERM the server removed it)
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)


@pytest.mark.slow
def test_sigterm_during_warm_up(tmp_path: Path) -> None:
    srv = Serve(tmp_path)
    kids: list[int] = []
    try:
        srv.wait_healthy()
        kids = srv.wait_children(3)  # tracker + forkserver + the first worker, still importing the planners
        time.sleep(0.3)
        srv.proc.send_signal(signal.SIGTERM)
        srv.proc.wait(timeout=30)
        time.sleep(0.5)
        left = wait_gone(kids, timeout=10)
        assert not left, _describe(left)
        log = srv.text()
        assert "leaked semaphore" not in log, log[-2000:]
        # a worker still starting is cancelled: the thread reading its pipe ends with EOFError, expected, not logged
        assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]
    finally:
        srv.cleanup(kids)


@pytest.mark.slow
def test_restarts_do_not_accumulate_processes(tmp_path: Path) -> None:
    """Three kill -9 / restart cycles on one database: nothing of the earlier servers survives."""
    everything: list[int] = []
    db = f"sqlite:///{tmp_path}/cycles.db"
    try:
        for _ in range(3):
            srv = Serve(tmp_path, args=("--database", db))
            srv.wait_healthy()
            everything += srv.wait_children(4)
            srv.proc.kill()  # the server alone (its own session): its children must follow it
            srv.proc.wait(timeout=30)
        left = wait_gone(everything, timeout=10)
        assert not left, _describe(left)
    finally:
        for p in wait_gone(everything, timeout=0):
            os.kill(p, signal.SIGKILL)
