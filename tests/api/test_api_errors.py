"""Server-side failures: a 500 with a request id, and the traceback logged under that id."""

from __future__ import annotations

import asyncio
import logging

import httpx
from fastapi import FastAPI

from api import errors
from solvers.errors import PlannerError, ServerError


def _app() -> FastAPI:
    app = FastAPI()
    errors.install(app)

    @app.get("/planner-bug")
    async def planner_bug() -> None:
        raise PlannerError("flux: the plan exceeds the migration budget")

    @app.get("/unexpected")
    async def unexpected() -> None:
        raise KeyError("job")

    return app


def _get(path: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            return await c.get(path)

    return asyncio.run(go())


def test_a_planner_bug_is_a_500_with_a_request_id_and_a_logged_traceback(caplog):
    assert issubclass(PlannerError, ServerError) and issubclass(ServerError, RuntimeError)
    with caplog.at_level(logging.ERROR, logger="rebalancer.api"):
        r = _get("/planner-bug")
    assert r.status_code == 500
    body = r.json()
    assert body["detail"] == "planner failed: flux: the plan exceeds the migration budget"
    rid = body["request_id"]
    assert len(rid) == 16 and r.headers["x-request-id"] == rid
    [record] = [rec for rec in caplog.records if rid in rec.getMessage()]
    assert record.exc_info is not None and record.exc_info[0] is PlannerError
    assert "GET /planner-bug" in record.getMessage()


def test_any_other_failure_is_a_json_500_with_a_request_id(caplog):
    with caplog.at_level(logging.ERROR, logger="rebalancer.api"):
        r = _get("/unexpected")
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json()["detail"] == "internal server error"
    rid = r.json()["request_id"]
    assert any(rid in rec.getMessage() and rec.exc_info for rec in caplog.records)
