"""Planning without a job: plans, offline evaluation, what-if scaling, Gedik partitioning, the algorithm list.

Plan, evaluation and what-if bodies go to a solver worker as raw bytes, whatever their size: it validates, builds
the problem, solves and serialises (:mod:`controller.planning`); the event loop only moves bytes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Body, Depends, Request
from fastapi.responses import Response

from api.deps import get_controller
from api.io import answer, read_body, request_body, respond
from controller import planning
from controller.errors import TooLarge
from controller.service import Controller
from controller.settings import Settings
from rebalancer_client import contract as c
from solvers.errors import InvalidInput

router = APIRouter(prefix="/v1", tags=["planning"])

ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"model": c.Error, "description": "invalid input: field path and reason"},
    413: {"model": c.Error, "description": "request too large"},
    415: {"model": c.Error, "description": "the body is not application/json"}}
SOLVE_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 429: {"model": c.Error, "description": "too many solves in flight"},
    503: {"model": c.Error, "description": "the solve's worker was stopped at its hard deadline or died; retry"}}


async def in_worker(ctl: Controller, task: Any, raw: bytes, solve: bool) -> Any:
    """``task(raw, limits)`` in a solver worker, holding one ad-hoc solve slot; its hard deadline allows the
    maximum time limit (when it solves) and ``offload_seconds_per_mb`` per MB of body."""
    s = ctl.settings
    budget = (s.max_time_limit_s if solve else 0.0) + s.offload_seconds_per_mb * len(raw) / 1e6
    return await ctl.ctx.pool.submit(planning.answer_task, task, raw, ctl.planning.limits, time_limit=budget)


@router.post("/plans", response_model=c.Plan, responses=SOLVE_ERRORS, openapi_extra=request_body(c.PlanRequest))
async def create_plan(request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Solve a problem document with a planner (default: the server's default planner) and return the plan
    document (assignment, moves, before/after metrics, solver status and bound). ``time_limit_s`` defaults to
    ``REBALANCER_DEFAULT_TIME_LIMIT_S`` and is capped by ``REBALANCER_MAX_TIME_LIMIT_S``."""
    t0 = time.perf_counter()
    status, body, name, solver_status = await in_worker(ctl, planning.plan_task, await read_body(request), True)
    if name is not None:
        ctl.planning.observe(name, solver_status, time.perf_counter() - t0)
    return answer(status, body)


@router.post("/evaluate", response_model=c.Evaluation, responses=SOLVE_ERRORS,
             openapi_extra=request_body(c.EvaluateRequest))
async def evaluate(request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Before/after metrics of a plan for a problem (offline evaluation); the plan must belong to the problem."""
    status, body, _, _ = await in_worker(ctl, planning.evaluate_task, await read_body(request), False)
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
    w = await in_worker(ctl, planning.what_if_task, await read_body(request), False)
    if not isinstance(w, planning.WhatIf):
        return answer(w[0], w[1])
    with ctl.ctx.pool.admit(len(w.variants)) as ticket:
        solved = await asyncio.gather(*(ctl.planning.solve(w.algorithm, v.problem, w.time_limit, w.params,
                                                           ticket=ticket) for v in w.variants))
    return respond(planning.what_if_report(w, [s.plan for s in solved]))


@router.post("/partitioning", responses=SOLVE_ERRORS)
async def partitioning(request: Request, spec: dict[str, Any] = Body(..., description="the Gedik partitioning spec"),
                       ctl: Controller = Depends(get_controller)) -> Any:
    """Build a Gedik partitioning-function document (scan / redist / readj) with
    ``solvers.gedik.build_document``. Caps (413 beyond them): ``channels`` ≤ ``REBALANCER_MAX_PARTITION_CHANNELS``
    (default 1024), ``channels × replicas`` ≤ ``REBALANCER_MAX_PARTITION_RING`` (consistent-hash points, default
    2^20), keys with a frequency ≤ ``REBALANCER_MAX_PARTITION_KEYS`` (default 100,000) and ``channels × keys`` ≤
    ``REBALANCER_MAX_PARTITION_WORK`` (default 2^24); the same for the ``previous`` function. ``domain_size`` is an
    integer in [1, 2^63 − 1] (422)."""
    check_partitioning_caps(spec, request.app.state.settings)
    return await ctl.planning.partitioning(spec)


#: the caps are the settings ``max_partition_*``. Measured (build_document, one process, a loaded 2-core machine):
#: readj with 4096 channels × 1000 replicas took 24 s and 1 GB; scan with 1024 channels and 20,000 keys 4.2 s and
#: 0.28 GB; readj with 64 channels × 30,000 replicas 6.4 s and 0.5 GB.
DEFAULT_REPLICAS = 1000  # solvers.gedik.ring.DEFAULT_REPLICAS


def check_partitioning_caps(spec: Any, settings: Settings) -> None:
    """Refuse partitioning specs whose size would stall a worker (TooLarge: 413) and domain sizes that are not
    64-bit integers (InvalidInput: 422), before any work; the spec's own rules are checked by ``solvers.gedik``."""
    if not isinstance(spec, dict):
        return  # solvers.gedik answers with its own 422
    dom = spec.get("domain_size")
    if dom is not None and (isinstance(dom, bool) or not isinstance(dom, (int, float))
                            or not (1 <= dom <= c.MAX_INT64)):
        raise InvalidInput("domain_size", f"must be an integer in [1, 2^63 - 1], got {str(dom)[:40]}")
    prev = spec.get("previous")
    ring = prev.get("consistent_hash") if isinstance(prev, dict) else None
    functions = [("", spec.get("channels"), spec.get("replicas"), spec.get("frequencies"))]
    if isinstance(prev, dict):
        functions.append(("previous.", prev.get("channels"), ring.get("replicas") if isinstance(ring, dict) else None,
                          prev.get("explicit")))
    for where, channels, replicas, keys in functions:
        _check_function(settings, where, channels, replicas, keys)


def _check_function(s: Settings, where: str, channels: Any, replicas: Any, keys: Any) -> None:
    n = channels if isinstance(channels, int) and not isinstance(channels, bool) else 0
    r = replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else DEFAULT_REPLICAS
    k = len(keys) if isinstance(keys, dict) else 0
    if n > s.max_partition_channels:
        raise TooLarge(f"{where}channels: {n} > {s.max_partition_channels} (REBALANCER_MAX_PARTITION_CHANNELS)")
    if n * r > s.max_partition_ring:
        raise TooLarge(f"{where}channels × replicas: {n} × {r} = {n * r} consistent-hash points > "
                       f"{s.max_partition_ring} (REBALANCER_MAX_PARTITION_RING)")
    if k > s.max_partition_keys:
        raise TooLarge(f"{where}{'frequencies' if not where else 'explicit'}: {k} keys > "
                       f"{s.max_partition_keys} (REBALANCER_MAX_PARTITION_KEYS)")
    if n * k > s.max_partition_work:
        raise TooLarge(f"{where}channels × keys: {n} × {k} = {n * k} > {s.max_partition_work} "
                       "(REBALANCER_MAX_PARTITION_WORK)")


@router.get("/algorithms", response_model=list[c.Algorithm])
async def algorithms(ctl: Controller = Depends(get_controller)) -> Response:
    """The planners this server can run, with their parameters."""
    return respond(ctl.planning.algorithms(), cls=list[c.Algorithm])
