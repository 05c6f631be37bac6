"""``rebalancer serve``: start the controller with uvicorn.

``rebalancer serve [--host H] [--port P] [--database URL]``; the port defaults to ``$PORT``, else 8000. Without
``--database`` the URL comes from ``REBALANCER_DATABASE_URL``, else SQLite at ``./data/rebalancer.db`` (WAL) under
the current directory. A relative SQLite path is resolved to an absolute one and logged at startup. Other settings
come from the environment (``REBALANCER_*``, see controller/settings.py; an unknown one is an error).

Before anything is loaded: the port must be free, the database must open, and no other server may hold the
database (one server per database, :mod:`controller.lease`); each failure is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

from cli.common import CLIError


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0–65535 (0 = any free port)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {value}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="start the controller (FastAPI + uvicorn)",
                       description="Start the controller. Settings come from REBALANCER_* environment variables "
                                   "(see the configuration page of the docs); the port from --port or $PORT.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; 0.0.0.0 for every interface (a container)")
    p.add_argument("--port", type=port_number, default=None,
                   help="TCP port, 0 = any free port (default: $PORT, else 8000)")
    p.add_argument("--database", default=None,
                   help="SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db (default: $REBALANCER_DATABASE_URL "
                        "or SQLite under ./data/)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="the server's log level")
    p.add_argument("--access-log", action="store_true", help="log every request (off: it costs on the hot path)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from api.app import create_app

    port = args.port if args.port is not None else port_from_env()
    settings = load_settings(args.database)
    check_port(args.host, port)
    check_database(settings)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lease = acquire_lease(settings)
    previous = signal.signal(signal.SIGTERM, _stopped)
    try:
        uvicorn.run(create_app(settings, lease=lease), host=args.host, port=port, log_level=args.log_level,
                    access_log=args.access_log, **uvicorn_options(settings))
    except _Stopped:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        lease.release()
    return 0


def uvicorn_options(settings: Any) -> dict[str, Any]:
    """The options uvicorn serves the app with, beyond the address and the logging (``run``; the tests' servers on
    a thread take the same). The standard asyncio loop, even where uvloop is installed: with uvloop 0.23 the solver
    workers that are handed a request's raw body died receiving it (measured: 503 on every big ``/v1/plans``)."""
    return {"http": header_timeout_protocol(settings.header_timeout_s), "loop": "asyncio", "timeout_keep_alive": 30}


class _Stopped(Exception):
    """SIGTERM reached the server (see :func:`_stopped`)."""


def _stopped(signum: int, frame: Any) -> None:
    """SIGTERM's handler around ``uvicorn.run``. uvicorn replaces it while it serves, shuts down gracefully on the
    signal, then restores this handler and raises the signal again "for the expected behaviour": with the default
    handler the process would die there, skipping every ``finally`` and ``atexit`` — the lease's release, the
    forkserver's stop and multiprocessing's removal of its ``/tmp/pymp-*`` folder (one left per stop, measured).
    Here the signal ends ``uvicorn.run`` as an exception instead, and a stop that was asked for exits with status 0,
    as a clean shutdown (what systemd and ``docker stop`` expect). Also when the signal comes before uvicorn serves."""
    raise _Stopped


def http_protocol() -> type[Any]:
    """uvicorn's HTTP/1.1 protocol: httptools' C parser when it is installed (the server's dependencies include it: a
    60 MB body is parsed without holding the event loop), else h11 (pure Python)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


def header_timeout_protocol(seconds: float) -> type[Any]:
    """uvicorn's protocol (:func:`http_protocol`) with a header timeout: a request's headers must be complete within
    ``seconds`` of the connection (or of the first byte after the previous answer), else the connection is closed.
    uvicorn alone waits for ever: its keep-alive timer runs only between requests and is stopped by every byte."""
    base = http_protocol()

    class HeaderTimeoutProtocol(base):  # type: ignore[valid-type,misc]
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self.header_timer = self.loop.call_later(seconds, self.header_timeout)

        def data_received(self, data: bytes) -> None:
            if self.header_timer is None and self.between_requests():
                self.header_timer = self.loop.call_later(seconds, self.header_timeout)
            super().data_received(data)
            if self.header_timer is not None and not self.between_requests():
                self.header_timer.cancel()
                self.header_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None
            super().connection_lost(exc)

        def between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def header_timeout(self) -> None:
            self.header_timer = None
            if self.between_requests() and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutProtocol


def port_from_env() -> int:
    """``$PORT`` (as set by container platforms), else 8000; a CLIError naming the variable when it is not a port."""
    text = os.environ.get("PORT", "").strip() or "8000"
    try:
        return port_number(text)
    except argparse.ArgumentTypeError as exc:
        raise CLIError(f"PORT: {exc}") from None


def acquire_lease(settings: Any) -> Any:
    """The one-server-per-database lease (:mod:`controller.lease`); a CLIError naming the holder otherwise."""
    from controller.lease import LeaseHeld, lease_for

    lease = lease_for(settings)
    try:
        lease.acquire()
    except LeaseHeld as exc:
        raise CLIError(f"--database: {exc}") from None
    return lease


def check_port(host: str, port: int) -> None:
    """Fail before loading anything when ``host:port`` cannot be bound (another server, a typo in --host)."""
    import errno
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CLIError(f"--host: cannot resolve {host!r}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        try:
            s.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CLIError(f"--port: {host}:{port} is already in use; pick another port "
                               f"(--port N, or make run PORT=N)") from None
            raise CLIError(f"--host/--port: cannot listen on {host}:{port}: {exc.strerror}") from None


def load_settings(database: str | None) -> Any:
    """Settings from the environment (and ``--database``); a CLIError naming the bad variable otherwise (one line,
    never the value: tokens and passwords are settings too)."""
    import pydantic
    import pydantic_settings

    from controller.settings import Settings

    try:
        settings = Settings(database_url=database) if database else Settings()
    except pydantic_settings.SettingsError as exc:  # a value that is not even JSON, for a structured setting
        raise CLIError(f"setting {_variable(str(exc))}: not valid JSON") from None
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        msg = str(err["msg"]).removeprefix("Value error, ")
        if not err["loc"]:  # a check across settings, or an unknown variable: the message names it
            raise CLIError(f"settings: {msg}") from None
        name = "REBALANCER_" + str(err["loc"][0]).upper()
        inner = [str(p) for p in err["loc"][1:]]
        if name == "REBALANCER_TOKEN_SCOPES" and inner:  # the key is a token: name its field, not the token
            inner = ["a token's " + inner[-1]] if len(inner) > 1 else ["a token"]
        where = f" ({'.'.join(inner)})" if inner else ""
        raise CLIError(f"setting {name}{where}: {msg}") from None
    return settings.resolved()


def _variable(message: str) -> str:
    """``REBALANCER_<FIELD>`` from pydantic-settings' 'error parsing value for field "<field>" …'."""
    import re

    found = re.search(r'field "(\w+)"', message)
    return "REBALANCER_" + found.group(1).upper() if found else "REBALANCER_*"


def safe_url(url: str) -> str:
    """A database URL as it may be printed: its password masked."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can read: print none of it
        return "<the database URL>"


def check_database(settings: Any) -> None:
    """Open the database once before serving, so a bad URL or an unreachable server is one clear line."""
    import sqlalchemy.exc
    from sqlalchemy import text

    from controller.repository import make_engine

    url = settings.sqlalchemy_url()
    try:
        engine = make_engine(url, settings.sqlite_synchronous)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise CLIError(f"--database: not a usable database URL {safe_url(settings.database_url)!r}: {exc}") from None
    except (sqlalchemy.exc.SQLAlchemyError, OSError, ImportError) as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise CLIError(f"--database: cannot open {safe_url(settings.database_url)!r}: {reason}") from None
