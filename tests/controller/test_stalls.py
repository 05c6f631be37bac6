"""``REBALANCER_LOOP_STALL_MS``: a server whose event loop is held logs where the loop's thread was."""

from __future__ import annotations

import logging
import time

from tests.helpers.server import InProcessServer


def test_a_held_event_loop_is_reported_with_the_holding_frame(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rebalancer.stalls")

    def reported() -> list[str]:  # (a busy machine may add reports of its own: only this one is looked for)
        return [r.getMessage() for r in caplog.records
                if r.name == "rebalancer.stalls" and "_hold_the_event_loop" in r.getMessage()]

    async def _hold_the_event_loop() -> None:
        deadline = time.monotonic() + 60
        while not reported() and time.monotonic() < deadline:  # held (no await) until the watchdog has spoken
            time.sleep(0.01)

    with InProcessServer(database_url=f"sqlite:///{tmp_path}/r.db", loop_stall_ms=50, warm=False) as srv:
        srv.run(_hold_the_event_loop())
        watch = srv.controller._stalls
    messages = reported()
    assert len(messages) == 1 and watch is not None and watch.reports >= 1, messages
    assert messages[0].startswith("the event loop is") and "thread rebalancer-checkpoint" in messages[0], messages


def test_off_by_default(tmp_path):
    with InProcessServer(database_url=f"sqlite:///{tmp_path}/r.db", warm=False) as srv:
        assert srv.controller._stalls is None
