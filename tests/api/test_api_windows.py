"""What a window holds in memory and on disk is the same set, across resizes and restarts;
batch ids are signed 64-bit integers and a far-future id cannot freeze the window."""

from __future__ import annotations

import httpx

from controller.service import Controller
from tests.api.inproc import run, stats

KGS = [f"agg/{k}" for k in range(4)]


def job(window: int) -> dict:
    return {"nodes": ["w0", "w1"], "operators": [{"id": "agg", "key_groups": 4}], "window_batches": window,
            "algorithm": "flux"}


def test_resizing_the_window_keeps_memory_and_disk_equal_across_a_restart(tmp_path):
    db = tmp_path / "r.db"

    async def first(c: httpx.AsyncClient, _ctl: Controller) -> list[int]:
        assert (await c.put("/v1/jobs/w", json=job(5))).status_code == 201
        for b in range(1, 6):
            assert (await c.post("/v1/jobs/w/stats", json=stats(b, KGS))).status_code == 202
        r = await c.put("/v1/jobs/w", json=job(2))
        assert r.status_code == 200 and r.json()["window"]["batches"] == [4, 5]
        assert (await c.put("/v1/jobs/w", json=job(10))).status_code == 200
        r = await c.post("/v1/jobs/w/stats", json=stats(1, KGS))
        assert r.status_code == 202, r.text  # was 500: UNIQUE constraint failed (batch 1 still on disk)
        assert r.json()["counted"] is True
        return list(r.json()["window"]["batches"])

    async def after_restart(c: httpx.AsyncClient, _ctl: Controller) -> list[int]:
        r = await c.get("/v1/jobs/w")
        assert r.status_code == 200
        return list(r.json()["window"]["batches"])

    before = run(db, first)
    assert before == [4, 5, 1]
    assert run(db, after_restart) == before  # evicted batches do not come back


def test_shrinking_then_restarting_does_not_bring_evicted_batches_back(tmp_path):
    db = tmp_path / "r.db"

    async def first(c: httpx.AsyncClient, _ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/w", json=job(5))).status_code == 201
        for b in range(1, 6):
            assert (await c.post("/v1/jobs/w/stats", json=stats(b, KGS))).status_code == 202
        assert (await c.put("/v1/jobs/w", json=job(2))).json()["window"]["batches"] == [4, 5]
        assert (await c.put("/v1/jobs/w", json=job(10))).json()["window"]["batches"] == [4, 5]

    async def second(c: httpx.AsyncClient, _ctl: Controller) -> list[int]:
        return list((await c.get("/v1/jobs/w")).json()["window"]["batches"])

    run(db, first)
    assert run(db, second) == [4, 5]


def test_batch_ids_beyond_signed_64_bits_are_422_naming_the_field(tmp_path):
    async def main(c: httpx.AsyncClient, _ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/w", json=job(1))).status_code == 201
        for bad in (2**63, 2**64, 10**30):
            r = await c.post("/v1/jobs/w/stats", json=stats(bad, KGS))
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["field"] == "batch_id"
        r = await c.post("/v1/jobs/w/stats", json=stats(1, KGS, epoch=2**63))
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "epoch"
        r = await c.post("/v1/jobs/w/stats", json=stats(2**63 - 1, KGS))
        assert r.status_code == 202 and r.json()["counted"] is True

    run(tmp_path / "r.db", main)


def test_a_far_future_batch_id_does_not_freeze_the_window(tmp_path):
    """The ordering rule: the window holds the most recently received batches (controller.windows)."""
    async def main(c: httpx.AsyncClient, _ctl: Controller) -> None:
        assert (await c.put("/v1/jobs/w", json=job(1))).status_code == 201
        assert (await c.post("/v1/jobs/w/stats", json=stats(2**63 - 1, KGS))).json()["counted"] is True
        for b in (1, 2, 3):
            r = await c.post("/v1/jobs/w/stats", json=stats(b, KGS, load=float(b)))
            assert r.status_code == 202 and r.json()["counted"] is True, r.text
            assert r.json()["window"]["batches"] == [b]
        r = await c.post("/v1/jobs/w/stats", json=stats(3, KGS))
        assert r.json()["counted"] is False and r.json()["duplicate"] is True

    run(tmp_path / "r.db", main)


def test_a_batch_id_beyond_64_bits_is_a_422_on_a_live_keep_alive_connection(tmp_path):
    """Over real HTTP (uvicorn, as ``rebalancer serve`` runs it): the 422 comes back and the same connection serves
    the next request (not a 500 and a dropped keep-alive connection)."""
    from tests.helpers.server import ThreadServer

    with ThreadServer(f"sqlite:///{tmp_path}/r.db").start() as srv:
        ports: set[int] = set()
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            def note(r: httpx.Response) -> None:
                stream = r.extensions.get("network_stream")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None:
                    ports.add(sock.getsockname()[1])

            c.event_hooks["response"] = [note]
            assert c.put("/v1/jobs/w", json=job(1)).status_code == 201
            r = c.post("/v1/jobs/w/stats", json=stats(2**64, KGS))
            assert r.status_code == 422 and r.json()["detail"][0]["field"] == "batch_id", r.text
            r = c.post("/v1/jobs/w/stats", json=stats(1, KGS))
            assert r.status_code == 202 and r.json()["counted"] is True
        assert len(ports) == 1  # one connection (one local port) for the three requests
