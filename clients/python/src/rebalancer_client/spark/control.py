"""The driver's conversation with the controller, kept apart from the state and the batch.

:class:`ControllerLink` registers the job, posts each batch's statistics and follows the controller's answers; the
controller alone judges whether moving state is worth it (the job's ``policy``), the link keeps no window of its
own. Its rules:

* **One round trip per batch** in automatic mode (the default): the statistics answer (``StatsAck``) carries the
  placement to apply (``apply``) whenever the job's epoch is newer than the batch's. In proposal mode the link asks
  for a proposal only when the answer's ``decision`` says ``significant`` and executes it only when the
  controller judged it ``worth``; a proposal that is not worth it is not asked for again before the policy's
  ``cooldown_batches`` have passed. Proposals run off the batch's critical path (``async_plans``).
* **Numbers, not ids.** The job's key groups are checked once (at registration and on a resync) against the
  operators this side routes; statistics then travel as arrays in the job's key-group order and placements come
  back as arrays (``Placement.placement``: the node index of each key group). A job whose key groups differ is
  spoken to by key-group id.
* **Nodes are partitions, by position** (:mod:`rebalancer_client.spark.layout`): node ``j`` of the job is Spark
  partition ``j``, so every node the controller plans onto is one the query runs. A node added or deleted on the
  controller changes the query's partition count at the next batch boundary; a query restarted with another partition
  count (or :meth:`ControllerLink.scale` between batches) asks the controller to place the key groups on the new node
  set (``POST /v1/jobs/{id}/scale``). Either side's change converges to one node list.
* **Nothing the controller answers fails a batch.** Every call in a batch goes through a guard.
* **Configuration errors fail** :meth:`ControllerLink.start` with the server's message (a 4xx other than 404,
  408, 429): an unknown algorithm or a negative budget must not look like "controller down".
* **Back-off in time**: after a failure the controller is left alone for 1, 2, 4, … up to ``max_backoff_s``
  seconds, whatever the batch rate; the first batch after that tries again.
* **A controller that comes back empty** (its database lost the job) gets the driver's *current* placement
  registered explicitly, so nothing moves back to the default layout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from rebalancer_client import APIError, ConflictError, NotFoundError, RebalancerError
from rebalancer_client import contract as c
from rebalancer_client.spark.config import ControllerConfig
from rebalancer_client.spark.layout import JobOrder, Layout, Routed, Target, node_list, same_layout
from rebalancer_client.spark.proposals import Proposing
from rebalancer_client.spark.routing import contiguous, partition_ids

log = logging.getLogger("rebalancer.spark")

_NOT_CONFIG = {404, 408, 429}


class ConfigurationError(ValueError):
    """The controller refused the job's configuration (its message is the exception's text)."""


class ControllerLink(Proposing):
    """The conversation of one job with the controller (see the module docstring).

    Args:
        config: the job's :class:`~rebalancer_client.spark.config.ControllerConfig`.
        partitions: the query's partitions (= controller nodes ``p0..p{n-1}``).
        operators: ``(operator id, key groups)`` of the operators this side routes, in order.
        owner: the side that routes them (:class:`Routed`).
    """

    def __init__(self, config: ControllerConfig, partitions: int, operators: Sequence[tuple[str, int]],
                 owner: Routed):
        self.config = config
        self.client = config.client
        self.job_id = config.job_id
        self.nodes = partition_ids(int(partitions))         # the job's nodes = the query's partitions, in order
        self.operators = list(operators)
        self.extra = [(str(o["id"]), int(o["key_groups"])) for o in config.extra_operators]
        self.owner = owner
        self.registered = False
        self.pending: Target | None = None                 # a placement for the next batch boundary
        self.received = False                            # a placement arrived during the latest batch's talk
        self.decision: c.Decision | None = None           # the controller's latest verdict
        self.order: JobOrder | None = None
        self._cooldown = 0                                # the job's policy's cooldown_batches
        self._ask_after = -1                              # no proposal before this batch (one was not worth it)
        self.proposals = 0                                # proposals asked for
        self._failures = 0
        self._retry_at = 0.0
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: Future[str] | None = None

    # ------------------------------------------------------------------ availability and back-off
    def available(self) -> bool:
        return self.client is not None and time.monotonic() >= self._retry_at

    def _down(self, what: str, exc: BaseException) -> None:
        self._failures += 1
        delay = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        log.warning("controller %s failed (%s: %s); keeping the routing of epoch %d, next try in %.1f s",
                    what, type(exc).__name__, exc, self.owner.epoch, delay)

    # ------------------------------------------------------------------ registration
    def _ids(self) -> set[str]:
        return {f"{o}/{k}" for o, g in (*self.operators, *self.extra) for k in range(g)}

    def _spec(self, explicit: bool) -> dict[str, Any]:
        cfg = self.config
        spec: dict[str, Any] = {"nodes": list(self.nodes), "algorithm": cfg.algorithm,
                                "params": dict(cfg.params) or None, "budget": cfg.budget,
                                "window_batches": cfg.window_batches, "time_limit_s": cfg.time_limit_s,
                                "auto": cfg.auto, "policy": cfg.policy}
        if explicit:  # the current placement (a controller that lost the job must not reset it)
            n = len(self.nodes)
            layout = {**{o: contiguous(g, n) for o, g in self.extra}, **self.owner.layout()}
            spec["key_groups"] = [c.JobKeyGroup(id=f"{o}/{k}", operator=o, node=self.nodes[int(p)])
                                  for o, parts in layout.items() for k, p in enumerate(parts.tolist())]
        else:
            spec["operators"] = [c.Operator(id=o, key_groups=g) for o, g in (*self.operators, *self.extra)]
        return spec

    def _register(self) -> tuple[c.JobState, bool]:
        """The job as registered, and whether its node list has another length than the query's partitions."""
        assert self.client is not None
        explicit = False
        if self.owner.has_layout():
            try:
                self.client.get_job(self.job_id)
            except NotFoundError:
                explicit = True
                log.warning("job %r is unknown to the controller: registering the current placement (epoch %d "
                            "here) instead of the default layout", self.job_id, self.owner.epoch)
        try:
            return self.client.put_job(self.job_id, **self._spec(explicit)), False
        except NotFoundError as exc:  # no route for this id (e.g. a '/' in it): never "controller down"
            raise ConfigurationError(f"the controller has no route for job id {self.job_id!r}: {exc}") from exc
        except ConflictError as exc:  # another node list (or other key groups: refused)
            job = self.client.get_job(self.job_id)
            if set(job.key_groups) != self._ids():
                raise ConfigurationError(
                    f"job {self.job_id!r} has other key groups than this query ({len(job.key_groups)} against "
                    f"{len(self._ids())}): the number of key groups of a job is fixed, like Flink's maximum "
                    f"parallelism; register the query under another job id ({exc})") from exc
            return job, len(job.nodes) != self.owner.partitions

    def start(self) -> bool:
        """Register the job with the controller (idempotent). Returns True when registered.

        A job registered with another number of nodes than the query's partitions is scaled to them
        (:meth:`scale`, within ``ControllerConfig.scale_budget``); one with the same number of nodes under other
        ids keeps its ids (node ``j`` is partition ``j``). A controller that is down is not an error (the driver
        runs on its current routing and retries later); a configuration the controller refuses raises
        :class:`ConfigurationError` with the server's message.
        """
        if self.client is None:
            return False
        try:
            job, rescale = self._register()
            self._learn(job)
            if rescale:  # the query runs another number of partitions: the controller places the key groups
                self.nodes = [nd.id for nd in job.nodes]
                self._rescale(at_once=True)
            else:
                self._adopt(job.epoch, job.placement, job.nodes, at_once=True)
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
        self._failures, self._retry_at = 0, 0.0
        return True

    def _learn(self, job: c.JobState) -> None:
        """The job's key-group order and cooldown (checked once per registration or resync)."""
        self.order = JobOrder(job.key_groups, self.operators, self._ids())
        if self.order.index is None:
            log.warning("job %r has other key groups than this query's operators: statistics go by key-group id",
                        self.job_id)
        self._cooldown = int(job.policy.cooldown_batches)

    # ------------------------------------------------------------------ placements
    def _adopt(self, epoch: int, placement: Sequence[int], nodes: Sequence[Any], *, at_once: bool = False) -> None:
        """Take the controller's (epoch, placement, nodes): at the next batch boundary, or at once when
        ``at_once`` and nothing has run yet; the epoch label alone when nothing moves. ``nodes``: ids or
        ``NodeState`` documents."""
        if self.order is None or self.order.index is None:
            return
        ids = [nd if isinstance(nd, str) else nd.id for nd in nodes]
        target = Target(int(epoch), ids, self.order.layout(placement))
        self.nodes = ids
        if target.partitions == self.owner.partitions and same_layout(target.layout, self.owner.layout()):
            self.pending = None
            self.owner.relabel(target.epoch)
        elif at_once and self.owner.may_switch_now():
            self.pending = None
            self.owner.switch(target)
        else:
            self.pending = target
            self.received = True

    def take(self) -> Target | None:
        """The placement to apply at this batch boundary, if one arrived."""
        pending, self.pending = self.pending, None
        return pending

    def _resync(self) -> None:
        """Fetch the job and adopt its epoch and placement at the next batch boundary."""
        assert self.client is not None
        try:
            job = self.client.get_job(self.job_id)
        except NotFoundError:
            self.registered = False  # deleted (or a fresh controller database): register again
            return
        self._learn(job)
        self._adopt(job.epoch, job.placement, job.nodes)

    # ------------------------------------------------------------------ scaling
    def scale(self, partitions: int, *, budget: c.Budget | Mapping[str, Any] | None = None,
              at_once: bool = False) -> c.Scaled:
        """Ask the controller to place the job's key groups on ``partitions`` nodes (the current ones kept where
        they can: :func:`~rebalancer_client.spark.layout.node_list`), within ``budget`` (default
        ``ControllerConfig.scale_budget``; None: a full rebalance); the new placement runs from the next batch
        boundary (``at_once``: now, before anything ran)."""
        assert self.client is not None
        cfg = self.config
        scaled = self.client.scale(self.job_id, nodes=node_list(self.nodes, int(partitions)),
                                   budget=cfg.scale_budget if budget is None else budget,
                                   time_limit_s=cfg.time_limit_s)
        log.info("job %r scaled to %d partitions: epoch %d, %d key groups move (%.0f state bytes)", self.job_id,
                 len(scaled.nodes), scaled.epoch, len(scaled.moves), scaled.metrics.migration_bytes)
        self._adopt(scaled.epoch, scaled.placement, scaled.nodes, at_once=at_once)
        return scaled

    def _rescale(self, at_once: bool = False, attempts: int = 3) -> None:
        """Scale the job to the query's partition count. A scale that meets a round executed meanwhile is asked
        again; one the controller cannot plan yet (an empty window) is asked at a later batch (:meth:`talk` tries
        while the node counts differ), the query running its own layout meanwhile."""
        for attempt in range(attempts):
            try:
                self.scale(self.owner.partitions, at_once=at_once)
                return
            except ConflictError as exc:
                if attempt + 1 == attempts:
                    log.warning("job %r not scaled to %d partitions yet (%s); the query runs its own layout "
                                "meanwhile", self.job_id, self.owner.partitions, exc.detail)

    def what_if(self, candidates: Sequence[int | Mapping[str, Any]], **kw: Any) -> c.WhatIfReport:
        """What the job's own window says of other partition counts (``POST /v1/jobs/{id}/what-if``)."""
        assert self.client is not None
        return self.client.job_what_if(self.job_id, candidates=list(candidates), **kw)

    # ------------------------------------------------------------------ per batch
    def talk(self, batch_id: int, load: Layout, state_bytes: Layout | None,
             edges: list[dict[str, Any]] | None) -> str:
        """All controller traffic of one batch (``load`` and ``state_bytes``: per operator, per key group): post
        the statistics and follow the answer — a newer placement is applied at the next boundary; in proposal
        mode a ``significant`` verdict asks for a proposal. Never raises; returns the status: ok, down, skipped
        or conflict."""
        self.received = False
        if not self.registered and self.available():
            try:
                self.start()
            except Exception as exc:  # noqa: BLE001 - a batch never fails on the controller
                self._down("registration", exc)
                return "down"
        if not self.registered or not self.available():
            return "skipped"
        try:
            ack = self._post(batch_id, load, state_bytes, edges)
        except ConflictError as exc:  # our epoch is ahead of the job (a new controller database?)
            log.warning("statistics refused (%s); fetching the job", exc.detail)
            return self._guarded("resync", self._resync, conflict=True)
        except NotFoundError:
            self.registered = False
            return "skipped"
        except Exception as exc:  # noqa: BLE001 - the controller never fails a batch
            self._down("statistics", exc)
            return "down"
        self._failures, self._retry_at = 0, 0.0
        self.decision = d = ack.decision
        status = "ok"
        try:
            if ack.apply is not None:
                self._adopt(ack.apply.epoch, ack.apply.placement, ack.apply.nodes)
            elif self.pending is None and len(self.nodes) != self.owner.partitions:
                self._rescale()
            elif (not self.config.auto and d is not None and d.reason == "significant"
                  and batch_id >= self._ask_after):
                status = (self._propose_in_background(batch_id) if self.config.async_plans else
                          self._guarded("proposal", lambda: self._propose_and_execute(batch_id)))
        except Exception as exc:  # noqa: BLE001 - a malformed answer must not fail the batch either
            self._down("answer", exc)
            return "down"
        return status

    def _post(self, batch_id: int, load: Layout, state_bytes: Layout | None,
              edges: list[dict[str, Any]] | None) -> c.StatsAck:
        """Statistics as arrays in the job's order (or by key-group id when the job's key groups are others)."""
        assert self.client is not None
        if self.order is not None and self.order.index is not None:
            loads, sizes = self.order.arrays(load, state_bytes)
            return self.client.post_stats(self.job_id, batch_id=batch_id, epoch=self.owner.epoch, load=loads,
                                          state_bytes=sizes, communication=edges)
        kgs = [{"id": f"{op}/{k}", "load": float(x),
                "state_bytes": None if state_bytes is None else float(state_bytes[op][k])}
               for op, values in load.items() for k, x in enumerate(values.tolist())]
        return self.client.post_stats(self.job_id, batch_id=batch_id, epoch=self.owner.epoch, key_groups=kgs,
                                      communication=edges)

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

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class LinkOwner:
    """What a driver and an operator chain share as owners of a :class:`ControllerLink` (``None``: no
    controller)."""

    link: ControllerLink | None

    def wait_for_plan(self, timeout: float | None = None) -> None:
        """Wait until a background proposal has finished (tests, orderly shutdown)."""
        if self.link is not None:
            self.link.wait_for_plan(timeout)

    def _talk(self, batch_id: int, load: Layout, state_bytes: Layout | None,
              edges: list[dict[str, Any]] | None) -> tuple[str, bool, float]:
        """A batch's conversation (:meth:`ControllerLink.talk`) as a report's figures: the status, whether a
        placement arrived, the seconds it took."""
        if self.link is None:
            return "disabled", False, 0.0
        t0 = time.perf_counter()
        status = self.link.talk(batch_id, load, state_bytes, edges)
        return status, self.link.received, time.perf_counter() - t0

    def close(self) -> None:
        """Stop the link's background work and free the state's cached blocks (a durable driver first writes its
        last version whole: ``DurabilityConfig.snapshot_on_close``)."""
        if self.link is not None:
            self.link.close()
        self._release()

    def _release(self) -> None:
        raise NotImplementedError
