"""Pure ASGI middleware (cheap on the hot path): request metrics, authentication and token scopes, request bodies.

Order, outermost first: metrics -> auth (401 before anything is read; a scoped token's 403/404, and its filtered
``GET /v1/jobs``, see :mod:`api.tenants`) -> bodies (:class:`BodyLimitMiddleware`: size, read timeouts and the
bytes held by all requests and by each client). The header timeout is the server's (:mod:`cli.serve`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from api.tenants import JOBS, Grant, decide, filter_job_list
from controller.telemetry import Telemetry

#: probes and the API documentation never need a token (the schema holds no secret; Swagger UI must load it)
OPEN_PATHS = {"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
OPEN_PREFIXES = ("/docs-assets/",)
_METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}


async def _send_json(send: Callable[..., Any], status: int, body: Any,
                     headers: list[tuple[bytes, bytes]] | None = None) -> None:
    raw = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())] + (headers or [])
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": raw})


class MetricsMiddleware:
    """Counts every request by method, route template and status, and times it by route.

    ``route`` is the matched route's path template; a request served by a mounted app (the API documentation's
    static files) counts under the mount, ``/docs-assets/{path}``; only a path no route or mount matches is
    ``unmatched``. ``status`` is the status sent; a request whose client went away before the answer started (an
    aborted upload: the truncated body may even have been answered 422 or failed) counts as ``499`` (as nginx names
    it), not as a client or server error."""

    def __init__(self, app: Any, telemetry: Telemetry):
        self.app, self.telemetry = app, telemetry

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status: list[int | None] = [None]
        disconnected = [False]
        root_path = scope.get("root_path", "")

        async def send_wrapper(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = 499 if disconnected[0] else message["status"]  # an answer nobody will read
            await send(message)

        async def receive_wrapper() -> dict[str, Any]:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.disconnect":
                disconnected[0] = True
            return message

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        finally:
            name = _route_name(scope, root_path)
            code = status[0] if status[0] is not None else (499 if disconnected[0] else 500)
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"  # bounded label values
            self.telemetry.requests.inc(method, name, str(code))
            self.telemetry.latency.observe(time.perf_counter() - t0, name)


def _route_name(scope: dict[str, Any], root_path: str) -> str:
    """The matched route's template; under a mount (Starlette extends ``root_path`` by the mount's prefix as it
    routes into it), the mount's prefix + ``/{path}``; else ``unmatched``."""
    path = getattr(scope.get("route"), "path", None)
    if path:
        return str(path)
    mounted = str(scope.get("root_path", ""))
    if mounted != root_path and mounted.startswith(root_path):
        return mounted[len(root_path):] + "/{path}"
    return "unmatched"


class JobIdSlashMiddleware:
    """A job id may not contain '/': a URL-encoded one (``%2F``) is decoded before routing, so
    ``/v1/jobs/a%2Fb`` would reach another route or a bare 404 (and ``a%2Fstats`` the statistics route of job
    ``a``). Refused with the 422 the ``job_id`` pattern gives, before authentication and routing."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path") or b""
            if raw.startswith(JOBS.encode() + b"/"):
                job_part = raw[len(JOBS) + 1:].split(b"/", 1)[0].split(b"?", 1)[0]
                if b"%2f" in job_part.lower():
                    await _send_json(send, 422, {"detail": [{
                        "field": "job_id", "reason": "must match ^[A-Za-z0-9][A-Za-z0-9._:-]*$ (a '/' is not "
                                                     "allowed, URL-encoded or not)"}]})
                    return
        await self.app(scope, receive, send)


class AuthMiddleware:
    """Bearer tokens: ``grants`` maps each token to its :class:`~api.tenants.Grant` (empty: no authentication)."""

    def __init__(self, app: Any, grants: dict[bytes, Grant]):
        self.app = app
        self.grants = list(grants.items())

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.grants or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        auth = b""
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                auth = v
                break
        scheme, _, token = auth.partition(b" ")
        grant = None
        if scheme.lower() == b"bearer":
            token = token.strip()
            for t, g in self.grants:  # compare with every token: the time taken does not say which one matched
                if hmac.compare_digest(token, t):
                    grant = g
        if grant is None:
            reason = "missing bearer token" if not auth else "invalid bearer token"
            await _send_json(send, 401, {"detail": f"unauthorized: {reason} (Authorization: Bearer <token>)"},
                             [(b"www-authenticate", b"Bearer")])
            return
        refusal = decide(grant, scope["method"], path)
        if refusal is not None:
            await _send_json(send, *refusal)
            return
        if grant.admin or not (scope["method"] == "GET" and path.rstrip("/") == JOBS):
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _filtering(grant, send))


def _filtering(grant: Grant, send: Callable[..., Any]) -> Callable[..., Any]:
    """Buffer the ``GET /v1/jobs`` answer and keep only the jobs ``grant`` sees."""
    start: dict[str, Any] = {}
    parts: list[bytes] = []

    async def filtered(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        parts.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        body = b"".join(parts)
        if start.get("status") == 200:
            body = filter_job_list(grant, body)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return filtered


class Uploads:
    """Bytes of request bodies held in memory now, by all requests together and by each client (on the loop)."""

    def __init__(self, total_cap: int, client_cap: int):
        self.total_cap, self.client_cap = total_cap, client_cap
        self.total = 0
        self.by_client: dict[bytes, int] = {}

    def refusal(self, client: bytes, n: int) -> tuple[int, str] | None:
        """Why ``n`` more bytes of ``client`` cannot be held (status, reason), or None."""
        mine = self.by_client.get(client, 0)
        if mine + n > self.client_cap:
            return 429, (f"too many uploads from this client: its request bodies would hold {mine + n} bytes, more "
                         f"than {self.client_cap} (REBALANCER_MAX_CLIENT_UPLOAD_BYTES); retry when they are answered")
        if self.total + n > self.total_cap:
            return 503, (f"too many uploads: request bodies would hold {self.total + n} bytes, more than "
                         f"{self.total_cap} (REBALANCER_MAX_UPLOAD_BYTES); retry")
        return None

    def take(self, client: bytes, n: int) -> None:
        self.total += n
        self.by_client[client] = self.by_client.get(client, 0) + n

    def give(self, client: bytes, n: int) -> None:
        self.total -= n
        left = self.by_client.get(client, 0) - n
        if left > 0:
            self.by_client[client] = left
        else:
            self.by_client.pop(client, None)


CLOSE = [(b"connection", b"close")]
RETRY = [(b"retry-after", b"1")]


class BodyLimitMiddleware:
    """Every byte of a request body bounded: at most ``max_bytes`` per body (413, on Content-Length or while it
    arrives), held in memory until its answer within the app's :class:`Uploads` caps (``max_upload_bytes`` for all
    requests, 503; ``max_client_upload_bytes`` per bearer token, or per address without authentication, 429), and
    read in time: within ``body_timeout_s``, never pausing longer than ``body_idle_timeout_s`` (408). A refused
    body's connection is closed (what is left of it is not read). The limits are the app's settings
    (``app.state.settings``)."""

    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes
        self.uploads: Uploads | None = None

    def _settings(self, scope: dict[str, Any]) -> Any:
        settings = scope["app"].state.settings
        if self.uploads is None:
            self.uploads = Uploads(settings.max_upload_bytes, settings.max_client_upload_bytes)
        return settings

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        settings = self._settings(scope)
        uploads = self.uploads
        assert uploads is not None
        declared, client = _declared_length(scope), _client(scope, settings.auth_enabled())
        if declared is not None and declared > self.max_bytes:
            await _send_json(send, 413, {"detail": f"request too large: body over {self.max_bytes} bytes"}, CLOSE)
            return
        refused = uploads.refusal(client, declared) if declared else None
        if refused is not None:
            await _send_json(send, refused[0], {"detail": refused[1]}, CLOSE + RETRY)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + settings.body_timeout_s
        state = {"held": 0, "done": False}

        async def bounded_receive() -> dict[str, Any]:
            if state["done"]:
                return await receive()  # type: ignore[no-any-return]
            wait = min(settings.body_idle_timeout_s, deadline - loop.time())
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    message: dict[str, Any] = await receive()
            except TimeoutError:
                raise HTTPException(408, f"request body not received in time (REBALANCER_BODY_TIMEOUT_S "
                                         f"{settings.body_timeout_s:g} s, REBALANCER_BODY_IDLE_TIMEOUT_S "
                                         f"{settings.body_idle_timeout_s:g} s)", headers={"Connection": "close"}
                                    ) from None
            if message["type"] == "http.request":
                state["done"] = not message.get("more_body", False)
                n = len(message.get("body", b""))
                if state["held"] + n > self.max_bytes:  # a chunked body without Content-Length
                    raise HTTPException(413, f"request too large: body over {self.max_bytes} bytes",
                                        headers={"Connection": "close"})
                refusal = uploads.refusal(client, n) if n else None
                if refusal is not None:
                    raise HTTPException(refusal[0], refusal[1], headers={"Connection": "close", "Retry-After": "1"})
                uploads.take(client, n)
                state["held"] += n
            return message

        try:
            await self.app(scope, bounded_receive, send)
        finally:
            uploads.give(client, state["held"])


def _declared_length(scope: dict[str, Any]) -> int | None:
    for k, v in scope.get("headers", ()):
        if k == b"content-length":
            try:
                return int(v)
            except ValueError:
                return None
    return None


def _client(scope: dict[str, Any], by_token: bool) -> bytes:
    """Who holds an upload: the bearer token when tokens are checked (the auth middleware let it in), else the
    client's address."""
    if by_token:
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                token: bytes = v.partition(b" ")[2].strip()
                return token
    peer = scope.get("client")
    return str(peer[0] if peer else "").encode()
