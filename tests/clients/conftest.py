"""Fixtures of the client tests: one local SparkSession for the whole session, real controllers over HTTP."""

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
    """A real controller: ``python -m cli.main serve`` on a free port with a temp SQLite database."""

    def __init__(self, db_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.pop("REBALANCER_API_TOKENS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(self.port),
             "--database", f"sqlite:///{db_path}", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self._wait()

    def _wait(self, timeout: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"controller exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("controller did not become healthy")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="session")
def controller(tmp_path_factory):
    c = Controller(tmp_path_factory.mktemp("controller") / "rebalancer.db")
    yield c
    c.stop()


@pytest.fixture
def make_controller(tmp_path):
    """Start extra controllers that a test may stop."""
    started: list[Controller] = []

    def make() -> Controller:
        c = Controller(tmp_path / f"c{len(started)}.db")
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


@pytest.fixture(scope="session")
def spark():
    pyspark = pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need this venv (pandas, pyarrow)
    s = (SparkSession.builder.master("local[2]").appName("rebalancer-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.default.parallelism", "2")
         .config("spark.sql.adaptive.enabled", "true")
         .config("spark.driver.memory", "1g")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
    del pyspark


@pytest.fixture
def unused_port() -> int:
    return free_port()
