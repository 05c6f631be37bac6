"""Controller settings, read from the environment (prefix ``REBALANCER_``) with pydantic-settings.

Every limit of the service lives here so that an operator can tune it without code changes:
``REBALANCER_DATABASE_URL=postgresql+psycopg://user@host/db``, ``REBALANCER_API_TOKENS=tok1,tok2``,
``REBALANCER_MAX_TIME_LIMIT_S=30`` …
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "sqlite:///./data/rebalancer.db"


class Settings(BaseSettings):
    """Configuration of one controller process."""

    model_config = SettingsConfigDict(env_prefix="REBALANCER_", extra="ignore")

    #: SQLAlchemy URL. SQLite (default, WAL) or PostgreSQL (``postgresql+psycopg://…``; ``postgresql://`` is
    #: rewritten to use psycopg 3).
    database_url: str = DEFAULT_DATABASE_URL
    #: SQLite ``synchronous`` pragma: NORMAL survives a kill -9 of the server (WAL); FULL also survives power loss.
    sqlite_synchronous: str = "NORMAL"
    #: comma-separated bearer tokens; empty = no authentication.
    api_tokens: str = ""

    #: planner used by jobs and requests that do not name one ("" = first available of albic-milp, albic, flux).
    default_algorithm: str = ""
    default_time_limit_s: float = Field(1.0, gt=0)
    #: every solve's time limit is capped at this many seconds.
    max_time_limit_s: float = Field(10.0, gt=0)
    #: how long ``POST …/proposals`` waits for its solve before answering 202 with a task to poll.
    request_wait_s: float = Field(5.0, ge=0)
    #: solver worker processes (the process pool off the event loop).
    solver_workers: int = Field(2, ge=1)
    #: solves admitted at once (running + queued for a worker); more answer 429.
    max_concurrent_solves: int = Field(8, ge=1)

    #: request size caps (413 beyond them).
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    max_key_groups: int = Field(200_000, ge=1)
    max_edges: int = Field(1_000_000, ge=0)
    max_nodes: int = Field(10_000, ge=1)
    max_window_batches: int = Field(1000, ge=1)
    max_candidates: int = Field(32, ge=1)

    #: commit at most this many queued writes in one transaction (group commit).
    commit_batch: int = Field(256, ge=1)

    def tokens(self) -> set[str]:
        return {t.strip() for t in self.api_tokens.split(",") if t.strip()}

    def sqlalchemy_url(self) -> str:
        url = self.database_url
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            url = "postgresql+psycopg://" + url.split("://", 1)[1]
        return url
