"""Cancelling an owner's solves (a deleted job's): queued ones fail at once, a running one has its worker killed
and replaced, its admitted slots are freed; other owners' solves are not touched."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from controller.solving import SolveCancelled, SolverPool
from tests.ops.test_solver_pool import EVENT_TIMEOUT_S, Gate, queued, run, until


def test_cancel_drops_the_queued_solves_of_an_owner_and_frees_their_slots(tmp_path: Path) -> None:
    async def body(pool: SolverPool) -> None:
        gate = Gate(tmp_path)
        held = asyncio.ensure_future(gate.hold(pool))  # not the job's: keeps the only worker busy
        mine = [asyncio.ensure_future(pool.call("time", "sleep", 0, owner="job-a")) for _ in range(3)]
        auto = asyncio.ensure_future(pool.call("time", "sleep", 0, kind="auto", owner="job-a"))
        other = asyncio.ensure_future(pool.call("time", "sleep", 0, owner="job-b"))
        await queued(pool, 5)
        assert pool.in_flight == 6
        assert pool.cancel("job-a", "the job was deleted") == 4
        assert pool.queued == 1
        res = await asyncio.wait_for(asyncio.gather(*mine, auto, return_exceptions=True),  # the gate is still closed
                                     EVENT_TIMEOUT_S)
        assert all(isinstance(r, SolveCancelled) and "the job was deleted" in str(r) for r in res), res
        assert pool.in_flight == 2  # the gate and job-b's solve
        await gate.open()
        assert await other is None and await held == ""
        assert pool.in_flight == 0 and pool.died == 0

    run(body, workers=1, max_concurrent=16)


def test_cancel_kills_a_running_solve_of_the_owner_and_the_pool_replaces_its_worker(tmp_path: Path) -> None:
    async def body(pool: SolverPool) -> None:
        gate = Gate(tmp_path)
        (before,) = pool.pids()
        running = asyncio.ensure_future(gate.hold(pool, owner="job-a"))  # would never end by itself
        await until(lambda: pool.queued == 0 and pool.in_flight == 1, "the solve to run")
        assert pool.cancel("job-a") == 1
        with pytest.raises(SolveCancelled):
            await asyncio.wait_for(running, EVENT_TIMEOUT_S)
        assert before not in pool.pids()
        assert await pool.call("time", "sleep", 0, owner="job-a") is None  # a new solve of that owner runs
        assert pool.died == 0 and pool.killed == 0 and pool.in_flight == 0

    run(body, workers=1)


def test_cancel_frees_the_unused_slots_of_the_owners_tickets() -> None:
    async def body(pool: SolverPool) -> None:
        ticket = pool.admit(3, owner="job-a")  # a proposal admitted, still writing its pending row
        other = pool.admit(1, owner="job-b")
        assert pool.in_flight == 4
        assert pool.cancel("job-a") == 0  # nothing queued or running yet
        assert pool.in_flight == 1
        with pytest.raises(SolveCancelled):
            await pool.call("time", "sleep", 0, ticket=ticket)
        ticket.release()
        assert await pool.call("time", "sleep", 0, ticket=other) is None
        assert pool.in_flight == 0

    run(body, workers=1)


def test_a_solve_whose_request_went_away_leaves_the_queue(tmp_path: Path) -> None:
    async def body(pool: SolverPool) -> None:
        gate = Gate(tmp_path)
        held = asyncio.ensure_future(gate.hold(pool))
        gone = asyncio.ensure_future(pool.call("time", "sleep", 0))  # a client that disconnects while queued
        await queued(pool, 1)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        assert pool.queued == 0 and pool.in_flight == 1
        await gate.open()
        assert await held == ""

    run(body, workers=1)
