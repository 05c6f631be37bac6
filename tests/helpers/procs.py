"""Process trees read from /proc (Linux): for tests that check what a server leaves behind."""

from __future__ import annotations

import os
import time


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, …
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Running (a zombie has exited and only waits to be reaped)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, …)."""
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


def group_pids(pgid: int) -> list[int]:
    """The live processes of a process group."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st is not None and int(st[2]) == pgid and st[0] != "Z":
                out.append(int(d))
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` is alive; the ones still alive after ``timeout``."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if alive(p)]
    return left


def unix_sockets(pid: int) -> list[str]:
    """The paths of the Unix sockets ``pid`` holds open that are bound to a path (its descriptors' inodes looked up
    in ``/proc/net/unix``)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        with open("/proc/net/unix") as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return []
    return [row[7] for row in rows if len(row) >= 8 and row[6] in inodes]
