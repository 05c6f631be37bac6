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

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Connection, Engine

from controller.jobs import Job, JobConfig, Node
from controller.windows import Batch, Window
from solvers.model import _int_if_whole

if TYPE_CHECKING:
    from controller.proposals import Proposal

metadata = MetaData()

jobs = Table(
    "jobs", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("spec", Text, nullable=False),          # JSON: JobConfig.as_dict()
    Column("registration", Text, nullable=False),  # JSON: the topology as registered (for idempotent PUT)
    Column("kgs", Text, nullable=False),           # JSON: {"ids": [...], "operators": [...], "state_bytes": [...]}
    Column("nodes", Text, nullable=False),         # JSON: [{"id", "capacity", "removing"}]
    Column("assignment", Text, nullable=False),    # JSON: [node id per key group, in kgs order]
    Column("epoch", BigInteger, nullable=False),
    Column("last_round_batch", BigInteger, nullable=True),  # batch id of the last auto round (cooldown)
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("generation", String(32), nullable=True),  # one registration of the job id (None: before issue 12)
)

epochs = Table(
    "epochs", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("epoch", BigInteger, primary_key=True),
    Column("kind", String(20), nullable=False),    # register | execute | auto | nodes
    Column("proposal_id", String(64), nullable=True),
    Column("nodes", Text, nullable=False),
    Column("assignment", Text, nullable=False),
    Column("plan", Text, nullable=True),           # JSON: moves, metrics, solver, algorithm
    Column("created_at", Float, nullable=False),
)

stats = Table(
    "stats_batches", metadata,
    Column("job_id", String(200), primary_key=True),
    Column("batch_id", BigInteger, primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("kg_index", LargeBinary, nullable=False),   # int32 array: key group indices
    Column("load", LargeBinary, nullable=False),       # float64 array
    Column("state_bytes", LargeBinary, nullable=True),  # float64 array (NaN = not reported)
    Column("comm", LargeBinary, nullable=True),        # int32 src, int32 dst, float64 rate (concatenated)
    Column("received_at", Float, nullable=False),
)

proposals = Table(
    "proposals", metadata,
    Column("id", String(64), primary_key=True),
    Column("job_id", String(200), nullable=False, index=True),
    Column("base_epoch", BigInteger, nullable=False),
    Column("status", String(20), nullable=False),  # pending | ready | failed | executed
    Column("algorithm", String(100), nullable=False),
    Column("params", Text, nullable=False),
    Column("time_limit_s", Float, nullable=False),
    Column("window", Text, nullable=True),
    Column("plan", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("executed_epoch", BigInteger, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("generation", String(32), nullable=True),  # the job's generation when it was proposed
)

#: columns added after the first release: ``create_schema`` adds them to an existing database.
_ADDED_COLUMNS = {"jobs": ("generation", "VARCHAR(32)"), "proposals": ("generation", "VARCHAR(32)")}

Op = Callable[[Connection], Any]


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def loads(text_: str | None) -> Any:
    return None if text_ is None else json.loads(text_)


def make_engine(url: str, sqlite_synchronous: str = "NORMAL") -> Engine:
    """An engine for ``url``; SQLite gets WAL, the chosen ``synchronous`` level and its directory created."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        sync = sqlite_synchronous.upper()
        if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            sync = "NORMAL"

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={sync}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
    else:
        engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    return engine


def create_schema(engine: Engine) -> None:
    """Create the tables, and add the columns a database of an earlier version lacks."""
    metadata.create_all(engine)
    with engine.begin() as conn:
        insp = inspect(conn)
        for table, (col, sql_type) in _ADDED_COLUMNS.items():
            if col not in {c["name"] for c in insp.get_columns(table)}:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {col} {sql_type}"))


# ---------------------------------------------------------------------- row formats
def batch_row(job_id: str, b: Batch, now: float) -> dict[str, Any]:
    comm = None
    if b.src is not None and b.dst is not None and b.rate is not None and b.src.size:
        comm = (b.src.astype(np.int32).tobytes() + b.dst.astype(np.int32).tobytes()
                + b.rate.astype(np.float64).tobytes())
    full = bool(b.idx.size) and b.idx[0] == 0 and b.idx[-1] == b.idx.size - 1 and bool((np.diff(b.idx) == 1).all())
    return {"job_id": job_id, "batch_id": b.batch_id, "epoch": b.epoch,
            # b"" = key groups 0..n-1 in order (what a driver sending every key group posts)
            "kg_index": b"" if full else b.idx.astype(np.int32).tobytes(),
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
    return dumps([nd.as_dict() for nd in nodes])


def assignment_json(job: Job, assignment: np.ndarray | None = None) -> str:
    ids = job.node_ids
    a = job.assignment if assignment is None else assignment
    return dumps([ids[i] for i in a.tolist()])


def job_row(job: Job) -> dict[str, Any]:
    return {"job_id": job.job_id, "generation": job.generation, "spec": dumps(job.config.as_dict()),
            "registration": dumps(job.registration),
            "kgs": dumps({"ids": job.kg_ids, "operators": job.operators,
                          "state_bytes": [_int_if_whole(x) for x in job.reg_state.tolist()]}),
            "nodes": nodes_json(job.nodes), "assignment": assignment_json(job), "epoch": job.epoch,
            "last_round_batch": job.last_round_batch, "created_at": job.created_at, "updated_at": job.updated_at}


def job_from_row(row: Mapping[str, Any], batches: Sequence[Mapping[str, Any]]) -> Job:
    kgs = loads(row["kgs"])
    nodes = [Node.parse(nd) for nd in loads(row["nodes"])]
    config = JobConfig.from_dict(loads(row["spec"]))
    node_index = {nd.id: i for i, nd in enumerate(nodes)}
    assignment = np.array([node_index[n] for n in loads(row["assignment"])], dtype=np.int64)
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


def epoch_row(job: Job, epoch: int, kind: str, proposal_id: str | None, nodes: list[Node], assignment: np.ndarray,
              plan: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
    history_plan = None
    if plan is not None and plan.get("metrics") is not None:
        history_plan = dumps({k: plan.get(k) for k in ("algorithm", "moves", "metrics", "solver")})
    ids = [nd.id for nd in nodes]
    return {"job_id": job.job_id, "epoch": epoch, "kind": kind, "proposal_id": proposal_id,
            "nodes": nodes_json(nodes), "assignment": dumps([ids[i] for i in assignment.tolist()]),
            "plan": history_plan, "created_at": now}


def proposal_row(p: Proposal) -> dict[str, Any]:
    return {"id": p.id, "job_id": p.job_id, "generation": p.generation, "base_epoch": p.base_epoch,
            "status": p.status, "algorithm": p.algorithm, "params": dumps(p.params), "time_limit_s": p.time_limit_s,
            "window": dumps(p.window), "plan": None if p.plan is None else dumps(p.plan), "error": p.error,
            "executed_epoch": p.executed_epoch, "created_at": p.created_at}


def proposal_from_row(row: Mapping[str, Any]) -> Proposal:
    from controller.proposals import Proposal

    return Proposal(id=row["id"], job_id=row["job_id"], generation=row.get("generation") or "",
                    base_epoch=int(row["base_epoch"]), status=row["status"], algorithm=row["algorithm"],
                    params=loads(row["params"]), time_limit_s=float(row["time_limit_s"]),
                    window=loads(row["window"]), plan=loads(row["plan"]), error=row["error"],
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


def insert_proposal(p: Proposal) -> Op:
    def op(conn: Connection) -> None:
        conn.execute(insert(proposals).values(**proposal_row(p)))
    return op


def finish_proposal(pid: str, status: str, plan: Mapping[str, Any] | None, error: str | None) -> Op:
    plan_json = None if plan is None else dumps(plan)

    def op(conn: Connection) -> None:
        conn.execute(update(proposals).where(proposals.c.id == pid, proposals.c.status == "pending")
                     .values(status=status, plan=plan_json, error=error))
    return op


def advance_epoch(job_id: str, base_epoch: int, new_values: dict[str, Any], epoch_row_: dict[str, Any],
                  proposal_id: str | None = None, proposal: Proposal | None = None,
                  last_round_batch: int | None = None) -> Callable[[Connection], bool]:
    """The atomic epoch compare-and-set: new assignment/nodes + history row + proposal marked executed, or nothing.

    Returns False (and changes nothing) when the job's epoch is no longer ``base_epoch``.
    """
    proposal_values = None if proposal is None else proposal_row(proposal)

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
                         .values(status="executed", executed_epoch=new_epoch))
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
    out = [job_from_row(row, by_job.get(row["job_id"], [])) for row in job_rows]
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


def get_proposal(engine: Engine, job_id: str, pid: str) -> Proposal | None:
    with engine.connect() as conn:
        r = conn.execute(select(proposals).where(proposals.c.id == pid, proposals.c.job_id == job_id)).first()
    return None if r is None else proposal_from_row(dict(r._mapping))


def get_history(engine: Engine, job_id: str, limit: int | None = None) -> list[dict[str, Any]]:
    q = select(epochs).where(epochs.c.job_id == job_id).order_by(epochs.c.epoch.desc())
    if limit:
        q = q.limit(limit)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
    rows.reverse()
    return rows


def database_kind(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else url.split(":", 1)[0]


def sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite") or "///" not in url:
        return None
    p = url.split("///", 1)[1]
    return None if p in ("", ":memory:") else os.path.abspath(p)
