"""Solves off the event loop: pre-warmed worker processes, admission with a share reserved for automatic rounds,
and a hard time limit per solve.

Workers are started with the ``forkserver`` method (never ``fork`` from a threaded server), which imports numpy,
scipy, the registry and every planner (OR-tools included) once, so each worker starts with them
(:data:`~controller.solver_worker.PRELOAD`); :meth:`SolverPool.warm` starts them at startup so the first request
does not pay for the imports. A planner that does not import is an error at startup, not a silent omission.

Each worker is one process with its own pipe (not a ``ProcessPoolExecutor``, whose shared queues make one worker's
death fail every solve in flight). So the pool can

* **enforce the time limit**: a solve still running after ``kill_factor`` × its limit + ``kill_grace_s`` has its
  worker killed and replaced; that request gets :class:`SolveTimeout`, the others are unaffected;
* **survive a crash**: a worker that dies (out of memory, a segfault in a native solver) fails only its request
  (:class:`WorkerDied`) and is replaced;
* **heal itself**: a worker that fails to start is started again with back-off (:mod:`controller.pool_workers`);
  only when no worker can be started many times in a row is the pool :attr:`~SolverPool.broken` (queued solves
  fail with :class:`PoolBroken`, the liveness probe fails), until a start succeeds;
* **never orphan a process**: the forkserver and every worker die with the server, even on ``kill -9``
  (:mod:`controller.lifeline`), and :meth:`SolverPool.shutdown` stops them all on a normal stop.

Admission (:mod:`controller.pool_admission`): ``max_concurrent`` solve slots (running + queued); each solve holds
one until it ends, so a what-if holds one per candidate. :meth:`SolverPool.admit` takes all of a request's slots at
once, before its first ``await``, so concurrent requests never take more than there are. ``reserved_auto`` of them
only serve automatic rounds of registered jobs (``kind="auto"``). Beyond its share a request gets
:class:`~controller.errors.Busy` (429); one that could never be admitted gets :class:`~controller.errors.TooLarge`.

Queueing (:mod:`controller.pool_queue`): requests and jobs take turns, automatic rounds first, so a small request is
never stuck behind a big one; :meth:`SolverPool.cancel` drops an owner's (a deleted job's) solves.

Everything crossing the process boundary is plain data: a :class:`~solvers.model.Problem` (numpy arrays) goes in,
a plan document or an error tuple comes out (``InvalidInput`` does not pickle with its two arguments).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Hashable
from typing import Any

from controller.errors import Busy
from controller.lifeline import start_forkserver
from controller.pool_admission import Admission, Ticket
from controller.pool_errors import PoolBroken, SolveCancelled, SolverUnavailable, SolveTimeout, WorkerDied
from controller.pool_queue import KINDS, FairQueue, Kind, Task, retrieve, settle
from controller.pool_workers import NotDelivered, Worker, Workers, memory_limit_bytes
from controller.solver_worker import PRELOAD, Solved, _call_task, _solve_task, pack
from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.solving")

__all__ = ["KINDS", "Busy", "Kind", "PoolBroken", "SolveCancelled", "SolveTimeout", "SolverPool", "SolverUnavailable",
           "Ticket", "WorkerDied", "memory_limit_bytes"]


class SolverPool:
    """Worker processes, the admission rule and the time-limit guard (see the module docstring)."""

    def __init__(self, workers: int, max_concurrent: int, max_time_limit: float, *, reserved_auto: int | None = None,
                 kill_factor: float = 2.0, kill_grace_s: float = 5.0, nice: int = 19, memory_limit_mb: int = 0,
                 max_start_failures: int = 5, start_backoff_s: float = 0.25, max_start_backoff_s: float = 30.0,
                 start_timeout_s: float = 120.0):
        self.workers = workers
        self.max_time_limit = max_time_limit
        self._admission = Admission(max_concurrent, reserved_auto)
        self.max_concurrent, self.reserved_auto = max_concurrent, self._admission.reserved_auto
        self.kill_factor, self.kill_grace_s = kill_factor, kill_grace_s
        self.nice = nice
        self.memory_limit = memory_limit_bytes(memory_limit_mb, workers)
        self.counts = self._admission.counts  # slots taken per kind
        self.solves = 0
        self.killed = 0  # workers killed for overrunning their solve's time limit
        self.died = 0  # workers that died by themselves
        self.last_seconds = 0.0
        self.solve_seconds: list[float] = []
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        start_forkserver()
        self._server_pid = os.getpid()
        self._queue = FairQueue()
        self._running: dict[Worker, Task] = {}
        self._io = cf.ThreadPoolExecutor(max_workers=2 * workers + 2, thread_name_prefix="solver-io")
        self._workers = Workers(workers, self._spawn, self._io, self._pump, self._fail_queued,
                                max_start_failures=max_start_failures, backoff_s=start_backoff_s,
                                max_backoff_s=max_start_backoff_s, start_timeout_s=start_timeout_s)
        self._closed = False

    @classmethod
    def from_settings(cls, s: Any) -> SolverPool:
        """The pool a :class:`~controller.settings.Settings` describes (create it on the server's main thread)."""
        return cls(s.solver_workers, s.max_concurrent_solves, s.max_time_limit_s,
                   reserved_auto=s.reserved_auto_solves, kill_factor=s.solve_kill_factor,
                   kill_grace_s=s.solve_kill_grace_s, nice=s.solver_nice,
                   memory_limit_mb=s.solver_memory_limit_mb, max_start_failures=s.solver_start_failures,
                   start_backoff_s=s.solver_start_backoff_s)

    # ------------------------------------------------------------------ admission
    @property
    def in_flight(self) -> int:
        """Solve slots taken: solves running or queued, and slots admitted for solves not submitted yet."""
        return sum(self.counts.values())

    @property
    def queued(self) -> int:
        """Solves waiting for a worker."""
        return len(self._queue)

    def admit(self, n: int = 1, kind: Kind = "adhoc", owner: Hashable | None = None) -> Ticket:
        """Take ``n`` solve slots at once for one request, or raise (:class:`Busy`, :class:`TooLarge` as
        :meth:`check_admission`; :class:`PoolBroken`). Call it before the request's first ``await``; each of its
        solves then passes ``ticket=`` and uses one slot; :meth:`Ticket.release` (or leaving ``with``) gives back
        the slots left unused. The solves of a ticket queue as one flow (see :mod:`controller.pool_queue`), or as
        their ``owner``'s (a job id) when it is given."""
        if self._closed:
            raise RuntimeError("the solver pool is shut down")
        if self.broken:
            raise PoolBroken(f"solver workers cannot start: {self.broken}")
        return self._admission.admit(n, kind, owner)

    def cancel(self, owner: Hashable, reason: str = "cancelled", kill_running: bool = True) -> int:
        """Cancel every solve of ``owner`` (e.g. a deleted job's): its queued solves and, with ``kill_running``,
        its running ones (their workers are killed and replaced; a worker runs one solve, so nothing else is hit)
        fail at once with :class:`SolveCancelled`; its tickets' unused slots are freed and a later solve on them
        fails the same way. Solves submitted afterwards with that owner run as usual. Returns how many solves were
        cancelled (queued + running)."""
        if owner is None:
            raise ValueError("cancel needs an owner")
        why = f"the solves of {owner!r} were cancelled: {reason}"
        self._admission.cancel(owner, why)
        gone = self._queue.remove(lambda t: t.owner == owner)
        if kill_running:
            for w, task in list(self._running.items()):
                if task.owner == owner:
                    task.cancelled = True
                    self._workers.lost(w, close=False)  # killed; its replacement starts now
                    gone.append(task)
        for task in gone:
            settle(task.future, exc=SolveCancelled(why))
        if gone:
            log.info("%d solves of %r cancelled: %s", len(gone), owner, reason)
        return len(gone)

    def capacity(self, kind: Kind = "adhoc") -> int:
        return self._admission.capacity(kind)

    def check_admission(self, n: int = 1, kind: Kind = "adhoc") -> None:
        """Raise :class:`Busy` when ``n`` more solves of ``kind`` would exceed its share, :class:`TooLarge` when
        they never could. A check only: nothing is taken, so concurrent requests that each check and then
        ``await`` before they submit can all pass it; :meth:`admit` checks and takes the slots at once."""
        self._admission.check(n, kind)

    # ------------------------------------------------------------------ public calls
    async def solve(self, name: str, problem: Problem, time_limit: float, params: dict[str, Any],
                    admit: bool = True, kind: Kind = "adhoc", *, ticket: Ticket | None = None,
                    owner: Hashable | None = None) -> Solved:
        """Run a planner in a worker; returns the plan document and the numeric assignment. With ``ticket``, the
        solve uses one of its slots (``admit``, ``kind`` and ``owner`` are the ticket's); ``owner`` (a job id)
        queues the solves of one job as one flow.

        ``time_limit`` is the solve's (decided by :meth:`controller.settings.Settings.time_limit`).

        Raises:
            Busy: too many solves in flight (only with ``admit`` and no ``ticket``).
            InvalidInput: invalid parameters (normally caught earlier, in the server process).
            SolveTimeout: the planner overran its time limit; its worker was killed.
            RuntimeError: the planner failed (a bug, not user input) or its worker died.
        """
        res: Solved = await self.submit(_solve_task, name, problem, time_limit, params, admit=admit, kind=kind,
                                        time_limit=time_limit, ticket=ticket, owner=owner)
        return res

    async def call(self, module: str, func: str, arg: Any, admit: bool = True, kind: Kind = "adhoc", *,
                   ticket: Ticket | None = None, owner: Hashable | None = None) -> Any:
        """``module.func(arg)`` in a worker, bounded like a solve at the maximum time limit (the pool's own tests
        run their work through it)."""
        return await self.submit(_call_task, module, func, arg, admit=admit, kind=kind, ticket=ticket, owner=owner)

    async def submit(self, fn: Callable[..., tuple[Any, ...]], *args: Any, admit: bool = True, kind: Kind = "adhoc",
                     time_limit: float | None = None, raw: bool = False, ticket: Ticket | None = None,
                     owner: Hashable | None = None) -> Any:
        """Run ``fn(*args)`` in a worker. ``fn`` returns ``("ok", value)``, ``("invalid", field, reason)`` or
        ``("error", message)``; with ``raw`` its tuple is returned as it is. The worker is killed after
        ``kill_factor`` × ``time_limit`` (default: the maximum time limit) + ``kill_grace_s``.

        The solve holds a slot until it ends: one of ``ticket``'s (see :meth:`admit`), else one taken now (checked
        against its ``kind``'s share with ``admit``; ``admit=False`` when the caller checked already). It queues
        in its ticket's flow, its ``owner``'s, or one of its own (see :mod:`controller.pool_queue`)."""
        if self._closed:
            raise RuntimeError("the solver pool is shut down")
        if self.broken:
            raise PoolBroken(f"solver workers cannot start: {self.broken}")
        if ticket is not None:
            ticket.use()  # its slot was counted at admission
            kind, owner = ticket.kind, ticket.owner
        else:
            if admit:
                self.check_admission(1, kind)
            self.counts[kind] += 1
        limit = self.max_time_limit if time_limit is None else time_limit
        loop = asyncio.get_running_loop()
        task = Task(fn, args, self.kill_factor * limit + self.kill_grace_s, loop.create_future(), kind, owner,
                    flow=ticket if ticket is not None and owner is None else None)
        task.future.add_done_callback(retrieve)  # a request cancelled meanwhile leaves no "never retrieved"
        t0 = time.perf_counter()
        try:
            self._queue.push(task)
            self._workers.fill()
            self._pump()
            out = await asyncio.shield(task.future)  # a cancelled request does not cancel its running solve ...
        except asyncio.CancelledError:
            if self._queue.remove(lambda t: t is task):  # ... but nobody waits for it to start any more
                task.future.cancel()
            raise
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
        self._workers.fill()
        await self._workers.settled()
        if self.broken:
            log.error("solver workers cannot start: %s", self.broken)
        else:
            log.info("solver workers ready: %s", self.pids())

    def _spawn(self) -> Worker:
        return Worker(self._ctx, self._server_pid, self.nice, self.memory_limit)

    @property
    def broken(self) -> str | None:
        """Why no solve can run (no worker could be started, many times in a row; the pool keeps trying), or None.
        The liveness probe fails while it is set: a restart of the server may be what heals it."""
        return None if self._closed else self._workers.broken

    @property
    def healthy(self) -> bool:
        """Not shut down and not :attr:`broken` (workers may still be starting or being replaced)."""
        return not self._closed and self.broken is None

    @property
    def state(self) -> str:
        """``starting`` (no worker ready yet), ``ready`` (every worker), ``degraded`` (some are being replaced),
        ``broken`` or ``closed``."""
        if self._closed:
            return "closed"
        if self.broken:
            return "broken"
        ready = len(self._workers.ready)
        return "starting" if ready == 0 else "ready" if ready >= self.workers else "degraded"

    def _fail_queued(self, reason: str) -> None:
        for t in self._queue.remove(lambda t: True):
            settle(t.future, exc=PoolBroken(f"solver workers cannot start: {reason}"))

    def _pump(self) -> None:
        if self._closed:
            return
        if self.broken:
            self._fail_queued(self.broken)
            return
        loop = asyncio.get_running_loop()
        while self._queue:
            w = self._workers.take()
            if w is None:
                return
            task = self._queue.pop()
            self._running[w] = task  # from now on cancel() finds it
            loop.create_task(self._run(w, task))

    async def _run(self, w: Worker, task: Task) -> None:
        try:
            await self._exchange(w, task)
        finally:
            self._running.pop(w, None)

    async def _exchange(self, w: Worker, task: Task) -> None:
        loop = asyncio.get_running_loop()
        if task.cancelled:  # cancelled (its worker killed) before it was sent
            w.close()
            return
        try:  # pickling off the loop
            payload = await loop.run_in_executor(self._io, pack, task.fn, task.args)
        except Exception as exc:  # e.g. a task argument that does not pickle: the worker is still fine
            log.exception("a task for solver worker %d could not be pickled", w.pid)
            settle(task.future, exc=RuntimeError(f"the task could not be sent to a worker: {type(exc).__name__}"))
            self._workers.put(w)
            return
        reply = loop.run_in_executor(self._io, w.run, payload)
        done, _ = await asyncio.wait({reply}, timeout=task.kill_after)
        if not done or task.cancelled:  # overran, or killed by cancel() (which started its replacement)
            if not task.cancelled:
                self._overran(w, task)
            await asyncio.gather(reply, return_exceptions=True)
            w.close()
            return
        try:
            out = reply.result()
        except NotDelivered:
            self._redeliver(w, task)
        except (EOFError, OSError) as exc:
            await self._died(w, task, exc)
        else:
            settle(task.future, result=out)
            self._workers.put(w)

    def _redeliver(self, w: Worker, task: Task) -> None:
        """``w`` died before it received ``task``: the task goes back to the head of the queue, once."""
        self._workers.died_before_delivery(w)
        if self._closed:
            settle(task.future, exc=RuntimeError("the server is shutting down"))
        elif task.redelivered:  # the second worker in a row: not a coincidence, maybe the task (its size)
            settle(task.future, exc=WorkerDied("two solver workers died receiving the solve; they were replaced"))
        else:
            task.redelivered = True
            self._queue.push(task, first=True)
            self._pump()

    async def _died(self, w: Worker, task: Task, exc: BaseException) -> None:
        w.kill()
        if self._closed:
            settle(task.future, exc=RuntimeError("the server is shutting down"))
            return
        self.died += 1
        how = await asyncio.get_running_loop().run_in_executor(self._io, w.describe_exit)
        log.error("solver worker %d died (%s) during a solve: %s", w.pid, how, type(exc).__name__)
        settle(task.future, exc=WorkerDied(f"the solver worker died ({how}); it was replaced"))
        self._workers.lost(w)

    def _overran(self, w: Worker, task: Task) -> None:
        self.killed += 1
        self._workers.lost(w, close=False)  # killed; its replacement starts now
        log.error("solve overran its time limit: worker %d killed after %.1f s", w.pid, task.kill_after)
        settle(task.future, exc=SolveTimeout(
            f"the planner overran its time limit and was stopped after {task.kill_after:g} s "
            f"({self.kill_factor:g} × the limit + {self.kill_grace_s:g} s); try a smaller problem or "
            f"a shorter time_limit_s"))

    def health(self) -> dict[str, Any]:
        """For the probes: workers ready to solve, how many there should be, why the pool is unusable."""
        ws = self._workers
        return {"state": self.state, "ready_workers": len(ws.ready), "workers": self.workers,
                "starting": ws.starting, "broken": self.broken, "closed": self._closed, "in_flight": self.in_flight,
                "queued": self.queued, "killed": self.killed, "died": self.died, "idle_died": ws.idle_died,
                "start_failures": ws.start_failures, "last_start_failure": ws.last_failure}

    def pids(self) -> list[int]:
        """Pids of the live workers, starting ones included (tests, diagnostics)."""
        return sorted(w.pid for w in self._workers.all)

    def starting_pids(self) -> list[int]:
        """Pids of the workers still starting (tests, diagnostics)."""
        return self._workers.starting_pids()

    def shutdown(self) -> None:
        """Stop every worker (SIGTERM, then SIGKILL after 2 s); safe to call twice. The forkserver is the
        process's: it serves the next pool of this process and stops when the process exits
        (:func:`controller.lifeline.start_forkserver`)."""
        if self._closed:
            return
        self._closed = True
        for t in self._queue.remove(lambda t: True):
            settle(t.future, exc=RuntimeError("the server is shutting down"))
        workers = self._workers.close()
        for w in workers:
            if w.proc.is_alive():
                w.proc.terminate()
        deadline = time.monotonic() + 2.0
        for w in workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            w.close()
            w.proc.join(timeout=1.0)
        self._io.shutdown(wait=False, cancel_futures=True)
