"""The solver pool's worker processes: started (and restarted, with back-off) until the pool has its size, idle
ones watched so that a death is noticed before a solve is sent to the dead process.

A start fails when the worker dies before it says it is ready (killed, out of memory, the forkserver gone), does
not answer within ``start_timeout_s``, or reports an import error. A failed start is retried after a back-off that
doubles from ``backoff_s`` up to ``max_backoff_s``, for as long as the pool lives: a transient failure heals by
itself. When ``max_start_failures`` starts in a row have failed and no worker is ready, the pool is **broken**
(:attr:`Workers.broken` gives the last failure): queued solves fail with that reason instead of waiting, and the
liveness probe reports the server as not alive. The first start that succeeds clears it.

An idle worker sends nothing, so its pipe becomes readable only at end of file: the event loop watches it
(``add_reader``) and a worker that dies while idle is replaced at once; :meth:`Workers.take` checks the pipe
again before handing a worker out. A worker may still die between that check and the task's arrival (a killed
process closes its pipe only when its last thread has gone): a worker acknowledges each task on arrival
(:meth:`Worker.run`), so the pool knows that such a task never ran and gives it to another worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import os
from collections.abc import Callable
from typing import Any

from controller.solver_worker import _worker_main

log = logging.getLogger("rebalancer.solving")


class Worker:
    """One solver process and its end of the pipe."""

    def __init__(self, ctx: Any, server_pid: int, nice: int = 0, memory_limit: int = 0):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child, server_pid, nice, memory_limit),
                                name="rebalancer-solver", daemon=True)
        try:
            self.proc.start()
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()
        self.pid: int = self.proc.pid

    def run(self, payload: list[bytes | memoryview]) -> Any:
        """Send a packed task (:func:`controller.solver_worker.pack`) and wait for its result (blocks: call it off
        the event loop). Raises
        :class:`NotDelivered` when the worker died before it acknowledged the task (it never ran: another worker
        may run it), ``EOFError``/``OSError`` when it died after."""
        try:
            for part in payload:
                self.conn.send_bytes(part)
            self.conn.recv_bytes()  # the receipt
        except (EOFError, OSError) as exc:
            raise NotDelivered(f"{type(exc).__name__}: {exc}") from exc
        return self.conn.recv()

    def quiet(self) -> bool:
        """An idle worker's pipe has nothing to read unless the worker is gone (end of file)."""
        try:
            return not self.conn.poll(0)
        except (OSError, ValueError):  # closed
            return False

    def kill(self) -> None:
        """SIGKILL (the pipe stays open: a thread may still be reading it; :meth:`close` after that)."""
        try:
            self.proc.kill()
        except (OSError, ValueError):  # already gone / already closed
            pass

    def close(self) -> None:
        self.kill()
        self.conn.close()

    def describe_exit(self) -> str:
        """How the process ended (blocks up to 1 s for its exit status: call it off the event loop)."""
        self.proc.join(timeout=1.0)
        code = self.proc.exitcode
        return f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"


class NotDelivered(Exception):
    """The worker died before it acknowledged a task: the task did not run."""


class _StartFailed(Exception):
    pass


class Workers:
    """``size`` worker processes: started, watched while idle, replaced (see the module docstring).

    ``on_idle`` is called when a worker becomes idle (the pool hands it work), ``on_broken`` with the reason when
    the pool becomes broken (the pool fails its queued solves). Every method runs on the event loop's thread.
    """

    def __init__(self, size: int, spawn: Callable[[], Worker], io: cf.Executor, on_idle: Callable[[], None],
                 on_broken: Callable[[str], None], *, max_start_failures: int = 5, backoff_s: float = 0.25,
                 max_backoff_s: float = 30.0, start_timeout_s: float = 120.0):
        self.size = size
        self._spawn, self._io = spawn, io
        self._on_idle, self._on_broken = on_idle, on_broken
        self.max_start_failures = max(1, max_start_failures)
        self.backoff_s, self.max_backoff_s, self.start_timeout_s = backoff_s, max_backoff_s, start_timeout_s
        self.all: set[Worker] = set()  # every live process, starting ones included
        self.ready: set[Worker] = set()  # started: idle or busy
        self.idle: list[Worker] = []
        self.starting = 0  # start loops running (each ends with one ready worker)
        self.failures = 0  # consecutive failed starts
        self.start_failures = 0  # failed starts in all
        self.idle_died = 0  # workers found dead while idle
        self.last_failure: str | None = None
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the event loop the workers are watched on
        self._loops: set[asyncio.Task[None]] = set()
        self._waiters: list[asyncio.Future[None]] = []

    # ------------------------------------------------------------------ state
    @property
    def broken(self) -> str | None:
        """Why the pool cannot solve (``max_start_failures`` failed starts in a row and no worker ready), or None."""
        if self.failures >= self.max_start_failures and not self.ready:
            return self.last_failure
        return None

    def _changed(self) -> None:
        for f in self._waiters:
            if not f.done():
                f.set_result(None)
        self._waiters.clear()

    async def settled(self) -> None:
        """Wait until every start under way has ended (or the pool is broken or closed)."""
        while not (self.closed or self.broken or self.starting == 0):
            f = asyncio.get_running_loop().create_future()
            self._waiters.append(f)
            await f

    def starting_pids(self) -> list[int]:
        return sorted(w.pid for w in self.all - self.ready)

    # ------------------------------------------------------------------ starting
    def fill(self) -> None:
        """Start workers until ready + starting ones make the pool's size."""
        if self.closed:
            return
        self._loop = asyncio.get_running_loop()
        for _ in range(self.size - len(self.ready) - self.starting):
            self.starting += 1
            task = self._loop.create_task(self._start_loop())
            self._loops.add(task)
            task.add_done_callback(self._loops.discard)

    async def _start_loop(self) -> None:
        counted = True  # this loop is in ``starting`` until it hands out its worker or ends
        try:
            while not self.closed:
                try:
                    w = await self._start_once()
                except _StartFailed as exc:
                    self._start_failed(str(exc))
                    await asyncio.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** min(self.failures - 1, 30)))
                    continue
                if w is not None:
                    self.failures = 0
                    self.ready.add(w)
                    self.starting -= 1  # before the hand-out: a solve may kill it, and its replacement is due
                    counted = False
                    self._changed()
                    self.put(w)
                return
        finally:
            if counted:
                self.starting -= 1
                self._changed()

    def _start_failed(self, reason: str) -> None:
        self.failures += 1
        self.start_failures += 1
        self.last_failure = reason
        log.warning("a solver worker could not start (%d in a row): %s", self.failures, reason)
        broken = self.broken
        if broken:
            log.error("solver pool unusable: %s", broken)
            self._changed()
            self._on_broken(broken)

    async def _start_once(self) -> Worker | None:
        loop = asyncio.get_running_loop()
        spawned = loop.run_in_executor(self._io, self._spawn)
        try:
            w = await asyncio.shield(spawned)
        except asyncio.CancelledError:  # shut down meanwhile: the process being started must not outlive the pool
            spawned.add_done_callback(_close_spawned)
            raise
        except Exception as exc:  # e.g. the forkserver could not be reached or started
            raise _StartFailed(f"cannot start a solver worker: {type(exc).__name__}: {exc}") from exc
        self.all.add(w)
        recv = loop.run_in_executor(self._io, w.conn.recv)
        try:
            done, _ = await asyncio.wait({recv}, timeout=self.start_timeout_s)
            if not done:
                w.kill()
                await asyncio.gather(recv, return_exceptions=True)
                raise _StartFailed(f"the worker did not start within {self.start_timeout_s:g} s")
            try:
                hello = recv.result()
            except (EOFError, OSError):
                how = await loop.run_in_executor(self._io, w.describe_exit)
                raise _StartFailed(f"the worker died while starting ({how})") from None
            if hello[0] != "ready":
                raise _StartFailed(f"the worker failed while starting: {hello[1]}")
        except BaseException as exc:  # cancelled (shut down): a thread may still be reading the pipe
            recv.add_done_callback(_retrieved)  # its EOFError, once the worker is gone, is expected: not logged
            self._discard(w, close=not isinstance(exc, asyncio.CancelledError))
            raise
        if self.closed:
            self._discard(w)
            return None
        return w

    # ------------------------------------------------------------------ idle workers
    def put(self, w: Worker) -> None:
        """``w`` is idle: watch its pipe and let the pool hand it work."""
        if self.closed:
            return
        self.idle.append(w)
        asyncio.get_running_loop().add_reader(w.conn.fileno(), self._idle_readable, w)
        self._on_idle()

    def take(self) -> Worker | None:
        """An idle worker that is still alive (dead ones found on the way are replaced), or None."""
        loop = asyncio.get_running_loop()
        while self.idle:
            w = self.idle.pop()
            loop.remove_reader(w.conn.fileno())
            if w.quiet():
                return w
            self._idle_death(w)
        return None

    def _idle_readable(self, w: Worker) -> None:
        if w in self.idle:
            asyncio.get_running_loop().remove_reader(w.conn.fileno())
            self.idle.remove(w)
            self._idle_death(w)

    def _idle_death(self, w: Worker, what: str = "while idle") -> None:
        self.idle_died += 1
        log.error("solver worker %d died %s; replacing it", w.pid, what)
        self.lost(w)

    def died_before_delivery(self, w: Worker) -> None:
        """``w`` died before it acknowledged its task (a death while idle, noticed late)."""
        self._idle_death(w, "before it received a solve")

    def lost(self, w: Worker, close: bool = True) -> None:
        """``w`` is dead or killed: forget it and start a replacement. ``close=False`` when a thread may still be
        reading its pipe (the caller closes it after that)."""
        self._discard(w, close)
        self.fill()

    def _discard(self, w: Worker, close: bool = True) -> None:
        self.all.discard(w)
        self.ready.discard(w)
        if close:
            w.close()
        else:
            w.kill()
        self._changed()

    # ------------------------------------------------------------------ stop
    def close(self) -> list[Worker]:
        """Stop starting workers and forget them all; returns the live processes for the caller to stop (it may
        call this from another thread than the event loop's)."""
        self.closed = True
        loop, loops, fds = self._loop, list(self._loops), [w.conn.fileno() for w in self.idle]

        def stop() -> None:
            for t in loops:
                t.cancel()
            for fd in fds:
                loop.remove_reader(fd)  # type: ignore[union-attr]
            self._changed()

        if loop is not None and not loop.is_closed():
            if _running_loop() is loop:
                stop()
            else:
                loop.call_soon_threadsafe(stop)
        workers = list(self.all)
        self.all.clear()
        self.ready.clear()
        self.idle.clear()
        return workers


def _close_spawned(fut: asyncio.Future[Worker]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().close()


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Consume the outcome of a read nobody waits for any more (asyncio logs an exception never retrieved)."""
    if not fut.cancelled():
        fut.exception()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


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
