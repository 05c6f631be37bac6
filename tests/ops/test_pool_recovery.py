"""The solver pool heals itself: a worker killed while it starts is started again (with back-off), a worker that
dies while idle is replaced before it gets work, and a pool that cannot start any worker says so (``broken``: the
liveness probe fails) instead of answering 500 forever."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from controller.solving import PoolBroken, SolverPool, WorkerDied
from tests.helpers.procs import alive
from tests.ops.test_solver_pool import EVENT_TIMEOUT_S, run, small_problem, until


async def kill_a_starting_worker(pool: SolverPool) -> None:
    """SIGKILL workers while they start until the pool has counted a failed start. A start this loop did not see
    (it was not scheduled while the worker started: a loaded machine) is given another chance: the ready worker is
    killed, and the pool replaces it; so is a kill that comes just after the worker said it was ready (an idle
    death). Waiting for the next start instead waits for one that never comes."""
    failed = pool.health()["start_failures"]

    def counted() -> bool:
        return bool(pool.health()["start_failures"] > failed)

    while not counted():
        await until(lambda: pool.starting_pids() or counted() or pool.state == "ready", "a worker to start")
        victims = pool.starting_pids() or ([] if counted() else pool.pids())
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        await until(lambda gone=set(victims): not gone & set(pool.pids()) or counted(), "the pool to notice the kill")


@pytest.mark.parametrize("seen", [True, False], ids=["start seen", "start missed"])
def test_a_replacement_worker_killed_while_it_starts_is_started_again(seen: bool) -> None:
    async def body(pool: SolverPool) -> None:
        with pytest.raises(WorkerDied):  # the only worker dies: its replacement starts
            await pool.call("os", "_exit", 3)
        if not seen:  # as on a loaded machine, the replacement has started before the test looks
            await until(lambda: pool.state == "ready", "the replacement worker")
        await kill_a_starting_worker(pool)
        assert pool.healthy and pool.state in ("starting", "degraded")
        solved = await pool.solve("flux", small_problem(), 0.5, {})  # waits for the next start, then solves
        assert solved.assignment.shape == (6,)
        assert pool.health()["start_failures"] >= 1 and pool.state == "ready"

    run(body, workers=1, start_backoff_s=0.05)


def test_a_pool_that_cannot_start_any_worker_is_broken_and_says_why() -> None:
    # a data-segment limit of 1 MB, below what a worker holds at its start (the planners the forkserver imported):
    # every start fails with a MemoryError that names the setting to raise
    async def body(pool: SolverPool) -> None:
        assert pool.state == "broken" and not pool.healthy
        assert "MemoryError" in str(pool.broken) and pool.health()["broken"] == pool.broken
        assert "REBALANCER_SOLVER_MEMORY_LIMIT_MB" in str(pool.broken)
        with pytest.raises(PoolBroken, match="solver workers cannot start: .*MemoryError"):
            await pool.call("time", "sleep", 0)

    run(body, workers=1, memory_limit_mb=1, max_start_failures=2, start_backoff_s=0.01)


def test_queued_solves_fail_when_the_pool_breaks_instead_of_waiting() -> None:
    async def main() -> None:
        pool = SolverPool(1, 4, 0.5, memory_limit_mb=1, max_start_failures=3, start_backoff_s=0.01, nice=0)
        try:
            queued = [asyncio.ensure_future(pool.call("time", "sleep", 0)) for _ in range(3)]  # starts the workers
            res = await asyncio.wait_for(asyncio.gather(*queued, return_exceptions=True), EVENT_TIMEOUT_S)
            assert all(isinstance(r, PoolBroken) for r in res), res
            assert pool.health()["start_failures"] == 3
        finally:
            pool.shutdown()

    asyncio.run(main())


def test_the_next_solve_after_an_idle_worker_died_does_not_go_to_the_dead_worker() -> None:
    async def body(pool: SolverPool) -> None:
        (victim,) = pool.pids()
        os.kill(victim, signal.SIGKILL)
        await until(lambda: not alive(victim), "the killed worker to exit")
        solved = await pool.solve("flux", small_problem(), 0.5, {})  # at once: the pool may not have looked yet
        assert solved.assignment.shape == (6,)
        assert victim not in pool.pids() and pool.health()["idle_died"] == 1 and pool.died == 0

    run(body, workers=1)


def test_a_worker_that_dies_while_idle_is_replaced_without_a_request() -> None:
    async def body(pool: SolverPool) -> None:
        victim, other = pool.pids()
        os.kill(victim, signal.SIGKILL)
        await until(lambda: pool.health()["idle_died"] == 1, "the pool to notice the death")
        assert victim not in pool.pids() and pool.health()["ready_workers"] == 1  # /readyz no longer counts it
        await until(lambda: pool.state == "ready", "its replacement")
        assert other in pool.pids() and len(pool.pids()) == 2
        assert await pool.call("time", "sleep", 0) is None

    run(body, workers=2)


def test_a_solve_sent_to_a_worker_that_dies_before_receiving_it_goes_to_another_worker() -> None:
    # the death comes after the pool's last look at the idle worker: stopped (alive, its pipe open), handed the
    # solve, then killed before it could acknowledge it
    async def body(pool: SolverPool) -> None:
        (victim,) = pool.pids()
        os.kill(victim, signal.SIGSTOP)
        try:
            solve = asyncio.ensure_future(pool.call("time", "sleep", 0))
            await until(lambda: pool.queued == 0 and pool.in_flight == 1, "the solve to be handed to the worker")
        finally:
            os.kill(victim, signal.SIGKILL)
        assert await asyncio.wait_for(solve, EVENT_TIMEOUT_S) is None  # run by the replacement
        assert victim not in pool.pids() and pool.died == 0 and pool.health()["idle_died"] == 1

    run(body, workers=1)


def test_a_worker_whose_pool_is_gone_before_it_is_ready_ends_quietly() -> None:
    # a server stopped while its worker still imported the planners: the worker finds the pipe closed when it says
    # it is ready, and ends with status 0 (it used to die of a BrokenPipeError, its traceback printed: status 1)
    import multiprocessing as mp

    from controller.lifeline import start_forkserver
    from controller.solver_worker import PRELOAD, _worker_main

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    start_forkserver()  # this process's, as a pool starts it
    server, worker = ctx.Pipe()
    server.close()
    proc = ctx.Process(target=_worker_main, args=(worker, os.getpid()), name="rebalancer-solver")
    proc.start()
    worker.close()
    proc.join(EVENT_TIMEOUT_S)
    assert proc.exitcode == 0
