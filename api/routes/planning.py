"""Stateless endpoints: plans, offline evaluation, what-if scaling, Gedik partitioning, the algorithm list.

The problem and plan documents in these bodies reach the controller as decoded JSON and are validated once, by
:mod:`solvers.documents` (the pydantic models only describe them in OpenAPI)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Request

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
from controller.errors import TooLarge
from controller.service import Controller
from controller.settings import Settings
from solvers.documents import MAX_INT64
from solvers.errors import InvalidInput

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


@router.post("/partitioning", dependencies=JSON_BODY, responses=SOLVE_ERRORS)
async def partitioning(request: Request, spec: dict[str, Any] = Body(..., description="the Gedik partitioning spec"),
                       ctl: Controller = Depends(get_controller)) -> Any:
    """Build a Gedik partitioning-function document (scan / redist / readj) with
    ``solvers.gedik.build_document``. Caps (413 beyond them): ``channels`` ≤ ``REBALANCER_MAX_PARTITION_CHANNELS``
    (default 1024), ``channels × replicas`` ≤ ``REBALANCER_MAX_PARTITION_RING`` (consistent-hash points, default
    2^20), keys with a frequency ≤ ``REBALANCER_MAX_PARTITION_KEYS`` (default 100,000) and ``channels × keys`` ≤
    ``REBALANCER_MAX_PARTITION_WORK`` (default 2^24); the same for the ``previous`` function. ``domain_size`` is an
    integer in [1, 2^63 − 1] (422)."""
    check_partitioning_caps(spec, request.app.state.settings)
    return await ctl.partitioning(spec)


#: the caps are the settings ``max_partition_*``. Measured (build_document, one process, the loaded 2-core box):
#: readj with 4096 channels × 1000 replicas took 24 s and 1 GB; scan with 1024 channels and 20,000 keys 4.2 s and
#: 0.28 GB; readj with 64 channels × 30,000 replicas 6.4 s and 0.5 GB.
DEFAULT_REPLICAS = 1000  # solvers.gedik.ring.DEFAULT_REPLICAS


def check_partitioning_caps(spec: Any, settings: Settings) -> None:
    """Issue 12.6: refuse partitioning specs whose size would stall a worker (TooLarge: 413) and domain sizes that
    are not 64-bit integers (InvalidInput: 422), before any work; the spec's own rules are checked by
    ``solvers.gedik``."""
    if not isinstance(spec, dict):
        return  # solvers.gedik answers with its own 422
    cap = {"max_partition_channels": settings.max_partition_channels, "max_partition_ring": settings.max_partition_ring,
           "max_partition_keys": settings.max_partition_keys, "max_partition_work": settings.max_partition_work}
    dom = spec.get("domain_size")
    if dom is not None and (isinstance(dom, bool) or not isinstance(dom, (int, float))
                            or not (1 <= dom <= MAX_INT64)):
        raise InvalidInput("domain_size", f"must be an integer in [1, 2^63 - 1], got {str(dom)[:40]}")
    prev = spec.get("previous")
    ring = prev.get("consistent_hash") if isinstance(prev, dict) else None
    functions = [("", spec.get("channels"), spec.get("replicas"), spec.get("frequencies"))]
    if isinstance(prev, dict):
        functions.append(("previous.", prev.get("channels"), ring.get("replicas") if isinstance(ring, dict) else None,
                          prev.get("explicit")))
    for where, channels, replicas, keys in functions:
        n = channels if isinstance(channels, int) and not isinstance(channels, bool) else 0
        r = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else DEFAULT_REPLICAS
        k = len(keys) if isinstance(keys, dict) else 0
        if n > cap["max_partition_channels"]:
            raise TooLarge(f"{where}channels: {n} > {cap['max_partition_channels']} "
                           "(REBALANCER_MAX_PARTITION_CHANNELS)")
        if n * r > cap["max_partition_ring"]:
            raise TooLarge(f"{where}channels × replicas: {n} × {r} = {n * r} consistent-hash points > "
                           f"{cap['max_partition_ring']} (REBALANCER_MAX_PARTITION_RING)")
        if k > cap["max_partition_keys"]:
            raise TooLarge(f"{where}{'frequencies' if not where else 'explicit'}: {k} keys > "
                           f"{cap['max_partition_keys']} (REBALANCER_MAX_PARTITION_KEYS)")
        if n * k > cap["max_partition_work"]:
            raise TooLarge(f"{where}channels × keys: {n} × {k} = {n * k} > {cap['max_partition_work']} "
                           "(REBALANCER_MAX_PARTITION_WORK)")


@router.get("/algorithms")
async def algorithms(ctl: Controller = Depends(get_controller)) -> list[dict[str, Any]]:
    """The planners this server can run, with their parameters."""
    return ctl.algorithms()
