"""A task's messages to a solver worker (:func:`controller.solver_worker.pack`): big bodies out of band."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import threading
from typing import Any

from controller.solver_worker import OUT_OF_BAND_BYTES, _receive, pack


def _through_a_pipe(parts: list[bytes | memoryview]) -> tuple[Any, list[bytes]]:
    """Send ``parts`` from a thread (a pipe holds less than a body) and read them as a worker does."""
    a, b = mp.Pipe()
    sender = threading.Thread(target=lambda: [a.send_bytes(p) for p in parts])
    sender.start()
    head, bufs = _receive(b)
    sender.join()
    return pickle.loads(memoryview(head)[4:], buffers=bufs), bufs


def test_a_big_body_travels_out_of_band_and_arrives_whole() -> None:
    body = bytes(range(256)) * (OUT_OF_BAND_BYTES // 256 + 7)
    parts = pack(len, (body, b"small", {"k": 1}))
    assert len(parts) == 2                      # the pickle, then the body as it is
    assert len(parts[0]) < 1000                 # the pickle does not hold a copy of the body
    (fn, args), bufs = _through_a_pipe(parts)
    assert fn is len and args == (body, b"small", {"k": 1})
    assert type(args[0]) is bytes and args[0] is bufs[0]


def test_small_arguments_stay_in_band() -> None:
    small = b"x" * (OUT_OF_BAND_BYTES - 1)
    parts = pack(max, (small, 3))
    assert len(parts) == 1
    (fn, args), bufs = _through_a_pipe(parts)
    assert bufs == [] and (fn, args) == (max, (small, 3))
