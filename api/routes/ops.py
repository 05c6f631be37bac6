"""Operations: liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from sqlalchemy import text

from api.deps import get_controller
from controller.service import Controller
from controller.telemetry import CONTENT_TYPE
from rebalancer_client.contract import Health

router = APIRouter(tags=["operations"])

READY_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=Health, responses={503: {"model": Health,
                                                                "description": "the solver pool cannot recover"}})
async def healthz(ctl: Controller = Depends(get_controller)) -> JSONResponse:
    """Liveness (never needs a token): the event loop answers, and the solver pool is not broken beyond repair (it
    retries worker starts with back-off; after repeated failures with no worker ready it is broken, and only a
    restart helps: 503, so an orchestrator restarts the server)."""
    try:
        broken = ctl.ctx.pool.broken
    except RuntimeError:  # not started yet
        broken = None
    if broken:
        return JSONResponse({"status": "broken", "solver_pool": broken}, status_code=503)
    return JSONResponse({"status": "ok"})


def _ping(engine: Any) -> None:
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))


@router.get("/readyz", responses={503: {"description": "not ready: the database or the solver pool is not usable, "
                                                    "or this replica is a standby (``Rebalancer-Leader``: the "
                                                    "leader's URL)"}})
async def readyz(ctl: Controller = Depends(get_controller)) -> JSONResponse:
    """Readiness (never needs a token): this replica leads (``role``; on PostgreSQL a standby answers 503 with the
    leader's URL in ``leader`` and the ``Rebalancer-Leader`` header), the database answers ``SELECT 1`` within 2 s
    and the solver pool has a worker ready (workers start in the background at startup) and is not broken; 503 with
    the reason otherwise."""
    lead = ctl.ctx.leadership
    out: dict[str, Any] = lead.describe()
    ok = out["role"] == "leader"
    hint = lead.leader_hint()
    headers = {"Rebalancer-Leader": hint} if hint else None
    try:
        await asyncio.wait_for(asyncio.to_thread(_ping, ctl.ctx.engine), READY_TIMEOUT_S)
        out["database"] = "ok"
    except TimeoutError:
        ok, out["database"] = False, f"no answer within {READY_TIMEOUT_S:g} s"
    except Exception as exc:  # noqa: BLE001 - any driver error means "not ready", reported with its type
        ok, out["database"] = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    try:
        health = ctl.ctx.pool.health()
    except RuntimeError:  # not started yet
        health = None
    if health is None:
        ok, out["solver_pool"] = False, "not started"
    else:
        out["solver_pool"] = health
        if health["broken"] or health["closed"] or health["ready_workers"] < 1:
            ok = False
    out["status"] = "ready" if ok else "not ready"
    return JSONResponse(out, status_code=200 if ok else 503, headers=headers)


@router.get("/metrics", response_class=Response)
async def prometheus(ctl: Controller = Depends(get_controller)) -> Response:
    """Prometheus text format: requests, latencies, solve times, plans, epochs, statistics batches, jobs, per-job
    epoch / load distance / migrations, the process (CPU, memory, file descriptors)."""
    return Response(ctl.ctx.telemetry.render(), media_type=CONTENT_TYPE)
