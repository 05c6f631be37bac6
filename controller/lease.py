"""Who may serve a database.

* SQLite: one server per database file. The controller keeps every job's window in memory and serialises a job's
  mutations with an in-process lock, so two servers on one file would diverge silently (and a second path to the
  same file — a hard link — would even give it a second write-ahead log). The lock is an exclusive ``flock`` on
  the database file itself, so it holds for the file's identity (device, inode) whatever path names it; the
  operating system releases it when its holder dies (``kill -9`` included), so a restart never waits for a stale
  lease. ``<database file>.lock`` is locked too (servers of earlier versions lock only that file) and records the
  holder (pid, host, start) for the message a second server prints.
* PostgreSQL: any number of replicas share the database; one of them leads (a lease row with an expiry on the
  database's clock and a fencing epoch, :mod:`controller.leadership`) and the others stand by, so this lease never
  refuses there.

A second server on one SQLite file gets :class:`LeaseHeld` naming the holder (``rebalancer serve`` prints it and
exits with 2).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("rebalancer.lease")


class LeaseHeld(Exception):
    """Another server holds this database (or its lock cannot be taken at all)."""


def _holder() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                          time.gmtime())}


def _describe(h: dict[str, Any]) -> str:
    return f"pid {h.get('pid', '?')} on {h.get('host', '?')}, started {h.get('started_at', '?')}"


def flock_holder(fd: int) -> int | None:
    """The pid holding an ``flock`` on the file open as ``fd`` (from ``/proc/locks``), None when unknown."""
    st = os.fstat(fd)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == key and parts[4].isdigit():
                    return int(parts[4])
    except OSError:
        pass
    return None


class ServerLease:
    """Acquire with :meth:`acquire` (raises :class:`LeaseHeld`), give back with :meth:`release` (idempotent)."""

    def __init__(self, url: str, sqlite_path: Path | None):
        self.url = url
        self.sqlite_path = sqlite_path
        self._fds: list[int] = []
        self.held = False

    def _refused(self, path: Path, holder: dict[str, Any]) -> LeaseHeld:
        return LeaseHeld(f"database {path} is in use by another rebalancer server ({_describe(holder)}); stop it "
                         f"first or start this one with another --database (one server per database)")

    def _acquire_file(self, path: Path) -> None:
        import fcntl

        lock = path.with_name(path.name + ".lock")
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise LeaseHeld(f"cannot create the lock file {lock} (one server per database): {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            os.close(fd)
            raise self._refused(path, holder) from None
        try:  # the file itself (created empty if new: SQLite takes an empty file as an empty database)
            db = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            os.close(fd)
            raise LeaseHeld(f"cannot open the database file {path} to lock it: {exc.strerror}") from None
        try:
            fcntl.flock(db, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held through another path to the same file (a hard link, a bind mount)
            pid = flock_holder(db)
            os.close(db)
            os.close(fd)
            who = {"pid": pid if pid is not None else "?", "host": socket.gethostname(),
                   "started_at": "? (it opened this file under another name: a hard link?)"}
            raise self._refused(path, who) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder()).encode(), 0)
        self._fds = [db, fd]

    def acquire(self) -> ServerLease:
        if self.held:
            return self
        if self.url.startswith("sqlite") and self.sqlite_path is not None:  # :memory: is private to this process
            self._acquire_file(self.sqlite_path)
            log.info("database lease taken (%s)", _describe(_holder()))
        self.held = True
        return self

    def release(self) -> None:
        for fd in self._fds[1:]:
            try:
                os.ftruncate(fd, 0)
            except OSError:  # pragma: no cover
                pass
        for fd in self._fds:
            os.close(fd)  # closing the only descriptor releases the flock
        self._fds = []
        self.held = False


def lease_for(settings: Any) -> ServerLease:
    """The lease of the database that ``settings`` name."""
    return ServerLease(settings.sqlalchemy_url(), settings.sqlite_path())
