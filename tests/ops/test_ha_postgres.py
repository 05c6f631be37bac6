"""Replicas on one PostgreSQL database (controller/leadership.py): a standby names the leader, a takeover reloads
the jobs, the Python client fails over, and an old leader — paused, or frozen inside a transaction — can neither
write after the takeover nor block the new leader. Real server processes on a throwaway cluster; each test gets its
own database."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "api"))
from test_api_postgres import pg_url  # noqa: E402,F401  (the throwaway cluster fixture)

from rebalancer_client import RebalancerClient  # noqa: E402
from tests.helpers.server import ServerProcess, free_port  # noqa: E402

pytestmark = [pytest.mark.postgres, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals")]

#: a long lease: no test waits for an expiry it does not provoke, however loaded the machine
LEASE = {"lease_ttl_s": 3.0, "lease_renew_s": 0.3}
JOB = {"nodes": ["n0", "n1"], "operators": [{"id": "op", "key_groups": 4}], "algorithm": "flux",
       "window_batches": 50}


@pytest.fixture()
def db_url(pg_url: str) -> Iterator[str]:  # noqa: F811
    import psycopg

    name = f"ha_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_url.rsplit("/", 1)[0] + "/" + name


def replica(url: str, tmp: Path, name: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(url, port=port, settings={**LEASE, "advertised_url": f"http://127.0.0.1:{port}"},
                         log_path=tmp / f"{name}.log", log_level="info")


def wait_for(what: str, cond: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        time.sleep(0.05)


def leads(srv: ServerProcess) -> bool:
    try:
        r = httpx.get(srv.url + "/readyz", timeout=5)
    except httpx.HTTPError:
        return False
    return bool(r.json().get("role") == "leader")


def freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue
        return all(st in ("T", "t") for st in states)

    wait_for(f"{pid} stops", stopped)


def stats(batch: int, epoch: int = 0) -> dict[str, Any]:
    return {"batch_id": batch, "epoch": epoch, "load": [1.0 + batch % 3, 2.0, 3.0, 4.0]}


def test_a_standby_names_the_leader_and_a_takeover_reloads_the_jobs(db_url: str, tmp_path: Path) -> None:
    import psycopg

    a = replica(db_url, tmp_path, "a").start()
    b: ServerProcess | None = None
    try:
        wait_for("a leads", lambda: leads(a))
        b = replica(db_url, tmp_path, "b").start()  # (its port found free just before its start)
        # the standby: alive, not ready, and every API request answered with where the leader is (nothing done)
        assert httpx.get(b.url + "/healthz").status_code == 200
        r = httpx.get(b.url + "/readyz")
        assert r.status_code == 503 and r.json()["role"] == "standby" and r.json()["leader"] == a.url, r.text
        assert r.headers["Rebalancer-Leader"] == a.url
        r = httpx.put(b.url + "/v1/jobs/j", json=JOB)
        assert r.status_code == 421, r.text
        assert r.headers["Rebalancer-Leader"] == a.url and r.headers["Rebalancer-Role"] == "standby"
        documented = httpx.get(b.url + "/openapi.json").json()["paths"]["/v1/jobs/{job_id}"]["put"]["responses"]
        assert "Rebalancer-Leader" in documented["421"]["headers"], documented  # the answer is in the OpenAPI
        assert httpx.get(a.url + "/v1/jobs/j").status_code == 404  # the standby did not forward or write it

        # a client given the standby first follows it to the leader, and fails over when the leader dies
        with RebalancerClient([b.url, a.url], timeout=10, retries=5, backoff=0.05) as rc:
            job = rc.put_job("j", **JOB)
            for i in range(1, 6):
                assert rc.post_stats("j", batch_id=i, epoch=job.epoch, load=stats(i)["load"]).counted
            assert rc.base_url == a.url
            with psycopg.connect(db_url) as conn:  # a solve the leader had not finished
                conn.execute("INSERT INTO proposals (id, job_id, base_epoch, status, algorithm, params, "
                             "time_limit_s, created_at, generation) SELECT 'punfinished', job_id, 0, 'pending', "
                             "'flux', '{}', 1.0, 0, generation FROM jobs WHERE job_id = 'j'")
            a.kill9()
            for i in range(6, 11):  # each answered by the new leader
                assert rc.post_stats("j", batch_id=i, epoch=job.epoch, load=stats(i)["load"]).counted
            assert rc.base_url == b.url
            after = rc.get_job("j")
            assert after.window.batches == list(range(1, 11)) and after.epoch == job.epoch
            prop = rc.get_proposal("j", "punfinished")
            assert prop.status == "failed" and "leader changed" in (prop.error or ""), prop
        assert leads(b)
    finally:
        a.kill9()
        if b is not None:
            b.stop()


def _blocked_insert(db_url: str) -> bool:
    import psycopg

    with psycopg.connect(db_url) as conn:
        return bool(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                 "AND query LIKE 'INSERT INTO stats_batches%'").fetchone()[0])  # type: ignore[index]


def _post_in_background(url: str, body: dict[str, Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def go() -> None:
        try:
            out.append(httpx.post(url + "/v1/jobs/j/stats", json=body, timeout=120))
        except httpx.HTTPError as exc:
            out.append(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, out


def _stored(db_url: str, batch: int) -> bool:
    import psycopg

    with psycopg.connect(db_url) as conn:
        return bool(conn.execute("SELECT count(*) FROM stats_batches WHERE job_id = 'j' AND batch_id = %s",
                                 (batch,)).fetchone()[0])  # type: ignore[index]


def test_an_old_leader_can_neither_write_after_a_takeover_nor_block_the_new_leader(db_url: str,
                                                                                    tmp_path: Path) -> None:
    """1. A leader paused (SIGSTOP) with a statistics post past its checks, waiting on the database: a standby
    takes over; woken up, the old leader's write is refused (the fencing epoch) and not stored.
    2. The new leader frozen inside its write transaction: a standby takes over after the lease expires, and the
    same batch posted to it is stored while the frozen one still holds its row (idle_in_transaction timeout)."""
    import psycopg

    a = replica(db_url, tmp_path, "a").start()
    b: ServerProcess | None = None
    try:
        wait_for("a leads", lambda: leads(a))
        b = replica(db_url, tmp_path, "b").start()  # (its port found free just before its start)
        with httpx.Client(base_url=a.url, timeout=60) as c:
            assert c.put("/v1/jobs/j", json=JOB).status_code == 201
            assert c.post("/v1/jobs/j/stats", json=stats(1)).status_code == 202

        # 1. the paused leader
        with psycopg.connect(db_url) as lock:
            lock.execute("LOCK TABLE stats_batches IN EXCLUSIVE MODE")  # reads go on, inserts wait
            thread, answer = _post_in_background(a.url, stats(2))
            wait_for("a's insert waits on the lock", lambda: _blocked_insert(db_url))
            freeze(a.pid)
            try:
                wait_for("b takes over", lambda: leads(b))
            finally:
                os.kill(a.pid, signal.SIGCONT)
            wait_for("a knows it lost the lease", lambda: not leads(a))
        thread.join(timeout=120)  # the lock is released: a's insert runs, then its commit is fenced
        assert answer and isinstance(answer[0], httpx.Response), answer
        assert answer[0].status_code in (421, 503), answer[0].text
        assert answer[0].headers.get("Rebalancer-Role") == "standby"
        assert not _stored(db_url, 2), "a paused old leader wrote after the takeover"
        r = httpx.post(a.url + "/v1/jobs/j/stats", json=stats(3), timeout=60)
        assert r.status_code == 421 and r.headers["Rebalancer-Leader"] == b.url, r.text

        # 2. the new leader frozen inside its transaction (row lock on batch 4 held, not committed)
        with psycopg.connect(db_url) as lock:
            lock.execute("LOCK TABLE stats_batches IN EXCLUSIVE MODE")
            thread, answer = _post_in_background(b.url, stats(4))
            wait_for("b's insert waits on the lock", lambda: _blocked_insert(db_url))
            freeze(b.pid)
        try:  # the lock is released: b's insert is done, its transaction idles, frozen
            wait_for("a takes over", lambda: leads(a))
            r = httpx.post(a.url + "/v1/jobs/j/stats", json=stats(4), timeout=60)
            assert r.status_code == 202 and r.json()["counted"], r.text
            assert _stored(db_url, 4)
        finally:
            os.kill(b.pid, signal.SIGCONT)
        thread.join(timeout=120)
        assert answer and not (isinstance(answer[0], httpx.Response) and answer[0].is_success), answer
        with httpx.Client(base_url=a.url, timeout=60) as c:
            assert c.get("/v1/jobs/j").json()["window"]["batches"] == [1, 4]
    finally:
        a.kill9()
        if b is not None:
            b.kill9()
