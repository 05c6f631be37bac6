"""Fixtures of the Spark process tests: a real controller over HTTP (subprocess, temp SQLite), free ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Controller:
    """``python -m cli.main serve`` on a free port with a temporary SQLite database."""

    def __init__(self, db_path: Path):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.pop("REBALANCER_API_TOKENS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(self.port), "--database",
             f"sqlite:///{db_path}", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("the controller exited")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("the controller did not become healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    c = Controller(tmp_path_factory.mktemp("controller") / "rebalancer.db")
    yield c
    c.stop()
