"""The solver worker process: what runs on the far side of :class:`controller.solving.SolverPool`'s pipes.

A worker binds its life to the server's (:mod:`controller.lifeline`), starts with numpy, scipy, the registry and
every planner imported (the forkserver imported them once: :data:`PRELOAD`), then answers ``(fn, args)`` messages
with ``fn(*args)``: a plan document or an error tuple comes back as plain data (``InvalidInput`` does not pickle
with its two arguments). A task travels as :func:`pack` makes it: its pickle, then each big ``bytes`` argument (a
request body) out of band, straight from the server's buffer.
"""

from __future__ import annotations

import importlib
import io
import multiprocessing.connection as mpc
import os
import pickle
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from controller.lifeline import bind_worker
from rebalancer_client.contract import Plan
from solvers.errors import InvalidInput
from solvers.model import Problem
from solvers.registry import PLANNER_MODULES

#: what the planners import lazily (the CLI should not pay for OR-tools when it runs Flux): a long-lived worker
#: imports it at start-up, so a solve never spends its time limit importing (~1 s for OR-tools on a busy machine)
LAZY_SOLVER_MODULES = ["solvers.albic.milp.cpsat", "solvers.albic.milp.cbc"]

#: the modules of the functions the server sends to its workers (``SolverPool.submit``): request bodies read and
#: answered (:mod:`controller.planning`, :mod:`controller.edge`) and jobs built (:mod:`controller.jobs`). Unpickling
#: a task imports its function's module: without these a worker's first request spent ~0.2 s importing (0.3 s over
#: HTTP: a server's first plan, answered after its time limit)
TASK_MODULES = ["controller.edge", "controller.planning", "controller.jobs"]

#: imported once by the forkserver, so that every worker starts with them: a worker killed at its hard deadline or
#: lost is replaced in ~0.15 s instead of ~0.8 s (seconds on a busy machine: the imports are most of a worker's
#: start), and the workers share the pages of OR-tools, pandas and scipy (PSS of a 2-worker pool 168 MB instead of
#: 199 MB). The first binds the forkserver to the server's life. The forkserver skips a module that fails to import;
#: the worker's own import (:func:`_init_worker`) then fails too and reports why.
PRELOAD = ["controller.forkserver_lifeline", "numpy", "scipy.sparse", "solvers.model", "solvers.metrics",
           "solvers.registry", *PLANNER_MODULES.values(), *LAZY_SOLVER_MODULES, *TASK_MODULES]


def _import_planners() -> list[str]:
    """Import every planner module; an import error is a bug of this build and propagates."""
    from solvers import registry

    for module in registry.PLANNER_MODULES.values():
        importlib.import_module(module)
    return sorted(registry.PLANNER_MODULES)


def _init_worker() -> None:
    """Import what the forkserver should have (a no-op when it did; the registry read again, as registered now): an
    import that fails raises here."""
    for m in PRELOAD[1:]:
        importlib.import_module(m)
    _import_planners()


def loaded(names: list[str]) -> list[bool]:
    """Which of ``names`` this process has imported (``SolverPool.call`` target for the readiness tests)."""
    import sys

    return [n in sys.modules for n in names]


#: this worker's data-segment limit in bytes (0: none), for the out-of-memory message
MEMORY_LIMIT = 0


def _limit_memory(limit: int) -> None:
    """Cap the worker's data segment (heap and anonymous mappings: ``RLIMIT_DATA``): a solve that needs more gets
    a ``MemoryError`` (its request a clear error) instead of taking the machine's memory. A limit below what the
    worker holds when it starts (the planners the forkserver imported) leaves it nothing to solve with: the start
    fails with a ``MemoryError`` that says so."""
    global MEMORY_LIMIT
    if limit > 0:
        import resource

        held = _data_bytes()
        if held >= limit:
            raise MemoryError(f"the solver memory limit ({limit >> 20} MB) is below what a worker holds at its start "
                              f"({held >> 20} MB: the planners): raise REBALANCER_SOLVER_MEMORY_LIMIT_MB")
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        MEMORY_LIMIT = limit


def _data_bytes() -> int:
    """This process's data segment now (``VmData``), in bytes: what ``RLIMIT_DATA`` counts (0 where there is no
    ``/proc``: not checked)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return 0


#: task arguments of at least this many bytes travel out of band (:func:`pack`)
OUT_OF_BAND_BYTES = 1 << 20


def pack(fn: Any, args: tuple[Any, ...]) -> list[bytes | memoryview]:
    """The messages of the task ``fn(*args)``: its pickle (protocol 5; a 4-byte count of the buffers first), then,
    out of band, every ``bytes`` argument of at least :data:`OUT_OF_BAND_BYTES`. Pickling a 50 MB body in band
    copies it while holding the GIL (~40 ms in which the server's event loop cannot run); out of band it goes from
    the buffer to the pipe, the GIL released during each write."""
    bufs: list[pickle.PickleBuffer] = []
    wrapped = tuple(pickle.PickleBuffer(a) if isinstance(a, bytes) and len(a) >= OUT_OF_BAND_BYTES else a
                    for a in args)
    f = io.BytesIO()
    pickler = pickle.Pickler(f, 5, buffer_callback=bufs.append)
    pickler.dispatch_table = {**ForkingPickler._copyreg_dispatch_table,  # type: ignore[attr-defined]
                              **ForkingPickler._extra_reducers}  # type: ignore[attr-defined]
    pickler.dump((fn, wrapped))
    return [len(bufs).to_bytes(4, "big") + f.getvalue(), *(b.raw() for b in bufs)]


def _receive(conn: mpc.Connection) -> tuple[bytes, list[bytes]]:
    """The messages of one task (:func:`pack`): the pickle and its out-of-band buffers."""
    head = conn.recv_bytes()
    return head, [conn.recv_bytes() for _ in range(int.from_bytes(head[:4], "big"))]


def _failure(exc: Exception) -> str:
    if isinstance(exc, MemoryError) and MEMORY_LIMIT:
        return (f"MemoryError: the solve needed more than the solver worker's memory limit "
                f"({MEMORY_LIMIT // 2**20} MB, REBALANCER_SOLVER_MEMORY_LIMIT_MB)")
    return f"{type(exc).__name__}: {exc}"


def _worker_main(conn: mpc.Connection, server_pid: int, nice: int = 0, memory_limit: int = 0) -> None:
    """One solver process: bind to the server's life, import the planners, then answer ``(fn, args)`` messages
    with ``fn(*args)`` until the pipe closes or ``None`` arrives. Each message is acknowledged (an empty message)
    as soon as it has arrived, before it is unpickled or run."""
    bind_worker(server_pid)
    if nice:  # the event loop wins the CPU over a solve when the machine is busy
        os.nice(nice)
    try:
        _limit_memory(memory_limit)
        _init_worker()
    except BaseException as exc:  # reported to the server, which refuses solves with this reason
        _send(conn, ("init-error", f"{type(exc).__name__}: {exc}"))
        return
    if not _send(conn, ("ready", os.getpid())):
        return
    while True:
        try:
            head, bufs = _receive(conn)
            conn.send_bytes(b"")  # the receipt: from now on the task is this worker's (the server retries it before)
        except (EOFError, OSError):
            return
        msg = pickle.loads(memoryview(head)[4:], buffers=bufs)
        if msg is None:
            return
        fn, args = msg
        try:
            out = fn(*args)
        except Exception as exc:  # a bug in a task function: reported, the worker lives on
            out = ("error", _failure(exc))
        if not _send(conn, out):
            return


def _send(conn: mpc.Connection, obj: Any) -> bool:
    """Send ``obj`` to the server; ``False`` when the server has closed the pipe (it stopped, or gave up on this
    worker: a pool shut down while the worker was still starting), and the worker then just ends, printing nothing."""
    try:
        conn.send(obj)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        return False
    return True


@dataclass(frozen=True)
class Solved:
    """A solve's result as it leaves the worker: the plan document (for users and the history) and the numeric
    assignment (node index per key group, in the problem's order) that the controller commits as it is."""

    plan: Plan
    assignment: np.ndarray


def solve_plan(name: str, problem: Problem, time_limit: float, params: dict[str, Any]) -> Solved:
    """The one solve of a plan (in a worker): ``registry.solve``, then the plan document."""
    from solvers import registry
    from solvers.documents import plan_document

    plan = registry.solve(name, problem, time_limit=time_limit, **params)
    return Solved(plan_document(problem, plan), np.asarray(plan.assignment, dtype=np.int64))


def _solve_task(name: str, problem: Problem, time_limit: float, params: dict[str, Any]) -> tuple[Any, ...]:
    """Worker side of :meth:`controller.solving.SolverPool.solve`: errors come back as data."""
    try:
        return ("ok", solve_plan(name, problem, time_limit, params))
    except InvalidInput as exc:
        return ("invalid", exc.field, exc.reason)
    except Exception as exc:  # a planner bug (or out of memory): reported, never crashes the server
        return ("error", _failure(exc))


def _call_task(module: str, func: str, arg: Any) -> tuple[Any, ...]:
    """Worker side of :meth:`controller.solving.SolverPool.call`: ``module.func(arg)``."""
    try:
        mod = importlib.import_module(module)
        return ("ok", getattr(mod, func)(arg))
    except InvalidInput as exc:
        return ("invalid", exc.field, exc.reason)
    except Exception as exc:
        return ("error", _failure(exc))
