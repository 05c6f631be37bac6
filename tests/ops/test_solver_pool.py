"""The solver pool with real worker processes: the time limit is enforced by killing the overrunning worker only,
a crashed worker fails only its request, admission reserves a share for automatic rounds, import errors surface.
Also the helpers of the other ``test_pool_*`` modules (:func:`run`, :class:`Gate`, :func:`until`)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from controller.errors import Busy, TooLarge
from controller.solving import SolverPool, SolveTimeout, WorkerDied
from solvers.model import Problem


def run(body: Callable[[SolverPool], Awaitable[Any]], **kw: Any) -> Any:
    """``body(pool)`` on a warm pool of real workers. The kill deadline of a solve is a minute unless the test sets
    ``kill_grace_s``: a loaded machine must not turn a quick solve into a timeout. The workers run at the tests'
    priority unless the test sets ``nice`` (at the default 19 a worker gets ~1 % of a core beside the other test
    processes and can miss even that minute)."""
    kw.setdefault("kill_grace_s", 60.0)
    kw.setdefault("nice", 0)

    async def main() -> Any:
        pool = SolverPool(kw.pop("workers", 2), kw.pop("max_concurrent", 8), kw.pop("max_time_limit", 0.5), **kw)
        try:
            await pool.warm()
            return await body(pool)
        finally:
            pool.shutdown()

    return asyncio.run(main())


def small_problem() -> Problem:
    return Problem.from_dict({"nodes": [{"id": "a"}, {"id": "b"}],
                              "key_groups": [{"id": f"k{i}", "node": "a", "load": 1 + i} for i in range(6)]})


#: generous bounds on events (a worker starts in ~2 s on an idle machine): a passing test never waits this long
EVENT_TIMEOUT_S = 120.0


async def until(cond: Callable[[], object], what: str) -> None:
    """Poll ``cond()`` on the event loop until it is true (bounded: a pool that never gets there fails the test)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + EVENT_TIMEOUT_S
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Gate:
    """A solve that holds its worker until the test opens the gate: the worker blocks opening a FIFO for reading
    until the test opens it for writing. Lets a test queue solves behind a busy worker without timing."""

    def __init__(self, tmp: Path, name: str = "gate"):
        self.path = tmp / name
        os.mkfifo(self.path)

    def hold(self, pool: SolverPool, **kw: Any) -> Awaitable[Any]:
        return pool.submit(Path.read_text, self.path, raw=True, time_limit=3600, **kw)  # never killed

    async def open(self) -> None:
        await asyncio.to_thread(lambda: open(self.path, "w").close())  # waits for the worker to be reading


async def queued(pool: SolverPool, n: int) -> None:
    """Let the submitted coroutines run up to their queueing (bounded: they queue in one pass of the loop)."""
    for _ in range(1000):
        if pool.queued == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{pool.queued} solves queued, expected {n}")


def test_an_overrunning_solve_is_killed_and_the_others_finish() -> None:
    async def body(pool: SolverPool) -> None:
        before = pool.pids()
        t0 = time.perf_counter()
        res = await asyncio.gather(pool.call("time", "sleep", 60), pool.call("time", "sleep", 0.2),
                                   pool.call("time", "sleep", 0.3), pool.call("time", "sleep", 0.1),
                                   return_exceptions=True)
        took = time.perf_counter() - t0
        assert isinstance(res[0], SolveTimeout), res
        assert "time limit" in str(res[0])
        assert res[1:] == [None, None, None]
        assert took < 50, took  # killed at 2 × 0.5 s + 0.5 s, not after 60 s
        assert pool.killed == 1
        await until(lambda: pool.state == "ready", "the replacement")  # it starts in the background
        assert len(pool.pids()) == 2 and pool.pids() != before
        solved = await pool.solve("flux", small_problem(), 0.5, {})  # the pool still solves
        assert set(solved.plan.assignment) == {f"k{i}" for i in range(6)}
        assert solved.assignment.shape == (6,)

    run(body, kill_grace_s=0.5)


def test_workers_run_at_the_niceness_they_are_given() -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)

    async def body(pool: SolverPool) -> list[int]:
        await until(lambda: len(pool.pids()) == 2, "two workers")
        return [os.getpriority(os.PRIO_PROCESS, pid) for pid in pool.pids()]

    assert run(body, nice=5) == [min(19, own + 5)] * 2


def test_a_crashed_worker_fails_only_its_request() -> None:
    async def body(pool: SolverPool) -> None:
        res = await asyncio.gather(pool.call("time", "sleep", 0.5), pool.call("os", "_exit", 3),
                                   pool.call("time", "sleep", 0.2), return_exceptions=True)
        assert isinstance(res[1], WorkerDied) and "exit code 3" in str(res[1]), res
        assert res[0] is None and res[2] is None
        assert pool.died == 1
        solved = await pool.solve("flux", small_problem(), 0.5, {})
        assert solved.plan.solver.status

    run(body)


def test_admission_reserves_a_share_for_automatic_rounds() -> None:
    async def body(pool: SolverPool) -> None:
        assert pool.capacity("adhoc") == 4 and pool.capacity("auto") == 6
        with pytest.raises(TooLarge):  # a what-if with more candidates than the ad-hoc share: never admissible
            pool.check_admission(5)
        pool.check_admission(4)
        # four ad-hoc solves queued (two running, two waiting): the ad-hoc share is used up ...
        adhoc = [asyncio.ensure_future(pool.call("time", "sleep", 0.6)) for _ in range(4)]
        await asyncio.sleep(0.05)
        assert pool.counts["adhoc"] == 4
        with pytest.raises(Busy):
            pool.check_admission(1)
        with pytest.raises(Busy):
            await pool.call("time", "sleep", 0)
        # ... but automatic rounds are still admitted, up to the whole pool
        pool.check_admission(2, kind="auto")
        with pytest.raises(Busy):
            pool.check_admission(3, kind="auto")
        auto = await pool.call("time", "sleep", 0.01, kind="auto")
        assert auto is None
        await asyncio.gather(*adhoc)
        assert pool.in_flight == 0
        pool.check_admission(4)

    run(body, max_concurrent=6, reserved_auto=2)


def test_auto_solves_jump_the_queue(tmp_path: Path) -> None:
    async def body(pool: SolverPool) -> None:
        done: list[str] = []

        async def job(tag: str, kind: str) -> None:
            await pool.call("time", "sleep", 0, kind=kind, admit=False)  # type: ignore[arg-type]
            done.append(tag)

        gate = Gate(tmp_path)
        first = asyncio.ensure_future(gate.hold(pool))  # occupies the only worker
        adhoc = [asyncio.ensure_future(job(f"adhoc{i}", "adhoc")) for i in range(3)]
        await queued(pool, 3)
        auto = asyncio.ensure_future(job("auto", "auto"))  # queued last
        await queued(pool, 4)
        await gate.open()
        await asyncio.gather(first, *adhoc, auto)
        assert done[0] == "auto", done

    run(body, workers=1)


def test_planner_import_errors_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    from controller.solver_worker import _import_planners
    from solvers import registry

    monkeypatch.setitem(registry.PLANNER_MODULES, "broken", "solvers.no_such_planner_module")
    with pytest.raises(ModuleNotFoundError):
        _import_planners()



def test_pools_started_on_other_threads_do_not_take_each_other_down() -> None:
    """An in-process test server runs its loop on a thread: the forkserver it starts must not die with that thread
    (the parent-death signal follows the thread) while another pool still uses it."""
    a_ready, b_ready, a_done = threading.Event(), threading.Event(), threading.Event()
    result: dict[str, Any] = {}

    async def a() -> None:
        pool = SolverPool(1, 4, 1.0, nice=0)
        await pool.warm()
        a_ready.set()
        b_ready.wait(120)
        pool.shutdown()

    async def b() -> None:
        a_ready.wait(120)
        pool = SolverPool(1, 4, 1.0, nice=0)
        try:
            await pool.warm()
            b_ready.set()
            a_done.wait(120)
            await asyncio.sleep(0.5)  # a parent-death signal would have arrived by now
            result["doc"] = (await pool.solve("flux", small_problem(), 0.5, {})).plan
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            result["error"] = exc
        finally:
            pool.shutdown()

    t1 = threading.Thread(target=asyncio.run, args=(a(),))
    t2 = threading.Thread(target=asyncio.run, args=(b(),))
    t1.start()
    t2.start()
    t1.join(180)
    a_done.set()
    t2.join(180)
    assert "error" not in result, result
    assert result["doc"].algorithm == "flux"


def test_a_solve_over_the_memory_limit_fails_alone() -> None:
    """A request that would take the machine's memory gets a clear error; the worker lives on."""
    import resource

    async def body(pool: SolverPool) -> None:
        limit = 700 * 2**20
        assert tuple(await pool.call("resource", "getrlimit", resource.RLIMIT_DATA)) == (limit, limit)
        before = pool.pids()
        with pytest.raises(RuntimeError, match=r"memory limit \(700 MB, REBALANCER_SOLVER_MEMORY_LIMIT_MB\)"):
            await pool.call("numpy", "ones", 2 * 10**8)  # 1.6 GB
        assert pool.pids() == before and pool.died == 0
        assert await pool.call("time", "sleep", 0) is None

    run(body, workers=1, memory_limit_mb=700)


def test_memory_limit_setting() -> None:
    from controller.solving import memory_limit_bytes

    assert memory_limit_bytes(512, 2) == 512 * 2**20
    assert memory_limit_bytes(-1, 2) == 0
    auto = memory_limit_bytes(0, 2)
    assert 0 < auto < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_workers_import_the_exact_model_solvers_before_the_first_solve() -> None:
    # the planners import OR-tools / PuLP lazily (the CLI's Flux should not pay for them); a server worker that did
    # the same spent a solve's time limit importing: the README's 6-key-group proposal came back "feasible" after
    # 1 s (import 1.0 s) instead of "optimal" in 0.2 s
    async def body(pool: SolverPool) -> None:
        names = ["ortools.sat.python.cp_model", "pulp", "solvers.albic.milp.cpsat", "solvers.albic.milp.cbc"]
        assert await pool.call("controller.solver_worker", "loaded", names) == [True] * len(names)

    run(body)


def test_workers_start_with_the_modules_of_the_servers_tasks() -> None:
    # unpickling a task imports its function's module: a worker that had not imported controller.planning spent
    # ~0.2 s of a server's first request importing it (a first 1 s plan answered in 1.24 s over HTTP)
    from controller import edge, jobs, planning

    tasks = [planning.answer_task, planning.solve_summary_task, edge.in_worker, edge.StatsColumns.read, jobs.build]

    async def body(pool: SolverPool) -> None:
        names = sorted({f.__module__ for f in tasks})
        assert await pool.call("controller.solver_worker", "loaded", names) == [True] * len(names), names

    run(body, workers=1)


def test_the_forkserver_imports_the_planners_once_for_every_worker() -> None:
    # a replacement worker (after a kill at the hard deadline, a crash) starts from the forkserver with OR-tools,
    # PuLP and the planners already imported: in ~0.15 s instead of ~0.8 s (seconds on a busy machine)
    import multiprocessing.forkserver as mpfs

    async def body(pool: SolverPool) -> None:
        fs = mpfs._forkserver._forkserver_pid  # type: ignore[attr-defined]
        maps = Path(f"/proc/{fs}/maps").read_text()
        assert "ortools" in maps, "the forkserver has not loaded OR-tools"
        with pytest.raises(WorkerDied):
            await pool.call("os", "_exit", 3)
        await until(lambda: pool.state == "ready", "the replacement worker")
        names = ["ortools.sat.python.cp_model", "pulp", "solvers.albic.milp.cpsat"]
        assert await pool.call("controller.solver_worker", "loaded", names) == [True] * len(names)

    run(body, workers=1)


def test_the_next_pool_of_a_process_forks_from_the_same_forkserver() -> None:
    # the forkserver's import of the planners (~0.6 s of CPU) is paid once per process, not once per pool: an
    # in-process server started after another (tests, a restarted app) finds it running
    import multiprocessing.forkserver as mpfs

    def forkserver(pool: SolverPool) -> Any:
        async def pid() -> int:
            return int(mpfs._forkserver._forkserver_pid)  # type: ignore[attr-defined]
        return pid()

    first = run(forkserver, workers=1)
    second = run(forkserver, workers=1)
    assert first == second
    assert Path(f"/proc/{second}").exists()
