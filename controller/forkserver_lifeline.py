"""Preloaded by the solver pool's forkserver (and imported nowhere else): bind the forkserver to the server.

The forkserver is started by the server's main thread; with ``PR_SET_PDEATHSIG`` the kernel kills it when the
server dies, even by ``kill -9``, and each worker it forked dies with it (see :mod:`controller.lifeline`).
"""

from __future__ import annotations

import os
import signal

from controller.lifeline import set_pdeathsig

set_pdeathsig(signal.SIGKILL)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
if os.getppid() == 1:  # pragma: no cover - the server died before the signal was armed
    os._exit(70)
