"""Error mapping: every failure the user can cause becomes a 4xx with a body naming the field and the reason.

Body of every error: ``{"detail": [{"field": "key_groups[3].load", "reason": "..."}]}`` for 422, and
``{"detail": "<message>"}`` for 401/404/409/413/415/429/501, and ``{"detail": "<message>", "request_id": "<id>"}``
for 500 (a :class:`solvers.errors.ServerError` or any other failure of the server; the log line with the
traceback carries the same id, as does the ``X-Request-ID`` header) and for 503 (the solve's worker was killed at
its hard deadline or died; ``Retry-After: 1``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.errors import Busy, Conflict, NotFound, TooLarge
from controller.solving import SolveTimeout, WorkerDied
from solvers.errors import InvalidInput

log = logging.getLogger("rebalancer.api")


def field_path(loc: Iterable[Any]) -> str:
    """``("body", "key_groups", 3, "load")`` -> ``key_groups[3].load`` (the foundation's path style)."""
    out = ""
    for part in loc:
        if part == "body" and not out:
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _is_union_tag(part: Any) -> bool:
    # pydantic adds the union member's name to the location ("JobNode", "str", "int", "ScalingChange")
    return isinstance(part, str) and (part[:1].isupper() or part in ("str", "int", "float", "bool"))


def pydantic_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    out = []
    seen: set[tuple[str, str]] = set()
    for e in errors:
        loc = [p for p in e.get("loc", ()) if not _is_union_tag(p) and not str(p).startswith("function-")]
        if e.get("type") == "json_invalid":
            item = {"field": "body", "reason": f"invalid JSON: {e.get('msg')}"}
        else:
            msg = e.get("msg", "invalid")
            if e.get("type") == "missing":
                msg = "is required"
            elif e.get("type") == "extra_forbidden":
                msg = "unknown field"
            item = {"field": field_path(loc) or "body", "reason": msg}
        key = (item["field"], item["reason"])
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


class UnsupportedMediaType(Exception):
    """A request body that is not JSON (415)."""


def is_json(content_type: str) -> bool:
    """``application/json`` or ``application/<x>+json``, with any parameters (``; charset=utf-8``)."""
    media = content_type.split(";", 1)[0].strip().lower()
    kind, _, sub = media.partition("/")
    return kind == "application" and (sub == "json" or sub.endswith("+json"))


async def require_json(request: Request) -> None:
    """Route dependency: a request with a body must declare it as JSON (a missing Content-Type is read as JSON, as
    FastAPI does); anything else is a 415 naming the type, before the body is parsed."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not is_json(content_type):
        raise UnsupportedMediaType(f"unsupported media type {content_type[:100]!r}: send the body as "
                                   "application/json")


def server_error(req: Request, exc: BaseException, detail: str) -> JSONResponse:
    """500 with a request id; the traceback is logged under the same id (issue 11 §4)."""
    rid = uuid.uuid4().hex[:16]
    log.error("server error %s on %s %s: %s: %s", rid, req.method, req.url.path, type(exc).__name__, exc,
              exc_info=exc)
    return JSONResponse({"detail": detail, "request_id": rid}, status_code=500, headers={"X-Request-ID": rid})


def solver_unavailable(req: Request | None, exc: BaseException) -> JSONResponse:
    """503 (with ``Retry-After``) when the solve itself could not finish: its worker was killed at the hard
    deadline (:class:`SolveTimeout`) or died (:class:`WorkerDied`); the pool has replaced the worker, so a retry
    can succeed. Logged under the request id it carries."""
    rid = uuid.uuid4().hex[:16]
    where = f" on {req.method} {req.url.path}" if req is not None else ""
    log.warning("solver unavailable %s%s: %s: %s", rid, where, type(exc).__name__, exc)
    return JSONResponse({"detail": f"solver unavailable: {exc}; retry the request", "request_id": rid},
                        status_code=503, headers={"Retry-After": "1", "X-Request-ID": rid})


def client_error(exc: InvalidInput | TooLarge) -> tuple[int, dict[str, Any]]:
    """Status and body of a client error raised by the controller's checks (one mapping for the routes'
    handlers and for the requests answered in a solver worker, :mod:`api.offload`)."""
    if isinstance(exc, TooLarge):
        return 413, {"detail": f"request too large: {exc}"}
    return 422, {"detail": [{"field": exc.field or "body", "reason": exc.reason}]}


def invalid(items: list[dict[str, str]]) -> JSONResponse:
    return JSONResponse({"detail": items}, status_code=422)


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_req: Request, exc: RequestValidationError) -> JSONResponse:
        return invalid(pydantic_errors(exc.errors()))

    @app.exception_handler(ValidationError)
    async def _pyd(_req: Request, exc: ValidationError) -> JSONResponse:
        return invalid(pydantic_errors(exc.errors()))

    @app.exception_handler(InvalidInput)
    @app.exception_handler(TooLarge)
    async def _client(_req: Request, exc: InvalidInput | TooLarge) -> JSONResponse:
        status, body = client_error(exc)
        return JSONResponse(body, status_code=status)

    @app.exception_handler(UnsupportedMediaType)
    async def _media(_req: Request, exc: UnsupportedMediaType) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=415)

    @app.exception_handler(NotFound)
    async def _nf(_req: Request, exc: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(_req: Request, exc: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)

    @app.exception_handler(Busy)
    async def _busy(_req: Request, exc: Busy) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": "1"})

    @app.exception_handler(SolveTimeout)
    @app.exception_handler(WorkerDied)
    async def _unavailable(req: Request, exc: RuntimeError) -> JSONResponse:
        return solver_unavailable(req, exc)

    @app.exception_handler(RuntimeError)
    async def _runtime(req: Request, exc: RuntimeError) -> JSONResponse:
        # ServerError (PlannerError), the solver pool's failures: all RuntimeError
        return server_error(req, exc, f"planner failed: {exc}")

    @app.exception_handler(Exception)
    async def _unexpected(req: Request, exc: Exception) -> JSONResponse:
        return server_error(req, exc, "internal server error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and "parsing the body" in str(exc.detail):  # e.g. bytes that are not UTF-8
            return invalid([{"field": "body", "reason": "invalid JSON: the body could not be decoded"}])
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)
