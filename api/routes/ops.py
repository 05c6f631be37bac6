"""Operations: liveness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from api.deps import get_controller
from api.schemas import HealthDoc
from controller.service import Controller

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=HealthDoc)
async def healthz() -> dict:
    """Liveness (never needs a token)."""
    return {"status": "ok"}


@router.get("/metrics", response_class=PlainTextResponse)
async def prometheus(ctl: Controller = Depends(get_controller)) -> PlainTextResponse:
    """Prometheus text: requests, latencies, solve times, plans, epochs, statistics batches, jobs."""
    return PlainTextResponse(ctl.telemetry.render(), media_type="text/plain; version=0.0.4")
