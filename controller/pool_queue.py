"""The solver pool's queue.

Queued solves are grouped in *flows*: all the solves of one owner (a job: its proposals, its automatic rounds) or of
one admission ticket (a request: a what-if's candidates, see :mod:`controller.pool_admission`), or a lone solve.
Flows take turns (round robin, one solve per turn, in the order they first queued), so a request of one solve waits
for at most one solve of each flow ahead of it, never for all of a big request's. Automatic rounds of registered
jobs have their own flows, always served first. Solves of an owner can be taken out of the queue
(:meth:`FairQueue.remove`) to be cancelled.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["adhoc", "auto"]
KINDS: tuple[Kind, ...] = ("adhoc", "auto")
_SERVED_FIRST: tuple[Kind, ...] = ("auto", "adhoc")


@dataclass(eq=False)
class Task:
    """A solve waiting for, or running in, a worker."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kill_after: float
    future: asyncio.Future[Any]
    kind: Kind = "adhoc"
    owner: Hashable | None = None
    flow: Hashable = field(default=None)
    cancelled: bool = False
    redelivered: bool = False  # its first worker died before it received it

    def __post_init__(self) -> None:
        if self.flow is None:
            # a task without an owner is a flow of its own; its id, not the task itself (a reference cycle would keep
            # its arguments, a body of many megabytes, alive until a full garbage collection)
            self.flow = ("task", id(self)) if self.owner is None else ("owner", self.owner)


class FairQueue:
    """Round robin over flows, automatic rounds first (see the module docstring)."""

    def __init__(self) -> None:
        self._flows: dict[Kind, OrderedDict[Hashable, deque[Task]]] = {"auto": OrderedDict(), "adhoc": OrderedDict()}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def push(self, task: Task, first: bool = False) -> None:
        """Queue ``task`` last in its flow (a new flow takes its turn after the others), or ``first``: before every
        other solve (it was taken out but could not run)."""
        flows = self._flows[task.kind]
        q = flows.setdefault(task.flow, deque())
        if first:
            q.appendleft(task)
            flows.move_to_end(task.flow, last=False)
        else:
            q.append(task)
        self._n += 1

    def pop(self) -> Task:
        """The next solve: the first flow's first, and that flow goes last (IndexError when empty)."""
        for kind in _SERVED_FIRST:
            flows = self._flows[kind]
            if flows:
                flow, q = next(iter(flows.items()))
                task = q.popleft()
                if q:
                    flows.move_to_end(flow)
                else:
                    del flows[flow]
                self._n -= 1
                return task
        raise IndexError("pop from an empty queue")

    def remove(self, which: Callable[[Task], bool]) -> list[Task]:
        """Take out (and return) every queued solve ``which`` selects."""
        out: list[Task] = []
        for flows in self._flows.values():
            for flow in list(flows):
                keep = deque(t for t in flows[flow] if not which(t))
                out.extend(t for t in flows[flow] if which(t))
                if keep:
                    flows[flow] = keep
                else:
                    del flows[flow]
        self._n -= len(out)
        return out


def settle(fut: asyncio.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    """Set ``fut``'s outcome unless it has one (a solve may be cancelled, timed out and answered in any order)."""
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


def retrieve(fut: asyncio.Future[Any]) -> None:
    """A done callback: a solve whose request went away leaves no "exception was never retrieved"."""
    if not fut.cancelled():
        fut.exception()
