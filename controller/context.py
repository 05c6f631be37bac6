"""What the use cases of the controller share: settings, database, writer, solver pool, telemetry, the jobs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from controller import repository as repo
from controller.errors import NotFound
from controller.leadership import Leadership, ReplicaLeadership, leadership_for
from controller.model import Job, ProposalRecord
from controller.settings import Settings
from controller.solving import SolverPool
from controller.telemetry import Telemetry
from controller.writer import InlineWriter, Writer, make_writer

PROPOSAL_CACHE = 2000


class ProposalCache:
    """The most recent proposals in memory (pending ones are never dropped); older ones are read back from the
    database."""

    def __init__(self, size: int = PROPOSAL_CACHE):
        self.size = size
        self.items: dict[str, ProposalRecord] = {}

    def get(self, pid: str) -> ProposalRecord | None:
        return self.items.get(pid)

    def put(self, prop: ProposalRecord) -> None:
        self.items[prop.id] = prop
        while len(self.items) > self.size:
            oldest = next(iter(self.items))
            if self.items[oldest].status == "pending":
                self.items[oldest] = self.items.pop(oldest)  # move to the end
                if all(p.status == "pending" for p in self.items.values()):
                    break
                continue
            self.items.pop(oldest)

    def drop_job(self, job_id: str) -> None:
        for pid in [p for p, d in self.items.items() if d.job_id == job_id]:
            self.items.pop(pid, None)


class Context:
    """One per server process. ``writer`` and ``pool`` exist between :meth:`open` and :meth:`close`."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.url = settings.sqlalchemy_url()
        self.engine = repo.make_engine(self.url, settings.sqlite_synchronous)
        #: who serves: the one server (SQLite), or the leader of the replicas on PostgreSQL
        self.leadership: Leadership = leadership_for(self.url, settings)
        if isinstance(self.leadership, ReplicaLeadership):
            self.leadership.attach(self.engine)
        self.telemetry = Telemetry()
        self.jobs: dict[str, Job] = {}
        self.proposals = ProposalCache()
        self._writer: Writer | InlineWriter | None = None
        self._pool: SolverPool | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.started_at = time.time()
        #: bytes of statistics held by every window (capped by ``max_total_window_bytes``)
        self.window_bytes = 0

    @property
    def writer(self) -> Writer | InlineWriter:
        if self._writer is None:
            raise RuntimeError("the controller is not started")
        return self._writer

    @property
    def pool(self) -> SolverPool:
        if self._pool is None:
            raise RuntimeError("the controller is not started")
        return self._pool

    @property
    def started(self) -> bool:
        return self._writer is not None

    def open(self) -> None:
        s = self.settings
        lead = self.leadership
        self._writer = make_writer(self.engine, self.url, s.sqlite_synchronous, s.commit_batch,
                                   lead if isinstance(lead, ReplicaLeadership) else None)
        self._pool = SolverPool.from_settings(s)

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if isinstance(self._writer, InlineWriter):
            await self._writer.drain()
            self._writer.close()
        elif self._writer is not None:
            await asyncio.to_thread(self._writer.close)
        if self._pool is not None:
            self._pool.shutdown()
        self.engine.dispose()

    def forget_jobs(self) -> None:
        """Drop the jobs and proposals held in memory (a replica that stops leading, or before a takeover's load);
        requests still holding a job find it unregistered (:meth:`still_registered`)."""
        self.jobs.clear()
        self.proposals = ProposalCache(self.proposals.size)
        self.window_bytes = 0

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """A background task the controller cancels at shutdown."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"unknown job {job_id!r}")
        return job

    def still_registered(self, job: Job) -> None:
        """Under the job's lock: 404 when the job was deleted (or replaced) while the request waited for it."""
        if self.jobs.get(job.job_id) is not job:
            raise NotFound(f"unknown job {job.job_id!r}")
