"""The inline group commit on SQLite: a heavy write is committed in a thread while the event loop goes on, and what
is queued meanwhile is written after it, in order; every operation's result or error reaches its awaiter."""

from __future__ import annotations

import asyncio
import threading

import pytest
from sqlalchemy.engine import Connection

from controller.database import make_engine
from controller.errors import Busy
from controller.writer import HEAVY_ROW_BYTES, InlineWriter, heavy_rows


@pytest.fixture
def writer(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path}/w.db")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE log (n INTEGER NOT NULL, body TEXT)")
    w = InlineWriter(engine)
    yield w
    w.close()
    engine.dispose()


def _append(n: int, body: str = "") -> object:
    def op(conn: Connection) -> int:
        conn.exec_driver_sql("INSERT INTO log (n, body) VALUES (?, ?)", (n, body))
        return n
    return op


def _rows(w: InlineWriter) -> list[int]:
    with w.engine.connect() as conn:
        return [r[0] for r in conn.exec_driver_sql("SELECT n FROM log ORDER BY rowid")]


def test_a_heavy_write_runs_in_a_thread_while_the_loop_answers_and_later_writes_follow_it_in_order(writer):
    async def main() -> tuple[bool, bool, list[int]]:
        loop_thread = threading.get_ident()
        released = threading.Event()
        seen: dict[str, object] = {}

        def heavy(conn: Connection) -> str:
            seen["thread"] = threading.get_ident()
            # set by a callback of the loop: inline (on the loop) this would wait for its whole timeout
            seen["loop_ran"] = released.wait(30)
            conn.exec_driver_sql("INSERT INTO log (n, body) VALUES (?, ?)", (1, "x" * 1000))
            return "heavy"

        first = asyncio.ensure_future(writer.run(heavy, heavy=True))
        await asyncio.sleep(0)  # the flush hands the group to a thread
        later = [asyncio.ensure_future(writer.run(_append(n))) for n in (2, 3, 4)]
        asyncio.get_running_loop().call_soon(released.set)
        results = await asyncio.gather(first, *later)
        assert results == ["heavy", 2, 3, 4]
        return seen["thread"] != loop_thread, bool(seen["loop_ran"]), _rows(writer)

    off_loop, loop_ran, rows = asyncio.run(main())
    assert off_loop and loop_ran
    assert rows == [1, 2, 3, 4]
    assert writer.threaded_commits == 1


def test_a_light_write_commits_on_the_loop(writer):
    async def main() -> bool:
        loop_thread = threading.get_ident()
        where: list[int] = []

        def op(conn: Connection) -> None:
            where.append(threading.get_ident())
        await writer.run(op)
        return where == [loop_thread]

    assert asyncio.run(main())
    assert writer.threaded_commits == 0


def test_a_failing_heavy_write_fails_alone_and_its_group_is_written(writer):
    def bad(conn: Connection) -> None:
        raise ValueError("refused")

    async def main() -> list[object]:
        futs = [asyncio.ensure_future(writer.run(_append(1))),
                asyncio.ensure_future(writer.run(bad, heavy=True)),
                asyncio.ensure_future(writer.run(_append(2)))]
        return await asyncio.gather(*futs, return_exceptions=True)

    out = asyncio.run(main())
    assert out[0] == 1 and out[2] == 2 and isinstance(out[1], ValueError), out
    assert _rows(writer) == [1, 2]


def test_drain_waits_for_a_threaded_group_before_close(writer):
    gate = threading.Event()

    def slow(conn: Connection) -> None:
        gate.wait(30)
        conn.exec_driver_sql("INSERT INTO log (n, body) VALUES (?, ?)", (7, ""))

    async def main() -> None:
        fut = asyncio.ensure_future(writer.run(slow, heavy=True))
        await asyncio.sleep(0)
        queued = asyncio.ensure_future(writer.run(_append(8)))
        asyncio.get_running_loop().call_later(0.05, gate.set)
        await writer.drain()
        assert fut.done() and queued.done()

    asyncio.run(main())
    assert _rows(writer) == [7, 8]


def test_close_after_a_drain_that_gave_up_leaves_the_connection_to_the_stuck_commit(tmp_path):
    """A threaded commit stuck past :meth:`InlineWriter.drain`'s wait: ``close`` must not commit what is queued on
    the connection that thread is using; the queued operation fails with ``Busy`` (nothing written), and the stuck
    group still commits when it is released."""
    engine = make_engine(f"sqlite:///{tmp_path}/w.db")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE log (n INTEGER NOT NULL, body TEXT)")
    w = InlineWriter(engine)
    gate, inside = threading.Event(), threading.Event()

    def stuck(conn: Connection) -> None:
        inside.set()
        gate.wait(30)
        conn.exec_driver_sql("INSERT INTO log (n, body) VALUES (?, ?)", (1, ""))

    async def main() -> tuple[BaseException | None, asyncio.Future[None]]:
        held = asyncio.ensure_future(w.run(stuck, heavy=True))
        await asyncio.to_thread(inside.wait, 30)
        queued = asyncio.ensure_future(w.run(_append(2)))
        await w.drain(timeout=0.05)
        w.close()
        await asyncio.wait({queued}, timeout=10)
        error = queued.exception() if queued.done() else None
        gate.set()
        await held
        return error, queued

    error, queued = asyncio.run(main())
    assert isinstance(error, Busy), (error, queued)
    with engine.connect() as conn:
        assert [r[0] for r in conn.exec_driver_sql("SELECT n FROM log")] == [1]
    engine.dispose()


def test_heavy_rows_counts_the_text_of_the_rows():
    assert not heavy_rows({"a": "x" * 10, "n": 5})
    assert heavy_rows({"a": "x" * (HEAVY_ROW_BYTES // 2)}, {"b": b"y" * (HEAVY_ROW_BYTES // 2)})
