"""The FastAPI application factory: ``create_app(settings)`` wires the controller, middleware, routes and errors.

Run it with ``rebalancer serve`` (one process: the controller keeps each job's window in memory and serialises a
job's mutations with a lock; executes are also atomic in the database).
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from api import errors
from api.deps import documented_auth
from api.middleware import AuthMiddleware, BodyLimitMiddleware, MetricsMiddleware
from api.routes import jobs, ops, planning
from api.schemas import ErrorDoc, StatsRequest
from controller.service import Controller
from controller.settings import Settings

DESCRIPTION = """Rebalancing controller for stateful stream and micro-batch jobs.

Stateless: `POST /v1/plans`, `/v1/evaluate`, `/v1/what-if/scaling`, `/v1/partitioning`.
Stateful: `PUT /v1/jobs/{job_id}`, statistics per batch, proposals (dry runs), executes guarded by epochs (409 when
stale), scaling, history. Errors: 422 `{"detail": [{"field", "reason"}]}`, 404, 409, 413, 429, 501.
When `REBALANCER_API_TOKENS` is set every route but `/healthz` needs `Authorization: Bearer <token>`.
"""


def create_app(settings: Settings | None = None, warm: bool = True) -> FastAPI:
    settings = settings or Settings()
    controller = Controller(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        await controller.start(warm=warm)
        try:
            yield
        finally:
            await controller.close()

    app = FastAPI(title="Rebalancer", version="0.1.0", description=DESCRIPTION, lifespan=lifespan)
    app.state.controller = controller
    app.state.settings = settings
    errors.install(app)
    app.include_router(ops.router)
    secured = [Depends(documented_auth)] if settings.tokens() else []
    app.include_router(planning.router, dependencies=secured)
    app.include_router(jobs.router, dependencies=secured)
    # innermost first: body limit, auth, metrics (outermost)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(AuthMiddleware, tokens=settings.tokens())
    app.add_middleware(MetricsMiddleware, telemetry=controller.telemetry)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        from fastapi.openapi.utils import get_openapi

        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        extra = StatsRequest.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in extra.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        comps["StatsRequest"] = extra
        # every 422 of this API has the {"detail": [{"field", "reason"}]} shape, not FastAPI's default
        err = ErrorDoc.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in err.pop("$defs", {}).items():
            comps.setdefault(name, sub)
        comps["ErrorDoc"] = err
        comps["HTTPValidationError"] = {"$ref": "#/components/schemas/ErrorDoc"}
        comps.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
