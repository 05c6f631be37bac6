"""The load generator of the API benchmarks (:mod:`benchmarks.bench_api`, :mod:`benchmarks.bench_mixed_load`): a
small keep-alive HTTP/1.1 client on asyncio (so that the load costs little CPU on a 2-core machine) and closed- and
open-loop request loops over it, each summarised as throughput and latency percentiles."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tests.helpers.server import HOST

#: one request of a load loop: method, path, body, the statuses that count as success
Request = tuple[str, str, bytes | None, tuple[int, ...]]
#: ``make_request(client index, request number of that client)``
MakeRequest = Callable[[int, int], Request]


# ---------------------------------------------------------------------- minimal HTTP/1.1 keep-alive client
class Conn:
    """One keep-alive connection; ``request`` returns (status, body bytes)."""

    def __init__(self, port: int, token: str | None = None):
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port, limit=1 << 22)

    async def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\n".encode() + self.auth
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
        self.writer.write(head + b"\r\n" + (body or b""))
        await self.writer.drain()
        raw = await self.reader.readuntil(b"\r\n\r\n")
        status = int(raw[9:12])
        length = 0
        for line in raw.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await self.reader.readexactly(length) if length else b""
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
            self.writer = None


def summarise(lat: list[float], errors: int, seconds: float) -> dict[str, Any]:
    a = np.array(lat) * 1000.0 if lat else np.zeros(1)
    return {"requests": len(lat), "errors": errors, "seconds": round(seconds, 2),
            "throughput_rps": round(len(lat) / seconds, 1) if seconds > 0 else 0.0,
            "p50_ms": round(float(np.percentile(a, 50)), 2), "p90_ms": round(float(np.percentile(a, 90)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2), "max_ms": round(float(a.max()), 2)}


async def closed_loop(port: int, n_clients: int, seconds: float, make_request: MakeRequest, max_requests: int,
                      token: str | None = None) -> dict[str, Any]:
    """``n_clients`` connections each sending its next request as soon as the previous answered."""
    lat: list[float] = []
    errors = [0]
    stop_at = time.perf_counter() + seconds
    count = [0]

    async def client(i: int) -> None:
        c = Conn(port, token)
        k = 0
        try:
            while time.perf_counter() < stop_at and count[0] < max_requests:
                method, path, body, ok = make_request(i, k)
                k += 1
                count[0] += 1
                t0 = time.perf_counter()
                try:
                    st, _ = await c.request(method, path, body)
                except Exception:
                    errors[0] += 1
                    await c.close()
                    continue
                lat.append(time.perf_counter() - t0)
                if st not in ok:
                    errors[0] += 1
        finally:
            await c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(n_clients)))
    return summarise(lat, errors[0], time.perf_counter() - t0)


async def open_loop(port: int, n_clients: int, rate: float, seconds: float, make_request: MakeRequest,
                    token: str | None = None, on_tick: Callable[[float], None] | None = None,
                    stop: asyncio.Event | None = None,
                    times: list[float] | None = None) -> tuple[dict[str, Any], list[float]]:
    """Requests scheduled at ``rate``/s in total, round-robin over ``n_clients`` connections; latency is measured
    from the scheduled time (a late send counts as latency). ``stop`` (set) ends the schedule early: no request is
    scheduled after the moment it is set. Returns the summary and per-request latencies (``times`` gets each one's
    scheduled time, in the same order)."""
    lat: list[float] = []
    errors = [0]
    per_client = rate / n_clients
    start = time.perf_counter() + 0.2
    end = start + seconds
    if stop is not None:
        async def watch() -> None:
            nonlocal end
            await stop.wait()
            end = min(end, time.perf_counter())
        watcher = asyncio.create_task(watch())

    async def client(i: int) -> None:
        c = Conn(port, token)
        k = 0
        t_next = start + (i / n_clients) / per_client  # staggered
        try:
            while t_next < end:
                delay = t_next - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                method, path, body, ok = make_request(i, k)
                k += 1
                try:
                    st, _ = await c.request(method, path, body)
                except Exception:
                    errors[0] += 1
                    await c.close()
                    t_next += 1.0 / per_client
                    continue
                lat.append(time.perf_counter() - t_next)
                if times is not None:
                    times.append(t_next)
                if st not in ok:
                    errors[0] += 1
                t_next += 1.0 / per_client
        finally:
            await c.close()

    tasks = [asyncio.create_task(client(i)) for i in range(n_clients)]
    ticker = None
    if on_tick is not None:
        async def tick() -> None:
            while time.perf_counter() < end:
                on_tick(time.perf_counter() - start)
                await asyncio.sleep(min(5.0, max(1.0, seconds / 60)))
        ticker = asyncio.create_task(tick())
    await asyncio.gather(*tasks)
    if ticker is not None:
        ticker.cancel()
    if stop is not None:
        watcher.cancel()
    return summarise(lat, errors[0], max(time.perf_counter() - start, 1e-9)), lat
