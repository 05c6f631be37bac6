"""Persistence behind one small module (SQLAlchemy 2 Core): jobs, versioned assignments (epochs), statistics
windows, proposals — the tables, their row and JSON formats, and the operations the writer commits.

Durability: every write the API acknowledges has been committed first (:mod:`controller.writer`). SQLite runs in
WAL mode (``synchronous`` NORMAL by default: a committed transaction survives a kill -9 of the server; FULL also
survives power loss); PostgreSQL is used by URL through psycopg 3.

The epoch compare-and-set of an execute is one ``UPDATE jobs SET epoch = :new WHERE job_id = :id AND epoch =
:base`` in the same transaction as the new assignment and the history row: of two executes from one epoch exactly
one updates a row, whatever the number of processes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection, Engine

from controller.database import create_schema as create_schema  # re-exported: the repository is the storage API
from controller.database import database_kind as database_kind
from controller.database import epochs as epochs
from controller.database import jobs as jobs
from controller.database import make_engine as make_engine
from controller.database import metadata as metadata
from controller.database import proposals as proposals
from controller.database import sqlite_path as sqlite_path
from controller.database import stats as stats
from controller.model import Job, JobConfig, Node, ProposalRecord
from controller.windows import Batch, Window
from rebalancer_client import contract as c
from rebalancer_client.wire import dump, read
from solvers.model import int_if_whole

Op = Callable[[Connection], Any]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def loads(text_: str | None) -> Any:
    return None if text_ is None else json.loads(text_)


# ---------------------------------------------------------------------- row formats
def batch_row(job_id: str, b: Batch, now: float) -> dict[str, Any]:
    comm = None
    if b.src is not None and b.dst is not None and b.rate is not None and b.src.size:
        comm = (b.src.astype(np.int32).tobytes() + b.dst.astype(np.int32).tobytes()
                + b.rate.astype(np.float64).tobytes())
    return {"job_id": job_id, "batch_id": b.batch_id, "epoch": b.epoch,
            # b"" = key groups 0..n-1 in order (what a driver sending every key group posts)
            "kg_index": b"" if b.whole else b.idx.astype(np.int32).tobytes(),
            "load": b.load.astype(np.float64).tobytes(),
            "state_bytes": None if b.state is None else b.state.astype(np.float64).tobytes(),
            "comm": comm, "received_at": now}


def batch_from_row(row: Mapping[str, Any]) -> Batch:
    load = np.frombuffer(row["load"], dtype=np.float64).copy()
    idx = (np.frombuffer(row["kg_index"], dtype=np.int32).copy() if row["kg_index"]
           else np.arange(load.size, dtype=np.int32))
    state = None if row["state_bytes"] is None else np.frombuffer(row["state_bytes"], dtype=np.float64).copy()
    src = dst = rate = None
    if row["comm"]:
        raw = row["comm"]
        e = len(raw) // 16
        src = np.frombuffer(raw[: 4 * e], dtype=np.int32).copy()
        dst = np.frombuffer(raw[4 * e: 8 * e], dtype=np.int32).copy()
        rate = np.frombuffer(raw[8 * e:], dtype=np.float64).copy()
    return Batch(int(row["batch_id"]), int(row["epoch"]), idx, load, state, src, dst, rate)


def nodes_json(nodes: list[Node]) -> str:
    return dumps([dump(nd.doc()) for nd in nodes])


def assignment_json(job: Job, assignment: np.ndarray | None = None) -> str:
    ids = job.node_ids
    a = job.assignment if assignment is None else assignment
    return dumps([ids[i] for i in a.tolist()])


def job_row(job: Job) -> dict[str, Any]:
    return {"job_id": job.job_id, "generation": job.generation, "spec": dumps(job.config.as_dict()),
            "registration": dumps(job.registration),
            "kgs": dumps({"ids": job.kg_ids, "operators": job.operators,
                          "state_bytes": [int_if_whole(x) for x in job.reg_state.tolist()]}),
            "nodes": nodes_json(job.nodes), "assignment": assignment_json(job), "epoch": job.epoch,
            "last_round_batch": job.last_round_batch, "created_at": job.created_at, "updated_at": job.updated_at}


def job_from_row(row: Mapping[str, Any], batches: Sequence[Mapping[str, Any]],
                 assignment_ids: list[str] | None = None) -> Job:
    """A job from its row, the statistics rows of its window (in the order received) and its current assignment
    (rebuilt from the epoch history; the row's own is the one of the latest snapshot)."""
    kgs = loads(row["kgs"])
    nodes = [Node.of(read(c.JobNode, nd)) for nd in loads(row["nodes"])]
    config = JobConfig.from_dict(loads(row["spec"]))
    node_index = {nd.id: i for i, nd in enumerate(nodes)}
    ids = loads(row["assignment"]) if assignment_ids is None else assignment_ids
    assignment = np.array([node_index[n] for n in ids], dtype=np.int64)
    window = Window(size=config.window_batches, m=len(kgs["ids"]))
    for brow in batches:
        b = batch_from_row(brow)
        counted, _dup, evict = window.classify(b.batch_id)
        if counted:
            window.add(b, evict)
    return Job(job_id=row["job_id"], generation=row.get("generation") or "", config=config,
               registration=loads(row["registration"]), kg_ids=kgs["ids"], operators=kgs["operators"],
               reg_state=np.array(kgs["state_bytes"], dtype=float), nodes=nodes, assignment=assignment,
               epoch=int(row["epoch"]), window=window, created_at=row["created_at"], updated_at=row["updated_at"],
               last_round_batch=row["last_round_batch"])


def executed_plan(plan: c.Plan | None) -> c.Plan | None:
    """What an executed proposal keeps of its plan: all but the assignment, which is its epoch's (see
    :func:`assignment_at`) — so a proposal row, like an epoch row, grows with the moves, not with the job."""
    return None if plan is None else dataclasses.replace(plan, assignment={})


def _json(doc: Any) -> str | None:
    return None if doc is None else dumps(dump(doc))


def proposal_row(p: ProposalRecord) -> dict[str, Any]:
    plan = executed_plan(p.plan) if p.status == "executed" else p.plan
    return {"id": p.id, "job_id": p.job_id, "generation": p.generation, "base_epoch": p.base_epoch,
            "status": p.status, "algorithm": p.algorithm, "params": dumps(p.params), "time_limit_s": p.time_limit_s,
            "window": _json(p.window), "plan": _json(plan), "decision": _json(p.decision), "error": p.error,
            "executed_epoch": p.executed_epoch, "created_at": p.created_at}


def plan_from_json(text_: str | None) -> c.Plan | None:
    """A stored plan (an executed one has no assignment: rows of the first releases leave the key out)."""
    doc = loads(text_)
    return None if doc is None else read(c.Plan, {"assignment": {}, **doc})


def proposal_from_row(row: Mapping[str, Any]) -> ProposalRecord:
    window, decision = loads(row["window"]), loads(row.get("decision"))
    return ProposalRecord(id=row["id"], job_id=row["job_id"], generation=row.get("generation") or "",
                          base_epoch=int(row["base_epoch"]), status=row["status"], algorithm=row["algorithm"],
                          params=loads(row["params"]), time_limit_s=float(row["time_limit_s"]),
                          window=None if window is None else read(c.WindowState, window),
                          plan=plan_from_json(row["plan"]),
                          decision=None if decision is None else read(c.Decision, decision), error=row["error"],
                          executed_epoch=row["executed_epoch"], created_at=float(row["created_at"]))


# ---------------------------------------------------------------------- operations
def insert_job(row: dict[str, Any], epoch_row_: dict[str, Any]) -> Op:
    def op(conn: Connection) -> None:
        conn.execute(insert(jobs).values(**row))
        conn.execute(insert(epochs).values(**epoch_row_))
    return op


def update_job_config(job_id: str, config: JobConfig, now: float, drop_batches: list[int] | None = None) -> Op:
    """New configuration; ``drop_batches``: statistics a smaller window no longer holds (deleted in the same
    transaction, so the database holds the same window as memory)."""
    def op(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.job_id == job_id)
                     .values(spec=dumps(config.as_dict()), updated_at=now))
        if drop_batches:
            conn.execute(STATS_DELETE, [{"j_id": job_id, "b_id": b} for b in drop_batches])
    return op


def delete_job(job_id: str) -> Op:
    def op(conn: Connection) -> int:
        conn.execute(delete(stats).where(stats.c.job_id == job_id))
        conn.execute(delete(proposals).where(proposals.c.job_id == job_id))
        conn.execute(delete(epochs).where(epochs.c.job_id == job_id))
        return int(conn.execute(delete(jobs).where(jobs.c.job_id == job_id)).rowcount)
    return op


STATS_DELETE = delete(stats).where(stats.c.job_id == bindparam("j_id"), stats.c.batch_id == bindparam("b_id"))


def insert_proposal(p: ProposalRecord) -> Op:
    def op(conn: Connection) -> None:
        conn.execute(insert(proposals).values(**proposal_row(p)))
    return op


def finish_proposal(pid: str, status: str, plan: c.Plan | None, decision: c.Decision | None,
                    error: str | None) -> Op:
    values = {"status": status, "plan": _json(plan), "decision": _json(decision), "error": error}

    def op(conn: Connection) -> None:
        conn.execute(update(proposals).where(proposals.c.id == pid, proposals.c.status == "pending").values(**values))
    return op


def advance_epoch(job_id: str, base_epoch: int, new_values: dict[str, Any], epoch_row_: dict[str, Any],
                  proposal_id: str | None = None, proposal: ProposalRecord | None = None,
                  last_round_batch: int | None = None, then: Op | None = None,
                  plan: c.Plan | None = None) -> Callable[[Connection], bool]:
    """The atomic epoch compare-and-set: new assignment/nodes + history row + proposal marked executed, or nothing.

    Returns False (and changes nothing) when the job's epoch is no longer ``base_epoch``; ``then`` runs in the
    same transaction after a successful one (history compaction); ``plan``: the executed proposal's plan (stored
    without its assignment).
    """
    proposal_values = None if proposal is None else proposal_row(proposal)
    kept = _json(executed_plan(plan))
    executed = {} if kept is None else {"plan": kept}

    def op(conn: Connection) -> bool:
        new_epoch = base_epoch + 1
        values = dict(new_values, epoch=new_epoch)
        if last_round_batch is not None:
            values["last_round_batch"] = last_round_batch
        res = conn.execute(update(jobs).where(jobs.c.job_id == job_id, jobs.c.epoch == base_epoch).values(**values))
        if res.rowcount != 1:
            return False
        conn.execute(insert(epochs).values(**epoch_row_))
        if proposal_values is not None:
            conn.execute(insert(proposals).values(**proposal_values))
        elif proposal_id is not None:
            conn.execute(update(proposals).where(proposals.c.id == proposal_id)
                         .values(status="executed", executed_epoch=new_epoch, **executed))
        if then is not None:
            then(conn)
        return True

    return op


def set_last_round(job_id: str, batch_id: int) -> Op:
    def op(conn: Connection) -> None:
        conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(last_round_batch=batch_id))
    return op


# ---------------------------------------------------------------------- reads (any thread)
def load_all(engine: Engine) -> list[Job]:
    """Every job with the statistics of its window, replayed in the order received (startup). Rows a window does
    not hold (left by a version that did not delete them on a resize) are deleted, so disk and memory agree."""
    with engine.connect() as conn:
        job_rows = [dict(r._mapping) for r in conn.execute(select(jobs))]
        by_job: dict[str, list[dict[str, Any]]] = {}
        for r in conn.execute(select(stats).order_by(stats.c.job_id, stats.c.received_at, stats.c.batch_id)):
            by_job.setdefault(r.job_id, []).append(dict(r._mapping))
        current = {row["job_id"]: current_assignment(conn, row["job_id"], len(loads(row["kgs"])["ids"]))
                   for row in job_rows}
    out = [job_from_row(row, by_job.get(row["job_id"], []), current[row["job_id"]]) for row in job_rows]
    stale = [{"j_id": j.job_id, "b_id": r["batch_id"]} for j in out for r in by_job.get(j.job_id, [])
             if r["batch_id"] not in j.window.batches]
    if stale:
        with engine.begin() as conn:
            conn.execute(STATS_DELETE, stale)
    return out


def fail_pending_proposals(engine: Engine) -> int:
    """Solves in flight when the server stopped are lost: mark their proposals failed (startup)."""
    with engine.begin() as conn:
        return int(conn.execute(update(proposals).where(proposals.c.status == "pending")
                                .values(status="failed", error="interrupted: the server restarted during the solve")
                                ).rowcount)


def get_proposal(engine: Engine, job_id: str, pid: str) -> ProposalRecord | None:
    with engine.connect() as conn:
        r = conn.execute(select(proposals).where(proposals.c.id == pid, proposals.c.job_id == job_id)).first()
    return None if r is None else proposal_from_row(dict(r._mapping))


def replay(kg_count: int, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Node id of each key group after ``rows`` (a snapshot, then deltas, in epoch order)."""
    current: list[str] = []
    for r in rows:
        doc = loads(r["assignment"])
        if isinstance(doc, list):
            current = list(doc)
        else:
            for k, node in doc["moves"]:
                current[k] = node
    if len(current) != kg_count:
        raise ValueError(f"epoch history does not rebuild the assignment ({len(current)} of {kg_count} key groups)")
    return current


def current_assignment(conn: Connection, job_id: str, kg_count: int, epoch: int | None = None) -> list[str] | None:
    """The job's assignment (at ``epoch``, default the latest) from the latest snapshot before it and the deltas
    after that snapshot; None when the history does not hold it."""
    last = epochs.c.epoch <= epoch if epoch is not None else epochs.c.epoch.is_not(None)
    snap = conn.execute(select(func.max(epochs.c.epoch)).where(
        epochs.c.job_id == job_id, epochs.c.assignment.like("[%"), last)).scalar()
    if snap is None:
        return None
    rows = conn.execute(select(epochs.c.assignment).where(epochs.c.job_id == job_id, epochs.c.epoch >= snap, last)
                        .order_by(epochs.c.epoch)).mappings().all()
    return replay(kg_count, [dict(r) for r in rows])


def assignment_at(engine: Engine, job_id: str, epoch: int) -> dict[str, str] | None:
    """Key group id -> node id at ``epoch`` (an executed proposal's assignment), None when not in the history."""
    with engine.connect() as conn:
        kgs = conn.execute(select(jobs.c.kgs).where(jobs.c.job_id == job_id)).scalar()
        if kgs is None:
            return None
        ids = loads(kgs)["ids"]
        nodes = current_assignment(conn, job_id, len(ids), epoch)
    return None if nodes is None else dict(zip(ids, nodes, strict=True))
