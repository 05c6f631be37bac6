"""Stateful jobs: registration, statistics windows, proposals, executes, scaling, history."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from api.deps import get_controller
from api.errors import invalid, pydantic_errors, require_json
from api.schemas import (
    ErrorDoc,
    ExecuteResponse,
    HistoryResponse,
    JobSpec,
    JobState,
    NodesRequest,
    ProposalDoc,
    ProposalRequest,
    StatsResponse,
)
from api.stats_parser import StatsInvalid, parse_stats
from controller.service import Controller

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
JSON_BODY = [Depends(require_json)]

JobId = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$",
                            description="job id (letters, digits, . _ : -)")]
ProposalId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9]+$")]

Responses = dict[int | str, dict[str, Any]]
E404: Responses = {404: {"model": ErrorDoc, "description": "unknown job or proposal"}}
E409: Responses = {409: {"model": ErrorDoc, "description": "epoch conflict"}}
E413: Responses = {413: {"model": ErrorDoc, "description": "request too large"}}
E415: Responses = {415: {"model": ErrorDoc, "description": "the body is not application/json"}}
E422: Responses = {422: {"model": ErrorDoc, "description": "invalid input: field path and reason"}}
E429: Responses = {429: {"model": ErrorDoc, "description": "too many solves in flight"}}


@router.get("", response_model=list[dict[str, Any]])
async def list_jobs(ctl: Controller = Depends(get_controller)) -> Any:
    """Registered jobs with their epochs."""
    return [{"job_id": j.job_id, "epoch": j.epoch, "nodes": len(j.nodes), "key_groups": len(j.kg_ids)}
            for j in ctl.jobs.values()]


@router.put("/{job_id}", response_model=JobState, status_code=201, dependencies=JSON_BODY,
            responses={200: {"model": JobState, "description": "the job existed with this topology: its "
                                                               "configuration was updated"},
                       **E409, **E413, **E415, **E422})
async def put_job(job_id: JobId, body: JobSpec, response: Response, ctl: Controller = Depends(get_controller)) -> Any:
    """Register a job (201) with ``epoch`` 0 and its assignment: the given placement of ``key_groups``, or
    ``operators`` whose key groups ``<op>/<k>`` are spread in contiguous ranges over the active nodes, as Flink
    does. PUT is idempotent: the same topology again answers 200 with the job as it is now (its epoch is kept;
    algorithm, params, budget, window and auto settings are updated). Another topology is a 409."""
    created, state = await ctl.put_job(job_id, body.model_dump())
    if not created:
        response.status_code = 200
    return state


@router.get("/{job_id}", response_model=JobState, responses=E404)
async def get_job(job_id: JobId, ctl: Controller = Depends(get_controller)) -> Any:
    """Nodes, assignment, ``epoch``, window coverage and the metrics of the current assignment under the window."""
    return await ctl.get_job(job_id)


@router.delete("/{job_id}", status_code=204, responses=E404)
async def delete_job(job_id: JobId, ctl: Controller = Depends(get_controller)) -> Response:
    """Remove a job, its history, statistics and proposals."""
    await ctl.delete_job(job_id)
    return Response(status_code=204)


@router.post(
    "/{job_id}/stats", response_model=StatsResponse, status_code=202, dependencies=JSON_BODY,
    responses={**E404, **E409, **E413, **E415, **E422},
    openapi_extra={"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/StatsRequest"}}}}},
)
async def post_stats(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Any:
    """Statistics of one micro-batch (202 with the window state).

    ``key_groups``: load (and optionally state_bytes) per key group in this batch; ``communication``: rates between
    key groups. The same ``batch_id`` posted twice is counted once (``duplicate: true``); the window keeps the last
    ``window_batches`` batches. ``epoch`` is the epoch the driver ran the batch with: older epochs are accepted
    (loads per key group do not depend on the placement), a future epoch is a 409.

    With ``auto.enabled``: when the window is full, the driver is on the current epoch, the cooldown
    (``cooldown_batches`` since the last automatic round) has passed and the windowed load distance exceeds
    ``load_distance_threshold`` (null: whenever a plan improves it), the controller solves and **executes** the plan
    itself and returns it as ``apply``: ``{"proposal_id", "base_epoch", "epoch": <new epoch>, "assignment",
    "moves", "metrics", "solver"}`` — apply it at the next batch boundary and post that batch with the new epoch
    (one round trip per batch). Otherwise ``apply`` is null.
    """
    raw = await request.body()
    try:
        body = parse_stats(raw)
    except StatsInvalid as exc:
        return invalid(pydantic_errors(exc.errors))
    out = await ctl.post_stats(job_id, body)
    return JSONResponse(out, status_code=202)


@router.post("/{job_id}/proposals", response_model=ProposalDoc, status_code=201, dependencies=JSON_BODY,
             responses={202: {"model": ProposalDoc, "description": "still solving: poll the Location"},
                        **E404, **E409, **E415, **E422, **E429})
async def create_proposal(job_id: JobId, response: Response, body: ProposalRequest | None = None,
                          ctl: Controller = Depends(get_controller)) -> Any:
    """A dry-run plan computed from the current window (nothing changes): 201 with ``id``, ``base_epoch`` and the
    ``plan``. A solve that outlasts the wait (``wait_s``, capped by ``REBALANCER_REQUEST_WAIT_S``) answers 202 with
    ``status: pending``; poll ``GET /v1/jobs/{job_id}/proposals/{id}``. 409 when the window is still empty."""
    body = body or ProposalRequest.model_validate({})
    done, prop = await ctl.propose(job_id, body.algorithm, body.params, body.time_limit_s, body.wait_s)
    if not done:
        response.status_code = 202
        response.headers["Location"] = f"/v1/jobs/{job_id}/proposals/{prop['id']}"
    return prop


@router.get("/{job_id}/proposals/{proposal_id}", response_model=ProposalDoc, responses=E404)
async def get_proposal(job_id: JobId, proposal_id: ProposalId, ctl: Controller = Depends(get_controller)) -> Any:
    """A proposal: ``status`` pending | ready | failed | executed, and its plan once ready."""
    return await ctl.get_proposal(job_id, proposal_id)


@router.post("/{job_id}/proposals/{proposal_id}/execute", response_model=ExecuteResponse,
             responses={**E404, **E409})
async def execute_proposal(job_id: JobId, proposal_id: ProposalId, ctl: Controller = Depends(get_controller)) -> Any:
    """Apply a ready proposal exactly as computed: 200 with the new ``epoch`` (``base_epoch`` + 1), the assignment
    and the moves. 409 when the job is no longer at the proposal's ``base_epoch`` (another execute won, nodes
    changed, or this proposal was executed already), or the proposal is pending or failed."""
    return await ctl.execute(job_id, proposal_id)


@router.post("/{job_id}/nodes", response_model=JobState, dependencies=JSON_BODY,
             responses={**E404, **E409, **E413, **E415, **E422})
async def change_nodes(job_id: JobId, body: NodesRequest, ctl: Controller = Depends(get_controller)) -> Any:
    """Scale out (``add``), mark nodes for scale-in (``remove``: they drain over the next rounds, within the
    budget), and delete empty removing nodes (``delete``; 409 while they hold key groups). A change is a new
    epoch."""
    return await ctl.change_nodes(job_id, [n if isinstance(n, str) else n.model_dump() for n in body.add],
                                  body.remove, body.delete)


@router.get("/{job_id}/history", response_model=HistoryResponse, responses=E404)
async def history(job_id: JobId, limit: int | None = Query(None, ge=1, le=10000),
                  ctl: Controller = Depends(get_controller)) -> Any:
    """Epochs, oldest first: registration, executes, automatic rounds and node changes, with plans and metrics."""
    return await ctl.history(job_id, limit)
