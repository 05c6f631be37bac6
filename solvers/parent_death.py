"""A child process that dies with its parent: Linux's parent-death signal (``prctl(PR_SET_PDEATHSIG)``).

Shared by the server's process chain (:mod:`controller.lifeline`: server → forkserver → solver workers) and the
planner's forked search processes (:mod:`solvers.albic.milp.portfolio`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1


@functools.cache
def _libc() -> Any:
    """The C library (looked up once: ``find_library`` runs ``ldconfig``, which a forked child should not wait for)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def prepare() -> None:
    """Look the C library up now (before forking), so that :func:`set_pdeathsig` in a child makes no subprocess."""
    if sys.platform.startswith("linux"):
        try:
            _libc()
        except OSError:
            pass


def set_pdeathsig(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(_libc().prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
