"""Preloaded by the solver pool's forkserver (and imported nowhere else): bind the forkserver to the server.

When the server's main thread started the forkserver, ``PR_SET_PDEATHSIG`` has the kernel kill it when the server
dies, even by ``kill -9``, and each worker it forked dies with it (see :mod:`controller.lifeline`).
"""

from __future__ import annotations

import os
import signal

from controller.lifeline import PDEATHSIG_ENV, set_pdeathsig

signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the server's to handle
if os.environ.get(PDEATHSIG_ENV) == "1":  # started by the server's main thread (see lifeline.start_forkserver)
    set_pdeathsig(signal.SIGKILL)
    if os.getppid() == 1:  # pragma: no cover - the server died before the signal was armed
        os._exit(70)
