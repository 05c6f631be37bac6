"""The driver's conversation with the controller (issue 7's /v1 API), kept apart from the state and the batch.

:class:`ControllerLink` is the part of :class:`clients.spark.driver.RebalancingDriver` that registers the job,
posts statistics, asks for and executes proposals, and adopts the controller's (epoch, assignment). Its rules:

* **Nothing the controller answers fails a batch.** Every call in a batch goes through a guard; an assignment is
  validated when it arrives (:meth:`ControllerLink._accept`) and refused — logged once per epoch, the routing
  kept — when it names a node that is not one of the driver's partitions.
* **Nodes are partitions.** Controller node ``p<i>`` is Spark partition ``i`` of the ``partitions`` the driver
  routes to; the partition count of a running query is fixed, so a node added to the job (``POST
  /v1/jobs/{id}/nodes {"add": ["p8"]}``) cannot be used until the query is restarted with more partitions.
* **Configuration errors fail** :meth:`ControllerLink.start` with the server's message (a 4xx other than 404,
  408, 429): an unknown algorithm or a negative budget must not look like "controller down".
* **Back-off in time**: after a failure the controller is left alone for 1, 2, 4, … up to ``max_backoff_s``
  seconds, whatever the batch rate; the first batch after that tries again.
* **Plans off the batch's critical path** (``async_plans``, default): the proposal is requested and executed on
  a background thread; the plan is applied at the first batch boundary after it arrived.
* **A controller that comes back empty** (its database lost the job) gets the driver's *current* assignment
  registered explicitly, so nothing moves back to the default layout.
* **No solve that cannot pay off.** Before asking for a proposal, the link computes the load distance of its current
  layout over its own window of statistics; when even a perfect plan (distance 0) would fail
  :func:`worth_executing` (a stationary stream whose imbalance is sampling noise), it does not ask: the controller's
  solver would burn its time limit of CPU for a plan that is then thrown away.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from clients.python import APIError, ConflictError, NotFoundError, RebalancerError
from clients.spark.routing import RoutingTable, partition_ids

log = logging.getLogger("rebalancer.spark")

_NOT_CONFIG = {404, 408, 429}


def worth_executing(before: float, after: float, mean_load: float, *, min_gain: float,
                    threshold: float | None = None, noise_sigmas: float | None = None) -> bool:
    """Whether a proposal that takes the load distance (max over nodes of |load − mean|, ALBIC §4.3.1) from
    ``before`` to ``after`` is worth its migrations.

    It must lower the distance by at least ``min_gain`` × the mean node load (hysteresis), ``before`` must exceed
    ``threshold`` when one is set, and — for record counts, whose per-node sums fluctuate like Poisson counts
    with standard deviation √mean — ``before`` must exceed ``noise_sigmas`` × √``mean_load``: an imbalance that
    sampling noise alone explains (a stationary stream after convergence) is not chased with migrations.
    """
    if after >= before or (before - after) < min_gain * mean_load:
        return False
    if threshold is not None and before <= threshold:
        return False
    return not (noise_sigmas is not None and before <= noise_sigmas * math.sqrt(max(mean_load, 0.0)))


class ConfigurationError(ValueError):
    """The controller refused the job's configuration (its message is the exception's text)."""


class ControllerLink:
    """Mixin: controller plumbing of :class:`clients.spark.driver.RebalancingDriver` (see the module docstring)."""

    # set by the driver
    client: Any
    job_id: str
    operator: str
    G: int
    n: int
    node_ids: list[str]
    epoch: int
    routing: RoutingTable
    pending: tuple[int, dict[str, str]] | None
    registered: bool
    auto: bool
    cooldown_batches: int
    batches_since_change: int
    min_gain: float
    load_distance_threshold: float | None
    time_limit_s: float
    budget: dict[str, Any]
    window_batches: int
    extra_operators: list[dict[str, Any]]
    algorithm: str | None
    params: dict[str, Any]
    backoff_s: float
    max_backoff_s: float
    _failures: int
    _retry_at: float
    _refused_epoch: int | None
    _refusals: int
    async_plans: bool
    noise_sigmas: float | None
    load: str
    _pool: Any
    _inflight: Any

    def _has_layout(self) -> bool:  # overridden by the driver: state exists or batches ran
        return False

    def _boundary_switch_allowed(self) -> bool:  # overridden by the driver
        return False

    def _switch(self, epoch: int, assignment: Mapping[str, str]):  # implemented by the driver
        raise NotImplementedError

    def _owned(self) -> list[tuple[str, int]]:
        """(operator id, key groups) of the operators this link routes (the driver: its one operator)."""
        return [(self.operator, self.G)]

    def _layout(self) -> dict[str, str]:
        """The current assignment of the owned operators' key groups."""
        return self.routing.assignment()

    def _relabel(self, epoch: int) -> None:
        """The controller moved to ``epoch`` without moving any owned key group."""
        self.epoch = self.routing.epoch = int(epoch)

    def _init_link(self, *, client: Any, job_id: str, partitions: int, algorithm: str | None,
                   params: Mapping[str, Any] | None, budget: Mapping[str, Any] | None, window_batches: int,
                   time_limit_s: float, auto: bool, cooldown_batches: int, load_distance_threshold: float | None,
                   min_gain: float, noise_sigmas: float | None, load: str,
                   extra_operators: Any, async_plans: bool, backoff_s: float, max_backoff_s: float) -> None:
        """The link's settings and its conversation state (see :class:`clients.spark.driver.RebalancingDriver`
        for the meaning of every argument)."""
        if load not in ("records", "bytes"):
            raise ValueError("load must be 'records' or 'bytes'")
        self.client = client
        self.job_id = job_id
        self.n = int(partitions)
        self.node_ids = partition_ids(self.n)
        self.algorithm = algorithm
        self.params = dict(params or {})
        self.budget = dict(budget or {})
        self.window_batches = int(window_batches)
        self.time_limit_s = float(time_limit_s)
        self.auto = bool(auto)
        self.cooldown_batches = int(cooldown_batches)
        self.load_distance_threshold = load_distance_threshold
        self.min_gain = float(min_gain)
        self.noise_sigmas = noise_sigmas
        self.load = load
        self.extra_operators = [dict(o) for o in extra_operators]
        self.async_plans = bool(async_plans)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.epoch = 0
        self.registered = False
        self.pending = None
        self.batches_since_change = 0
        self._failures = 0
        self._retry_at = 0.0
        self._refused_epoch = None
        self._refusals = 0
        self._pool = None
        self._inflight = None
        self._window_ids: tuple[str, ...] = ()        # key group ids of the window's load vectors
        self._window: deque[np.ndarray] = deque(maxlen=max(1, self.window_batches))
        self.proposals_skipped = 0                     # proposals not asked for (see _may_gain)
        self._plain_job = False                        # the job is what this side sees (see _note_job)

    # ------------------------------------------------------------------ availability and back-off
    def _controller_available(self) -> bool:
        return self.client is not None and time.monotonic() >= self._retry_at

    def _ok(self) -> None:
        self._failures = 0
        self._retry_at = 0.0

    def _down(self, what: str, exc: BaseException) -> None:
        self._failures += 1
        delay = min(self.max_backoff_s, self.backoff_s * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        log.warning("controller %s failed (%s: %s); keeping the routing of epoch %d, next try in %.1f s",
                    what, type(exc).__name__, exc, self.epoch, delay)

    # ------------------------------------------------------------------ registration
    def _job_spec(self, explicit: bool = False) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "nodes": self.node_ids, "budget": self.budget, "window_batches": self.window_batches,
            "time_limit_s": self.time_limit_s,
            "auto": {"enabled": self.auto, "cooldown_batches": self.cooldown_batches,
                     "load_distance_threshold": self.load_distance_threshold},
        }
        if explicit:  # the driver's current layout (a controller that lost the job must not reset it)
            kgs = [{"id": k, "operator": k.rsplit("/", 1)[0], "node": v} for k, v in self._layout().items()]
            for o in self.extra_operators:
                other = RoutingTable.contiguous(o["id"], int(o["key_groups"]), self.n)
                kgs += [{"id": k, "operator": o["id"], "node": v} for k, v in other.assignment().items()]
            spec["key_groups"] = kgs
        else:
            spec["operators"] = [*({"id": o, "key_groups": g} for o, g in self._owned()), *self.extra_operators]
        if self.algorithm:
            spec["algorithm"] = self.algorithm
        if self.params:
            spec["params"] = self.params
        return spec

    def _same_topology(self, job) -> bool:
        ids = {f"{o}/{k}" for o, g in self._owned() for k in range(g)}
        for o in self.extra_operators:
            ids |= {f"{o['id']}/{k}" for k in range(int(o["key_groups"]))}
        return set(job.assignment) == ids and set(self.node_ids) <= set(job.nodes)

    def start(self) -> bool:
        """Register the job with the controller (idempotent). Returns True when registered.

        A controller that is down is not an error (the driver runs on its current routing and retries later);
        a configuration the controller refuses raises :class:`ConfigurationError` with the server's message.
        """
        if self.client is None:
            return False
        try:
            explicit = False
            if self._has_layout():
                try:
                    self.client.get_job(self.job_id)
                except NotFoundError:
                    explicit = True
                    log.warning("job %r is unknown to the controller: registering the current assignment "
                                "(epoch %d here) instead of the default layout", self.job_id, self.epoch)
            try:
                job = self.client.put_job(self.job_id, **self._job_spec(explicit))
            except NotFoundError as exc:  # no route for this id (e.g. a '/' in it): never "controller down"
                raise ConfigurationError(f"the controller has no route for job id {self.job_id!r}: {exc}") from exc
            except ConflictError as exc:
                job = self.client.get_job(self.job_id)
                if not self._same_topology(job):
                    raise ConfigurationError(f"job {self.job_id!r}: {exc}") from exc
        except ConfigurationError:
            raise
        except APIError as exc:
            if 400 <= exc.status_code < 500 and exc.status_code not in _NOT_CONFIG:
                raise ConfigurationError(f"the controller refused job {self.job_id!r}: {exc}") from exc
            self._down("registration", exc)
            return False
        except RebalancerError as exc:
            self._down("registration", exc)
            return False
        self.registered = True
        self._ok()
        self._note_job(job)
        self._adopt(job.epoch, job.assignment)
        return True

    def _note_job(self, job) -> None:
        """Remember whether the controller's job is exactly what this side can judge on its own (see
        :meth:`_may_gain`): its nodes are this side's partitions, none removing, all of one capacity, and no
        communication cost."""
        self._plain_job = (sorted(job.nodes) == sorted(self.node_ids) and not job.removing
                           and len(set(job.capacity.values())) <= 1 and not job.communication_cost)

    # ------------------------------------------------------------------ assignments
    def _own(self, assignment: Mapping[str, str]) -> dict[str, str]:
        """The part of a job assignment that belongs to the operators this link routes."""
        owned = {o for o, _ in self._owned()}
        return {k: v for k, v in assignment.items() if k.rsplit("/", 1)[0] in owned}

    def _accept(self, epoch: int, assignment: Mapping[str, str]) -> bool:
        """Validate an assignment from the controller; refuse (log once per epoch, keep the routing) when it
        puts a key group on a node that is not one of the driver's partitions ``p0..p{n-1}``."""
        own = self._own(assignment)
        unknown = sorted({v for v in own.values() if v not in self.node_ids})
        if not unknown:
            return True
        if self._refused_epoch != epoch:
            bad = next(k for k, v in own.items() if v in unknown)
            log.error("controller epoch %d refused: it puts %s on node %r, which is not one of this query's %d "
                      "partitions (p0..p%d); a running query has a fixed partition count: restart it with "
                      "partitions=%d to use the new node(s) %s. Keeping the routing of epoch %d.",
                      epoch, bad, unknown[0], self.n, self.n - 1, self.n + len(unknown), unknown, self.epoch)
        self._refused_epoch = int(epoch)
        self._refusals += 1
        return False

    def _adopt(self, epoch: int, assignment: Mapping[str, str]) -> None:
        """Take the controller's (epoch, assignment): at once before any state exists, else at the next boundary."""
        if not self._accept(epoch, assignment):
            return
        own = self._own(assignment)
        if self._layout() == own:  # nothing moves: the epoch label changes at once
            self._relabel(epoch)
            return
        if self._boundary_switch_allowed():
            self._switch(epoch, own)
        else:
            self.pending = (int(epoch), dict(own))

    def _resync(self) -> None:
        """Fetch the job and adopt its epoch and assignment at the next batch boundary."""
        try:
            job = self.client.get_job(self.job_id)
        except NotFoundError:
            self.registered = False  # deleted (or a fresh controller database): register again
            return
        self._note_job(job)
        if not self._accept(job.epoch, job.assignment):
            return
        own = self._own(job.assignment)
        if job.epoch != self.epoch or own != self._layout():
            self.pending = (job.epoch, own)

    # ------------------------------------------------------------------ the window on this side
    def _remember(self, stats: list[dict[str, Any]]) -> None:
        """Keep the loads per key group of the last ``window_batches`` batches (the controller's window)."""
        ids = tuple(str(s["id"]) for s in stats)
        if ids != self._window_ids:
            self._window_ids = ids
            self._window.clear()
        self._window.append(np.fromiter((float(s["load"]) for s in stats), dtype=np.float64, count=len(stats)))

    def _may_gain(self, edges: list[dict[str, Any]] | None) -> bool:
        """Whether a proposal could be worth executing: False only when, on this side's window and the current
        layout, the load distance ``before`` fails :func:`worth_executing` even against a perfect plan
        (``after`` = 0). Unknown parts of the job (operators this link does not route, communication, a window
        not yet full, a job whose nodes, capacities or communication cost differ from this side's view) answer
        True: the controller decides."""
        if (not self._plain_job or self.extra_operators or edges
                or len(self._window) < self.window_batches):
            return True
        layout = self._layout()
        index = {p: i for i, p in enumerate(self.node_ids)}
        try:
            nodes = np.fromiter((index[layout[k]] for k in self._window_ids), dtype=np.int64,
                                count=len(self._window_ids))
        except KeyError:  # a key group or node this side does not know: let the controller judge
            return True
        loads = np.bincount(nodes, weights=np.mean(self._window, axis=0), minlength=self.n)
        mean = float(loads.sum()) / self.n
        before = float(np.max(np.abs(loads - mean)))
        return worth_executing(before, 0.0, mean, min_gain=self.min_gain, threshold=self.load_distance_threshold,
                               noise_sigmas=self.noise_sigmas if self.load == "records" else None)

    # ------------------------------------------------------------------ per batch
    def _talk(self, batch_id: int, stats: list[dict[str, Any]], edges: list[dict[str, Any]] | None, report) -> str:
        """All controller traffic of one batch; never raises."""
        if self.client is None:
            return "disabled"
        self._remember(stats)
        refusals = self._refusals
        status = self._talk_inner(batch_id, stats, edges, report)
        return "refused" if self._refusals > refusals and status in ("ok", "conflict") else status

    def _talk_inner(self, batch_id: int, stats: list[dict[str, Any]], edges: list[dict[str, Any]] | None,
                    report) -> str:
        if not self.registered and self._controller_available():
            try:
                self.start()
            except Exception as exc:  # noqa: BLE001 - a batch never fails on the controller
                self._down("registration", exc)
                return "down"
        if not self.registered or not self._controller_available():
            return "skipped"
        try:
            ack = self.client.post_stats(self.job_id, batch_id=batch_id, epoch=self.epoch, key_groups=stats,
                                         communication=edges)
        except ConflictError as exc:  # our epoch is ahead of the job (a new controller database?)
            log.warning("statistics refused (%s); fetching the job", exc.detail)
            return self._guarded("resync", self._resync, conflict=True)
        except NotFoundError:
            self.registered = False
            return "skipped"
        except Exception as exc:  # noqa: BLE001 - the controller never fails a batch
            self._down("statistics", exc)
            return "down"
        self._ok()
        try:
            if ack.apply is not None:
                if not self._accept(ack.apply.epoch, ack.apply.assignment):
                    return "refused"
                self.pending = (ack.apply.epoch, self._own(ack.apply.assignment))
                report.plan_received = True
                return "ok"
            if ack.epoch != self.epoch:  # someone else executed a plan: adopt the job's assignment
                status = self._guarded("resync", self._resync, conflict=True)
                report.plan_received = self.pending is not None
                return status
            if not self.auto and ack.window_ready and self.batches_since_change + 1 >= self.cooldown_batches:
                if not self._may_gain(edges):
                    self.proposals_skipped += 1
                    return "ok"
                if self.async_plans:
                    return self._propose_in_background()
                status = self._guarded("proposal", self._propose_and_execute)
                report.plan_received = self.pending is not None
                return status
        except Exception as exc:  # noqa: BLE001 - a malformed answer must not fail the batch either
            self._down("answer", exc)
            return "down"
        return "ok"

    def _guarded(self, what: str, fn: Callable[[], object], conflict: bool = False) -> str:
        try:
            fn()
            return "conflict" if conflict else "ok"
        except ConflictError as exc:
            log.info("%s: conflict (%s); adopting the controller's epoch", what, exc.detail)
            try:
                self._resync()
            except Exception as exc2:  # noqa: BLE001
                self._down("resync", exc2)
                return "down"
            return "conflict"
        except Exception as exc:  # noqa: BLE001
            self._down(what, exc)
            return "down"

    def _propose_in_background(self) -> str:
        """Ask for (and execute) a proposal on a background thread: the batch does not wait for the solver; the
        plan lands in ``pending`` and is applied at the first batch boundary after it arrived."""
        if self.pending is not None or (self._inflight is not None and not self._inflight.done()):
            return "ok"  # a plan waits for its boundary, or one is being computed
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebalancer-plan")
        self._inflight = self._pool.submit(self._guarded, "proposal", self._propose_and_execute)
        return "ok"

    def _propose_and_execute(self) -> None:
        prop = self.propose()
        if prop is not None:
            self.execute(prop)

    def apply_proposal(self, prop) -> str:
        """Execute ``prop`` and never raise: ``"ok"`` (applied at the next boundary), ``"conflict"`` (the job had
        moved on: its current assignment is adopted at the next boundary instead) or ``"down"``."""
        return self._guarded("execute", lambda: self.execute(prop))

    def propose(self):
        """Ask the controller for a proposal from the current window; ``None`` when it would not improve."""
        prop = self.client.create_proposal(self.job_id, wait_s=max(2.0, 2 * self.time_limit_s))
        if prop.plan is None or not prop.plan.moves:
            return None
        if prop.base_epoch is not None and prop.base_epoch != self.epoch:
            self._resync()
            return None
        before_m = prop.plan.metrics.get("before", {})
        if not worth_executing(float(before_m.get("load_distance", 0.0)),
                               float(prop.plan.metrics.get("after", {}).get("load_distance", 0.0)),
                               float(before_m.get("total_load", 0.0) or 0.0) / self.n, min_gain=self.min_gain,
                               threshold=self.load_distance_threshold,
                               noise_sigmas=self.noise_sigmas if self.load == "records" else None):
            return None
        if not self._accept(prop.base_epoch + 1 if prop.base_epoch is not None else -1, prop.plan.assignment):
            return None
        return prop

    def execute(self, prop) -> bool:
        """Execute a proposal; on success its assignment is applied at the next batch boundary.

        Raises ConflictError when the job moved past the proposal's base epoch (callers in a batch go through
        the guarded path, which then adopts the job's current assignment instead).
        """
        ex = self.client.execute_proposal(self.job_id, prop.id)
        assignment = ex.assignment if ex.assignment is not None else prop.plan.assignment
        if self._accept(ex.epoch, assignment):
            self.pending = (ex.epoch, self._own(assignment))
        return True
