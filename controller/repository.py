"""Persistence behind one small module (SQLAlchemy 2 Core): jobs, versioned assignments (epochs), statistics
windows, proposals.

Durability: every write the API acknowledges has been committed first. SQLite runs in WAL mode (``synchronous``
NORMAL by default: a committed transaction survives a kill -9 of the server; FULL also survives power loss);
PostgreSQL is used by URL through psycopg 3.

Writes go through one writer thread (:class:`Writer`) that drains a queue and commits many queued operations in
one transaction (group commit): 50 drivers posting statistics cost one commit per burst, not 50. An operation is a
function ``op(conn) -> result``; should one raise, the burst is rolled back and its operations are replayed one
transaction each, so a failing operation never takes others down with it.

The epoch compare-and-set of an execute is one ``UPDATE jobs SET epoch = :new WHERE job_id = :id AND epoch =
:base`` in the same transaction as the new assignment and the history row: of two executes from one epoch exactly
one updates a row, whatever the number of processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine

log = logging.getLogger("rebalancer.repository")

metadata = MetaData()

jobs = Table(
    "jobs", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("spec", Text, nullable=False),          # JSON: algorithm, params, budget, window_batches, auto, …
    Column("registration", Text, nullable=False),  # JSON: the topology as registered (for idempotent PUT)
    Column("kgs", Text, nullable=False),           # JSON: {"ids": [...], "operators": [...], "state_bytes": [...]}
    Column("nodes", Text, nullable=False),         # JSON: [{"id", "capacity", "removing"}]
    Column("assignment", Text, nullable=False),    # JSON: [node id per key group, in kgs order]
    Column("epoch", Integer, nullable=False),
    Column("last_round_batch", Integer, nullable=True),  # batch id of the last auto round (cooldown)
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

epochs = Table(
    "epochs", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("kind", String(20), nullable=False),    # register | execute | auto | nodes
    Column("proposal_id", String(64), nullable=True),
    Column("nodes", Text, nullable=False),
    Column("assignment", Text, nullable=False),
    Column("plan", Text, nullable=True),           # JSON: moves, metrics, solver, algorithm
    Column("created_at", Float, nullable=False),
)

stats = Table(
    "stats_batches", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("batch_id", Integer, primary_key=True),
    Column("epoch", Integer, nullable=False),
    Column("kg_index", LargeBinary, nullable=False),   # int32 array: key group indices
    Column("load", LargeBinary, nullable=False),       # float64 array
    Column("state_bytes", LargeBinary, nullable=True),  # float64 array (NaN = not reported)
    Column("comm", LargeBinary, nullable=True),        # int32 src, int32 dst, float64 rate (concatenated)
    Column("received_at", Float, nullable=False),
)

proposals = Table(
    "proposals", metadata,
    Column("id", String(64), primary_key=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("base_epoch", Integer, nullable=False),
    Column("status", String(20), nullable=False),  # pending | ready | failed | executed
    Column("algorithm", String(100), nullable=False),
    Column("params", Text, nullable=False),
    Column("time_limit_s", Float, nullable=False),
    Column("window", Text, nullable=True),
    Column("plan", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("executed_epoch", Integer, nullable=True),
    Column("created_at", Float, nullable=False),
)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def make_engine(url: str, sqlite_synchronous: str = "NORMAL") -> Engine:
    """An engine for ``url``; SQLite gets WAL, the chosen ``synchronous`` level and its directory created."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        sync = sqlite_synchronous.upper()
        if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            sync = "NORMAL"

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # noqa: ANN001
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    return engine


def create_schema(engine: Engine) -> None:
    metadata.create_all(engine)


# ---------------------------------------------------------------------- group-commit writer
class Writer:
    """One thread that commits queued write operations in batches (group commit).

    ``await writer.run(op)`` returns ``op(conn)``'s result once the transaction containing it has committed.
    """

    def __init__(self, engine: Engine, batch: int = 256):
        self.engine = engine
        self.batch = batch
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="rebalancer-writer", daemon=True)
        self._stopped = False
        self.commits = 0
        self.ops = 0
        self._last_group = 0
        self.cpu_seconds = 0.0
        self._thread.start()

    async def run(self, op: Callable[[Connection], Any]) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._q.put((op, fut, loop))
        return await fut

    def run_sync(self, op: Callable[[Connection], Any]) -> Any:
        """Run ``op`` in its own transaction in the calling thread (startup, tests)."""
        with self.engine.begin() as conn:
            return op(conn)

    def close(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._q.put(None)
            self._thread.join(timeout=10)

    # -------------------------------------------------------------- internals
    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            items = [item]
            stop = False
            if self._last_group > 1 and self._q.empty():
                # concurrent writers were seen: wait a moment so one commit carries many of them (group commit)
                time.sleep(0.0005)
            while len(items) < self.batch:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                items.append(nxt)
            self._last_group = len(items)
            t0 = time.thread_time()
            self._commit(items)
            self.cpu_seconds += time.thread_time() - t0
            if stop:
                return

    def _commit(self, items: list) -> None:
        try:
            with self.engine.begin() as conn:
                results = _execute_group(conn, [op for op, _f, _l in items])
            self.commits += 1
        except Exception as exc:  # replay one by one so one bad op does not fail the others
            if len(items) == 1:
                _op, fut, loop = items[0]
                log.exception("write failed")
                loop.call_soon_threadsafe(_set_exc, fut, exc)
                return
            for it in items:
                self._commit([it])
            return
        self.ops += len(items)
        for res, (_op, fut, loop) in zip(results, items):
            loop.call_soon_threadsafe(_set_result, fut, res)


def _execute_group(conn: Connection, ops: list) -> list:
    """Run ``ops`` in order on ``conn`` (one transaction); consecutive statistics batches go in two executemany."""
    results: list[Any] = []
    run: list[BatchOp] = []
    for op in ops:
        if type(op) is BatchOp:
            run.append(op)
            results.append(None)
            continue
        if run:
            _write_batches(conn, run)
            run = []
        results.append(op(conn))
    if run:
        _write_batches(conn, run)
    return results


class InlineWriter:
    """Group commit on the event-loop thread, for SQLite in WAL mode with ``synchronous`` NORMAL or OFF.

    There a commit is a ``write()`` to the WAL file — no fsync — so it is cheaper to do it in place than to hand it
    to a thread (two thread switches and GIL hand-offs per request). Every operation queued during one turn of the
    event loop is committed in one transaction by a callback scheduled with ``call_soon``; the awaiting requests
    resume only after that commit. Automatic checkpoints (which fsync) are disabled on this connection and done by
    a background thread instead (``PRAGMA wal_checkpoint(PASSIVE)`` every second, never blocking the writer).
    """

    def __init__(self, engine: Engine, batch: int = 256, checkpoint_every: float = 1.0):
        self.engine = engine
        self.batch = batch
        self._pending: list[tuple[Any, asyncio.Future]] = []
        self._scheduled = False
        self.commits = 0
        self.ops = 0
        self.cpu_seconds = 0.0
        self._conn = engine.connect()
        self._conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
        self._conn.commit()
        self._stop = threading.Event()
        self._every = checkpoint_every
        self._ckpt = threading.Thread(target=self._checkpoints, name="rebalancer-checkpoint", daemon=True)
        self._ckpt.start()

    async def run(self, op: Callable[[Connection], Any]) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append((op, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def run_sync(self, op: Callable[[Connection], Any]) -> Any:
        with self.engine.begin() as conn:
            return op(conn)

    def _flush(self) -> None:
        self._scheduled = False
        items, self._pending = self._pending, []
        t0 = time.thread_time()
        for i in range(0, len(items), self.batch):
            self._commit(items[i: i + self.batch])
        self.cpu_seconds += time.thread_time() - t0

    def _commit(self, items: list) -> None:
        conn = self._conn
        try:
            trans = conn.begin()
            try:
                results = _execute_group(conn, [op for op, _f in items])
                trans.commit()
            except BaseException:
                trans.rollback()
                raise
            self.commits += 1
        except Exception as exc:
            if len(items) == 1:
                log.exception("write failed")
                _set_exc(items[0][1], exc)
                return
            for it in items:
                self._commit([it])
            return
        self.ops += len(items)
        for res, (_op, fut) in zip(results, items):
            _set_result(fut, res)

    def _checkpoints(self) -> None:
        while not self._stop.wait(self._every):
            try:
                with self.engine.connect() as c:
                    c.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # pragma: no cover - best effort; the next one retries
                log.debug("checkpoint failed", exc_info=True)

    def close(self) -> None:
        if self._pending:
            self._flush()
        self._stop.set()
        self._ckpt.join(timeout=10)
        try:
            self._conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.commit()
        except Exception:
            pass
        self._conn.close()


def make_writer(engine: Engine, url: str, sqlite_synchronous: str, batch: int) -> Writer | InlineWriter:
    """The inline writer for SQLite WAL without fsync per commit, the writer thread otherwise."""
    if url.startswith("sqlite") and sqlite_synchronous.upper() in ("NORMAL", "OFF") and sqlite_path(url):
        return InlineWriter(engine, batch)
    return Writer(engine, batch)


def _set_result(fut: asyncio.Future, res: Any) -> None:
    if not fut.done():
        fut.set_result(res)


def _set_exc(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


# ---------------------------------------------------------------------- operations
def insert_job(row: dict[str, Any], epoch_row: dict[str, Any]) -> Callable[[Connection], None]:
    def op(conn: Connection) -> None:
        conn.execute(insert(jobs).values(**row))
        conn.execute(insert(epochs).values(**epoch_row))
    return op


def update_job_config(job_id: str, spec: str, now: float) -> Callable[[Connection], None]:
    def op(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(spec=spec, updated_at=now))
    return op


def delete_job(job_id: str) -> Callable[[Connection], int]:
    def op(conn: Connection) -> int:
        conn.execute(delete(stats).where(stats.c.job_id == job_id))
        conn.execute(delete(proposals).where(proposals.c.job_id == job_id))
        conn.execute(delete(epochs).where(epochs.c.job_id == job_id))
        return conn.execute(delete(jobs).where(jobs.c.job_id == job_id)).rowcount
    return op


STATS_INSERT = insert(stats)
STATS_DELETE = delete(stats).where(stats.c.job_id == bindparam("j_id"), stats.c.batch_id == bindparam("b_id"))


class BatchOp:
    """A statistics batch to insert (and the evicted one to delete): queued ones are written with two
    ``executemany`` calls per group commit instead of two statements each."""

    __slots__ = ("row", "evict")

    def __init__(self, row: dict[str, Any], evict: int | None):
        self.row, self.evict = row, evict

    def __call__(self, conn: Connection) -> None:
        _write_batches(conn, [self])


def _write_batches(conn: Connection, ops: list[BatchOp]) -> None:
    conn.execute(STATS_INSERT, [o.row for o in ops])
    dels = [{"j_id": o.row["job_id"], "b_id": o.evict} for o in ops if o.evict is not None]
    if dels:
        conn.execute(STATS_DELETE, dels)


def add_batch(row: dict[str, Any], evict: int | None) -> BatchOp:
    return BatchOp(row, evict)


def insert_proposal(row: dict[str, Any]) -> Callable[[Connection], None]:
    def op(conn: Connection) -> None:
        conn.execute(insert(proposals).values(**row))
    return op


def finish_proposal(pid: str, status: str, plan: str | None, error: str | None) -> Callable[[Connection], None]:
    def op(conn: Connection) -> None:
        conn.execute(update(proposals).where(proposals.c.id == pid, proposals.c.status == "pending")
                     .values(status=status, plan=plan, error=error))
    return op


def advance_epoch(job_id: str, base_epoch: int, new_values: dict[str, Any], epoch_row: dict[str, Any],
                  proposal_id: str | None = None, proposal_row: dict[str, Any] | None = None,
                  last_round_batch: int | None = None) -> Callable[[Connection], bool]:
    """The atomic epoch compare-and-set: new assignment/nodes + history row + proposal marked executed, or nothing.

    Returns False (and changes nothing) when the job's epoch is no longer ``base_epoch``.
    """

    def op(conn: Connection) -> bool:
        new_epoch = base_epoch + 1
        values = dict(new_values, epoch=new_epoch)
        if last_round_batch is not None:
            values["last_round_batch"] = last_round_batch
        res = conn.execute(update(jobs).where(jobs.c.job_id == job_id, jobs.c.epoch == base_epoch).values(**values))
        if res.rowcount != 1:
            return False
        conn.execute(insert(epochs).values(**epoch_row))
        if proposal_row is not None:
            conn.execute(insert(proposals).values(**proposal_row))
        elif proposal_id is not None:
            conn.execute(update(proposals).where(proposals.c.id == proposal_id)
                         .values(status="executed", executed_epoch=new_epoch))
        return True

    return op


def set_last_round(job_id: str, batch_id: int) -> Callable[[Connection], None]:
    def op(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(last_round_batch=batch_id))
    return op


# ---------------------------------------------------------------------- reads (any thread)
def load_all(engine: Engine) -> tuple[list[dict], dict[str, list[dict]]]:
    """Every job and the statistics rows of its window (used at startup)."""
    with engine.connect() as conn:
        job_rows = [dict(r._mapping) for r in conn.execute(select(jobs))]
        by_job: dict[str, list[dict]] = {}
        for r in conn.execute(select(stats).order_by(stats.c.job_id, stats.c.batch_id)):
            by_job.setdefault(r.job_id, []).append(dict(r._mapping))
    return job_rows, by_job


def fail_pending_proposals(engine: Engine) -> int:
    """Solves in flight when the server stopped are lost: mark their proposals failed (startup)."""
    with engine.begin() as conn:
        return conn.execute(update(proposals).where(proposals.c.status == "pending")
                            .values(status="failed", error="interrupted: the server restarted during the solve")
                            ).rowcount


def get_proposal(engine: Engine, job_id: str, pid: str) -> dict | None:
    with engine.connect() as conn:
        r = conn.execute(select(proposals).where(proposals.c.id == pid, proposals.c.job_id == job_id)).first()
    return None if r is None else dict(r._mapping)


def get_history(engine: Engine, job_id: str, limit: int | None = None) -> list[dict]:
    q = select(epochs).where(epochs.c.job_id == job_id).order_by(epochs.c.epoch.desc())
    if limit:
        q = q.limit(limit)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
    rows.reverse()
    return rows


def database_kind(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else url.split(":", 1)[0]


def sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite") or "///" not in url:
        return None
    p = url.split("///", 1)[1]
    return None if p in ("", ":memory:") else os.path.abspath(p)
