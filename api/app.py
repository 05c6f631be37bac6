"""The FastAPI application factory: ``create_app(settings)`` wires the controller, middleware, routes and errors.

Run it with ``rebalancer serve`` (one process: the controller keeps each job's window in memory and serialises a
job's mutations with a lock; executes are also atomic in the database). On PostgreSQL several replicas may run: the
leader serves, the standbys answer every request but the probes, metrics and documentation with where the leader is
(:class:`StandbyGuard`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.exceptions import HTTPException

from api import docs, errors
from api.deps import documented_auth
from api.errors import error
from api.io import REQUEST_DOCUMENTS
from api.middleware import (
    OPEN_PATHS,
    OPEN_PREFIXES,
    AuthMiddleware,
    BodyLimitMiddleware,
    JobIdSlashMiddleware,
    MetricsMiddleware,
)
from api.routes import jobs, ops, planning
from api.tenants import grants
from controller import edge
from controller.leadership import Fenced, Leadership, ReplicaLeadership, request_term
from controller.lease import ServerLease, lease_for
from controller.service import Controller
from controller.settings import Settings
from controller.telemetry import job_sampler

log = logging.getLogger("rebalancer.api")

#: what every operation that needs a token may answer (api.middleware.AuthMiddleware, api.tenants)
_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
AUTH_RESPONSES = {"401": {"description": "missing or invalid bearer token", "content": _ERROR},
                  "403": {"description": "the token's scope does not allow this (a read token writing, /metrics "
                                         "without admin)", "content": _ERROR}}
#: what every operation but the probes, metrics and documentation may answer on a replica that is not the leader
#: (:class:`StandbyGuard`, or a write fenced by a newer lease: nothing was done, the request may be sent again)
_LEADER = {"Rebalancer-Leader": {"description": "the leader's URL", "schema": {"type": "string"}},
           "Rebalancer-Role": {"description": "`standby`", "schema": {"type": "string"}}}
REPLICA_RESPONSES = {"421": {"description": "this replica is not the leader (replicated deployments): the request "
                                            "was not served; send it to the `Rebalancer-Leader` URL",
                             "headers": _LEADER, "content": _ERROR}}

DESCRIPTION = """Rebalancing controller for stateful stream and micro-batch jobs.

Stateless: `POST /v1/plans`, `/v1/evaluate`, `/v1/what-if/scaling`, `/v1/partitioning`.
Stateful: `PUT /v1/jobs/{job_id}`, statistics per batch, proposals (dry runs), executes guarded by epochs (409 when
stale), scaling, history. Errors: 422 `{"detail": [{"field", "reason"}]}`, 404, 409, 413, 429, 501.
When `REBALANCER_API_TOKENS` is set every route but `/healthz`, `/readyz` and the documentation (`/docs`,
`/openapi.json`) needs `Authorization: Bearer <token>` (the **Authorize** button of `/docs`).
"""


def log_database(settings: Settings) -> None:
    """One line naming the database this server uses (a relative SQLite path is resolved; the default is said)."""
    path = settings.sqlite_path()
    where = f"SQLite at {path}" if path is not None else f"{settings.sqlalchemy_url().split('://', 1)[0]} database"
    if settings.is_default_database():
        how = f"the default ./data/rebalancer.db under {os.getcwd()}; set --database or REBALANCER_DATABASE_URL"
    else:
        how = "from --database / REBALANCER_DATABASE_URL"
    fresh = " (new: it does not exist yet)" if path is not None and not path.exists() else ""
    log.info("database: %s%s (%s)", where, fresh, how)


#: the header naming the leader's URL on the answers of a replica that is not the leader (nothing was done)
LEADER_HEADER = "Rebalancer-Leader"
ROLE_HEADER = "Rebalancer-Role"


def not_leader(leader_url: str | None, detail: str) -> Response:
    """421 naming the leader (``Rebalancer-Leader``), or 503 while no leader is known; ``Rebalancer-Role: standby``
    tells clients that nothing was done, so any request may be sent again to the leader."""
    headers = {ROLE_HEADER: "standby", "Retry-After": "1"}
    if leader_url:
        headers[LEADER_HEADER] = leader_url
        return error(421, f"{detail}; the leader is at {leader_url}", headers)
    return error(503, f"{detail}; no leader is known yet", headers)


async def admitted(lead: Leadership) -> int | None:
    """The term to serve a request under, None when this replica must not: a leader whose lease was not renewed in
    time by its own clock waits (at most a lease's length) for the renewal under way rather than refuse at once."""
    term = lead.serving_term()
    if term is not None or not isinstance(lead, ReplicaLeadership):
        return term
    deadline = time.monotonic() + lead.ttl
    while lead.lapsed() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return lead.serving_term()


class StandbyGuard:
    """Pure ASGI: only the leader serves the API (the probes, metrics and documentation are served by every
    replica); each admitted request carries the lease term it was admitted under (writes of an older term fail)."""

    def __init__(self, app: Any, leadership: Leadership):
        self.app, self.leadership = app, leadership

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path == "/metrics" or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        term = await admitted(self.leadership)
        if term is None:
            await not_leader(self.leadership.leader_hint(), "this replica is not the leader now")(scope, receive, send)
            return
        token = request_term.set(term)
        try:
            await self.app(scope, receive, send)
        finally:
            request_term.reset(token)


async def warm_routes(app: FastAPI) -> None:
    """Have the router build its routes' state (built on the first request that walks past them otherwise): one
    request for a path no route matches, straight to the router. Done at every start (a server's first request to
    each group of routes stalled the event loop 100-200 ms: every other request waited), and by a standby before
    it competes for the lease, or a new leader's first requests would take a second more."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/-warm-up-", "raw_path": b"/-warm-up-", "root_path": "", "query_string": b"", "headers": [],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0), "app": app}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_message: MutableMapping[str, Any]) -> None:
        return None

    try:
        await app.router(scope, receive, send)
    except HTTPException:  # the 404 that the application's handlers would have answered
        pass


def install_failover(app: FastAPI, leadership: Leadership) -> None:
    """Replicas: a standby guard, and the answers of a write refused by the lease's fencing (421/503 naming the
    leader: nothing was written) or cut short by the database connection (503: the leader may be changing)."""
    if not leadership.replicated:
        return
    app.add_middleware(StandbyGuard, leadership=leadership)

    @app.exception_handler(Fenced)
    async def _fenced(_req: Request, exc: Fenced) -> Response:
        return not_leader(exc.leader_url, str(exc))

    @app.exception_handler(DBAPIError)
    async def _database(req: Request, exc: DBAPIError) -> Response:
        if not (exc.connection_invalidated or isinstance(exc, OperationalError)):
            return errors.server_error(req, exc, "internal server error")
        log.warning("database unavailable on %s %s: %s", req.method, req.url.path, str(exc.orig).splitlines()[0])
        return error(503, "the database is unavailable (the leader may be changing); retry the request",
                     {"Retry-After": "1"})


def create_app(settings: Settings | None = None, warm: bool = True, lease: ServerLease | None = None) -> FastAPI:
    """The application. ``lease``: the one-server-per-database lease already taken (``rebalancer serve`` takes it
    before loading anything); without one the lifespan takes its own."""
    settings = (settings or Settings()).resolved()
    controller = Controller(settings)
    controller.ctx.telemetry.job_samples = job_sampler(lambda: controller.ctx.jobs)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log_database(settings)
        own = lease is None
        held = lease_for(settings).acquire() if own else lease
        try:
            if warm:
                await warm_routes(app)
            await controller.start(warm=warm)
            try:
                yield
            finally:
                await controller.close()
        finally:
            if own and held is not None:
                held.release()

    app = FastAPI(title="Rebalancer", version="0.1.0", description=DESCRIPTION, lifespan=lifespan, docs_url=None,
                  redoc_url=None)
    app.state.controller = controller
    app.state.settings = settings
    errors.install(app)
    docs.install(app)
    app.include_router(ops.router)
    secured = [Depends(documented_auth)] if settings.auth_enabled() else []
    app.include_router(planning.router, dependencies=secured)
    app.include_router(jobs.router, dependencies=secured)
    # innermost first: body limit, auth, metrics (outermost)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(AuthMiddleware, grants=grants(settings.tokens(), settings.token_scopes))
    install_failover(app, controller.ctx.leadership)  # inside the metrics: standby answers are counted
    app.add_middleware(MetricsMiddleware, telemetry=controller.ctx.telemetry)
    app.add_middleware(JobIdSlashMiddleware)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, cls in REQUEST_DOCUMENTS.items():  # the request documents the routes read themselves
            doc = edge.schema(cls)
            # their sub-documents replace FastAPI's renderings of the same name (e.g. Budget, also in an answer):
            # its OpenAPI model holds bounds as floats, so 2^63 - 1 became 9.223372036854776e+18 (2^63) there
            comps.update(doc.pop("$defs", {}))
            comps[name] = doc
        # every 422 of this API has the {"detail": [{"field", "reason"}]} shape, not FastAPI's default
        comps["HTTPValidationError"] = {"$ref": "#/components/schemas/Error"}
        comps.pop("ValidationError", None)
        for path, ops_ in schema.get("paths", {}).items():
            if path not in OPEN_PATHS and path != "/metrics" and not path.startswith(OPEN_PREFIXES):
                for op in ops_.values():
                    if isinstance(op, dict):
                        op.setdefault("responses", {}).update(REPLICA_RESPONSES)
        if settings.auth_enabled():  # /docs gets an Authorize button; every operation but the open ones needs it
            schemes = schema["components"].setdefault("securitySchemes", {})
            schemes["bearer"] = {"type": "http", "scheme": "bearer",
                                 "description": "one of REBALANCER_API_TOKENS"}
            schema["security"] = [{"bearer": []}]
            for path, ops_ in schema.get("paths", {}).items():
                for op in ops_.values():
                    if isinstance(op, dict):
                        if path in OPEN_PATHS:
                            op["security"] = []
                        else:
                            op.pop("security", None)  # the global requirement
                            op.setdefault("responses", {}).update(AUTH_RESPONSES)
            schemes.pop("HTTPBearer", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
