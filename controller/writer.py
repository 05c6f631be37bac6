"""Group commit: every write the API acknowledges has been committed first, and many queued writes share one
transaction (50 drivers posting statistics cost one commit per burst, not 50).

An operation is a function ``op(conn) -> result`` (:mod:`controller.repository` builds them; statistics batches
are :class:`BatchOp` so that a group writes them with one ``executemany``). Should one raise,
the group is rolled back and its operations are replayed one transaction each, so a failing operation never
takes the others down with it. Two writers share that logic (:class:`GroupCommit`): a thread for databases whose
commit waits for the disk, and one on the event loop for SQLite in WAL mode without an fsync per commit.

Replicas on PostgreSQL fence every group (:class:`controller.leadership.ReplicaLeadership`): each operation carries
the lease term it was queued under, and a group commits only if the lease's epoch in the database is that term,
checked in the same transaction; otherwise every operation of it fails with :class:`Fenced` and nothing is written.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import insert
from sqlalchemy.engine import Connection, Engine

from controller import repository as repo
from controller.errors import Busy
from controller.leadership import Fenced, ReplicaLeadership
from controller.windows import Batch

log = logging.getLogger("rebalancer.repository")

Op = Callable[[Connection], Any]
#: an operation, the future of its result, its loop and the lease term it was queued under (None: not fenced)
Item = tuple[Op, "asyncio.Future[Any]", asyncio.AbstractEventLoop, int | None]


# ---------------------------------------------------------------------- statistics batches, grouped
STATS_INSERT = insert(repo.stats)


class BatchOp:
    """A statistics batch to insert (and the evicted one to delete): queued ones are written with two
    ``executemany`` calls per group commit instead of two statements each."""

    __slots__ = ("row", "evict")

    def __init__(self, row: dict[str, Any], evict: int | None):
        self.row, self.evict = row, evict

    def __call__(self, conn: Connection) -> None:
        _write_batches(conn, [self])


def add_batch(job_id: str, batch: Batch, evict: int | None, now: float) -> BatchOp:
    return BatchOp(repo.batch_row(job_id, batch, now), evict)


def _write_batches(conn: Connection, ops: list[BatchOp]) -> None:
    dels = [{"j_id": o.row["job_id"], "b_id": o.evict} for o in ops if o.evict is not None]
    if len(ops) > 1 and {(d["j_id"], d["b_id"]) for d in dels} & {(o.row["job_id"], o.row["batch_id"]) for o in ops}:
        for o in ops:  # a batch of this group evicts another one of it (or an evicted id comes back): in order
            if o.evict is not None:
                conn.execute(repo.STATS_DELETE, [{"j_id": o.row["job_id"], "b_id": o.evict}])
            conn.execute(STATS_INSERT, [o.row])
        return
    if dels:
        conn.execute(repo.STATS_DELETE, dels)
    conn.execute(STATS_INSERT, [o.row for o in ops])


def execute_group(conn: Connection, ops: list[Op]) -> list[Any]:
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


class GroupCommit:
    """Commit a group of operations in one transaction, or each alone when the group fails."""

    def __init__(self, engine: Engine, batch: int, fence: ReplicaLeadership | None = None):
        self.engine = engine
        self.batch = batch
        self.fence = fence
        self.commits = 0
        self.ops = 0
        self.cpu_seconds = 0.0

    def _transaction(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _deliver(self, item: Item, result: Any = None, exc: BaseException | None = None) -> None:
        raise NotImplementedError

    def _item(self, op: Op, fut: asyncio.Future[Any], loop: asyncio.AbstractEventLoop) -> Item:
        return op, fut, loop, None if self.fence is None else self.fence.op_term()

    def _commit(self, items: list[Item]) -> None:
        fence, term = self.fence, None
        if fence is not None:  # operations of another term than the current one are refused before any statement
            term = fence.term
            for it in [it for it in items if it[3] != term or term is None]:
                self._deliver(it, exc=fence.fenced(f"the operation is of lease term {it[3]}, this replica's {term}"))
            items = [it for it in items if it[3] == term and term is not None]
            if not items:
                return
        try:
            with self._transaction() as conn:
                if fence is not None:
                    fence.begin(conn, term)
                results = execute_group(conn, [it[0] for it in items])
                if fence is not None:
                    fence.check(conn, term)
            self.commits += 1
        except Fenced as exc:  # the group was rolled back: none of it is written
            log.warning("%d writes refused: %s", len(items), exc)
            for it in items:
                self._deliver(it, exc=exc)
            return
        except Exception as exc:  # replay one by one so one bad op does not fail the others
            if len(items) == 1:
                log.exception("write failed")
                self._deliver(items[0], exc=exc)
                return
            for it in items:
                self._commit([it])
            return
        self.ops += len(items)
        for res, it in zip(results, items, strict=True):
            self._deliver(it, res)


class Writer(GroupCommit):
    """One thread that commits queued write operations in batches.

    ``await writer.run(op)`` returns ``op(conn)``'s result once the transaction containing it has committed.
    """

    def __init__(self, engine: Engine, batch: int = 256, fence: ReplicaLeadership | None = None):
        super().__init__(engine, batch, fence)
        self._q: queue.Queue[Item | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="rebalancer-writer", daemon=True)
        self._stopped = False
        self._last_group = 0
        self._thread.start()

    async def run(self, op: Op, heavy: bool = False) -> Any:
        """``op(conn)``'s result once committed (``heavy`` is for the inline writer; this one is a thread)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._q.put(self._item(op, fut, loop))
        return await fut

    def close(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._q.put(None)
            self._thread.join(timeout=10)

    def _transaction(self) -> AbstractContextManager[Connection]:
        return self.engine.begin()

    def _deliver(self, item: Item, result: Any = None, exc: BaseException | None = None) -> None:
        fut, loop = item[1], item[2]
        if exc is None:
            loop.call_soon_threadsafe(_set_result, fut, result)
        else:
            loop.call_soon_threadsafe(_set_exc, fut, exc)

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


class InlineWriter(GroupCommit):
    """Group commit on the event-loop thread, for SQLite in WAL mode with ``synchronous`` NORMAL or OFF.

    There a commit is a ``write()`` to the WAL file — no fsync — so it is cheaper to do it in place than to hand it
    to a thread (two thread switches and GIL hand-offs per request). Every operation queued during one turn of the
    event loop is committed in one transaction by a callback scheduled with ``call_soon``; the awaiting requests
    resume only after that commit. Automatic checkpoints (which fsync) are disabled on this connection and done by
    a background thread instead (``PRAGMA wal_checkpoint(PASSIVE)`` every second, never blocking the writer).

    A ``heavy`` operation (megabytes of rows: a job of 200,000 key groups writes ~6 MB, 40-55 ms of SQLite) is
    committed, with the operations queued beside it, in a thread on the same connection: the event loop goes on
    answering, and what is queued meanwhile is committed after it, in order, as one group.
    """

    def __init__(self, engine: Engine, batch: int = 256, checkpoint_every: float = 1.0):
        super().__init__(engine, batch)
        self._pending: list[Item] = []
        self._scheduled = False
        self._heavy = False  # a heavy operation is pending
        self._busy = False  # a group is being committed in a thread: flushes wait for it
        self._closed = False  # closed while a group was committing in a thread
        self.threaded_commits = 0
        self._conn = engine.connect()
        self._conn.exec_driver_sql("PRAGMA wal_autocheckpoint=0")
        self._conn.commit()
        self._stop = threading.Event()
        self._every = checkpoint_every
        self._ckpt = threading.Thread(target=self._checkpoints, name="rebalancer-checkpoint", daemon=True)
        self._ckpt.start()

    async def run(self, op: Op, heavy: bool = False) -> Any:
        """``op(conn)``'s result once committed; ``heavy``: its group is committed in a thread."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._pending.append(self._item(op, fut, loop))
        self._heavy |= heavy
        if not self._scheduled and not self._busy:
            self._scheduled = True
            loop.call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._scheduled = False
        items, self._pending = self._pending, []
        if self._heavy and not self._busy:
            self._heavy, self._busy = False, True
            done = asyncio.get_running_loop().run_in_executor(None, self._commit_all, items)
            done.add_done_callback(self._after_thread)
            return
        self._commit_all(items)

    def _commit_all(self, items: list[Item]) -> None:
        t0 = time.thread_time()
        for i in range(0, len(items), self.batch):
            self._commit(items[i: i + self.batch])
        self.cpu_seconds += time.thread_time() - t0

    def _after_thread(self, done: asyncio.Future[None]) -> None:
        """On the loop, after a group committed in a thread: what was queued meanwhile is flushed now."""
        self._busy = False
        self.threaded_commits += 1
        if self._closed:
            self._conn.close()
            return
        if done.exception() is not None:  # pragma: no cover - _commit delivers every error to its operation
            log.error("a threaded group commit failed", exc_info=done.exception())
        if self._pending and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    @contextmanager
    def _inline_transaction(self) -> Iterator[Connection]:
        trans = self._conn.begin()
        try:
            yield self._conn
            trans.commit()
        except BaseException:
            trans.rollback()
            raise

    def _transaction(self) -> AbstractContextManager[Connection]:
        return self._inline_transaction()

    def _deliver(self, item: Item, result: Any = None, exc: BaseException | None = None) -> None:
        fut = item[1]
        if self._busy:  # from the committing thread
            item[2].call_soon_threadsafe(*((_set_result, fut, result) if exc is None else (_set_exc, fut, exc)))
        elif exc is None:
            _set_result(fut, result)
        else:
            _set_exc(fut, exc)

    def _checkpoints(self) -> None:
        while not self._stop.wait(self._every):
            try:
                with self.engine.connect() as c:
                    c.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # pragma: no cover - best effort; the next one retries
                log.debug("checkpoint failed", exc_info=True)

    async def drain(self, timeout: float = 60.0) -> None:
        """Wait (on the loop) until a group committing in a thread and what is queued behind it are written."""
        deadline = time.monotonic() + timeout
        while (self._busy or self._pending) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def close(self) -> None:
        """Commit what is queued and stop (after :meth:`drain`, on the loop's thread). A group still committing in
        a thread (:meth:`drain` gave up waiting) keeps the connection to itself: what is queued behind it is not
        written (its awaiters get :class:`Busy`: retry) and the connection is left to that thread."""
        if self._busy:
            items, self._pending = self._pending, []
            log.error("closing while a group commit still runs in a thread: %d queued operations not written",
                      len(items))
            for item in items:
                _set_exc(item[1], Busy("the server is stopping and its database write is stuck; nothing of this "
                                       "request was written: retry it"))
            self._stop.set()
            self._ckpt.join(timeout=10)
            self._closed = True  # the connection is closed once that group is done (_after_thread)
            return
        if self._pending:
            items, self._pending = self._pending, []
            self._commit_all(items)
        self._stop.set()
        self._ckpt.join(timeout=10)
        try:
            self._conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.commit()
        except Exception:  # the WAL is folded in at the next open anyway
            log.warning("final WAL checkpoint failed", exc_info=True)
        self._conn.close()


#: rows of at least this many bytes make a heavy write (:meth:`InlineWriter.run`)
HEAVY_ROW_BYTES = 1 << 20


def heavy_rows(*rows: dict[str, Any]) -> bool:
    """Whether these rows' text and bytes values hold :data:`HEAVY_ROW_BYTES` or more."""
    return sum(len(v) for row in rows for v in row.values() if isinstance(v, (str, bytes))) >= HEAVY_ROW_BYTES


def make_writer(engine: Engine, url: str, sqlite_synchronous: str, batch: int,
                fence: ReplicaLeadership | None = None) -> Writer | InlineWriter:
    """The inline writer for SQLite WAL without fsync per commit, the writer thread otherwise (fenced by the
    replicas' lease when ``fence`` is given)."""
    if url.startswith("sqlite") and sqlite_synchronous.upper() in ("NORMAL", "OFF") and repo.sqlite_path(url):
        return InlineWriter(engine, batch)
    return Writer(engine, batch, fence)


def _set_result(fut: asyncio.Future[Any], res: Any) -> None:
    if not fut.done():
        fut.set_result(res)


def _set_exc(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
