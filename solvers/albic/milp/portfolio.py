"""Phase 3 of the ALBIC MILP planner (§4.3.1, :func:`~solvers.albic.milp.phases.restarts`) on more than one core.

Ruin-and-recreate is a randomised search whose plans at a fixed time differ from seed to seed (grid at 1 s, seeds
0–5: 100–106 of 108 instances within the best known + 5 %), and a Python loop uses one core. With ``processes`` > 1
the planner forks ``processes − 1`` copies of itself when the restarts start; each runs them with its own seed
(``[seed, i]``) until the same end and sends back its best placement, which the parent offers to its pool (checked
like any other candidate: budget, resource limits, Lemma 1) — the best plan of all wins. A fork copies the call's
state without pickling it and shares its pages until they change.

A child imports nothing (numpy.random is imported before the fork; the solver's background import, if started, is
never touched in a child), dies with its parent (``PR_SET_PDEATHSIG``) and leaves through ``os._exit`` (no atexit
handler of the parent runs twice). When its own restarts end, the parent takes the answers that are there by the
restarts' end plus a grace (``GRACE``) and goes on with its next phases; answers still to come are taken when the
search ends (:func:`finish`, called by :func:`~solvers.albic.milp.phases.search`), until the call's stop time at
the latest. A child that is late or failed is then killed and its answer ignored, so the time limit holds as with one
process, and a loaded machine that delays a child costs its answer no more than the time the parent searches anyway.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
class Child:
    """A forked search process: its pid, the read end of its pipe, its seed's index and its answer so far."""

    pid: int
    fd: int
    index: int
    data: bytearray = field(default_factory=bytearray)  # its answer as read so far


def in_parallel(run: Run, end: float, processes: int, restarts: Callable[[Run, float], None]) -> None:
    """``restarts(run, end)`` (:func:`~solvers.albic.milp.phases.restarts`) in ``processes`` processes (this one and
    forked children, each with its own seed); the children's best placements are offered to ``run.pool`` and the
    best of all becomes ``run.best``. ``details``: ``search_processes``, ``child_ruins``, ``child_kicks``,
    ``child_plans`` (answers received) and, when a child's plan is the best, the origin ``restarts@<i>``."""
    if processes <= 1 or run.reached() or not run.rng_in_time(end):
        restarts(run, end)
        return
    run.rng  # noqa: B018 - numpy.random imported (and this process's generator made) before forking
    children: list[Child] = []
    try:
        for i in range(1, processes):
            child = _fork(run, end, i, restarts)
            if child is not None:
                children.append(child)
        restarts(run, end)
    finally:
        run.details["search_processes"] = 1 + len(children)
        for key in ("child_plans", "child_ruins", "child_kicks"):
            run.details.setdefault(key, 0)
        run.children += children
        _collect(run, min(run.stop, max(end, time.perf_counter()) + GRACE[0] + GRACE[1] * run.limit), final=False)


def finish(run: Run) -> None:
    """Take the answers of the children still searching, until the call's stop time (none once the plan is proven),
    then end every child."""
    if run.children:
        _collect(run, run.stop, final=True)


def _fork(run: Run, end: float, index: int, restarts: Callable[[Run, float], None]) -> Child | None:
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
    return Child(pid, r, index)


def _collect(run: Run, deadline: float, final: bool) -> None:
    """Read the answers of ``run.children`` until ``deadline`` (none once the plan is proven) and offer each to the
    pool; end and reap a child that answered, failed, or (``final``) is late, keep the others in ``run.children``.
    ``details``: ``child_plans``, ``child_ruins``, ``child_kicks``, ``child_cpu_seconds`` (summed)."""
    size = _HEADER.size + 8 * run.units.n_units
    cpu = os.times()
    children, run.children = run.children, []
    try:
        while children:
            child = children[0]
            if not run.reached() and not _read(child, size, deadline) and not final:
                run.children.append(children.pop(0))  # no answer yet: the final collect waits for it
                continue
            try:
                if len(child.data) == size:
                    _take(run, child)
            finally:
                _close(children.pop(0))
    finally:  # (an error above: the child it met and those not looked at yet are ended too)
        for child in children:
            _close(child)
    after = os.times()
    used = after.children_user + after.children_system - cpu.children_user - cpu.children_system
    run.details["child_cpu_seconds"] = round(run.details.get("child_cpu_seconds", 0.0) + used, 4)


def _take(run: Run, child: Child) -> None:
    """Offer a child's answer to the pool; the best plan of all becomes ``run.best``."""
    r, k = _HEADER.unpack_from(child.data)
    for key, value in (("child_plans", 1), ("child_ruins", r), ("child_kicks", k)):
        run.details[key] = run.details.get(key, 0) + value
    place = np.frombuffer(child.data, dtype=np.int64, offset=_HEADER.size).copy()
    if ((place >= 0) & (place < run.p.n_nodes)).all() and run.pool.offer(place, f"restarts@{child.index}"):
        best = State(run.units, place, run.t_lin)
        if best.key() < run.best.key():
            run.best = best


def _read(child: Child, size: int, deadline: float) -> bool:
    """Read a child's answer into ``child.data`` until it has ``size`` bytes, the pipe ends or ``deadline``
    (``time.perf_counter``); True when the child is done (a whole answer, an end of pipe or a pipe error)."""
    while len(child.data) < size:
        wait = deadline - time.perf_counter()
        try:
            if wait <= 0 or not select.select([child.fd], [], [], wait)[0]:
                return False
            part = os.read(child.fd, size - len(child.data))
        except OSError:  # a broken pipe is a child without an answer
            return True
        if not part:
            return True
        child.data += part
    return True


def _close(child: Child) -> None:
    """Close a child's pipe, kill it (it may still be searching) and reap it."""
    os.close(child.fd)
    _end(child.pid)


def _end(pid: int) -> None:
    """Kill a child and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
