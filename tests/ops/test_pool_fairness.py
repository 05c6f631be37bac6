"""The solver pool's queue is fair: requests and jobs take turns (round robin over flows), so a small request is
never stuck behind all of a big one's solves; automatic rounds are still served first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from controller.solving import SolverPool
from tests.ops.test_solver_pool import Gate, queued, run


def record(order: list[str], tag: str, solve: Callable[[], Awaitable[Any]]) -> asyncio.Future[Any]:
    async def go() -> None:
        await solve()
        order.append(tag)

    return asyncio.ensure_future(go())


def test_a_small_request_finishes_before_a_big_one_queued_earlier(tmp_path: Path) -> None:
    async def body(pool: SolverPool) -> None:
        gate, order = Gate(tmp_path), []
        held = asyncio.ensure_future(gate.hold(pool))  # the only worker is busy: everything else queues
        big = pool.admit(6)  # a what-if with six candidates, then a plan of one solve
        jobs = [record(order, "big", lambda: pool.call("time", "sleep", 0, ticket=big)) for _ in range(6)]
        jobs.append(record(order, "small", lambda: pool.call("time", "sleep", 0)))
        await queued(pool, 7)
        await gate.open()
        await asyncio.gather(held, *jobs)
        big.release()
        # first in, first out would give big × 6, then small
        assert order == ["big", "small"] + ["big"] * 5, order

    run(body, workers=1, max_concurrent=16)


def test_jobs_take_turns_and_automatic_rounds_go_first(tmp_path: Path) -> None:
    async def body(pool: SolverPool) -> None:
        gate, order = Gate(tmp_path), []
        held = asyncio.ensure_future(gate.hold(pool))
        jobs = [record(order, "a", lambda: pool.call("time", "sleep", 0, owner="job-a")) for _ in range(3)]
        jobs += [record(order, "b", lambda: pool.call("time", "sleep", 0, owner="job-b")) for _ in range(2)]
        jobs += [record(order, "auto-a", lambda: pool.call("time", "sleep", 0, kind="auto", owner="job-a")),
                 record(order, "auto-c", lambda: pool.call("time", "sleep", 0, kind="auto", owner="job-c"))]
        await queued(pool, 7)
        await gate.open()
        await asyncio.gather(held, *jobs)
        assert order == ["auto-a", "auto-c", "a", "b", "a", "b", "a"], order

    run(body, workers=1, max_concurrent=16)
