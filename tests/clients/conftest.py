"""Fixtures of the client tests: one local SparkSession for the whole session; ``controller``: the app served by
uvicorn on a thread (:class:`tests.helpers.server.ThreadServer`, the server's own defaults) for the session, for the
tests of the client and the Spark driver over real HTTP; ``make_controller``: real ``rebalancer serve`` processes
(:class:`tests.helpers.server.ServerProcess`) for the tests where the process matters (a controller frozen, stopped
or restarted); ``app_server``: the app in process (:class:`tests.helpers.server.InProcessServer`) for the Python
client's behaviour tests, through ``RebalancerClient(app_server.url, transport=app_server.transport())``."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.server import UNSTARVED, InProcessServer, ServerProcess, ThreadServer


def _warm(srv: ServerProcess | ThreadServer) -> None:
    """Return once both solver workers have answered a plan, so that a test's first solve does not wait for a
    worker's start (drivers here use timeouts of 1.5 s; on a loaded machine a cold worker took longer)."""
    problem = {"nodes": [{"id": "a"}, {"id": "b"}], "key_groups": [{"id": "k", "node": "a", "load": 1.0}]}
    with ThreadPoolExecutor(2) as ex, srv.client(timeout=120) as c:
        codes = list(ex.map(lambda _: c.post("/v1/plans", json={"problem": problem, "algorithm": "flux"}).status_code,
                            range(2)))
    assert codes == [200, 200], codes


@pytest.fixture(scope="session")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """The server's own defaults (two solver workers, 5 s request wait; the workers not niced), no tokens, a fresh
    SQLite file."""
    d = tmp_path_factory.mktemp("controller")
    with ThreadServer(f"sqlite:///{d}/rebalancer.db", test_settings=False, settings=UNSTARVED).start() as srv:
        _warm(srv)
        yield srv


@pytest.fixture(scope="session")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    d = tmp_path_factory.mktemp("app_server")
    with InProcessServer(database_url=f"sqlite:///{d}/rebalancer.db", test_settings=False, **UNSTARVED).start() as srv:
        yield srv


@pytest.fixture
def make_controller(tmp_path: Path) -> Iterator[Callable[[], ServerProcess]]:
    """Start extra controllers that a test may stop."""
    started: list[ServerProcess] = []

    def make() -> ServerProcess:
        db = tmp_path / f"c{len(started)}.db"
        c = ServerProcess(f"sqlite:///{db}", test_settings=False, settings=UNSTARVED, log_path=db.with_suffix(".log"))
        started.append(c.start())
        _warm(c)
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
def settle() -> Callable[..., None]:
    """``settle(client, job_id)``: wait until no automatic round of the job is being solved, so that a Spark test
    whose next batch must see a round's placement does not depend on how fast the machine solves (a stream whose
    batches take longer than a solve)."""

    def wait(client: Any, job_id: str, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            d = client.get_job(job_id).decision
            if d is None or d.reason != "started":
                return
            time.sleep(0.05)
        raise AssertionError(f"the automatic round of {job_id} did not finish within {timeout} s")

    return wait
