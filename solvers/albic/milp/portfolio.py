"""Phase 3 of the ALBIC MILP planner (§4.3.1, :func:`~solvers.albic.milp.phases.restarts`) on more than one core.

Ruin-and-recreate is a randomised search whose plans at a fixed time differ from seed to seed (grid at 1 s, seeds
0–5: 100–106 of 108 instances within the best known + 5 %), and a Python loop uses one core. With ``processes`` > 1
the planner forks ``processes − 1`` copies of itself when the restarts start; each runs them with its own seed
(``[seed, i]``) until the same end and sends back its best placement, which the parent offers to its pool (checked
like any other candidate: budget, resource limits, Lemma 1) — the best plan of all wins. A fork copies the call's
state without pickling it and shares its pages until they change.

A child imports nothing (numpy.random is imported before the fork; the solver's background import, if started, is
never touched in a child), dies with its parent (``PR_SET_PDEATHSIG``) and leaves through ``os._exit`` (no atexit
handler of the parent runs twice). The parent waits for a child's answer only until the restarts' end plus a grace
(``GRACE``, never past its own stop time); a child that is late or failed is killed and its answer ignored, so the
time limit holds as with one process.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from solvers import parent_death
from solvers.albic.milp.state import State

if TYPE_CHECKING:
    from solvers.albic.milp.phases import Run

MAX_AUTO = 4                  # processes=0 uses one per CPU this process may run on, at most this many
GRACE = (0.01, 0.02)          # a child's answer is awaited until the restarts' end + seconds + share of the limit
_HEADER = struct.Struct("<qq")  # the child's ruins and kicks, then its placement (int64 per unit)


def processes_for(requested: int) -> int:
    """The number of search processes for ``requested`` (0: one per CPU this process may run on, at most
    ``MAX_AUTO``); 1 where ``fork`` is not available."""
    if not hasattr(os, "fork"):
        return 1
    if requested > 0:
        return requested
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_AUTO, cpus))


@dataclass
class _Child:
    pid: int
    fd: int
    index: int


def in_parallel(run: Run, end: float, processes: int, restarts: Callable[[Run, float], None]) -> None:
    """``restarts(run, end)`` (:func:`~solvers.albic.milp.phases.restarts`) in ``processes`` processes (this one and
    forked children, each with its own seed); the children's best placements are offered to ``run.pool`` and the
    best of all becomes ``run.best``. ``details``: ``search_processes``, ``child_ruins``, ``child_kicks``,
    ``child_plans`` (answers received) and, when a child's plan is the best, the origin ``restarts@<i>``."""
    if processes <= 1 or run.reached() or not run.rng_in_time(end):
        restarts(run, end)
        return
    run.rng  # noqa: B018 - numpy.random imported (and this process's generator made) before forking
    parent_death.prepare()
    children: list[_Child] = []
    try:
        for i in range(1, processes):
            child = _fork(run, end, i, restarts)
            if child is not None:
                children.append(child)
        restarts(run, end)
    finally:
        _collect(run, children, min(run.stop, max(end, time.perf_counter()) + GRACE[0] + GRACE[1] * run.limit))
    run.details["search_processes"] = 1 + len(children)


def _fork(run: Run, end: float, index: int, restarts: Callable[[Run, float], None]) -> _Child | None:
    """Fork a child that runs the restarts with seed ``[run.seed, index]`` and writes its answer to a pipe."""
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.close(r)
            parent_death.set_pdeathsig(signal.SIGKILL)
            run._rng = np.random.default_rng([run.seed, index])
            run.details = {}
            restarts(run, end)
            place = np.ascontiguousarray(run.best.place, dtype=np.int64)
            data = _HEADER.pack(int(run.details.get("ruins", 0)), int(run.details.get("kicks", 0))) + place.tobytes()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return _Child(pid, r, index)


def _collect(run: Run, children: list[_Child], deadline: float) -> None:
    """Read each child's answer until ``deadline`` (none once the plan is proven), offer it to the pool; then end
    and reap every child (their CPU seconds in ``details["child_cpu_seconds"]``)."""
    size = _HEADER.size + 8 * run.units.n_units
    ruins = kicks = answers = 0
    cpu = os.times()
    for child in children:
        try:
            try:
                data = b"" if run.reached() else _read(child.fd, size, deadline)
            except OSError:  # a broken pipe is a child without an answer
                data = b""
            if len(data) == size:
                answers += 1
                r, k = _HEADER.unpack_from(data)
                ruins, kicks = ruins + r, kicks + k
                place = np.frombuffer(data, dtype=np.int64, offset=_HEADER.size).copy()
                if ((place >= 0) & (place < run.p.n_nodes)).all() and run.pool.offer(place, f"restarts@{child.index}"):
                    best = State(run.units, place, run.t_lin)
                    if best.key() < run.best.key():
                        run.best = best
        finally:
            os.close(child.fd)
            _end(child.pid)
    after = os.times()
    run.details.update(child_ruins=ruins, child_kicks=kicks, child_plans=answers, child_cpu_seconds=round(
        after.children_user + after.children_system - cpu.children_user - cpu.children_system, 4))


def _read(fd: int, size: int, deadline: float) -> bytes:
    """Up to ``size`` bytes from ``fd`` until EOF or ``deadline`` (``time.perf_counter``)."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        wait = deadline - time.perf_counter()
        if wait <= 0 or not select.select([fd], [], [], wait)[0]:
            break
        part = os.read(fd, size - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _end(pid: int) -> None:
    """Kill a child (it may still be searching) and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
