"""The one way tests and benchmarks start a Rebalancer controller.

Three kinds, one shape (``url``, ``client()``, ``stop()``, usable as context managers):

* :class:`InProcessServer` — the FastAPI app of :func:`api.app.create_app` in this process, spoken to through
  ``httpx.ASGITransport``. The app's lifespan (database load, writer, solver pool) runs on a private event-loop
  thread for the server's whole life, exactly as under uvicorn, so background tasks keep running between
  requests and concurrent requests from several threads interleave on one loop. ``client()`` is an ordinary
  synchronous ``httpx.Client``. No port, no process start: use it for API behaviour tests.
* :class:`ThreadServer` — the app served by uvicorn on a free 127.0.0.1 port, on a thread of this process, with
  the options ``rebalancer serve`` gives uvicorn: for what only real HTTP shows (stalled uploads, bodies uvicorn
  reads, a request's headers and their timeout), without a process start (~2.5 CPU-seconds each: the imports and
  the forkserver's preload, which this process has already paid).
* :class:`ServerProcess` — ``python -m cli.main serve`` on 127.0.0.1, in its own process group (so
  ``kill9()`` also takes the forkserver and the solver workers). Use it only where the process matters: kill -9 and
  restart, signals and shutdown, the lease, PostgreSQL, a controller a test freezes or stops, HTTP benchmarks.
* :func:`app_client` — the app on the CALLER's event loop (an async context manager yielding an
  ``httpx.AsyncClient`` and the controller), for async tests that order requests precisely (races).

Process trees (``alive``, ``descendants``, ``wait_gone``, …) are in :mod:`tests.helpers.procs`.

:data:`TEST_SETTINGS` are the settings tests run with (one solver worker, a 2 s cap on solves, requests that wait
long enough on a loaded CI machine that they never answer 202 unless asked to, and a minute's grace before a
worker whose task overran is killed: a niced worker on a machine loaded many times over can take seconds for a
task of milliseconds); benchmarks and the tests of the hard deadline pass their own.
Importable as ``tests.helpers.server`` from the repository root (``tests/conftest.py`` puts it on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.helpers.procs import alive, descendants, group_pids

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"

#: settings of every test server (``REBALANCER_<NAME>`` for a process); a test may override any of them.
#: ``solver_nice`` 0: at the default 19 a solver worker beside the other test processes of a loaded machine gets ~1 %
#: of a core; CI saw a 24-key-group Flux plan killed after 64 s (2 × its limit + the grace) and a proposal still
#: pending after 60 s. Tests that start a server with its own defaults (``test_settings=False``) pass
#: :data:`UNSTARVED` for the same reason; benchmarks keep the defaults.
TEST_SETTINGS: dict[str, Any] = {"solver_workers": 1, "max_time_limit_s": 2.0, "request_wait_s": 60.0,
                                 "solve_kill_grace_s": 60.0, "solver_nice": 0}
UNSTARVED: dict[str, Any] = {"solver_nice": 0}


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now (for a server about to listen on it)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def listening_port(pid: int) -> int | None:
    """The TCP port process ``pid`` listens on (IPv4; Linux's ``/proc``), or None while it listens on none (or has
    ended)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    if not inodes:
        return None
    try:
        with open(f"/proc/{pid}/net/tcp") as table:
            lines = table.readlines()[1:]
    except OSError:  # the process ended meanwhile
        return None
    for line in lines:
        fields = line.split()
        if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
            return int(fields[1].rsplit(":", 1)[1], 16)
    return None


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port of 127.0.0.1 that refuses connections while the block runs: bound and never listening, so no server
    of the run's other test processes can take it, as one can take a port merely found free (a driver meant to find
    its controller down once got 'ok' from another process's server that had been given the same port)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        yield int(s.getsockname()[1])


def settings_env(settings: Mapping[str, Any]) -> dict[str, str]:
    """``{"solver_workers": 1}`` → ``{"REBALANCER_SOLVER_WORKERS": "1"}``."""
    return {f"REBALANCER_{k.upper()}": str(v) for k, v in settings.items()}


class _Server:
    url: str

    def client(self, **kw: Any) -> httpx.Client:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> _Server:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------- in process
class _AsyncChunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]):
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for c in self._chunks:
            yield c


class _SyncASGITransport(httpx.BaseTransport):
    """A synchronous httpx transport that hands each request to ``httpx.ASGITransport`` on the server's loop."""

    def __init__(self, server: InProcessServer):
        self._server = server
        self._asgi = httpx.ASGITransport(app=server.app, raise_app_exceptions=False)  # a 500 answers, as uvicorn

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        chunks = [bytes(c) for c in request.stream]  # type: ignore[union-attr]  # a sync stream: the whole body
        inner = httpx.Request(request.method, request.url, headers=request.headers, stream=_AsyncChunks(chunks),
                              extensions=request.extensions)

        async def call() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            resp = await self._asgi.handle_async_request(inner)
            body = await resp.aread()
            return resp.status_code, resp.headers.raw, body

        status, headers, body = self._server.run(call())
        return httpx.Response(status, headers=headers, content=body, request=request)


class InProcessServer(_Server):
    """``create_app(Settings(**settings))`` with its lifespan running on a private event-loop thread.

    ``InProcessServer(database_url="sqlite:///…/db.sqlite", api_tokens="t")`` — keyword arguments are
    :class:`controller.settings.Settings` fields, over :data:`TEST_SETTINGS` (pass ``test_settings=False`` for the
    plain defaults). Environment variables ``REBALANCER_*`` still apply to the fields not given, as in the server.
    """

    url = "http://testserver"

    def __init__(self, test_settings: bool = True, warm: bool = True, **settings: Any):
        from api.app import create_app
        from controller.settings import Settings

        self.settings = Settings(**{**(TEST_SETTINGS if test_settings else {}), **settings})
        self.app = create_app(self.settings, warm=warm)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="in-process-server", daemon=True)
        self._stopping: asyncio.Event | None = None
        self._life: concurrent.futures.Future[None] | None = None

    @property
    def controller(self) -> Any:
        """The app's :class:`controller.service.Controller` (white-box checks only)."""
        return self.app.state.controller

    def run(self, coro: Any, timeout: float | None = 300.0) -> Any:
        """Run a coroutine on the server's loop and return its result (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self, timeout: float = 120.0) -> InProcessServer:
        self._thread.start()
        started = threading.Event()
        failed: list[BaseException] = []

        async def life() -> None:
            self._stopping = asyncio.Event()
            try:
                async with self.app.router.lifespan_context(self.app):
                    started.set()
                    await self._stopping.wait()
            except BaseException as exc:  # startup failed: hand it to start()
                failed.append(exc)
                started.set()
                raise

        self._life = asyncio.run_coroutine_threadsafe(life(), self._loop)
        if not started.wait(timeout):
            raise RuntimeError("the in-process server did not start")
        if failed:
            self._shutdown_loop()
            raise RuntimeError("the in-process server failed to start") from failed[0]
        return self

    def client(self, **kw: Any) -> httpx.Client:
        kw.setdefault("timeout", 60.0)
        return httpx.Client(base_url=self.url, transport=_SyncASGITransport(self), **kw)

    def transport(self) -> httpx.BaseTransport:
        """A synchronous httpx transport into this app, for clients that build their own ``httpx.Client``
        (``RebalancerClient(srv.url, transport=srv.transport())``)."""
        return _SyncASGITransport(self)

    def requests_session(self) -> Any:
        """A ``requests.Session`` whose requests to :attr:`url` go to this app (for tools built on requests,
        such as schemathesis' ``case.call(session=…)``)."""
        import io

        import requests
        from requests.adapters import BaseAdapter
        from urllib3 import HTTPResponse
        from urllib3._collections import HTTPHeaderDict

        client = self.client()

        class _Adapter(BaseAdapter):
            def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
                     verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
                assert request.method is not None and request.url is not None
                headers = {k: v if isinstance(v, str) else v.decode("latin-1") for k, v in request.headers.items()}
                body = request.body.encode() if isinstance(request.body, str) else request.body
                assert body is None or isinstance(body, bytes), "streamed request bodies are not supported"
                r = client.request(request.method, request.url, headers=headers, content=body,
                                   timeout=timeout or 60.0)
                out = requests.Response()
                out.status_code = r.status_code
                out.headers = requests.structures.CaseInsensitiveDict(r.headers)
                out._content = r.content
                out.raw = HTTPResponse(body=io.BytesIO(r.content), headers=HTTPHeaderDict(r.headers.multi_items()),
                                       status=r.status_code, version=11, preload_content=False)
                out.url = request.url
                out.request = request
                out.reason = r.reason_phrase
                out.encoding = r.encoding
                return out

            def close(self) -> None:
                client.close()

        session = requests.Session()
        session.mount(self.url, _Adapter())
        return session

    def stop(self) -> None:
        """Run the lifespan's shutdown (writer flush, solver pool shutdown) and end the loop thread."""
        if self._life is None:
            return
        life, self._life = self._life, None
        stopping = self._stopping
        if stopping is not None:
            self._loop.call_soon_threadsafe(stopping.set)
        try:
            life.result(timeout=60)
        finally:
            self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> InProcessServer:
        return self if self._life is not None else self.start()


@contextlib.asynccontextmanager
async def app_client(settings: Any, warm: bool = False) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """``create_app(settings)`` on the caller's event loop, lifespan run: ``async with app_client(s) as (c, ctl)``
    gives an ``httpx.AsyncClient`` (``httpx.ASGITransport``) and the app's controller. ``settings`` is a
    :class:`controller.settings.Settings`."""
    from api.app import create_app

    app = create_app(settings, warm=warm)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=InProcessServer.url, timeout=60) as c:
            yield c, app.state.controller


# ---------------------------------------------------------------------------------------------- on a port
class _OnPort(_Server):
    """A server on a TCP port of 127.0.0.1: the one given, or any free one it binds itself (``port`` None until it
    listens: no port is found free here and then given to another test process before the server binds it)."""

    port: int | None

    @property
    def url(self) -> str:  # type: ignore[override]
        if self.port is None:
            raise RuntimeError("the server's port is known once it listens (start())")
        return f"http://{HOST}:{self.port}"

    def client(self, **kw: Any) -> httpx.Client:
        kw.setdefault("timeout", 60.0)
        return httpx.Client(base_url=self.url, **kw)


# ---------------------------------------------------------------------------------------------- uvicorn on a thread
class ThreadServer(_OnPort):
    """``create_app(Settings(database_url=…, **settings))`` served by uvicorn on ``port`` of 127.0.0.1 on a thread,
    with :func:`cli.serve.uvicorn_options`; ``settings`` as :class:`InProcessServer`'s. Without ``port`` uvicorn binds
    any free one and :attr:`url` is known once :meth:`start` returns (no port found free and then taken by another
    test process in between)."""

    def __init__(self, database_url: str, *, settings: Mapping[str, Any] | None = None, test_settings: bool = True,
                 port: int | None = None):
        from controller.settings import Settings

        self.settings = Settings(database_url=database_url,
                                 **{**(TEST_SETTINGS if test_settings else {}), **(settings or {})})
        self.port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._status: int | str | None = None

    def _run(self, server: Any) -> None:
        try:
            server.run()
        except SystemExit as exc:  # uvicorn's way out of a failed startup (status 3)
            self._status = exc.code

    def start(self, timeout: float = 90.0) -> ThreadServer:
        """Serve on the thread; return once uvicorn listens (the app's lifespan has run)."""
        import uvicorn

        from api.app import create_app
        from cli.serve import uvicorn_options

        config = uvicorn.Config(create_app(self.settings), host=HOST, port=self.port or 0, log_level="warning",
                                log_config=None, access_log=False, **uvicorn_options(self.settings))
        self._server = server = uvicorn.Server(config)
        self._thread = thread = threading.Thread(target=self._run, args=(server,), name="uvicorn",
                                                 daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not thread.is_alive():
                self.stop()
                raise RuntimeError(f"the server on a thread stopped while starting (uvicorn's status {self._status}: "
                                   f"the lifespan failed, its error is in the log)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on a thread did not start in {timeout:.0f} s")
            time.sleep(0.02)
        self.port = int(server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """uvicorn's graceful shutdown (the lifespan's too), as on SIGTERM."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None and thread is not None:
            server.should_exit = True
            thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError(f"the server on a thread did not stop in {timeout:.0f} s")

    def __enter__(self) -> ThreadServer:
        return self if self._server is not None else self.start()


# ---------------------------------------------------------------------------------------------- a process
class ServerProcess(_OnPort):
    """``python -m cli.main serve --database URL`` on 127.0.0.1, in its own process group: on ``port``, or without one
    on any free port the server binds itself (``--port 0``), read from ``/proc`` once it listens (:attr:`url` is
    known from then on; a restart comes back on the same port).

    ``settings`` become ``REBALANCER_*`` variables (over :data:`TEST_SETTINGS` unless ``test_settings=False``);
    ``env`` is added last, verbatim. ``REBALANCER_API_TOKENS`` of the caller's environment is dropped (tests and
    benchmarks decide authentication themselves). ``args`` are more ``serve`` options; ``database_url=None`` leaves
    ``--database`` out (the server's default or ``REBALANCER_DATABASE_URL``). Output goes to ``log_path`` (else
    nowhere; :meth:`log_text` reads it).
    """

    def __init__(self, database_url: str | None, *, settings: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None, log_path: Path | None = None, test_settings: bool = True,
                 log_level: str = "warning", port: int | None = None, args: Sequence[str] = ()):
        self.database_url = database_url
        self.args = list(args)
        self.env = {**settings_env({**(TEST_SETTINGS if test_settings else {}), **(settings or {})}),
                    **dict(env or {})}
        # without a port the server binds any free one and start() reads it from /proc (Linux): a port found free
        # here could be given to another test process's server before this one binds it
        self.port: int | None = port or (None if sys.platform.startswith("linux") else free_port())
        self.log_path = log_path
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout: float = 90.0) -> ServerProcess:
        """Spawn the server and wait until ``/healthz`` answers."""
        return self.spawn().wait_healthy(timeout)

    def spawn(self) -> ServerProcess:
        """Start the process without waiting (a test that expects it to exit, or signals it while it starts)."""
        env = {k: v for k, v in os.environ.items() if k != "REBALANCER_API_TOKENS"}
        env.update({"PYTHONUNBUFFERED": "1", **self.env})
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            argv = [sys.executable, "-m", "cli.main", "serve", "--host", HOST, "--port", str(self.port or 0),
                    "--log-level", self.log_level, *self.args]
            if self.database_url is not None:
                argv += ["--database", self.database_url]
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        return self

    def wait_healthy(self, timeout: float = 90.0) -> ServerProcess:
        assert self.proc is not None, "not spawned"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}{self._log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.1)
        self.kill9()
        raise RuntimeError(f"server did not become healthy in {timeout:.0f} s{self._log_tail()}")

    def healthy(self) -> bool:
        """``/healthz`` answers 200 (False while the server listens on no port yet)."""
        if self.port is None and self.proc is not None:
            self.port = listening_port(self.proc.pid)
        if self.port is None:
            return False
        try:
            return httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def log_text(self) -> str:
        """Everything the server wrote so far (empty without ``log_path``)."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def _log_tail(self) -> str:
        return f"; {self.log_path}:\n" + self.log_text()[-2000:] if self.log_path else ""

    def descendants(self) -> list[int]:
        """The server's live child processes and theirs (resource tracker, forkserver, solver workers)."""
        return [p for p in descendants(self.pid) if alive(p)]

    def wait_children(self, n: int, timeout: float = 90.0) -> list[int]:
        """Wait until the server has at least ``n`` live descendants; return them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            kids = self.descendants()
            if len(kids) >= n:
                return kids
            time.sleep(0.2)
        raise AssertionError(f"only {self.descendants()} below the server after {timeout} s")

    def kill9(self) -> None:
        """kill -9 the server and its solver workers (its whole process group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._kill_group()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to the process group, then SIGKILL for anything left (forkserver, workers)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
        self._kill_group()

    def _kill_group(self, timeout: float = 10.0) -> None:
        """SIGKILL whatever is left of the process group and wait until it is gone."""
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while group_pids(self.proc.pid) and time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            time.sleep(0.05)

    def __enter__(self) -> ServerProcess:
        return self if self.proc is not None else self.start()

