"""Controller settings, read from the environment (prefix ``REBALANCER_``) with pydantic-settings.

Every limit of the service lives here so that an operator can tune it without code changes:
``REBALANCER_DATABASE_URL=postgresql+psycopg://user@host/db``, ``REBALANCER_API_TOKENS=tok1,tok2``,
``REBALANCER_MAX_TIME_LIMIT_S=30`` … An environment variable ``REBALANCER_<NAME>`` that is not a setting (a typo
such as ``REBALANCER_MAX_TIME_LIMIT=30``) is an error, not silently ignored; the client-side names
:data:`CLIENT_VARIABLES` are allowed.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: SQLite next to the current directory unless told otherwise; ``rebalancer serve`` resolves it to an absolute path
#: and logs it (and the Docker image sets ``/data/rebalancer.db`` explicitly).
DEFAULT_DATABASE_URL = "sqlite:///./data/rebalancer.db"
PREFIX = "REBALANCER_"
#: variables with the prefix that the clients read (``clients/``), not the server
CLIENT_VARIABLES = frozenset({"REBALANCER_URL", "REBALANCER_TOKEN"})


class TokenScope(BaseModel):
    """What one scoped token may do."""

    model_config = ConfigDict(extra="forbid")

    prefixes: list[str] = Field(default_factory=list)
    access: Literal["read", "write", "admin"] = "write"


class Settings(BaseSettings):
    """Configuration of one controller process."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

    _default_database: bool = PrivateAttr(False)

    #: SQLAlchemy URL. SQLite (default, WAL) or PostgreSQL (``postgresql+psycopg://…``; ``postgresql://`` is
    #: rewritten to use psycopg 3).
    database_url: str = DEFAULT_DATABASE_URL
    #: SQLite ``synchronous`` pragma: NORMAL survives a kill -9 of the server (WAL); FULL also survives power loss.
    sqlite_synchronous: str = "NORMAL"
    #: comma-separated bearer tokens with every right (admin); empty (and no scoped token) = no authentication.
    api_tokens: str = ""
    #: scoped tokens, JSON: ``{"<token>": {"prefixes": ["tenant-a."], "access": "read" | "write" | "admin"}}``:
    #: a scoped token sees only the jobs whose id starts with one of its prefixes (see api/tenants.py).
    token_scopes: dict[str, TokenScope] = Field(default_factory=dict)

    #: planner used by jobs and requests that do not name one ("" = first available of albic-milp, albic, flux).
    default_algorithm: str = ""
    default_time_limit_s: float = Field(default=1.0, gt=0)
    #: every solve's time limit is capped at this many seconds.
    max_time_limit_s: float = Field(default=10.0, gt=0)
    #: how long ``POST …/proposals`` waits for its solve before answering 202 with a task to poll.
    request_wait_s: float = Field(default=5.0, ge=0)
    #: solver worker processes (the process pool off the event loop).
    solver_workers: int = Field(default=2, ge=1)
    #: log where the event loop's thread is whenever the loop falls this many ms behind (0 = off):
    #: :mod:`controller.stalls`, logger ``rebalancer.stalls``.
    loop_stall_ms: float = Field(default=0.0, ge=0)
    #: niceness added to the solver workers (0-19): on a busy machine the event loop (health checks, statistics
    #: posts) gets the CPU before a background solve (19: under the mixed-load benchmark on 2 cores /healthz p99
    #: was 101 ms, with 5 it was 3.4-7.2 s; the solves took 5-70 % longer there).
    solver_nice: int = Field(default=19, ge=0, le=19)
    #: each solver worker's memory (data segment) in MB: a solve needing more fails with a clear error instead of
    #: taking the machine's memory. 0 = automatic (physical memory / (solver_workers + 1)), -1 = no limit.
    solver_memory_limit_mb: int = Field(default=0, ge=-1)
    #: a solver worker that fails to start is started again after a back-off from this many seconds, doubling up to
    #: 30 s; after this many failed starts in a row with no worker ready the pool is broken: solves answer 503 and
    #: ``/healthz`` 503 (liveness), so an orchestrator restarts the server.
    solver_start_backoff_s: float = Field(default=0.25, gt=0)
    solver_start_failures: int = Field(default=5, ge=1)
    #: solve slots: solves running or queued for a worker (a what-if holds one per candidate); beyond, 429.
    max_concurrent_solves: int = Field(default=40, ge=2)
    #: slots only automatic rounds of registered jobs may use (and they are dequeued first): ad-hoc plans,
    #: what-ifs and proposals can use ``max_concurrent_solves - reserved_auto_solves`` at most.
    reserved_auto_solves: int = Field(default=8, ge=1)
    #: a solve still running after ``solve_kill_factor`` × its time limit + ``solve_kill_grace_s`` has its worker
    #: killed and replaced; the request gets an error, the other solves are unaffected.
    solve_kill_factor: float = Field(default=2.0, ge=1.0)
    solve_kill_grace_s: float = Field(default=5.0, ge=0.0)

    #: request size caps (413 beyond them).
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    #: request bodies held in memory (from their first byte, or their Content-Length, to their answer): by all
    #: requests together (503 beyond) and by one client, its bearer token or else its address (429 beyond).
    max_upload_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    #: request bodies one client (its bearer token, or else its address) may have in memory at once (429 beyond).
    max_client_upload_bytes: int = Field(default=128 * 1024 * 1024, ge=1024)
    #: a request's headers must arrive within ``header_timeout_s`` of its first byte (or of the connection); its
    #: body within ``body_timeout_s``, with no pause longer than ``body_idle_timeout_s`` (the connection is
    #: closed; a body answers 408).
    header_timeout_s: float = Field(default=10.0, gt=0)
    body_timeout_s: float = Field(default=120.0, gt=0)
    body_idle_timeout_s: float = Field(default=10.0, gt=0)
    max_key_groups: int = Field(default=200_000, ge=1)
    max_edges: int = Field(default=1_000_000, ge=0)
    max_nodes: int = Field(default=10_000, ge=1)
    max_window_batches: int = Field(default=1000, ge=1)
    max_candidates: int = Field(default=32, ge=1)
    #: registered jobs (429 beyond), (key group, batch) cells held by one job's window, and bytes of statistics
    #: held by all windows together.
    max_jobs: int = Field(default=1000, ge=1)
    max_window_cells: int = Field(default=20_000_000, ge=1)
    #: key groups and window cells (key groups × window batches) of all registered jobs together (429 beyond): a
    #: job's registration holds about 200 bytes per key group (ids, index, placement, window sums).
    max_total_key_groups: int = Field(default=2_000_000, ge=1)
    max_total_window_cells: int = Field(default=100_000_000, ge=1)
    max_total_window_bytes: int = Field(default=2 * 1024**3, ge=1)

    #: ``POST /v1/partitioning`` caps (413 beyond them): channels, channels × replicas (consistent-hash points),
    #: keys with a frequency, channels × keys (see controller/planning.py: check_partitioning_size).
    max_partition_channels: int = Field(default=1024, ge=1)
    max_partition_ring: int = Field(default=2**20, ge=1)
    max_partition_keys: int = Field(default=100_000, ge=1)
    max_partition_work: int = Field(default=2**24, ge=1)
    #: job history: a full assignment snapshot every this many epochs (deltas in between), and the epochs kept
    #: (older ones are compacted into a snapshot; see controller/history.py).
    history_snapshot_every: int = Field(default=100, ge=1)
    history_retention_epochs: int = Field(default=1000, ge=0)

    #: bodies at least this large are parsed in a solver worker (plans, evaluations and what-ifs always are; the
    #: event loop only moves bytes); the worker may take ``offload_seconds_per_mb`` per MB of body on top of the
    #: time limit before it is stopped.
    offload_min_bytes: int = Field(default=1024 * 1024, ge=0)
    offload_seconds_per_mb: float = Field(default=2.0, ge=0)

    #: commit at most this many queued writes in one transaction (group commit).
    commit_batch: int = Field(default=256, ge=1)

    #: replicas on one PostgreSQL database (controller/leadership.py): the URL clients reach this replica at
    #: (standbys name the leader's in their answers; empty: they cannot say where it is), the lease's length on
    #: the database's clock (a leader that stops renewing is replaced after at most this long) and how often the
    #: leader renews it and standbys look at it.
    advertised_url: str = ""
    lease_ttl_s: float = Field(default=1.5, gt=0)
    lease_renew_s: float = Field(default=0.3, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_variables(cls, data: Any) -> Any:
        known = {PREFIX + name.upper() for name in cls.model_fields} | CLIENT_VARIABLES
        unknown = sorted(k for k in os.environ if k.upper().startswith(PREFIX) and k.upper() not in known)
        if unknown:
            close = difflib.get_close_matches(unknown[0].upper(), sorted(known - CLIENT_VARIABLES), n=1)
            hint = f"did you mean {close[0]}?" if close else "see the configuration page of the documentation"
            raise ValueError(f"unknown setting {unknown[0]} ({hint})")
        return data

    @model_validator(mode="after")
    def _shares(self) -> Settings:
        if self.reserved_auto_solves >= self.max_concurrent_solves:
            raise ValueError(f"reserved_auto_solves ({self.reserved_auto_solves}) must be below "
                             f"max_concurrent_solves ({self.max_concurrent_solves})")
        both = self.tokens() & set(self.token_scopes)
        if both:
            raise ValueError("token_scopes: a token is also in api_tokens (admin); give it one role")
        if any(not t.strip() for t in self.token_scopes):
            raise ValueError("token_scopes: empty token")
        if self.lease_renew_s * 2 > self.lease_ttl_s:
            raise ValueError(f"lease_renew_s ({self.lease_renew_s:g}) must be at most half of lease_ttl_s "
                             f"({self.lease_ttl_s:g}): a leader renews its lease several times before it expires")
        if not self.max_body_bytes <= self.max_client_upload_bytes <= self.max_upload_bytes:
            raise ValueError(f"max_body_bytes ({self.max_body_bytes}) ≤ max_client_upload_bytes "
                             f"({self.max_client_upload_bytes}) ≤ max_upload_bytes ({self.max_upload_bytes}) must "
                             "hold: a body the server accepts must fit in what one client and all may hold")
        if self.max_candidates > self.max_concurrent_solves - self.reserved_auto_solves:
            raise ValueError(f"max_candidates ({self.max_candidates}) must fit in the ad-hoc solve slots "
                             f"(max_concurrent_solves - reserved_auto_solves = "
                             f"{self.max_concurrent_solves - self.reserved_auto_solves}): a what-if holds one per "
                             f"candidate")
        return self

    def sqlite_path(self) -> Path | None:
        """The SQLite file as an absolute path (None for PostgreSQL and ``:memory:``)."""
        url = self.sqlalchemy_url()
        if not url.startswith("sqlite:///"):
            return None
        path = url[len("sqlite:///"):].split("?", 1)[0]
        if not path or path == ":memory:":
            return None
        return Path(path).resolve()

    def is_default_database(self) -> bool:
        """True when the database is the default (also after :meth:`resolved` made its path absolute)."""
        return self.database_url == DEFAULT_DATABASE_URL or self._default_database

    def resolved(self) -> Settings:
        """These settings with a relative SQLite path made absolute (the server logs the result)."""
        path = self.sqlite_path()
        if path is None:
            return self
        query = self.database_url.split("?", 1)[1] if "?" in self.database_url else ""
        url = f"sqlite:///{path}" + (f"?{query}" if query else "")
        out = self.model_copy(update={"database_url": url})
        out._default_database = self.is_default_database()
        return out

    def tokens(self) -> set[str]:
        """The admin tokens."""
        return {t.strip() for t in self.api_tokens.split(",") if t.strip()}

    def auth_enabled(self) -> bool:
        return bool(self.tokens() or self.token_scopes)

    def time_limit(self, requested: float | None) -> float:
        """The one place a solve's time limit is decided: the request's (already checked > 0 at the edge) or
        ``default_time_limit_s``, capped at ``max_time_limit_s``."""
        return min(self.default_time_limit_s if requested is None else float(requested), self.max_time_limit_s)

    def sqlalchemy_url(self) -> str:
        url = self.database_url
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            url = "postgresql+psycopg://" + url.split("://", 1)[1]
        return url
