"""Slow or stalled uploads cannot hold a real server's memory or connections: headers must arrive within
``header_timeout_s``, a body within its timeouts (408), and request bodies held by one client (its token) are
capped (429), so another client's uploads still get in. Outcomes only: who was answered what, and when the server
closed the connection (generous deadlines: without the bounds they never are)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.helpers.server import HOST, ThreadServer

MB = 1_000_000
LIMITS = {"max_body_bytes": 2 * MB, "max_client_upload_bytes": 4 * MB, "max_upload_bytes": 16 * MB,
          "header_timeout_s": 1.0, "body_idle_timeout_s": 5.0, "body_timeout_s": 30.0}
TOKENS = ("tok-a", "tok-b")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("uploads")
    with ThreadServer(f"sqlite:///{d}/db.sqlite", settings={**LIMITS, "api_tokens": ",".join(TOKENS)}).start() as s:
        yield s


async def _stalled_upload(port: int, token: str, declared: int, sent: int) -> tuple[str, float]:
    """Declare ``declared`` bytes, send ``sent`` and stall: what the server answered (or "closed"), and when."""
    r, w = await asyncio.open_connection(HOST, port)
    t0 = time.monotonic()
    w.write(f"POST /v1/plans HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n".encode())
    try:
        for _ in range(sent // 100_000):
            w.write(b" " * 100_000)
            await w.drain()
        line = await asyncio.wait_for(r.readline(), 30)
        outcome = line[9:12].decode() if line else "closed"
    except TimeoutError:  # (an OSError: first)
        outcome = "open"
    except (ConnectionError, OSError):
        outcome = "closed"
    finally:
        w.close()
    return outcome, time.monotonic() - t0


def test_stalled_uploads_are_answered_in_time_and_each_token_holds_its_own_share(srv):
    async def attack() -> list[list[tuple[str, float]]]:
        tasks = [[asyncio.create_task(_stalled_upload(srv.port, tok, 2 * MB, int(1.8 * MB))) for _ in range(3)]
                 for tok in TOKENS]
        return [list(await asyncio.gather(*t)) for t in tasks]

    outcomes = asyncio.run(attack())
    for tok, got in zip(TOKENS, outcomes, strict=True):
        codes = sorted(code for code, _ in got)
        assert "open" not in codes, (tok, got)  # the server answered or closed every one
        assert 1 <= codes.count("408") <= 2, (tok, got)  # 4 MB per token: two bodies of 1.8 MB at most
        assert set(codes) <= {"408", "429", "closed"}, (tok, got)
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {TOKENS[0]}"}, timeout=30) as c:
        assert c.get("/v1/jobs").status_code == 200


def _closed(r: asyncio.StreamReader) -> bool:
    """The server closed the connection: an end of stream, or a reset (Linux resets rather than ends a connection
    whose socket is closed with unread bytes, which a byte arriving just before the close leaves)."""
    return r.at_eof() or r.exception() is not None


def test_headers_sent_a_byte_at_a_time_are_dropped_after_the_header_timeout(srv):
    async def attack() -> tuple[int, int, str]:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
        conns = [await asyncio.open_connection(HOST, srv.port) for _ in range(100)]
        t0, sent = time.monotonic(), 0
        while time.monotonic() - t0 < 15 and not all(_closed(r) for r, _ in conns):
            for r, w in conns:
                if not _closed(r) and not w.is_closing():
                    try:
                        w.write(head[sent:sent + 1])
                    except (ConnectionError, OSError):
                        pass
            sent += 1
            await asyncio.sleep(0.2)
            for r, _ in conns:  # notice the server's close
                if not _closed(r):
                    try:
                        await asyncio.wait_for(r.read(1), 0.001)
                    except (TimeoutError, ConnectionError, OSError):
                        pass
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as c:
            ok = (await c.get("/healthz")).status_code
        for _, w in conns:
            w.close()
        seen = f"after {time.monotonic() - t0:.1f} s: {sum(r.at_eof() for r, _ in conns)} ended, " \
               f"{sum(r.exception() is not None for r, _ in conns)} reset, {sent} bytes sent"
        return sum(not _closed(r) for r, _ in conns), ok, seen

    still_open, healthz, seen = asyncio.run(attack())
    assert still_open == 0 and healthz == 200, (still_open, healthz, seen)
