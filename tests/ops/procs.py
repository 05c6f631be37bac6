"""A real ``rebalancer serve`` for the operations tests (its process tree is read with :mod:`tests.helpers.procs`)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

from tests.helpers.procs import alive, cmdline, descendants, unix_sockets, wait_gone
from tests.helpers.server import UNSTARVED, ServerProcess, free_port

__all__ = ["ROOT", "Serve", "alive", "cmdline", "descendants", "free_port", "unix_sockets", "wait_gone"]

ROOT = Path(__file__).resolve().parents[2]


class Serve(ServerProcess):
    """:class:`tests.helpers.server.ServerProcess` as the operations tests use it: spawned at once (not waited
    for: :meth:`wait_healthy` before its :attr:`url`, the port being the server's own choice), info-level log in
    ``tmp``, two solver workers, an SQLite file of its own in ``tmp`` unless ``args`` name a ``--database``; its own
    session, so that a test can signal the server pid alone (what a process manager or the OOM killer does)."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()):
        name = uuid.uuid4().hex[:8]
        self.db = None if "--database" in args else f"sqlite:///{tmp}/ops-{name}.db"
        super().__init__(self.db, settings={"solver_workers": 2, **UNSTARVED}, env=env,
                         log_path=tmp / f"serve-{name}.log", test_settings=False, log_level="info", args=args)
        self.spawn()

    def text(self) -> str:
        return self.log_text()

    def cleanup(self, pids: list[int] = ()) -> None:  # type: ignore[assignment]
        """Leave nothing behind whatever the test found (the server's group, then any listed straggler)."""
        self.kill9()
        for p in pids:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
