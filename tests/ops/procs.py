"""A real ``rebalancer serve`` for the operations tests (its process tree is read with :mod:`tests.helpers.procs`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers.procs import alive, cmdline, descendants, wait_gone
from tests.helpers.server import free_port

__all__ = ["ROOT", "Serve", "alive", "cmdline", "descendants", "free_port", "wait_gone"]

ROOT = Path(__file__).resolve().parents[2]


class Serve:
    """``python -m cli.main serve`` on a free port (its own session, so that the test can signal the server pid
    alone: what a process manager or the OOM killer does)."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self.db = f"sqlite:///{tmp}/ops-{self.port}.db"
        full = {**os.environ, "REBALANCER_SOLVER_WORKERS": "2", "PYTHONUNBUFFERED": "1", **(env or {})}
        full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
        argv = [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--log-level", "info", *args]
        if "--database" not in args:
            argv += ["--database", self.db]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=full, stdout=self.log, stderr=self.log,
                                     start_new_session=True)

    def wait_healthy(self, timeout: float = 60.0) -> Serve:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def wait_children(self, n: int, timeout: float = 90.0) -> list[int]:
        """Wait until the server has ``n`` descendants (resource tracker, forkserver, workers)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            kids = [p for p in descendants(self.proc.pid) if alive(p)]
            if len(kids) >= n:
                return kids
            time.sleep(0.2)
        raise AssertionError(f"only {descendants(self.proc.pid)} after {timeout} s")

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def cleanup(self, pids: list[int] = ()) -> None:  # type: ignore[assignment]
        """Leave nothing behind whatever the test found (the server's group, then any listed straggler)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in pids:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self.log.close()
