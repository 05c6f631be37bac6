"""Epoch history stored as what changed: deltas with periodic snapshots, and retention.

Every epoch is a row of the ``epochs`` table. A *snapshot* row holds the whole assignment (a JSON list of node ids
in key group order) and the node list; a *delta* row holds only the moves relative to the epoch before
(``{"moves": [[key group index, node id], ...]}``) and its node list only when the nodes changed (JSON ``null``
otherwise) — so a 20-byte node change or a round of three moves costs bytes, not the 3 MB of a 200,000 key group
assignment. The registration (epoch 0) and every ``history_snapshot_every``-th epoch are snapshots; the
``jobs`` row's assignment is written at snapshots only. At startup the current assignment is the latest snapshot
with the deltas after it applied.

Retention: with ``history_retention_epochs`` = R > 0, each snapshot deletes the epochs (and finished proposals)
older than the latest snapshot at or before ``epoch - R``; so at least the last R epochs are kept (at most
R + 2 × ``history_snapshot_every`` - 1), and the kept history always starts at a snapshot. 0 keeps everything.
A database written before deltas (every row a snapshot) is read as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from sqlalchemy import delete, func, select
from sqlalchemy.engine import Connection, Engine

from controller.model import Job, Node
from controller.repository import Op, dumps, epochs, nodes_json, proposals
from controller.settings import Settings
from rebalancer_client import contract as c
from rebalancer_client.wire import dump


def snapshot_every(s: Settings) -> int:
    return max(1, s.history_snapshot_every)


def retention(s: Settings) -> int:
    return max(0, s.history_retention_epochs)


def is_snapshot(assignment_json: str) -> bool:
    return assignment_json.lstrip().startswith("[")


def epoch_row(job: Job, epoch: int, kind: str, proposal_id: str | None, nodes: list[Node], assignment: np.ndarray,
              plan: c.Plan | None, now: float, every: int, decision: c.Decision | None = None) -> dict[str, Any]:
    """The history row of ``epoch`` (``job`` still holds the epoch before): a snapshot every ``every`` epochs (and
    at the registration), a delta otherwise; a plan's moves, metrics and solver, and the policy's verdict."""
    history_plan = None
    if plan is not None:
        history_plan = dumps({"algorithm": plan.algorithm, "moves": dump(plan.moves), "metrics": dump(plan.metrics),
                              "solver": dump(plan.solver), "decision": dump(decision)})
    ids = [nd.id for nd in nodes]
    if epoch == 0 or epoch % every == 0:
        return {"job_id": job.job_id, "epoch": epoch, "kind": kind, "proposal_id": proposal_id,
                "nodes": nodes_json(nodes), "assignment": dumps([ids[i] for i in assignment.tolist()]),
                "plan": history_plan, "created_at": now}
    old_ids = job.node_ids
    new_names = np.array(ids, dtype=object)[assignment]
    old_names = np.array(old_ids, dtype=object)[job.assignment]
    moved = np.flatnonzero(new_names != old_names)
    return {"job_id": job.job_id, "epoch": epoch, "kind": kind, "proposal_id": proposal_id,
            "nodes": "null" if nodes == job.nodes else nodes_json(nodes),
            "assignment": dumps({"moves": [[int(k), str(new_names[k])] for k in moved]}),
            "plan": history_plan, "created_at": now}


def compact(job_id: str, epoch: int, keep: int) -> Op:
    """Delete the history before the latest snapshot at or before ``epoch - keep`` (and the finished proposals
    computed before it); nothing when ``keep`` is 0."""

    def op(conn: Connection) -> int:
        if keep <= 0 or epoch - keep <= 0:
            return 0
        snaps = select(func.max(epochs.c.epoch)).where(
            epochs.c.job_id == job_id, epochs.c.epoch <= epoch - keep, epochs.c.assignment.like("[%"))
        cut = conn.execute(snaps).scalar()
        if not cut:
            return 0
        conn.execute(delete(proposals).where(proposals.c.job_id == job_id, proposals.c.base_epoch < cut,
                                             proposals.c.status != "pending"))
        return int(conn.execute(delete(epochs).where(epochs.c.job_id == job_id, epochs.c.epoch < cut)).rowcount)

    return op


def job_values(erow: Mapping[str, Any], now: float) -> dict[str, Any]:
    """What the ``jobs`` row gets with a new epoch: the assignment at snapshots, the nodes when they changed."""
    values: dict[str, Any] = {"updated_at": now}
    if is_snapshot(erow["assignment"]):
        values["assignment"] = erow["assignment"]
    if erow["nodes"] != "null":
        values["nodes"] = erow["nodes"]
    return values


def read(engine: Engine, job_id: str, limit: int | None = None) -> list[dict[str, Any]]:
    """History rows, oldest first, each with its node list (carried forward from the last row that changed it)."""
    q = select(epochs).where(epochs.c.job_id == job_id).order_by(epochs.c.epoch.desc())
    if limit:
        q = q.limit(limit)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
        rows.reverse()
        nodes = None
        if rows and rows[0]["nodes"] == "null":
            nodes = conn.execute(select(epochs.c.nodes).where(
                epochs.c.job_id == job_id, epochs.c.epoch < rows[0]["epoch"], epochs.c.nodes != "null")
                .order_by(epochs.c.epoch.desc()).limit(1)).scalar()
    for r in rows:
        if r["nodes"] == "null":
            r["nodes"] = nodes
        nodes = r["nodes"]
    return rows
