"""Child processes die with the server: a parent-death signal (Linux ``prctl``) and a watchdog on the server's pid.

Importing this module in a process started by the server (the ``forkserver`` imports it as its first preload
module) binds that process to its parent with ``PR_SET_PDEATHSIG`` = ``SIGKILL``: when the server dies, even by
``kill -9``, the kernel kills the forkserver; each solver worker binds itself to the forkserver the same way (and
watches the server's pid), so the chain server -> forkserver -> workers never leaves an orphan. The resource
tracker needs nothing: it exits when the last process holding its pipe is gone.
"""

from __future__ import annotations

import atexit
import multiprocessing.forkserver as mpfs
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from solvers.parent_death import set_pdeathsig

__all__ = ["PDEATHSIG_ENV", "bind_worker", "set_pdeathsig", "start_forkserver", "stop_forkserver", "watch"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a reused pid of another user: the server is gone
        return False
    return True


def watch(server_pid: int, interval: float = 0.5) -> threading.Thread:
    """A daemon thread that ends this process (``os._exit``) as soon as the parent changes or the server is gone:
    the portable backstop of the parent-death signal."""
    parent = os.getppid()

    def run() -> None:
        while True:
            if os.getppid() != parent or not _alive(server_pid):
                os._exit(70)
            time.sleep(interval)

    t = threading.Thread(target=run, name="rebalancer-lifeline", daemon=True)
    t.start()
    return t


def bind_worker(server_pid: int) -> None:
    """Called first in every solver worker: die with the forkserver (parent-death signal) and with the server
    (watchdog), and leave Ctrl-C to the server (the terminal sends SIGINT to the whole process group)."""
    set_pdeathsig(signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _alive(server_pid):  # the server died before the signal was armed
        os._exit(70)
    watch(server_pid)


#: set (to "1") in the forkserver's environment when it may bind itself to the thread that starts it
PDEATHSIG_ENV = "_REBALANCER_FORKSERVER_PDEATHSIG"
_env_lock = threading.Lock()
_stop_registered = False


#: the longest path a Unix socket binds to (``sun_path``, its final NUL excluded)
SUN_PATH_MAX = 103 if sys.platform == "darwin" else 107
#: what multiprocessing adds to the temporary directory for the forkserver's socket
_SOCKET_SUFFIX = len("/pymp-12345678/listener-12345678")


def socket_tempdir() -> str | None:
    """Where multiprocessing makes the folder of the forkserver's socket: the system's temporary directory (None:
    its default) unless that path is too long for a Unix socket — the server would fail to start with "AF_UNIX path
    too long" (measured with pytest-xdist's temporary folders as ``TMPDIR``) — then ``/tmp``, as Python 3.13 does."""
    base = tempfile.gettempdir()
    if len(os.fsencode(base)) + _SOCKET_SUFFIX <= SUN_PATH_MAX or not os.access("/tmp", os.W_OK | os.X_OK):
        return None
    return "/tmp"


def start_forkserver() -> None:
    """Start this process's forkserver (if it is not running). The kernel's parent-death signal follows the
    *thread* that started a process, so the forkserver binds itself to the server only when the main thread starts
    it (``rebalancer serve``); started from another thread (an in-process test server) it relies on the workers'
    watchdog and exits when the last of them has: its "alive" pipe reaches end of file.

    It is stopped when this process exits (``atexit``), not with a pool: every pool of the process (an in-process
    test server's, the next server's) forks its workers from it, so its import of the planners (~0.6 s of CPU) is
    paid once per process."""
    global _stop_registered
    on_main = threading.current_thread() is threading.main_thread()
    with _env_lock:
        os.environ[PDEATHSIG_ENV] = "1" if on_main else "0"
        default_dir = tempfile.tempdir
        tempfile.tempdir = socket_tempdir() or default_dir
        try:
            mpfs.ensure_running()
        finally:
            os.environ.pop(PDEATHSIG_ENV, None)
            tempfile.tempdir = default_dir
        if not _stop_registered:
            atexit.register(stop_forkserver)
            _stop_registered = True


def stop_forkserver() -> None:
    """Stop this process's forkserver (there is no public API; it would outlive the server otherwise)."""
    fs: Any = mpfs._forkserver
    pid = getattr(fs, "_forkserver_pid", None)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        fs._stop()  # closes our end of its "alive" pipe, reaps it and removes its socket
    except (OSError, ChildProcessError):  # pragma: no cover - already reaped
        fs._forkserver_pid = None
