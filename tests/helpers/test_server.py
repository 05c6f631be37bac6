"""The test servers themselves: the in-process app runs its lifespan (load, writer, solver pool) and shuts it down;
the server on a thread is real HTTP with the app's settings and fails at once when its lifespan does; a server
process takes any free port and leaves nothing of its process group behind."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.helpers.procs import group_pids, wait_gone
from tests.helpers.server import InProcessServer, ServerProcess, ThreadServer, app_client, listening_port

JOB = {"nodes": ["a", "b"], "operators": [{"id": "agg", "key_groups": 4}], "algorithm": "flux"}


def test_in_process_lifespan_persists_and_reloads(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/db.sqlite"
    with InProcessServer(database_url=url, warm=False).start() as srv, srv.client() as c:
        assert c.put("/v1/jobs/j1", json=JOB).status_code == 201
        r = c.post("/v1/jobs/j1/stats", json={"batch_id": 1, "epoch": 0,
                                              "key_groups": [{"id": "agg/0", "load": 5.0}]})
        assert r.status_code == 202, r.text
        assert srv.controller.ctx.started  # the lifespan opened the writer and the pool
        pool = srv.controller.ctx.pool
    assert srv.controller.ctx.pool is pool and srv._life is None  # stopped
    with InProcessServer(database_url=url, warm=False).start() as again, again.client() as c:
        job = c.get("/v1/jobs/j1").json()  # loaded from the file by the second lifespan
        assert job["epoch"] == 0 and job["window"]["batches"] == [1]


def test_in_process_requests_from_threads_run_concurrently(tmp_path: Path):
    with InProcessServer(database_url=f"sqlite:///{tmp_path}/db.sqlite", warm=False).start() as srv:
        codes: list[int] = []

        def put(i: int) -> None:
            with srv.client() as c:
                codes.append(c.put(f"/v1/jobs/t{i}", json=JOB).status_code)

        threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [201] * 8
        with srv.client() as c:
            assert len(c.get("/v1/jobs").json()) >= 8


def test_app_client_runs_on_the_callers_loop(tmp_path: Path):
    from controller.settings import Settings

    async def main() -> None:
        settings = Settings(database_url=f"sqlite:///{tmp_path}/db.sqlite", solver_workers=1, solver_nice=0)
        async with app_client(settings) as (c, ctl):
            assert (await c.put("/v1/jobs/j1", json=JOB)).status_code == 201
            assert "j1" in ctl.ctx.jobs and ctl.ctx.started  # the lifespan ran on this loop

    asyncio.run(main())


@pytest.mark.slow  # starts a real server process
def test_server_process_stop_leaves_no_process_of_its_group(tmp_path: Path):
    srv = ServerProcess(f"sqlite:///{tmp_path}/db.sqlite", log_path=tmp_path / "server.log", log_level="info",
                        args=("--access-log",)).start()
    # no port given: the server took a free one, which uvicorn names too
    assert f"Uvicorn running on http://127.0.0.1:{srv.port} " in srv.log_text()
    with srv.client() as c:
        assert c.put("/v1/jobs/j1", json=JOB).status_code == 201
    kids = srv.wait_children(1)  # resource tracker, forkserver, workers
    pgid = srv.pid
    assert group_pids(pgid), "the server runs in its own process group"
    assert "PUT /v1/jobs/j1" in srv.log_text()
    srv.stop()
    assert group_pids(pgid) == [] and wait_gone(kids, timeout=0) == []


def test_listening_port_is_the_port_a_process_listens_on_and_none_before():
    """What :class:`ServerProcess` reads to learn the port its server chose (``serve --port 0``)."""
    code = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1], "
            "flush=True); sys.stdin.readline(); s.listen(); print('listening', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        assert listening_port(proc.pid) is None  # bound, not listening yet
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "listening"
        assert listening_port(proc.pid) == port
    finally:
        proc.kill()
        proc.wait()
    assert listening_port(proc.pid) is None  # ended


def test_a_thread_server_serves_real_http_and_its_stop_runs_the_shutdown(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/db.sqlite"
    with ThreadServer(url, settings={"api_tokens": "t"}).start() as srv:
        with srv.client() as c:
            assert c.put("/v1/jobs/j1", json=JOB).status_code == 401  # the settings reach the app
            assert c.put("/v1/jobs/j1", json=JOB, headers={"Authorization": "Bearer t"}).status_code == 201
            assert c.get("/healthz").headers["server"] == "uvicorn"
    with pytest.raises(httpx.TransportError):
        httpx.get(srv.url + "/healthz", timeout=2)  # stopped: the port is closed
    with InProcessServer(database_url=url, warm=False, api_tokens="t").start() as again, again.client() as c:
        assert c.get("/v1/jobs/j1", headers={"Authorization": "Bearer t"}).status_code == 200  # written at the stop


def test_a_thread_server_whose_lifespan_fails_says_so_at_once(tmp_path: Path):
    from controller.lease import ServerLease

    db = tmp_path / "db.sqlite"
    held = ServerLease(f"sqlite:///{db}", db).acquire()  # another server's: the lifespan cannot take it
    try:
        with pytest.raises(RuntimeError, match="stopped while starting"):
            ThreadServer(f"sqlite:///{db}").start(timeout=60)
    finally:
        held.release()
