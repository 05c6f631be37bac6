"""Stall reports: where the event loop's thread was when the loop fell behind (``REBALANCER_LOOP_STALL_MS``).

``rebalancer_event_loop_lag_seconds`` says *that* the loop was late; this says *why*. The loop stamps a heartbeat
every ``threshold / 4``; a watchdog thread checks it as often, and when the heartbeat is older than the threshold
it logs (WARNING, logger ``rebalancer.stalls``) once per stall: how late, the loop thread's stack, and the
innermost frames of every other thread of the server (a pool thread unpickling an answer holds the GIL the loop
waits for). Off by default; it costs a timer on the loop and a thread that wakes every ``threshold / 4``.
It found, under the mixed-load benchmark, the router's first-request route building, the copies of big answers
written whole and a big registration's insert on the loop (``docs/benchmarks.md``, "Mixed load").
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("rebalancer.stalls")

#: frames of the loop thread and of each other thread in a report
LOOP_FRAMES = 12
OTHER_FRAMES = 4


class StallWatch:
    """Log where the loop's thread is whenever the loop is ``threshold_s`` or more behind (once per stall)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_s: float):
        self.loop, self.threshold = loop, threshold_s
        self.period = threshold_s / 4
        self.reports = 0
        self._beat = time.perf_counter()
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rebalancer-stall-watch", daemon=True)
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Call on the loop's thread."""
        self._loop_thread = threading.get_ident()
        self._tick()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        self._thread.join(timeout=5)

    def _tick(self) -> None:
        self._beat = time.perf_counter()
        self._timer = self.loop.call_later(self.period, self._tick)

    def _watch(self) -> None:
        reported = None
        while not self._stop.wait(self.period):
            beat = self._beat
            late = time.perf_counter() - beat - self.period
            if late >= self.threshold and beat != reported:
                reported = beat
                self.reports += 1
                log.warning("the event loop is %.0f ms late; where its thread is:\n%s", late * 1000,
                            self.where())

    def where(self) -> str:
        """The loop thread's stack, then the innermost frames of the other threads (this one left out)."""
        frames = sys._current_frames()
        names = {t.ident: t.name for t in threading.enumerate()}
        main = frames.get(self._loop_thread)
        out = ["".join(traceback.format_stack(main, limit=LOOP_FRAMES)) if main is not None else "  (no frame)\n"]
        for ident, frame in frames.items():
            if ident in (self._loop_thread, threading.get_ident()):
                continue
            summary = traceback.extract_stack(frame, limit=OTHER_FRAMES)
            path = " < ".join(f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in reversed(summary))
            out.append(f"  thread {names.get(ident, ident)}: {path}\n")
        return "".join(out)
