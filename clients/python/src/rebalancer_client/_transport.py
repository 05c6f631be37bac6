"""An httpx transport whose every socket operation respects one absolute deadline per call.

httpx timeouts bound each *single* socket operation: a server that drips one byte a second never trips a 2 s read
timeout, so a call could block for as long as the server likes. This transport wraps httpcore's synchronous
network backend: before every connect, read and write the remaining time until the deadline of the calling thread
replaces the operation's timeout (the smaller of the two wins), and once the deadline has passed the operation
fails at once with httpcore's own timeout exception, which httpx maps to ``httpx.TimeoutException``.
The deadline is per thread (``threading.local``), so one client may be shared by threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx


class _Deadline(threading.local):
    at: float | None = None


def _bounded(deadline: _Deadline, timeout: float | None, exc: type[Exception]) -> float | None:
    if deadline.at is None:
        return timeout
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise exc("deadline exceeded")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: _Deadline):
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        t = _bounded(self._deadline, timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, t), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, deadline: _Deadline):
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        t = _bounded(self._deadline, timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_tcp(host, port, t, local_address, socket_options), self._deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        t = _bounded(self._deadline, timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, t, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` (connection pool, keep-alive, TLS) whose socket operations stop at the deadline set
    with :meth:`deadline`. Proxies from the environment are not used (the controller is addressed directly)."""

    def __init__(self, *, verify: Any = True, limits: httpx.Limits | None = None):
        limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)
        # HTTPTransport.__init__ is not called: it would only build the pool that this one replaces (handle_request
        # and close use ``self._pool``): httpcore's public ConnectionPool, with our network backend.
        self._deadline = _Deadline()
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_Backend(self._deadline),
        )

    @contextmanager
    def deadline(self, at: float | None) -> Iterator[None]:
        """Bound every socket operation of this thread by ``at`` (``time.monotonic()`` seconds) inside the block."""
        before = self._deadline.at
        self._deadline.at = at
        try:
            yield
        finally:
            self._deadline.at = before
