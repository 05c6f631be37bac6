"""``controller.jobs.positions``: a big registration's key-group index, built on the event loop in slices."""

from __future__ import annotations

import asyncio

from controller.jobs import positions


def test_positions_match_the_order_across_slices_and_a_short_last_one() -> None:
    ids = [f"op/{k}" for k in range(25_003)]     # three slices of 10,000, the last one short
    index = asyncio.run(positions(ids))
    assert index == {k: i for i, k in enumerate(ids)}


def test_positions_let_other_tasks_run_between_slices() -> None:
    ran: list[int] = []

    async def main() -> None:
        async def other() -> None:
            while True:
                ran.append(1)
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await positions([str(k) for k in range(30_000)], chunk=10_000)
        task.cancel()

    asyncio.run(main())
    assert len(ran) >= 2  # the loop served another task between the slices
