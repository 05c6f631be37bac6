"""The same guarantees on PostgreSQL (psycopg 3): a throwaway cluster is created with initdb (as the ``postgres``
user when running as root, since initdb refuses root). Skipped, with the reason, when PostgreSQL binaries, an
unprivileged user or psycopg are missing."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

import pytest

from tests.api.api_helpers import execute_all_at_once, new_id, register, skewed_stats
from tests.helpers.server import ServerProcess as Server
from tests.helpers.server import free_port

pytestmark = pytest.mark.postgres


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name) or (f"/usr/local/bin/{name}" if os.path.exists(f"/usr/local/bin/{name}") else None)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


@pytest.fixture(scope="module")
def pg_url():
    pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'psycopg[binary]')")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL binaries (initdb, pg_ctl) not found")
    prefix: list[str] = []
    if os.geteuid() == 0:
        import pwd

        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no unprivileged 'postgres' user for initdb")
        runuser = shutil.which("runuser") or shutil.which("su")
        if not runuser:
            pytest.skip("running as root without runuser/su to drop privileges for initdb")
        prefix = [runuser, "-u", "postgres", "--"] if runuser.endswith("runuser") else None
        if prefix is None:
            pytest.skip("only runuser is supported to drop privileges")
    base = tempfile.mkdtemp(prefix="rebalancer-pg-")
    os.chmod(base, 0o755)
    data = os.path.join(base, "data")
    os.mkdir(data)
    if os.geteuid() == 0:
        os.chown(data, pw.pw_uid, pw.pw_gid)
    try:
        r = subprocess.run(prefix + [initdb, "-D", data, "-A", "trust", "-U", "rebalancer", "--no-sync"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            pytest.skip(f"initdb failed: {r.stderr.strip()[-300:]}")
        for _ in range(3):  # a port found free may be taken before the server binds it (by a connection of another
            port = free_port()  # test process): then another port, rather than a skip that hides these tests
            opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c fsync=on"
            r = subprocess.run(prefix + [pg_ctl, "-D", data, "-o", opts, "-l", os.path.join(data, "log"), "-w",
                                         "start"], capture_output=True, text=True, timeout=120)
            if r.returncode == 0:
                break
        else:
            pytest.skip(f"pg_ctl start failed: {r.stderr.strip()[-300:]}")
        yield f"postgresql://rebalancer@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(prefix + [pg_ctl, "-D", data, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def test_postgres_flow_concurrent_executes_and_kill9(pg_url, tmp_path):
    srv = Server(pg_url, log_path=tmp_path / "server.log").start()
    try:
        with srv.client() as c:
            jid = new_id()
            job = register(c, jid, window_batches=50, algorithm="flux", key_groups=24)
            for b in range(1, 4):
                assert c.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, b, 0)).status_code == 202
            assert c.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, 3, 0)).json()["duplicate"]
            props = [c.post(f"/v1/jobs/{jid}/proposals", json={}).json() for _ in range(4)]
            assert all(p["decision"]["worth"] for p in props), [p["decision"] for p in props]
        codes = execute_all_at_once(srv, jid, [p["id"] for p in props])
        assert sorted(codes) == [200] + [409] * (len(props) - 1)
        with srv.client() as c:
            for b in range(4, 10):
                assert c.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, b, 1)).status_code == 202
            before = c.get(f"/v1/jobs/{jid}").json()
            hist = c.get(f"/v1/jobs/{jid}/history").json()
        srv.kill9()
    finally:
        srv.stop()
    srv2 = Server(pg_url, log_path=tmp_path / "server2.log").start()
    try:
        with srv2.client() as c:
            after = c.get(f"/v1/jobs/{jid}").json()
            assert after["epoch"] == 1 and after["placement"] == before["placement"]
            assert after["window"]["batches"] == list(range(1, 10))
            assert c.get(f"/v1/jobs/{jid}/history").json() == hist
    finally:
        srv2.stop()
