"""Error mapping: every failure the user can cause becomes a 4xx with a body naming the field and the reason.

The body of every error is the contract's ``Error``: ``{"detail": [{"field": "key_groups[3].load", "reason":
"..."}]}`` for 422, ``{"detail": "<message>"}`` for 401/404/409/413/415/429/501, and ``{"detail": "<message>",
"request_id": "<id>"}`` for 500 (any failure of the server; the log line with the traceback carries the same id,
as does the ``X-Request-ID`` header) and for 503 (the solve's worker was killed at its hard deadline or died;
``Retry-After: 1``).
"""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.io import UnsupportedMediaType, respond
from controller.edge import Invalid, error_items
from controller.errors import Busy, Conflict, NotFound, TooLarge
from controller.pool_errors import SolverUnavailable
from rebalancer_client.contract import Error, ErrorItem
from solvers.errors import InvalidInput

log = logging.getLogger("rebalancer.api")


def error(status: int, detail: str, headers: dict[str, str] | None = None, request_id: str | None = None) -> Response:
    return respond(Error(detail=detail, request_id=request_id), status, headers=headers)


def server_error(req: Request, exc: BaseException, detail: str) -> Response:
    """500 with a request id; the traceback is logged under the same id."""
    rid = uuid.uuid4().hex[:16]
    log.error("server error %s on %s %s: %s: %s", rid, req.method, req.url.path, type(exc).__name__, exc,
              exc_info=exc)
    return error(500, detail, {"X-Request-ID": rid}, rid)


def solver_unavailable(req: Request, exc: BaseException) -> Response:
    """503 (with ``Retry-After``) when the solve itself could not finish (:class:`SolverUnavailable`): its worker
    was killed at the hard deadline or died (the pool has replaced it, so a retry can succeed), or the pool is
    broken (``/healthz`` says so too). Logged under the request id it carries."""
    rid = uuid.uuid4().hex[:16]
    log.warning("solver unavailable %s on %s %s: %s: %s", rid, req.method, req.url.path, type(exc).__name__, exc)
    return error(503, f"solver unavailable: {exc}; retry the request", {"Retry-After": "1", "X-Request-ID": rid}, rid)


def invalid(items: list[ErrorItem]) -> Response:
    return respond(Error(detail=items), 422)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> Response:
        return invalid(error_items(exc.errors()))

    @app.exception_handler(Invalid)
    async def _invalid(_req: Request, exc: Invalid) -> Response:
        return invalid(exc.items)

    @app.exception_handler(InvalidInput)
    async def _input(_req: Request, exc: InvalidInput) -> Response:
        return invalid([ErrorItem(field=exc.field or "body", reason=exc.reason)])

    @app.exception_handler(TooLarge)
    async def _large(_req: Request, exc: TooLarge) -> Response:
        return error(413, f"request too large: {exc}")

    @app.exception_handler(UnsupportedMediaType)
    async def _media(_req: Request, exc: UnsupportedMediaType) -> Response:
        return error(415, str(exc))

    @app.exception_handler(NotFound)
    async def _nf(_req: Request, exc: NotFound) -> Response:
        return error(404, str(exc))

    @app.exception_handler(Conflict)
    async def _conflict(_req: Request, exc: Conflict) -> Response:
        return error(409, str(exc))

    @app.exception_handler(Busy)
    async def _busy(_req: Request, exc: Busy) -> Response:
        return error(429, str(exc), {"Retry-After": "1"})

    @app.exception_handler(SolverUnavailable)
    async def _unavailable(req: Request, exc: RuntimeError) -> Response:
        return solver_unavailable(req, exc)

    @app.exception_handler(RuntimeError)
    async def _runtime(req: Request, exc: RuntimeError) -> Response:
        # a planner's failure, the solver pool's failures: all RuntimeError
        return server_error(req, exc, f"planner failed: {exc}")

    @app.exception_handler(Exception)
    async def _unexpected(req: Request, exc: Exception) -> Response:
        return server_error(req, exc, "internal server error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # e.g. bytes that are not UTF-8
            return invalid([ErrorItem(field="body", reason="invalid JSON: the body could not be decoded")])
        if exc.status_code == 405:
            return not_allowed(req, (exc.headers or {}).get("Allow", ""))
        return error(exc.status_code, str(exc.detail), dict(exc.headers or {}))


def not_allowed(req: Request, router_allow: str) -> Response:
    """405 with every method the path allows (in ``Allow`` and the detail), read from the OpenAPI document: each
    method of a path is a route of its own, and the router names only the first route whose path matched."""
    parts = req.url.path.rstrip("/").split("/")
    methods = {m.upper() for template, ops in req.app.openapi().get("paths", {}).items()
               if _same_path(template.rstrip("/").split("/"), parts) for m in ops}
    allow = ", ".join(sorted(methods)) or router_allow
    return error(405, f"method {req.method} not allowed on {req.url.path[:200]}; allowed: {allow}", {"Allow": allow})


def _same_path(template: list[str], parts: list[str]) -> bool:
    return len(template) == len(parts) and all(t == p or (t.startswith("{") and t.endswith("}") and p)
                                               for t, p in zip(template, parts, strict=True))
