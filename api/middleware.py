"""Pure ASGI middleware (cheap on the hot path): request metrics, authentication, body size cap.

Order, outermost first: metrics -> auth (401 before anything is read) -> body size (413 on Content-Length or while
streaming the body).
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException

from controller.telemetry import Telemetry

#: probes and the API documentation never need a token (the schema holds no secret; Swagger UI must load it)
OPEN_PATHS = {"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/openapi.json"}
OPEN_PREFIXES = ("/docs-assets/",)
_METHODS = {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"}


async def _send_json(send: Callable, status: int, body: dict, headers: list | None = None) -> None:
    raw = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())] + (headers or [])
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": raw})


class MetricsMiddleware:
    def __init__(self, app: Any, telemetry: Telemetry):
        self.app, self.telemetry = app, telemetry

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        status = [500]

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"  # bounded label values
            self.telemetry.requests.inc(method, name, str(status[0]))
            self.telemetry.latency.observe(time.perf_counter() - t0, name)


class AuthMiddleware:
    def __init__(self, app: Any, tokens: set[str]):
        self.app = app
        self.tokens = [t.encode() for t in tokens]

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.tokens or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return await self.app(scope, receive, send)
        auth = b""
        for k, v in scope.get("headers", ()):
            if k == b"authorization":
                auth = v
                break
        scheme, _, token = auth.partition(b" ")
        if scheme.lower() == b"bearer" and any(hmac.compare_digest(token.strip(), t) for t in self.tokens):
            return await self.app(scope, receive, send)
        reason = "missing bearer token" if not auth else "invalid bearer token"
        await _send_json(send, 401, {"detail": f"unauthorized: {reason} (Authorization: Bearer <token>)"},
                         [(b"www-authenticate", b"Bearer")])


class BodyLimitMiddleware:
    def __init__(self, app: Any, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    if int(v) > self.max_bytes:
                        return await _send_json(send, 413, {"detail": f"request too large: body over "
                                                                      f"{self.max_bytes} bytes"})
                except ValueError:
                    pass
                break
        seen = [0]
        limit = self.max_bytes

        async def limited_receive() -> dict:
            message = await receive()
            if message["type"] == "http.request":
                seen[0] += len(message.get("body", b""))
                if seen[0] > limit:  # a chunked body without Content-Length: the exception handler answers 413
                    raise HTTPException(413, f"request too large: body over {limit} bytes")
            return message

        await self.app(scope, limited_receive, send)
