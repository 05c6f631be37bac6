"""Stateless endpoints: plans, offline evaluation, what-if scaling, Gedik partitioning, the algorithm list.

The problem and plan documents in these bodies reach the controller as decoded JSON and are validated once, by
:mod:`solvers.documents` (the pydantic models only describe them in OpenAPI)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends

from api.deps import get_controller
from api.errors import require_json
from api.schemas import (
    ErrorDoc,
    EvaluateRequest,
    EvaluateResponse,
    PlanDoc,
    PlanRequest,
    ScalingRequest,
    ScalingResponse,
)
from controller.service import Controller

JSON_BODY = [Depends(require_json)]


def raw(document: object) -> Any:
    """A ``SkipValidation`` field as what it is at run time: decoded JSON, for :mod:`solvers.documents` to check."""
    return document


router = APIRouter(prefix="/v1", tags=["planning"])

ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorDoc, "description": "invalid input: field path and reason"},
    413: {"model": ErrorDoc, "description": "request too large"},
    415: {"model": ErrorDoc, "description": "the body is not application/json"}}
SOLVE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 429: {"model": ErrorDoc, "description": "too many solves in flight"}}


@router.post("/plans", response_model=PlanDoc, responses=SOLVE_ERRORS, dependencies=JSON_BODY)
async def create_plan(body: PlanRequest, ctl: Controller = Depends(get_controller)) -> Any:
    """Solve a problem document with a planner (default: the server's default planner) and return the plan
    document of DESIGN.md (assignment, moves, before/after metrics, solver status and bound). The time limit is
    capped by ``REBALANCER_MAX_TIME_LIMIT_S``."""
    return await ctl.plan(raw(body.problem), body.algorithm, body.params, body.time_limit_s)


@router.post("/evaluate", response_model=EvaluateResponse, responses=ERRORS, dependencies=JSON_BODY)
async def evaluate(body: EvaluateRequest, ctl: Controller = Depends(get_controller)) -> Any:
    """Before/after metrics of a plan for a problem (offline evaluation); the plan must belong to the problem."""
    return await ctl.evaluate(raw(body.problem), raw(body.plan))


@router.post("/what-if/scaling", response_model=ScalingResponse, responses=SOLVE_ERRORS, dependencies=JSON_BODY)
async def what_if_scaling(body: ScalingRequest, ctl: Controller = Depends(get_controller)) -> Any:
    """For each candidate cluster (a size, or ``{"add": [...], "remove": [...]}``): the load distance after a full
    rebalance, the migrations and bytes it needs, the rounds under the problem's per-round budget, and whether it
    meets the goal: load distance ≤ ``target_load_distance`` (default: the current one), no load left on removing
    nodes, and no node above ``max_utilisation`` (default: the hottest node's utilisation today).
    ``recommendation`` is the index of the smallest cluster meeting the goal (Cruise Control's rightsizing, Flink's
    autoscaler report), or null."""
    cands = [c if isinstance(c, int) else c.model_dump(exclude_none=True) for c in body.candidates]
    return await ctl.what_if(raw(body.problem), cands, body.target_load_distance,
                             body.algorithm, body.params, body.time_limit_s, body.max_utilisation)


@router.post("/partitioning", dependencies=JSON_BODY, responses={**SOLVE_ERRORS, 501: {"model": ErrorDoc,
                                                                "description": "Gedik partitioning not installed"}})
async def partitioning(spec: dict[str, Any] = Body(..., description="the Gedik partitioning spec"),
                       ctl: Controller = Depends(get_controller)) -> Any:
    """Build a Gedik partitioning-function document (scan / redist / readj) with
    ``solvers.gedik.build_document``; 501 when that module is not part of this build."""
    return await ctl.partitioning(spec)


@router.get("/algorithms")
async def algorithms(ctl: Controller = Depends(get_controller)) -> list[dict[str, Any]]:
    """The planners this server can run, with their parameters."""
    return ctl.algorithms()
