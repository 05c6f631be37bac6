"""A task's messages to a solver worker (:func:`controller.solver_worker.pack`): big bodies out of band."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import threading

from controller.solver_worker import OUT_OF_BAND_BYTES, _receive, pack


def test_a_big_body_travels_out_of_band_and_arrives_whole() -> None:
    body = bytes(range(256)) * (OUT_OF_BAND_BYTES // 256 + 7)
    parts = pack(len, (body, b"small", {"k": 1}))
    assert len(parts) == 2                      # the pickle, then the body as it is
    assert len(parts[0]) < 1000                 # the pickle does not hold a copy of the body
    a, b = mp.Pipe()
    sender = threading.Thread(target=lambda: [a.send_bytes(p) for p in parts])  # (a pipe holds less than the body)
    sender.start()
    head, bufs = _receive(b)
    sender.join()
    fn, args = pickle.loads(memoryview(head)[4:], buffers=bufs)
    assert fn is len and args == (body, b"small", {"k": 1})
    assert type(args[0]) is bytes


def test_small_arguments_stay_in_band() -> None:
    parts = pack(max, (b"x" * (OUT_OF_BAND_BYTES - 1), 3))
    assert len(parts) == 1
    a, b = mp.Pipe()
    a.send_bytes(parts[0])
    head, bufs = _receive(b)
    assert bufs == [] and pickle.loads(memoryview(head)[4:], buffers=bufs) == (max, (b"x" * (OUT_OF_BAND_BYTES - 1), 3))
