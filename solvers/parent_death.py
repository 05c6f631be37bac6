"""A child process that dies with its parent: Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``).

Shared by the server's process chain (:mod:`controller.lifeline`: server → forkserver → solver workers) and the
planner's forked search processes (:mod:`solvers.albic.milp.portfolio`).
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1


def set_pdeathsig(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits (Linux only). ``prctl`` is taken
    from the C library the process already has loaded (no library search: nothing to run in a freshly forked
    child)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
