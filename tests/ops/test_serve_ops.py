"""``rebalancer serve`` as an operator meets it: the database path resolved and logged, one
server per database, unknown settings refused, a busy port refused before anything is loaded, the readiness probe,
and Prometheus metrics from ``prometheus_client`` with per-job gauges."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "api"))
from api_helpers import register, skewed_stats  # noqa: E402
from procs import ROOT, Serve, free_port  # noqa: E402

from tests.helpers.cli import run_cli  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock, /proc")


def serve_once(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "cli.main", "serve", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60, env=full)


def wait_ready(url: str, timeout: float = 120.0) -> dict:
    deadline = time.time() + timeout
    last: dict = {}
    while time.time() < deadline:
        r = httpx.get(url + "/readyz", timeout=5)
        last = r.json()
        if r.status_code == 200:
            return last
        assert r.status_code == 503 and last["status"] == "not ready", r.text
        time.sleep(0.3)
    raise AssertionError(f"not ready after {timeout} s: {last}")


def test_unknown_setting_is_an_error() -> None:
    r = run_cli("serve", "--port", "0", env={**os.environ, "REBALANCER_MAX_TIME_LIMIT": "30"})  # exits at once
    assert r.returncode == 2, r.stderr[-800:]
    last = r.stderr.strip().splitlines()[-1]
    assert "unknown setting REBALANCER_MAX_TIME_LIMIT" in last and "REBALANCER_MAX_TIME_LIMIT_S" in last, last


def test_settings_rule_out_unknown_names_and_impossible_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    import pydantic

    from controller.settings import Settings

    monkeypatch.setenv("REBALANCER_SOLVER_WORKRES", "4")
    with pytest.raises(pydantic.ValidationError, match="REBALANCER_SOLVER_WORKERS"):
        Settings()
    monkeypatch.delenv("REBALANCER_SOLVER_WORKRES")
    monkeypatch.setenv("REBALANCER_URL", "http://x")  # the clients' variable is not the server's business
    Settings()
    with pytest.raises(pydantic.ValidationError, match="what-if holds one per candidate"):
        Settings(max_concurrent_solves=16, reserved_auto_solves=8, max_candidates=32)


def test_busy_port_fails_before_loading_the_database(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        db = tmp_path / "never" / "x.db"
        r = run_cli("serve", "--port", str(port), "--database", f"sqlite:///{db}")  # exits at once
    assert r.returncode == 2
    assert "already in use" in r.stderr.strip().splitlines()[-1]
    assert not db.parent.exists()  # refused before the database was touched


@pytest.mark.slow  # real server processes (31 s at load 15)
def test_one_server_per_database_and_the_default_path(tmp_path: Path) -> None:
    """A server started in a directory without --database: its log names the absolute path of the default
    SQLite file; a second server on the same file is refused naming the first; after kill -9 of the first, a new
    one starts at once (the lock dies with its holder); /readyz and /metrics on the way."""
    cwd = tmp_path / "somewhere"
    cwd.mkdir()
    port = free_port()
    log_path = tmp_path / "first.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REBALANCER_SOLVER_WORKERS": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port)], cwd=cwd, env=env,
                                stdout=log, stderr=log, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.time() < deadline and proc.poll() is None, log_path.read_text()[-2000:]
            time.sleep(0.1)
        text = log_path.read_text()
        expected = cwd.resolve() / "data" / "rebalancer.db"
        assert f"database: SQLite at {expected}" in text and "the default ./data/rebalancer.db" in text, text
        assert expected.exists()

        r = serve_once("--port", str(free_port()), cwd=cwd)  # same default file, same directory
        assert r.returncode == 2
        last = r.stderr.strip().splitlines()[-1]
        assert f"database {expected} is in use by another rebalancer server (pid {proc.pid}" in last, last
        r = serve_once("--port", str(free_port()), "--database", f"sqlite:///{expected}", cwd=tmp_path)
        assert r.returncode == 2 and "in use by another rebalancer server" in r.stderr  # the absolute spelling

        ready = wait_ready(url)
        assert ready["database"] == "ok" and ready["solver_pool"]["ready_workers"] == 1
        with httpx.Client(base_url=url, timeout=60) as c:
            job = register(c, "tenant-a.clicks", key_groups=9)
            for b in (1, 2):
                assert c.post("/v1/jobs/tenant-a.clicks/stats", json=skewed_stats(job, b, 0)).status_code == 202
            metrics = c.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        m = metrics.text
        for line in ("# TYPE rebalancer_requests_total counter", "# TYPE rebalancer_plans_total counter",
                     "# TYPE rebalancer_stats_batches_total counter", "# TYPE rebalancer_request_seconds histogram",
                     "# TYPE rebalancer_jobs gauge", "# TYPE rebalancer_db_commits_total counter",
                     "# TYPE rebalancer_event_loop_lag_seconds histogram",
                     "# TYPE rebalancer_job_load_distance gauge", "# TYPE rebalancer_job_migrations_total counter",
                     'rebalancer_job_epoch{job="tenant-a.clicks"} 0.0',
                     'rebalancer_job_window_batches{job="tenant-a.clicks"} 2.0',
                     'rebalancer_stats_batches_total{result="counted"} 2.0',
                     "process_resident_memory_bytes", "process_open_fds"):
            assert line in m, line
        ld = [ln for ln in m.splitlines() if ln.startswith('rebalancer_job_load_distance{job="tenant-a.clicks"}')]
        assert ld and float(ld[0].split()[-1]) > 0  # the skewed statistics make the first node hot

        proc.kill()  # kill -9: the flock dies with the process
        proc.wait(timeout=30)
        again = Serve(tmp_path, args=("--database", f"sqlite:///{expected}"))
        try:
            again.wait_healthy()
        finally:
            again.cleanup()
    finally:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
