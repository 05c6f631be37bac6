"""A real controller (``python -m cli.main serve``) on a free port, spoken to over real HTTP with httpx.

``server`` is one SQLite-backed server for the whole session; tests that restart or configure a server start
their own :class:`Server` (each runs in its own process group so that ``kill -9`` takes its solver workers too).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, database_url: str, env: dict[str, str] | None = None, log_path: Path | None = None):
        self.database_url = database_url
        self.env = dict(env or {})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = log_path

    def start(self, timeout: float = 60.0) -> Server:
        env = dict(os.environ)
        env.update({"REBALANCER_SOLVER_WORKERS": "1", "REBALANCER_MAX_TIME_LIMIT_S": "2",
                    "REBALANCER_REQUEST_WAIT_S": "60", "PYTHONUNBUFFERED": "1"})  # a loaded CI box: no 202s
        env.update(self.env)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port),
             "--database", self.database_url, "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}; see {self.log_path}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill9()
        raise RuntimeError("server did not become healthy")

    def kill9(self) -> None:
        """kill -9 the server and its solver workers (its whole process group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()
        # leftovers of the group (forkserver, workers)
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60.0, **kw)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("server")
    srv = Server(f"sqlite:///{d}/rebalancer.db", log_path=d / "server.log").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def client(server: Server):
    with server.client() as c:
        yield c
