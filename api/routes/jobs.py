"""Stateful jobs: registration, statistics, the policy's verdicts, proposals, executes, scaling, history."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response

from api.deps import get_controller
from api.io import answer, read_body, request_body, respond
from controller.edge import StatsColumns, in_worker, parse, unwrap
from controller.service import Controller
from rebalancer_client import contract as c

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[str, Path(min_length=1, max_length=c.MAX_ID_LENGTH, pattern=c.JOB_ID_PATTERN,
                            description="job id (letters, digits, . _ : -)")]
ProposalId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9]+$")]

Responses = dict[int | str, dict[str, Any]]
E404: Responses = {404: {"model": c.Error, "description": "unknown job or proposal"}}
E409: Responses = {409: {"model": c.Error, "description": "epoch conflict, or a plan not worth executing"}}
E413: Responses = {413: {"model": c.Error, "description": "request too large"}}
E415: Responses = {415: {"model": c.Error, "description": "the body is not application/json"}}
E422: Responses = {422: {"model": c.Error, "description": "invalid input: field path and reason"}}
E429: Responses = {429: {"model": c.Error, "description": "too many solves in flight"}}


@router.get("", response_model=list[c.JobSummary])
async def list_jobs(ctl: Controller = Depends(get_controller)) -> Response:
    """Registered jobs with their epochs."""
    return respond(ctl.jobs.summaries(), cls=list[c.JobSummary])


@router.put("/{job_id}", response_model=c.JobState, status_code=201, openapi_extra=request_body(c.JobSpec),
            responses={200: {"model": c.JobState, "description": "the job existed with this topology: its "
                                                                 "configuration was updated"},
                       429: {"model": c.Error, "description": "the registered jobs hold the most key groups, window "
                                                              "cells or jobs this server keeps; delete one first"},
                       **E409, **E413, **E415, **E422})
async def put_job(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Register a job (201) with ``epoch`` 0 and its placement: the given placement of ``key_groups``, or
    ``operators`` whose key groups ``<op>/<k>`` are spread in contiguous ranges over the active nodes, as Flink
    does. PUT is idempotent: the same topology again answers 200 with the job as it is now (its epoch is kept;
    algorithm, params, budget, window, policy and ``auto`` are updated). Another topology is a 409."""
    created, state = await ctl.jobs.put_body(job_id, await read_body(request))
    return answer(201 if created else 200, state)


@router.get("/{job_id}", response_model=c.JobState, responses=E404)
async def get_job(job_id: JobId, ctl: Controller = Depends(get_controller)) -> Response:
    """Nodes and key groups in order, the placement, ``epoch``, configuration, window coverage, the metrics of the
    current placement under the window and the policy's latest verdict."""
    return respond(await ctl.jobs.get(job_id))


@router.delete("/{job_id}", status_code=204, responses=E404)
async def delete_job(job_id: JobId, ctl: Controller = Depends(get_controller)) -> Response:
    """Remove a job, its history, statistics and proposals."""
    await ctl.jobs.delete(job_id)
    return Response(status_code=204)


@router.post("/{job_id}/stats", response_model=c.StatsAck, status_code=202, openapi_extra=request_body(c.Stats),
             responses={**E404, **E409, **E413, **E415, **E422})
async def post_stats(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Statistics of one micro-batch (202): by key group id, or as arrays in the job's key-group order.

    The same ``batch_id`` posted twice is counted once (``duplicate: true``); the window keeps the last
    ``window_batches`` batches. ``epoch`` is the epoch the driver ran the batch with: older epochs are accepted
    (loads per key group do not depend on the placement), a future epoch is a 409.

    Once the window is full the policy judges it at every batch (``decision``). With ``auto`` a round that may pay
    is solved in the background; when its plan is worth it the controller executes it, and the next answer
    carries the new placement as ``apply`` (apply it at the next batch boundary and post the following batches
    with its epoch: one round trip per batch). Without ``auto``, ``decision.reason`` ``significant`` says a
    proposal may pay."""
    raw = await read_body(request)
    stats = parse(c.Stats, raw) if len(raw) < ctl.settings.offload_min_bytes else await read_big_stats(ctl, job_id, raw)
    return respond(await ctl.rounds.post_stats(job_id, stats), 202)


async def read_big_stats(ctl: Controller, job_id: str, raw: bytes) -> c.Stats:
    """A statistics body of ``offload_min_bytes`` or more read in a solver worker, as columns, and made a document
    again in a thread (a 12 MB body took the event loop 1.8 s to parse)."""
    budget = ctl.settings.offload_seconds_per_mb * len(raw) / 1e6
    columns: StatsColumns = unwrap(await ctl.ctx.pool.submit(in_worker, StatsColumns.read, raw, raw=True,
                                                             time_limit=budget, owner=job_id))
    return await asyncio.to_thread(columns.stats, ctl.ctx.job(job_id).kg_ids)


@router.post("/{job_id}/proposals", response_model=c.Proposal, status_code=201,
             openapi_extra=request_body(c.ProposalRequest, required=False),
             responses={202: {"model": c.Proposal, "description": "still solving: poll the Location"},
                        **E404, **E409, **E415, **E422, **E429})
async def create_proposal(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """A dry-run plan computed from the current window (nothing changes), with the policy's verdict on it: 201
    with ``id``, ``base_epoch``, the ``plan`` and the ``decision``. A solve that outlasts the wait (``wait_s``,
    capped by ``REBALANCER_REQUEST_WAIT_S``) answers 202 with ``status: pending``; poll
    ``GET /v1/jobs/{job_id}/proposals/{id}``. 409 when the window is still empty."""
    req = parse(c.ProposalRequest, await read_body(request, default=b"{}"))
    done, prop = await ctl.proposals.propose(job_id, req)
    if done:
        return respond(prop, 201)
    return respond(prop, 202, headers={"Location": f"/v1/jobs/{job_id}/proposals/{prop.id}"})


@router.get("/{job_id}/proposals/{proposal_id}", response_model=c.Proposal, responses=E404)
async def get_proposal(job_id: JobId, proposal_id: ProposalId, ctl: Controller = Depends(get_controller)) -> Response:
    """A proposal: ``status`` pending | ready | failed | executed, and its plan and verdict once ready."""
    return respond(await ctl.proposals.get(job_id, proposal_id))


@router.post("/{job_id}/proposals/{proposal_id}/execute", response_model=c.Execution,
             openapi_extra=request_body(c.ExecuteRequest, required=False), responses={**E404, **E409, **E422})
async def execute_proposal(job_id: JobId, proposal_id: ProposalId, request: Request,
                           ctl: Controller = Depends(get_controller)) -> Response:
    """Apply a ready proposal exactly as computed: 200 with the new ``epoch`` (``base_epoch`` + 1), the placement
    and the moves. 409 when the job is no longer at the proposal's ``base_epoch`` (another execute won, nodes
    changed, or this proposal was executed already), the proposal is pending or failed, or the policy judged its
    plan not worth it (``{"force": true}`` overrides the verdict)."""
    req = parse(c.ExecuteRequest, await read_body(request, default=b"{}"))
    return respond(await ctl.proposals.execute(job_id, proposal_id, req.force))


@router.post("/{job_id}/nodes", response_model=c.JobState, openapi_extra=request_body(c.NodesRequest),
             responses={**E404, **E409, **E413, **E415, **E422})
async def change_nodes(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Scale out (``add``), mark nodes for scale-in (``remove``: they drain over the next rounds, within the
    budget), and delete empty removing nodes (``delete``; 409 while they hold key groups). A change is a new
    epoch."""
    req = parse(c.NodesRequest, await read_body(request))
    return respond(await ctl.jobs.change_nodes(job_id, req))


@router.post("/{job_id}/scale", response_model=c.Scaled, openapi_extra=request_body(c.ScaleRequest),
             responses={**E404, **E409, **E413, **E415, **E422, **E429})
async def scale(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """Change the job's nodes to ``nodes`` and place its key groups on them by load over the window, as one new
    epoch: the key groups of the nodes that go always move; ``budget`` bounds the moves in all (null: a full
    rebalance). For a job whose nodes are fixed for a run, such as a Spark query's partitions, restarted with
    another count. 409 when the job has no statistics yet or moved to another epoch meanwhile."""
    req = parse(c.ScaleRequest, await read_body(request))
    return respond(await ctl.scaling.scale(job_id, req))


@router.post("/{job_id}/what-if", response_model=c.WhatIfReport, openapi_extra=request_body(c.WhatIfQuestion),
             responses={**E404, **E409, **E413, **E415, **E422, **E429})
async def what_if(job_id: JobId, request: Request, ctl: Controller = Depends(get_controller)) -> Response:
    """``POST /v1/what-if/scaling`` on the job's own window: each candidate cluster fully rebalanced, and the
    smallest one meeting the goal. Nothing changes (``/scale`` applies one)."""
    req = parse(c.WhatIfQuestion, await read_body(request))
    return respond(await ctl.scaling.what_if(job_id, req))


@router.get("/{job_id}/history", response_model=c.History, responses=E404)
async def history(job_id: JobId, limit: int | None = Query(None, ge=1, le=10000),
                  ctl: Controller = Depends(get_controller)) -> Response:
    """Epochs, oldest first: registration, executes, automatic rounds and node changes, with plans, metrics and
    the policy's verdicts."""
    return respond(await ctl.jobs.history(job_id, limit))
