"""Planning without a job: plans, offline evaluation, what-if scaling, Gedik partitioning, the algorithm list.

Plan, evaluation, what-if and partitioning bodies go to a solver worker as raw bytes, whatever their size: it
validates, builds the problem, solves and serialises (:mod:`controller.planning`); the event loop only moves
bytes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from api.deps import get_controller
from api.io import answer, read_body, request_body, respond
from controller import planning
from controller.service import Controller
from rebalancer_client import contract as c

router = APIRouter(prefix="/v1", tags=["planning"])

ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"model": c.Error, "description": "invalid input: field path and reason"},
    413: {"model": c.Error, "description": "request too large"},
    415: {"model": c.Error, "description": "the body is not application/json"}}
SOLVE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 429: {"model": c.Error, "description": "too many solves in flight"},
    503: {"model": c.Error, "description": "the solve's worker was stopped at its hard deadline or died; retry"}}


async def in_worker(ctl: Controller, task: Any, raw: bytes) -> Any:
    """``task(raw, limits)`` in a solver worker, holding one ad-hoc solve slot; its hard deadline allows the
    maximum time limit (for a solve, or as a base for a parse) and ``offload_seconds_per_mb`` per MB of body."""
    s = ctl.settings
    budget = s.max_time_limit_s + s.offload_seconds_per_mb * len(raw) / 1e6
    return await ctl.ctx.pool.submit(planning.answer_task, task, raw, ctl.planning.limits, time_limit=budget)


@router.post("/plans", response_model=c.Plan, responses=SOLVE_ERRORS, openapi_extra=request_body(c.PlanRequest))
async def create_plan(request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Solve a problem document with a planner (default: the server's default planner) and return the plan
    document (assignment, moves, before/after metrics, solver status and bound). ``time_limit_s`` defaults to
    ``REBALANCER_DEFAULT_TIME_LIMIT_S`` and is capped by ``REBALANCER_MAX_TIME_LIMIT_S``."""
    t0 = time.perf_counter()
    status, body, name, solver_status = await in_worker(ctl, planning.plan_task, await read_body(request))
    if name is not None:
        ctl.planning.observe(name, solver_status, time.perf_counter() - t0)
    return answer(status, body)


@router.post("/evaluate", response_model=c.Evaluation, responses=SOLVE_ERRORS,
             openapi_extra=request_body(c.EvaluateRequest))
async def evaluate(request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Before/after metrics of a plan for a problem (offline evaluation); the plan must belong to the problem."""
    status, body, _, _ = await in_worker(ctl, planning.evaluate_task, await read_body(request))
    return answer(status, body)


@router.post("/what-if/scaling", response_model=c.WhatIfReport, responses=SOLVE_ERRORS,
             openapi_extra=request_body(c.WhatIfRequest))
async def what_if_scaling(request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """For each candidate cluster (a size, or ``{"add": [...], "remove": [...]}``): the load distance after a full
    rebalance, the migrations and bytes it needs, the rounds under the problem's per-round budget, and whether it
    meets the goal: load distance ≤ ``target_load_distance`` (default: the current one), no load left on removing
    nodes, and no node above ``max_utilisation`` (default: the hottest node's utilisation today).
    ``recommendation`` is the index of the smallest cluster meeting the goal (Cruise Control's rightsizing, Flink's
    autoscaler report), or null. Each candidate holds one solve slot while it is solved."""
    w = await in_worker(ctl, planning.what_if_task, await read_body(request))
    if not isinstance(w, planning.WhatIf):
        return answer(w[0], w[1])
    pool = ctl.ctx.pool
    with pool.admit(len(w.problems)) as ticket:  # the candidates' problems pass as bytes, solved in parallel
        plans = await asyncio.gather(*(pool.submit(planning.solve_summary_task, w.algorithm, problem, w.time_limit,
                                                   w.params, time_limit=w.time_limit, ticket=ticket)
                                       for problem in w.problems))
    return respond(w.report(list(plans)))


@router.post("/partitioning", response_model=c.PartitionFunction, responses=SOLVE_ERRORS,
             openapi_extra=request_body(c.PartitioningSpec))
async def partitioning(request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Build a Gedik partitioning-function document (scan / redist / readj, or the consistent or uniform hash
    alone) for a spec; a previous function document, when given, limits the migration from it. Caps (413 beyond
    them): ``channels`` ≤ ``REBALANCER_MAX_PARTITION_CHANNELS`` (default 1024), ``channels × replicas`` ≤
    ``REBALANCER_MAX_PARTITION_RING`` (consistent-hash points, default 2^20), keys with a frequency ≤
    ``REBALANCER_MAX_PARTITION_KEYS`` (default 100,000) and ``channels × keys`` ≤ ``REBALANCER_MAX_PARTITION_WORK``
    (default 2^24); the same for the ``previous`` function."""
    t0 = time.perf_counter()
    status, body, _, _ = await in_worker(ctl, planning.partitioning_task, await read_body(request))
    ctl.ctx.telemetry.solve_seconds.observe(time.perf_counter() - t0, "gedik")
    return answer(status, body)


@router.get("/algorithms", response_model=list[c.Algorithm])
async def algorithms(ctl: Controller = Depends(get_controller)) -> Response:
    """The planners this server can run, with their parameters."""
    return respond(ctl.planning.algorithms(), cls=list[c.Algorithm])
