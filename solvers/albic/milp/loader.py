"""Loading the MILP backends of the ALBIC planner (§4.3.1) without spending the time limit on it.

OR-tools (CP-SAT, which pulls in pandas) takes 0.3 s of CPU to import, several seconds on a loaded machine; PuLP
is lighter. A server loads them once; a fresh process (``rebalancer plan``) would pay for them inside the call.
The planner therefore never imports them on its critical path: it runs Flux, the greedy start and the analytic
bound first and, only when a MILP phase could still run after the import (the time left covers
:data:`IMPORT_SECONDS` and the phase's least), starts the import in a background thread (:meth:`Loader.start`)
while the heuristic search goes on; an import that could not end in time would only take the search's CPU. A MILP
phase runs only once the import is done (:meth:`Loader.ready`, or :meth:`Loader.wait` with a timeout that leaves
the phase its time); otherwise the call ends with the heuristic plan, on time. The thread is a daemon: a process
may exit while it is still importing.
"""

from __future__ import annotations

import importlib
import math
import sys
import threading
import time
from typing import Any

#: the modules a MILP phase needs, per backend (the CBC phase also builds its model with the CP-SAT module)
MODULES = {"cpsat": ("solvers.albic.milp.cpsat",),
           "cbc": ("solvers.albic.milp.cpsat", "solvers.albic.milp.cbc")}
#: seconds the import takes on a quiet machine (OR-tools: 0.3 s of CPU); started with less time left it cannot end
IMPORT_SECONDS = 0.3


class Loader:
    """One background import of a backend's modules (see the module docstring)."""

    def __init__(self, modules: tuple[str, ...]):
        self.modules = modules
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.started = self.finished = 0.0
        self.thread: threading.Thread | None = None
        self.declined = False  # not started: too little time left
        if all(m in sys.modules for m in modules):
            self.done.set()

    @property
    def preloaded(self) -> bool:
        return self.thread is None and self.done.is_set()

    def start(self, seconds: float = math.inf) -> None:
        """The import started in the background, when ``seconds`` (the time it may take before a MILP phase needs
        the modules) covers :data:`IMPORT_SECONDS`."""
        if self.done.is_set() or self.thread is not None:
            return
        if seconds < IMPORT_SECONDS:
            self.declined = True
            return
        self.started = time.perf_counter()
        self.thread = threading.Thread(target=self._run, name="albic-milp-import", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for m in self.modules:
                importlib.import_module(m)
        except BaseException as exc:  # re-raised in the caller's thread by ready()/wait()
            self.error = exc
        finally:
            self.finished = time.perf_counter()
            self.done.set()

    def ready(self) -> bool:
        """Whether the modules are loaded (a failed import is raised here: a broken installation surfaces)."""
        if not self.done.is_set():
            return False
        if self.error is not None:
            raise self.error
        return True

    def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the import (the waiting thread leaves it the CPU); loaded?"""
        if not self.done.is_set() and timeout > 0:
            self.done.wait(timeout)
        return self.ready()

    def report(self, t_start: float) -> dict[str, Any]:
        """What the call's ``details`` say about the import: its state, when it started and how long it took (in
        seconds from the start of the call; a thread started by an earlier call counts from that call)."""
        if self.preloaded:
            return {"ortools": "preloaded"}
        if self.thread is None:
            return {"ortools": "not imported (too little time)" if self.declined else "not needed"}
        out: dict[str, Any] = {"ortools": "imported" if self.done.is_set() else "importing (not used)",
                               "import_start_seconds": round(self.started - t_start, 4)}
        if self.done.is_set():
            out["import_seconds"] = round(self.finished - self.started, 4)
        return out


_LOADERS: dict[str, Loader] = {}
_LOCK = threading.Lock()


def backend_loader(backend: str) -> Loader:
    """The loader of ``backend`` for one call: already loaded (``preloaded``), the import in flight of an earlier
    call (shared), or a new one (not started)."""
    with _LOCK:
        ld = _LOADERS.get(backend)
        if ld is not None and ld.thread is not None and not ld.done.is_set():
            return ld
        ld = Loader(MODULES[backend])
        if not ld.done.is_set():
            _LOADERS[backend] = ld
        return ld
