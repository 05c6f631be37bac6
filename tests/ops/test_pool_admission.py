"""Admission that holds under concurrency: a request takes all of its solve slots at once (``SolverPool.admit``),
before its first ``await``, so concurrent requests never take more slots than the pool has."""

from __future__ import annotations

import asyncio

import pytest

from controller.errors import Busy, TooLarge
from controller.solving import SolverPool
from tests.ops.test_solver_pool import run


async def what_if(pool: SolverPool, k: int, peak: list[int]) -> str:
    """A request of ``k`` solves as the controller's use cases run one: admission, then some ``await`` (reading the
    window, writing the pending proposal) before the solves are submitted."""
    try:
        ticket = pool.admit(k)
    except Busy:
        return "busy"
    with ticket:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        peak.append(pool.in_flight)
        await asyncio.gather(*(pool.call("time", "sleep", 0, ticket=ticket) for _ in range(k)))
    return "done"


def test_concurrent_what_ifs_never_take_more_slots_than_the_share() -> None:
    async def body(pool: SolverPool) -> None:
        peak: list[int] = []
        res = await asyncio.gather(*(what_if(pool, 3, peak) for _ in range(4)))
        assert sorted(res) == ["busy"] * 3 + ["done"], res  # 4 × 3 candidates, 4 ad-hoc slots: one fits
        assert max(peak) <= pool.capacity("adhoc"), peak
        assert pool.in_flight == 0

    run(body, workers=1, max_concurrent=6, reserved_auto=2)


def test_concurrent_single_solve_requests_get_exactly_the_slots_there_are() -> None:
    async def body(pool: SolverPool) -> None:
        peak: list[int] = []
        res = await asyncio.gather(*(what_if(pool, 1, peak) for _ in range(30)))
        assert res.count("done") == pool.capacity("adhoc") == 4, res
        assert max(peak) <= 4 and pool.in_flight == 0
        # the automatic rounds' reserved share was never touched by the ad-hoc requests
        auto = pool.admit(2, kind="auto")
        auto.release()

    run(body, workers=1, max_concurrent=6, reserved_auto=2)


def test_a_ticket_gives_back_what_it_did_not_use() -> None:
    async def body(pool: SolverPool) -> None:
        with pytest.raises(TooLarge):
            pool.admit(5)
        with pool.admit(3) as ticket:
            assert pool.in_flight == 3
            with pytest.raises(Busy):
                pool.admit(2)
            await pool.call("time", "sleep", 0, ticket=ticket)
            assert pool.in_flight == 2  # the solve ended: its slot is free again
        assert pool.in_flight == 0  # the two unused ones went back on leaving the block
        with pytest.raises(ValueError, match="request failed"), pool.admit(4):
            raise ValueError("request failed")  # a request that fails before it solves frees its slots too
        assert pool.in_flight == 0
        ticket = pool.admit(1)
        await pool.call("time", "sleep", 0, ticket=ticket)
        with pytest.raises(RuntimeError, match="every solve slot of this admission is used"):
            await pool.call("time", "sleep", 0, ticket=ticket)
        ticket.release()
        assert pool.in_flight == 0

    run(body, workers=1, max_concurrent=6, reserved_auto=2)
