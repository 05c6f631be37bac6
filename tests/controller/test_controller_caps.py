"""Caps on jobs and on what they store (413/429 with the reason), epochs stored as deltas with periodic snapshots,
and history retention — through the API in process, on a real SQLite database."""

from __future__ import annotations

import sqlite3

import httpx
import numpy as np

from controller.service import Controller
from tests.api.api_helpers import assignment, named
from tests.api.inproc import propose, run, settle, stats


def job(n_kgs: int = 8, window: int = 2, nodes: tuple[str, ...] = ("w0", "w1")) -> dict:
    """A job whose rounds may follow each other (no cooldown)."""
    return {"nodes": list(nodes), "operators": [{"id": "agg", "key_groups": n_kgs}], "window_batches": window,
            "algorithm": "flux", "policy": {"cooldown_batches": 0}}


def kgs(n: int) -> list[str]:
    return [f"agg/{k}" for k in range(n)]


def test_the_95_byte_put_that_costs_gigabytes_of_window_is_413(tmp_path):
    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        r = await c.put("/v1/jobs/big", json={"nodes": ["a"], "operators": [{"id": "o", "key_groups": 200000}],
                                              "window_batches": 1000})
        assert r.status_code == 413, r.text[:300]
        assert "window_batches" in r.json()["detail"] and "MAX_WINDOW_CELLS" in r.json()["detail"]
        assert "big" not in ctl.ctx.jobs
        # a smaller window of the same job fits
        r = await c.put("/v1/jobs/big", json={"nodes": ["a"], "operators": [{"id": "o", "key_groups": 200000}],
                                              "window_batches": 10})
        assert r.status_code == 201

    run(tmp_path / "r.db", main)


def test_job_count_cap_is_429_with_the_reason_and_frees_on_delete(tmp_path):
    async def main(c: httpx.AsyncClient, _ctl: Controller) -> None:
        for j in ("a", "b"):
            assert (await c.put(f"/v1/jobs/{j}", json=job())).status_code == 201
        r = await c.put("/v1/jobs/c", json=job())
        assert r.status_code == 429 and "MAX_JOBS" in r.json()["detail"], r.text
        assert (await c.put("/v1/jobs/a", json=job(window=3))).status_code == 200  # updates still work
        assert (await c.delete("/v1/jobs/a")).status_code == 204
        assert (await c.put("/v1/jobs/c", json=job())).status_code == 201

    run(tmp_path / "r.db", main, max_jobs=2)


def test_total_window_bytes_cap_is_429_and_counts_evictions_and_deletes(tmp_path):
    one_batch = 100 * (4 + 8)  # int32 index + float64 load per key group

    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        for j in ("a", "b"):
            assert (await c.put(f"/v1/jobs/{j}", json=job(100, window=2))).status_code == 201
        for b in (1, 2):
            assert (await c.post("/v1/jobs/a/stats", json=stats(b, kgs(100)))).status_code == 202
        assert (await c.post("/v1/jobs/b/stats", json=stats(1, kgs(100)))).status_code == 202
        r = await c.post("/v1/jobs/b/stats", json=stats(2, kgs(100)))
        assert r.status_code == 429 and "MAX_TOTAL_WINDOW_BYTES" in r.json()["detail"], r.text
        # a full window replacing a batch does not grow: still accepted
        assert (await c.post("/v1/jobs/a/stats", json=stats(3, kgs(100)))).json()["counted"] is True
        assert ctl.ctx.window_bytes == 3 * one_batch
        assert (await c.delete("/v1/jobs/a")).status_code == 204
        assert ctl.ctx.window_bytes == one_batch
        assert (await c.post("/v1/jobs/b/stats", json=stats(2, kgs(100)))).status_code == 202

    run(tmp_path / "r.db", main, max_total_window_bytes=3 * one_batch)


def _epoch_rows(db) -> list[tuple[int, int, int]]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT epoch, length(assignment), length(nodes) FROM epochs ORDER BY epoch").fetchall()


async def _rounds(c, n: int, m: int, start_batch: int = 1) -> int:
    """``n`` epochs: a node added, then executes of flux proposals on skewed loads; returns the next batch id."""
    b = start_batch
    for i in range(n):
        if i % 3 == 0:
            r = await c.post("/v1/jobs/j/nodes", json={"add": [f"x{i}"]})
            assert r.status_code == 200, r.text
            continue
        state = (await c.get("/v1/jobs/j")).json()
        rng = np.random.default_rng(i)
        body = {"batch_id": b, "epoch": state["epoch"],
                "key_groups": [{"id": k, "load": float(rng.uniform(1, 2)) * (20 if node == "w0" or k.endswith("7")
                                                                             else 1)}
                               for k, node in assignment(state).items()]}
        b += 1
        assert (await c.post("/v1/jobs/j/stats", json=body)).status_code == 202
        p = await propose(c, "j")
        assert p["status"] == "ready", p
        r = await c.post(f"/v1/jobs/j/proposals/{p['id']}/execute")
        assert r.status_code == (200 if p["decision"]["worth"] else 409), r.text
    return b


def test_epochs_are_stored_as_deltas_and_rebuild_the_assignment_after_a_restart(tmp_path):
    db = tmp_path / "r.db"
    m = 2000

    async def first(c: httpx.AsyncClient, _: Controller) -> tuple[dict, dict]:
        assert (await c.put("/v1/jobs/j", json=job(m, window=1))).status_code == 201
        await _rounds(c, 9, m)
        return (await c.get("/v1/jobs/j")).json(), (await c.get("/v1/jobs/j/history")).json()

    async def second(c: httpx.AsyncClient, _: Controller) -> tuple[dict, dict]:
        last = (await c.get("/v1/jobs/j/history", params={"limit": 2})).json()["epochs"]
        full = (await c.get("/v1/jobs/j/history")).json()
        assert last == full["epochs"][-2:]  # a page starting at a delta still names its nodes
        return (await c.get("/v1/jobs/j")).json(), full

    before, hist = run(db, first, history_snapshot_every=100, history_retention_epochs=0)
    assert before["epoch"] >= 6
    rows = _epoch_rows(db)
    full = rows[0][1]
    assert full > 4 * m  # the registration is a snapshot: every key group's node
    assert [r[0] for r in rows] == [e["epoch"] for e in hist["epochs"]]
    for (_epoch, a_len, n_len), e in zip(rows[1:], hist["epochs"][1:], strict=True):
        assert a_len <= 12 + 16 * len(e["moves"] or [])  # what changed, not the whole assignment again
        assert (e["kind"] == "nodes") == (n_len > 4)  # node lists only when the nodes changed
    after, hist2 = run(db, second)
    assert after["placement"] == before["placement"] and after["epoch"] == before["epoch"]
    assert hist2 == hist
    # every epoch's node list is reported, carried forward from the epoch that changed it
    assert [len(e["nodes"]) for e in hist["epochs"]] == sorted(len(e["nodes"]) for e in hist["epochs"])
    assert hist["epochs"][-1]["nodes"] == [{k: n[k] for k in ("id", "capacity", "removing")}
                                           for n in before["nodes"]]


def test_retention_compacts_history_to_a_snapshot_and_keeps_the_assignment(tmp_path):
    db = tmp_path / "r.db"
    caps = {"history_snapshot_every": 3, "history_retention_epochs": 4}

    async def first(c: httpx.AsyncClient, _: Controller) -> dict:
        assert (await c.put("/v1/jobs/j", json=job(40, window=1))).status_code == 201
        await _rounds(c, 14, 40)
        return (await c.get("/v1/jobs/j")).json()

    async def second(c: httpx.AsyncClient, _: Controller) -> tuple[dict, dict]:
        return (await c.get("/v1/jobs/j")).json(), (await c.get("/v1/jobs/j/history")).json()

    before = run(db, first, **caps)
    epoch = before["epoch"]
    assert epoch >= 9
    kept = [e for e, _a, _n in _epoch_rows(db)]
    assert kept == list(range(kept[0], epoch + 1))
    assert epoch - kept[0] >= 4 and len(kept) <= 4 + 2 * 3 - 1  # at least the retention, at most ~2 periods more
    assert kept[0] % 3 == 0  # the kept history starts at a snapshot
    after, hist = run(db, second, **caps)
    assert assignment(after) == assignment(before)
    assert [e["epoch"] for e in hist["epochs"]] == kept and all(e["nodes"] for e in hist["epochs"])
    with sqlite3.connect(db) as con:
        old = con.execute("SELECT count(*) FROM proposals WHERE base_epoch < ? AND status != 'pending'",
                          (kept[0],)).fetchone()[0]
    assert old == 0


def test_automatic_rounds_use_the_reserved_share_and_what_ifs_hold_a_slot_per_candidate(tmp_path):
    """Automatic rounds are solves of kind "auto" (ad-hoc requests cannot take their share) and a what-if is
    admitted for all its candidates at once."""
    auto = {**job(8, window=1), "auto": True}
    problem = {"nodes": [{"id": "a"}, {"id": "b"}],
               "key_groups": [{"id": f"k{i}", "node": "a", "load": 1.0} for i in range(6)]}

    async def main(c: httpx.AsyncClient, ctl: Controller) -> None:
        pool = ctl.ctx.pool
        assert pool.capacity("adhoc") == 3
        r = await c.post("/v1/what-if/scaling", json={"problem": problem, "candidates": [1, 2, 3]})
        assert r.status_code == 200, r.text
        pool.counts["adhoc"] = 1  # one ad-hoc solve in flight: three candidates no longer fit the share
        r = await c.post("/v1/what-if/scaling", json={"problem": problem, "candidates": [1, 2, 3]})
        assert r.status_code == 429, r.text
        r = await c.post("/v1/what-if/scaling", json={"problem": problem, "candidates": [1, 2]})
        assert r.status_code == 200, r.text
        pool.counts["adhoc"] = 0
        assert (await c.put("/v1/jobs/j", json=auto)).status_code == 201
        pool.counts["adhoc"] = 3  # the ad-hoc share is taken (as by three long plans in flight)
        assert (await c.post("/v1/plans", json={"problem": problem})).status_code == 429
        r = await c.post("/v1/jobs/j/stats", json=stats(1, kgs(8), load=3.0))
        assert r.status_code == 202 and r.json()["decision"]["reason"] == "started", r.text
        await settle(ctl, "j")  # the round ends while the ad-hoc share is still taken
        pool.counts["adhoc"] = 0
        g = (await c.get("/v1/jobs/j")).json()
        assert g["epoch"] == 1 and g["decision"]["reason"] == "worth", g["decision"]  # the round still ran

    run(tmp_path / "r.db", main, max_concurrent_solves=4, reserved_auto_solves=1, max_candidates=3)


def test_executed_proposals_keep_their_moves_not_a_copy_of_the_assignment(tmp_path):
    """An executed proposal's row (and cache entry) drops the plan's assignment — it is the executed epoch's, and
    ``GET …/proposals/{id}`` still answers it, from the history, also after a restart."""
    db = tmp_path / "r.db"
    m = 3000
    # one hot key group: a plan of a move or two, worth it for any gain
    small = {**job(m, window=1), "policy": {"cooldown_batches": 0, "min_gain": 0.0}}
    auto = {**small, "auto": True}

    async def first(c: httpx.AsyncClient, ctl: Controller) -> tuple[str, str, dict, dict]:
        reg = (await c.put("/v1/jobs/j", json=small)).json()
        assert (await c.post("/v1/jobs/j/stats", json=stats(1, kgs(m), load=1.0))).status_code == 202
        p = await propose(c, "j")
        assert p["status"] == "ready" and len(p["plan"]["assignment"]) == m
        r = await c.post(f"/v1/jobs/j/proposals/{p['id']}/execute")
        assert r.status_code == 200, r.text[:300]
        executed = named(r.json()["placement"], ["w0", "w1"], reg["key_groups"])
        assert not ctl.ctx.proposals.get(p["id"]).plan.assignment
        got = (await c.get(f"/v1/jobs/j/proposals/{p['id']}")).json()
        assert got["status"] == "executed" and got["plan"]["assignment"] == executed
        assert got["plan"]["moves"] == p["plan"]["moves"]
        text = (await c.get("/metrics")).text  # the executed moves are counted per job
        assert f'rebalancer_job_migrations_total{{job="j"}} {float(len(p["plan"]["moves"]))}' in text, text[-800:]
        # an automatic round's proposal likewise
        assert (await c.put("/v1/jobs/a", json=auto)).status_code == 201
        r = await c.post("/v1/jobs/a/stats", json=stats(1, kgs(m), load=1.0))
        assert r.json()["decision"]["reason"] == "started"
        await settle(ctl, "a")
        apply = (await c.post("/v1/jobs/a/stats", json=stats(2, kgs(m), load=1.0))).json()["apply"]
        assert apply is not None
        auto_pid = (await c.get("/v1/jobs/a/history")).json()["epochs"][1]["proposal_id"]
        assert auto_pid
        return p["id"], auto_pid, executed, named(apply["placement"], apply["nodes"], reg["key_groups"])

    async def second(c: httpx.AsyncClient, _: Controller) -> tuple[dict, dict]:
        return ((await c.get(f"/v1/jobs/j/proposals/{pid}")).json(),
                (await c.get(f"/v1/jobs/a/proposals/{auto_pid}")).json())

    pid, auto_pid, executed, auto_assignment = run(db, first)
    with sqlite3.connect(db) as con:
        sizes = dict(con.execute("SELECT id, length(plan) FROM proposals").fetchall())
    assert sizes[pid] < 40 * m / 10 and sizes[auto_pid] < 40 * m / 10  # no 3,000-entry assignment in them
    got, got_auto = run(db, second)
    assert got["plan"]["assignment"] == executed and got_auto["plan"]["assignment"] == auto_assignment
