"""The pool's queue: a finished task frees its arguments at once (no reference cycle keeps a body alive)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from controller.pool_queue import FairQueue, Task


class Body:
    """Stands for a request body of many megabytes held in a task's arguments."""


def test_a_task_without_owner_is_freed_without_a_garbage_collection():
    loop = asyncio.new_event_loop()
    gc.disable()
    try:
        body = Body()
        ref = weakref.ref(body)
        q = FairQueue()
        q.push(Task(fn=print, args=(body,), kill_after=1.0, future=loop.create_future()))
        del body
        task = q.pop()
        assert ref() is not None
        del task
        assert ref() is None, "the task (and its arguments) outlived its last reference"
    finally:
        gc.enable()
        loop.close()
