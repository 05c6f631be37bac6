"""Solves off the event loop: pre-warmed worker processes, admission with a share reserved for automatic rounds,
and a hard time limit per solve.

Workers are started with the ``forkserver`` method (never ``fork`` from a threaded server) and import numpy,
scipy, the registry and every planner (OR-tools included) once; :meth:`SolverPool.warm` starts them at startup so
the first request does not pay for the imports. A planner that does not import is an error at startup, not a
silent omission.

Each worker is one process with its own pipe (not a ``ProcessPoolExecutor``, whose shared queues make one worker's
death fail every solve in flight). So the pool can

* **enforce the time limit**: a solve still running after ``kill_factor`` × its limit + ``kill_grace_s`` has its
  worker killed and replaced; that request gets :class:`SolveTimeout`, the others are unaffected;
* **survive a crash**: a worker that dies (out of memory, a segfault in a native solver) fails only its request
  (:class:`WorkerDied`) and is replaced;
* **never orphan a process**: the forkserver and every worker die with the server, even on ``kill -9``
  (:mod:`controller.lifeline`), and :meth:`SolverPool.shutdown` stops them all on a normal stop.

Admission (issue 12, item 9): ``max_concurrent`` solve slots (running + queued); each solve holds one until it
ends, so a what-if holds one per candidate. ``reserved_auto`` of them only serve automatic rounds of registered
jobs (``kind="auto"``), which are also dequeued first: ad-hoc queries (plans, what-ifs, proposals) can never
starve them. Beyond its share a request gets :class:`~controller.errors.Busy` (429); a request that could never be
admitted (more candidates than the ad-hoc share) gets :class:`~controller.errors.TooLarge` (413).

Everything crossing the process boundary is plain data: a :class:`~solvers.model.Problem` (numpy arrays) goes in,
a plan document or an error tuple comes out (``InvalidInput`` does not pickle with its two arguments).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import heapq
import itertools
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from controller.errors import Busy, TooLarge
from controller.lifeline import start_forkserver, stop_forkserver
from controller.solver_worker import PRELOAD, Solved, _call_task, _import_planners, _solve_task, _worker_main
from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.solving")

Kind = Literal["adhoc", "auto"]
KINDS: tuple[Kind, ...] = ("adhoc", "auto")

__all__ = ["Busy", "SolveTimeout", "SolverPool", "WorkerDied", "_call_task", "_import_planners", "_solve_task"]


class SolveTimeout(RuntimeError):
    """The solve overran its time limit (× ``kill_factor`` + grace); its worker was killed and replaced."""


class WorkerDied(RuntimeError):
    """The worker running the solve died (killed, out of memory, a crash in native code); it was replaced."""


# ---------------------------------------------------------------------------------------------- server side
class _Worker:
    def __init__(self, ctx: Any, server_pid: int, nice: int = 0, memory_limit: int = 0):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, server_pid, nice, memory_limit),
                                name="rebalancer-solver",
                                daemon=True)
        self.proc.start()
        child.close()
        self.pid: int = self.proc.pid

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, ValueError):  # already gone / already closed
            pass
        self.conn.close()

    def describe_exit(self) -> str:
        self.proc.join(timeout=1.0)
        code = self.proc.exitcode
        return f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"


@dataclass(order=True)
class _Task:
    priority: int
    seq: int
    fn: Callable[..., tuple[Any, ...]] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)
    kill_after: float = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)


class SolverPool:
    """Worker processes, the admission rule and the time-limit guard (see the module docstring)."""

    _live = 0  # pools of this process: the (process-wide) forkserver is stopped with the last one

    def __init__(self, workers: int, max_concurrent: int, max_time_limit: float, *, reserved_auto: int | None = None,
                 kill_factor: float = 2.0, kill_grace_s: float = 5.0, nice: int = 5, memory_limit_mb: int = 0):
        self.workers = workers
        self.max_concurrent = max_concurrent
        self.max_time_limit = max_time_limit
        self.reserved_auto = max(1, max_concurrent // 5) if reserved_auto is None else reserved_auto
        self.reserved_auto = min(self.reserved_auto, max_concurrent - 1)
        self.kill_factor, self.kill_grace_s = kill_factor, kill_grace_s
        self.nice = nice
        self.memory_limit = memory_limit_bytes(memory_limit_mb, workers)
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.solves = 0
        self.killed = 0  # workers killed for overrunning their solve's time limit
        self.died = 0  # workers that died by themselves
        self.last_seconds = 0.0
        self.solve_seconds: list[float] = []
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        start_forkserver()
        self._server_pid = os.getpid()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._ready: set[int] = set()
        self._queue: list[_Task] = []
        self._seq = itertools.count()
        self._io = cf.ThreadPoolExecutor(max_workers=2 * workers + 2, thread_name_prefix="solver-io")
        self._starting: asyncio.Task[None] | None = None
        self._broken: str | None = None
        self._closed = False
        SolverPool._live += 1

    @classmethod
    def from_settings(cls, s: Any) -> SolverPool:
        """The pool a :class:`~controller.settings.Settings` describes (create it on the server's main thread)."""
        return cls(s.solver_workers, s.max_concurrent_solves, s.max_time_limit_s,
                   reserved_auto=s.reserved_auto_solves, kill_factor=s.solve_kill_factor,
                   kill_grace_s=s.solve_kill_grace_s, nice=s.solver_nice,
                   memory_limit_mb=s.solver_memory_limit_mb)

    # ------------------------------------------------------------------ admission
    @property
    def in_flight(self) -> int:
        """Solves running or queued."""
        return sum(self.counts.values())

    def capacity(self, kind: Kind = "adhoc") -> int:
        return self.max_concurrent if kind == "auto" else self.max_concurrent - self.reserved_auto

    def check_admission(self, n: int = 1, kind: Kind = "adhoc") -> None:
        """Raise :class:`Busy` when ``n`` more solves of ``kind`` would exceed its share, :class:`TooLarge` when
        they never could (the caller then queues its ``n`` solves with ``admit=False``)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        cap = self.capacity(kind)
        if n > cap:
            raise TooLarge(f"{n} solves at once: at most {cap} {kind} solves are admitted "
                           f"(REBALANCER_MAX_CONCURRENT_SOLVES − REBALANCER_RESERVED_AUTO_SOLVES)")
        used = self.in_flight if kind == "auto" else self.counts["adhoc"]
        if used + n > cap or self.in_flight + n > self.max_concurrent:
            raise Busy(f"{self.in_flight} solves in flight ({self.counts['auto']} automatic); {kind} limit {cap} "
                       f"of {self.max_concurrent}; retry later")

    def cap(self, time_limit: float) -> float:
        return min(float(time_limit), self.max_time_limit)

    # ------------------------------------------------------------------ public calls
    async def solve(self, name: str, problem: Problem, time_limit: float, params: dict[str, Any],
                    admit: bool = True, kind: Kind = "adhoc") -> Solved:
        """Run a planner in a worker; returns the plan document and the numeric assignment.

        Raises:
            Busy: too many solves in flight (only with ``admit``).
            InvalidInput: invalid parameters (normally caught earlier, in the server process).
            SolveTimeout: the planner overran its time limit; its worker was killed.
            RuntimeError: the planner failed (a bug, not user input) or its worker died.
        """
        tl = self.cap(time_limit)
        res: Solved = await self.submit(_solve_task, name, problem, tl, params, admit=admit, kind=kind,
                                        time_limit=tl)
        return res

    async def call(self, module: str, func: str, arg: Any, admit: bool = True, kind: Kind = "adhoc") -> Any:
        """``module.func(arg)`` in a worker (the Gedik partitioning document), bounded like a solve at the
        maximum time limit."""
        return await self.submit(_call_task, module, func, arg, admit=admit, kind=kind)

    async def submit(self, fn: Callable[..., tuple[Any, ...]], *args: Any, admit: bool = True, kind: Kind = "adhoc",
                     time_limit: float | None = None, raw: bool = False) -> Any:
        """Run ``fn(*args)`` in a worker. ``fn`` returns ``("ok", value)``, ``("invalid", field, reason)`` or
        ``("error", message)``; with ``raw`` its tuple is returned as it is. The worker is killed after
        ``kill_factor`` × ``time_limit`` (default: the maximum time limit) + ``kill_grace_s``."""
        if admit:
            self.check_admission(1, kind)
        if self._closed:
            raise RuntimeError("the solver pool is shut down")
        limit = self.max_time_limit if time_limit is None else time_limit
        loop = asyncio.get_running_loop()
        task = _Task(0 if kind == "auto" else 1, next(self._seq), fn, args,
                     self.kill_factor * limit + self.kill_grace_s, loop.create_future())
        task.future.add_done_callback(_retrieve)  # a request cancelled meanwhile leaves no "never retrieved"
        self.counts[kind] += 1
        t0 = time.perf_counter()
        try:
            heapq.heappush(self._queue, task)
            self._ensure_started()
            self._pump()
            out = await asyncio.shield(task.future)  # a cancelled request does not cancel its running solve
        finally:
            self.counts[kind] -= 1
        self.solves += 1
        self.last_seconds = time.perf_counter() - t0
        if raw:
            return out
        if out[0] == "ok":
            return out[1]
        if out[0] == "invalid":
            raise InvalidInput(out[1], out[2])
        raise RuntimeError(out[1])

    # ------------------------------------------------------------------ workers
    async def warm(self) -> None:
        """Start every worker and import the planners in it (run once at startup, in the background)."""
        self._ensure_started()
        assert self._starting is not None
        await asyncio.shield(self._starting)
        if self._broken:
            log.error("solver workers cannot start: %s", self._broken)
        else:
            log.info("solver workers ready: %s", sorted(w.pid for w in self._all))

    def _ensure_started(self) -> None:
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(self._start_workers(self.workers))

    async def _start_workers(self, n: int) -> None:
        await asyncio.gather(*(self._add_worker() for _ in range(n)))

    async def _add_worker(self) -> None:
        loop = asyncio.get_running_loop()
        if self._closed or self._broken:
            return
        try:
            w = await loop.run_in_executor(self._io, _Worker, self._ctx, self._server_pid, self.nice,
                                           self.memory_limit)
        except Exception as exc:  # e.g. the forkserver could not start
            self._fail_all(f"cannot start a solver worker: {type(exc).__name__}: {exc}")
            return
        self._all.add(w)
        try:
            hello = await loop.run_in_executor(self._io, w.conn.recv)
        except (EOFError, OSError):
            hello = ("init-error", f"the worker died while starting ({w.describe_exit()})")
        if self._closed:
            w.kill()
            return
        if hello[0] != "ready":
            self._all.discard(w)
            w.kill()
            self._fail_all(hello[1])
            return
        self._ready.add(w.pid)
        self._idle.append(w)
        self._pump()

    def _fail_all(self, reason: str) -> None:
        self._broken = reason
        log.error("solver pool unusable: %s", reason)
        while self._queue:
            t = heapq.heappop(self._queue)
            if not t.future.done():
                t.future.set_exception(RuntimeError(f"solver workers cannot start: {reason}"))

    def _pump(self) -> None:
        if self._broken:
            self._fail_all(self._broken)
            return
        loop = asyncio.get_running_loop()
        while self._queue and self._idle:
            task = heapq.heappop(self._queue)
            loop.create_task(self._run(self._idle.pop(), task))

    async def _run(self, w: _Worker, task: _Task) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._io, w.conn.send, (task.fn, task.args))  # pickling off the loop
            recv = loop.run_in_executor(self._io, w.conn.recv)
            done, _ = await asyncio.wait({recv}, timeout=task.kill_after)
            if not done:
                self.killed += 1
                self._all.discard(w)
                self._ready.discard(w.pid)
                w.kill()
                log.error("solve overran its time limit: worker %d killed after %.1f s", w.pid, task.kill_after)
                _set(task.future, exc=SolveTimeout(
                    f"the planner overran its time limit and was stopped after {task.kill_after:g} s "
                    f"({self.kill_factor:g} × the limit + {self.kill_grace_s:g} s); try a smaller problem or "
                    f"a shorter time_limit_s"))
                await asyncio.gather(recv, return_exceptions=True)
                await self._replace(w)
                return
            out = recv.result()
        except (EOFError, OSError) as exc:
            if self._closed:
                _set(task.future, exc=RuntimeError("the server is shutting down"))
                return
            self.died += 1
            self._all.discard(w)
            self._ready.discard(w.pid)
            how = w.describe_exit()
            log.error("solver worker %d died (%s) during a solve: %s", w.pid, how, type(exc).__name__)
            _set(task.future, exc=WorkerDied(f"the solver worker died ({how}); it was replaced"))
            w.kill()
            await self._replace(w)
            return
        except Exception as exc:  # e.g. a task argument that does not pickle: the worker is still fine
            log.exception("sending a task to solver worker %d failed", w.pid)
            _set(task.future, exc=RuntimeError(f"the task could not be sent to a worker: {type(exc).__name__}"))
            self._idle.append(w)
            self._pump()
            return
        _set(task.future, result=out)
        self._idle.append(w)
        self._pump()

    async def _replace(self, w: _Worker) -> None:
        self._all.discard(w)
        self._ready.discard(w.pid)
        await self._add_worker()

    def health(self) -> dict[str, Any]:
        """For the readiness probe: workers ready to solve, how many there should be, why the pool is unusable."""
        return {"ready_workers": len(self._ready), "workers": self.workers, "broken": self._broken,
                "closed": self._closed, "in_flight": self.in_flight, "killed": self.killed, "died": self.died}

    def pids(self) -> list[int]:
        """Pids of the live workers (tests, diagnostics)."""
        return sorted(w.pid for w in self._all)

    def shutdown(self) -> None:
        """Stop every worker and the forkserver (SIGTERM, then SIGKILL after 2 s); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for t in self._queue:
            _set(t.future, exc=RuntimeError("the server is shutting down"))
        self._queue.clear()
        workers = list(self._all)
        for w in workers:
            if w.proc.is_alive():
                w.proc.terminate()
        deadline = time.monotonic() + 2.0
        for w in workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            w.kill()
            w.proc.join(timeout=1.0)
        self._all.clear()
        self._idle.clear()
        self._io.shutdown(wait=False, cancel_futures=True)
        SolverPool._live -= 1
        if SolverPool._live == 0:
            stop_forkserver()


def _set(fut: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def memory_limit_bytes(limit_mb: int, workers: int) -> int:
    """``limit_mb`` in bytes; 0 = automatic: the machine's memory / (workers + 1), so that the workers together
    leave the server its share; -1 = no limit (returns 0)."""
    if limit_mb > 0:
        return limit_mb * 2**20
    if limit_mb < 0:
        return 0
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX system
        return 0
    return int(total // (workers + 1))


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()

