"""kill -9 of the server (and its solver workers) loses nothing it acknowledged: jobs, epochs, assignments,
statistics windows, proposals; an acknowledged proposal can still be executed after the restart."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from api_helpers import new_id, register, skewed_stats  # noqa: E402
from conftest import Server  # noqa: E402


@pytest.mark.slow  # kill -9 and restart of a real server process (~15 s)
def test_kill9_restart_keeps_everything(tmp_path):
    db = f"sqlite:///{tmp_path}/restart.db"
    srv = Server(db, log_path=tmp_path / "server.log").start()
    try:
        with srv.client() as c:
            jid = new_id()
            job = register(c, jid, window_batches=400, algorithm="flux", key_groups=20,
                           policy={"cooldown_batches": 0})
            for b in range(1, 4):
                assert c.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, b, 0)).status_code == 202
            p1 = c.post(f"/v1/jobs/{jid}/proposals", json={}).json()
            ex = c.post(f"/v1/jobs/{jid}/proposals/{p1['id']}/execute").json()
            assert ex["epoch"] == 1
            p2 = c.post(f"/v1/jobs/{jid}/proposals", json={}).json()  # ready, not executed
            assert p2["status"] == "ready" and p2["base_epoch"] == 1 and p2["decision"] is not None
            before = c.get(f"/v1/jobs/{jid}").json()
            hist_before = c.get(f"/v1/jobs/{jid}/history").json()

        # statistics posted by 8 concurrent drivers while the server is killed: every acknowledged one must survive
        acked: list[int] = []
        lock = threading.Lock()
        stop = threading.Event()

        def driver(worker: int) -> None:
            with httpx.Client(base_url=srv.url, timeout=5) as cc:
                b = 1000 + worker
                while not stop.is_set() and b < 1000 + 8 * 40:
                    try:
                        r = cc.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, b, 1))
                    except httpx.HTTPError:
                        return
                    if r.status_code == 202 and r.json()["counted"]:
                        with lock:
                            acked.append(b)
                    b += 8

        threads = [threading.Thread(target=driver, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        deadline = time.time() + 20
        while len(acked) < 40 and time.time() < deadline:
            time.sleep(0.01)
        srv.kill9()
        stop.set()
        for t in threads:
            t.join()
        assert len(acked) >= 40
    finally:
        srv.stop()

    srv2 = Server(db, log_path=tmp_path / "server2.log").start()
    try:
        with srv2.client() as c:
            after = c.get(f"/v1/jobs/{jid}").json()
            assert after["epoch"] == before["epoch"] == 1
            assert after["placement"] == before["placement"] and after["key_groups"] == before["key_groups"]
            assert after["nodes"] == before["nodes"]
            batches = set(after["window"]["batches"])
            assert {1, 2, 3} <= batches
            missing = set(acked) - batches
            assert not missing, f"acknowledged batches lost: {sorted(missing)[:10]}"
            assert c.get(f"/v1/jobs/{jid}/history").json() == hist_before
            # a duplicate of an acknowledged batch is still counted once
            again = c.post(f"/v1/jobs/{jid}/stats", json=skewed_stats(job, acked[0], 1)).json()
            assert again["duplicate"] and not again["counted"]
            # the proposal acknowledged before the crash is intact, with the policy's verdict, and executable
            # (forced: on the balanced placement of epoch 1 its verdict may well be "not worth it")
            g = c.get(f"/v1/jobs/{jid}/proposals/{p2['id']}").json()
            assert g["status"] == "ready" and g["plan"] == p2["plan"] and g["decision"] == p2["decision"]
            if not g["decision"]["worth"]:
                assert c.post(f"/v1/jobs/{jid}/proposals/{p2['id']}/execute").status_code == 409
            r = c.post(f"/v1/jobs/{jid}/proposals/{p2['id']}/execute", json={"force": True})
            assert r.status_code == 200 and r.json()["epoch"] == 2
            assert c.get(f"/v1/jobs/{jid}/proposals/{p1['id']}").json()["status"] == "executed"
    finally:
        srv2.stop()
