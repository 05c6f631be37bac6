"""Process helpers for the operations tests: a real ``rebalancer serve`` and its process tree read from /proc."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"  # a zombie has exited (it only waits to be reaped)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st is not None:
                children.setdefault(int(st[1]), []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Serve:
    """``python -m cli.main serve`` on a free port (its own session, so that the test can signal the server pid
    alone: what a process manager or the OOM killer does)."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"serve-{self.port}.log"
        self.db = f"sqlite:///{tmp}/ops-{self.port}.db"
        full = {**os.environ, "REBALANCER_SOLVER_WORKERS": "2", "PYTHONUNBUFFERED": "1", **(env or {})}
        full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
        argv = [sys.executable, "-m", "cli.main", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--log-level", "info", *args]
        if "--database" not in args:
            argv += ["--database", self.db]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=full, stdout=self.log, stderr=self.log,
                                     start_new_session=True)

    def wait_healthy(self, timeout: float = 60.0) -> Serve:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("server did not become healthy")

    def wait_children(self, n: int, timeout: float = 90.0) -> list[int]:
        """Wait until the server has ``n`` descendants (resource tracker, forkserver, workers)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            kids = [p for p in descendants(self.proc.pid) if alive(p)]
            if len(kids) >= n:
                return kids
            time.sleep(0.2)
        raise AssertionError(f"only {descendants(self.proc.pid)} after {timeout} s")

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def cleanup(self, pids: list[int] = ()) -> None:  # type: ignore[assignment]
        """Leave nothing behind whatever the test found (the server's group, then any listed straggler)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in pids:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self.log.close()


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.time() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.time() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left
