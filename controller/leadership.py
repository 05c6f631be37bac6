"""Which replica serves: one server on SQLite, a leader and standbys on PostgreSQL.

Replicas on one PostgreSQL database elect a leader with a **lease row** (table ``leader_lease``): its holder, its
advertised URL, an **epoch** (the fencing token, + 1 at every change of leader) and an **expiry on the database's
clock**. The leader renews the row every ``lease_renew_s``; a standby takes it over once it has expired, with a new
epoch. Clocks of the replicas never matter: only the database's is compared.

* **Fencing.** Every group commit of the writer (:mod:`controller.writer`) starts by reading the lease's epoch
  (refused early once it has moved on) and ends with ``SELECT epoch … FOR SHARE`` on the lease row; it commits only
  if the epoch is still its own: a leader paused by ``SIGSTOP`` (or cut from the
  database) that wakes up after a takeover cannot write. The share lock orders the commit against a takeover (whose
  ``UPDATE`` waits for it), so the new leader, which loads the jobs after its takeover has committed, sees every
  write the old leader committed. Each request carries the epoch it was admitted under (:data:`request_term`, set by
  the API's standby guard): a request admitted in an earlier term of this process never writes.
* **Frozen inside a transaction.** ``idle_in_transaction_session_timeout`` (= the lease's length) is set in every
  transaction of the writer and of the lease, so a replica frozen inside one loses its session, and its row locks,
  instead of blocking the new leader.
* **A dead leader is noticed at once.** The row names the backend of the leader's lease session (``holder_pid``,
  refreshed at each renewal). The database ends that session when the leader dies (``kill -9``) or its connection
  is cut; a standby that finds it gone from ``pg_stat_activity`` takes the lease over without waiting for the
  expiry. A frozen leader keeps its session until the expiry decides.
* **Serving.** A leader serves while its lease is valid by its own clock too (``lease_ttl_s`` after the start of the
  last successful renewal) and once it has loaded the jobs of its term; a standby answers with the leader's URL.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

log = logging.getLogger("rebalancer.leadership")

LEASE = "controller"
#: the advisory lock held while a replica migrates the schema: "rebalancer" + "migrate"
MIGRATE_KEYS = (0x7265_6261, 0x6D69_6772)
NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"

#: the lease term a request was admitted under (None: not set, e.g. startup work: the current term)
request_term: contextvars.ContextVar[int | None] = contextvars.ContextVar("rebalancer_request_term", default=None)


class Fenced(Exception):
    """This replica is not the leader (any more): nothing of the operation was written."""

    def __init__(self, message: str, leader_url: str | None):
        super().__init__(message)
        self.leader_url = leader_url


class Leadership:
    """One server per database (SQLite): always the leader, nothing to fence."""

    replicated = False
    term: int | None = 0

    def leader_hint(self) -> str | None:
        """The URL of the leader to send clients to (None: unknown, or this replica itself)."""
        return None

    def serving_term(self) -> int | None:
        """The term requests are admitted under now; None when this replica must not serve."""
        return self.term

    def describe(self) -> dict[str, Any]:
        return {"role": "leader"}

    def halt(self) -> None:
        """Stop watching the lease (it is still held until :meth:`stop`)."""

    def stop(self, release: bool = True) -> None:
        """Stop taking part (and hand the lease over at once when ``release``)."""


class ReplicaLeadership(Leadership):
    """Leader election among the replicas on one PostgreSQL database (see the module's docstring).

    :meth:`step` makes one attempt (take over or renew); :meth:`start` runs it on a thread every ``lease_renew_s``
    (a leader) or half that (a standby) and calls ``changed()`` (from that thread) whenever the term changes. The
    controller loads the jobs of a new term and then calls :meth:`loaded`.
    """

    replicated = True

    def __init__(self, url: str, settings: Any):
        self.ttl = float(settings.lease_ttl_s)
        self.every = float(settings.lease_renew_s)
        self.advertised = settings.advertised_url.rstrip("/") or None
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.app_name = f"rebalancer {self.holder}"[:63]
        # idle_in_transaction_session_timeout in ms, of the writer's and the lease's transactions
        self._idle_ms = max(100, int(self.ttl * 1000))
        self._engine = create_engine(url, poolclass=NullPool, connect_args={
            "application_name": self.app_name, "connect_timeout": max(1, int(self.ttl)),
            "keepalives": 1, "keepalives_idle": 1, "keepalives_interval": 1, "keepalives_count": 3,
            "tcp_user_timeout": int(self.ttl * 2000)})
        self._conn: Connection | None = None
        self.term: int | None = None
        self._loaded: int | None = None
        self._valid_until = 0.0  # monotonic: the lease is surely valid before
        self._unreachable = False  # the last attempt failed (the database did not answer)
        self.leader_url: str | None = None  # as the lease row says (this replica's own while it leads)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()  # one step at a time (the thread, or the controller at start)

    # ------------------------------------------------------------------ what the server asks
    def lapsed(self) -> bool:
        """This replica leads and has loaded its term, but its lease has not been renewed in time by its own
        clock (a starved thread, a slow database; not one that failed to answer): the next renewal decides."""
        term = self.term
        return (term is not None and self._loaded == term and not self._unreachable
                and time.monotonic() >= self._valid_until)

    def leader_hint(self) -> str | None:
        url = self.leader_url
        return None if url == self.advertised and self.serving_term() is None else url

    def serving_term(self) -> int | None:
        term = self.term
        if term is None or self._loaded != term or time.monotonic() >= self._valid_until:
            return None
        return term

    def describe(self) -> dict[str, Any]:
        term = self.serving_term()
        out: dict[str, Any] = {"role": "leader" if term is not None else "standby", "leader": self.leader_hint()}
        if term is not None:
            out["epoch"] = term
        elif self.term is not None:
            out["role"] = "leader (loading)" if self._loaded != self.term else "leader (lease not renewed)"
        return out

    def loaded(self, term: int) -> None:
        """The jobs of ``term`` are loaded: serve (if the term is still ours)."""
        if self.term == term:
            self._loaded = term

    def unloaded(self) -> None:
        self._loaded = None

    @property
    def loaded_term(self) -> int | None:
        return self._loaded

    def attach(self, engine: Engine) -> None:
        """Name this replica's sessions of ``engine`` after it (``pg_stat_activity.application_name``)."""
        name = self.app_name

        @event.listens_for(engine, "connect")
        def _name(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("SELECT set_config('application_name', %s, false)", (name,))
            cur.close()
            dbapi_conn.commit()

    # ------------------------------------------------------------------ fencing (the writer's thread)
    def op_term(self) -> int | None:
        """The term an operation queued now belongs to: its request's, else the current one."""
        t = request_term.get()
        return self.term if t is None else t

    def fenced(self, why: str) -> Fenced:
        hint = self.leader_hint()
        return Fenced(f"this replica is not the leader ({why}); the leader is at {hint or 'an unknown URL'}", hint)

    def begin(self, conn: Connection, term: int | None) -> None:
        """First statement of a writer transaction (one round trip): refuse early when the lease has moved on, and
        set ``idle_in_transaction_session_timeout`` so that a replica frozen inside the transaction loses its
        session, and its row locks, instead of blocking the new leader."""
        if term is None:
            raise self.fenced("no term")
        epoch = conn.exec_driver_sql(  # psycopg returns the first statement's rows
            f"SELECT epoch FROM leader_lease WHERE name = '{LEASE}'; "
            f"SET LOCAL idle_in_transaction_session_timeout = {self._idle_ms}").scalar()
        if epoch != term:
            raise self.fenced(f"lease epoch {epoch}, this replica's {term}")

    def check(self, conn: Connection, term: int | None) -> None:
        """Last statement of a writer transaction: raise :class:`Fenced` (the caller rolls back) unless the lease's
        epoch is still ``term``; the share lock orders this commit before any takeover."""
        epoch = conn.exec_driver_sql(f"SELECT epoch FROM leader_lease WHERE name = '{LEASE}' FOR SHARE").scalar()
        if epoch != term:
            raise self.fenced(f"lease epoch {epoch}, this replica's {term}")

    def migrate(self, create_schema: Callable[[], str]) -> str:
        """Run ``create_schema`` while no other replica does (replicas may start together)."""
        return migrate_alone(self._engine, create_schema)

    # ------------------------------------------------------------------ the lease
    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = self._engine.connect()
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()
                conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass

    def _transaction_settings(self, conn: Connection, durable: bool = True) -> None:
        conn.exec_driver_sql(f"SET LOCAL idle_in_transaction_session_timeout = {self._idle_ms}; "
                             f"SET LOCAL lock_timeout = {self._idle_ms}; "
                             f"SET LOCAL synchronous_commit = {'on' if durable else 'off'}")

    #: the lease may be taken over: it has expired, or its holder's lease session is gone
    FREE = (f"leader_lease.expires_at < {NOW} OR NOT EXISTS "
            f"(SELECT 1 FROM pg_stat_activity a WHERE a.pid = leader_lease.holder_pid)")

    def _look(self, conn: Connection) -> bool:
        """Read the lease (no lock, nothing written: a standby's look costs the database no WAL flush); remember
        the leader's URL to send clients to — none once the lease may be taken over or has gone unrenewed for three
        renewal periods (the leader is likely frozen or dead: clients had better wait for its successor). True when
        it may be taken."""
        row = conn.execute(text(f"SELECT url, {NOW} - renewed_at, {self.FREE} FROM leader_lease "
                                f"WHERE name = :name"), {"name": LEASE}).first()
        conn.commit()
        free = row is None or bool(row[2])
        self.leader_url = row[0] if row is not None and row[1] < 3 * self.every and not free else None
        return free

    def _take_over(self, conn: Connection, t0: float) -> None:
        """Take the lease when it has expired or its holder's lease session is gone."""
        if not self._look(conn):
            return
        with conn.begin():
            self._transaction_settings(conn)
            row = conn.execute(text(
                f"INSERT INTO leader_lease (name, epoch, holder, url, expires_at, renewed_at, holder_pid) "
                f"VALUES (:name, 1, :holder, :url, {NOW} + :ttl, {NOW}, pg_backend_pid()) ON CONFLICT (name) DO UPDATE "
                f"SET epoch = leader_lease.epoch + 1, holder = EXCLUDED.holder, url = EXCLUDED.url, "
                f"expires_at = EXCLUDED.expires_at, renewed_at = EXCLUDED.renewed_at, holder_pid = EXCLUDED.holder_pid "
                f"WHERE {self.FREE} RETURNING epoch"),
                {"name": LEASE, "holder": self.holder, "url": self.advertised, "ttl": self.ttl}).first()
        if row is None:  # another standby was quicker
            self._look(conn)
            return
        self._valid_until = t0 + self.ttl
        self.term, self.leader_url = int(row[0]), self.advertised
        log.warning("this replica leads now (lease epoch %d)", row[0])

    def _renew(self, conn: Connection, t0: float) -> None:
        with conn.begin():
            self._transaction_settings(conn, durable=False)  # a lost renewal only shortens the lease
            row = conn.execute(text(
                f"UPDATE leader_lease SET expires_at = {NOW} + :ttl, renewed_at = {NOW}, holder_pid = pg_backend_pid() "
                f"WHERE name = :name AND epoch = :epoch RETURNING epoch"),
                {"name": LEASE, "epoch": self.term, "ttl": self.ttl}).first()
        if row is not None:
            self._valid_until = t0 + self.ttl
            return
        self._look(conn)
        log.warning("this replica lost the lease (epoch %s): another replica leads; standing by", self.term)
        self.term = None

    def step(self) -> int | None:
        """One attempt: renew the lease (leader) or take it over when it is free (standby); the term after it."""
        with self._mutex:
            t0 = time.monotonic()
            try:
                conn = self._connection()
                if self.term is None:
                    self._take_over(conn, t0)
                else:
                    self._renew(conn, t0)
                self._unreachable = False
            except Exception as exc:  # noqa: BLE001 - the database is unreachable: try again at the next step
                log.warning("lease %s failed: %s", "renewal" if self.term is not None else "check",
                            str(exc).splitlines()[0][:200])
                self._valid_until, self._unreachable = 0.0, True  # a leader cut from the database stops serving
                self._drop_connection()
            return self.term

    def start(self, changed: Callable[[], None]) -> None:
        """Renew or watch the lease every ``lease_renew_s`` on a thread; ``changed()`` after a change of term."""

        def run() -> None:  # a standby looks twice as often as a leader renews
            while not self._stop.wait(self.every if self.term is not None else self.every / 2):
                before = self.term
                if self.step() != before:
                    changed()

        self._thread = threading.Thread(target=run, name="rebalancer-lease", daemon=True)
        self._thread.start()

    def halt(self) -> None:
        """Stop watching the lease (it is still held until :meth:`stop`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def stop(self, release: bool = True) -> None:
        self.halt()
        with self._mutex:
            if release and self.term is not None and self._conn is not None:
                try:  # hand over at once: the lease expires now
                    with self._conn.begin():
                        self._conn.execute(text(f"UPDATE leader_lease SET expires_at = {NOW} - 1 "
                                                f"WHERE name = :name AND epoch = :epoch"),
                                           {"name": LEASE, "epoch": self.term})
                    log.info("lease (epoch %d) released", self.term)
                except Exception:  # noqa: BLE001 - it expires by itself
                    log.warning("releasing the lease failed; it expires by itself")
            self.term = None
            self._loaded = None
            self._drop_connection()
        self._engine.dispose()


def migrate_alone(engine: Engine, create_schema: Callable[[], str]) -> str:
    """Run ``create_schema`` holding the PostgreSQL advisory lock of migrations (taken on ``engine``), so that
    replicas starting together, or ``rebalancer db upgrade`` beside them, migrate one at a time."""
    with engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_lock(:a, :b)"), {"a": MIGRATE_KEYS[0], "b": MIGRATE_KEYS[1]})
        conn.commit()
        try:
            return create_schema()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:a, :b)"), {"a": MIGRATE_KEYS[0], "b": MIGRATE_KEYS[1]})
            conn.commit()


def leadership_for(url: str, settings: Any) -> Leadership:
    """:class:`ReplicaLeadership` on PostgreSQL, the single server's otherwise."""
    return Leadership() if url.startswith("sqlite") else ReplicaLeadership(url, settings)
