"""Several keyed operators in one query, as the operators of ONE controller job (issue 15).

A query often has more than one keyed step: per-user aggregates feeding a per-region top-N, a sessionisation
feeding per-page counts. :class:`OperatorChain` runs such steps in one ``foreachBatch``: stage ``i + 1`` consumes
what stage ``i`` emitted for the batch (its update-mode output: the changed state rows of an aggregation, the rows
a :class:`~clients.spark.functions.KeyedFunction` returned). Every stage is a
:class:`~clients.spark.driver.RebalancingDriver` without a controller of its own — its own keyed state, durable
under ``<state root>/<operator>``, its own routing table over the same ``partitions`` — and the chain is the one
:class:`~clients.spark.control.ControllerLink` of the job:

* the job is registered with every stage as an operator (key groups ``<operator>/<k>``, nodes ``p0..p{n-1}``);
* per batch the statistics of all stages go to the controller in one post, with the **communication** between
  consecutive stages: the rows stage ``i`` emits, counted per (source key group, destination key group) by
  :func:`clients.spark.stats.communication_stats` — the input ``albic``'s collocation needs
  (ALBIC §4.3.2; the edge ``s → r`` of DESIGN.md's communication statistics);
* a plan covers every operator of the job: at the next batch boundary each stage switches to its part of the
  assignment (a stage whose part did not change only takes the new epoch label).

Exactly once: each stage commits its own state version ``batch_id``. After a crash between two stages' commits,
Spark replays the batch; the stages that had committed it replay their stored output (not applied again) and the
later stages apply it — so the chain's output is exactly once when every stage's is (:mod:`clients.spark.driver`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from clients.python import RebalancerClient
from clients.spark.control import ControllerLink
from clients.spark.driver import RebalancingDriver
from clients.spark.reports import BatchReport
from clients.spark.stats import communication_stats

log = logging.getLogger("rebalancer.spark")

#: RebalancingDriver arguments that belong to the chain (the job), not to a stage
_JOB_ARGS = ("client", "job_id", "partitions", "checkpoint_location", "state_dir", "algorithm", "params", "budget",
             "window_batches", "time_limit_s", "auto", "cooldown_batches", "load_distance_threshold", "min_gain",
             "noise_sigmas", "load", "extra_operators", "async_plans", "backoff_s", "max_backoff_s", "output",
             "communication")


@dataclass
class ChainReport:
    """One micro-batch of the chain: a :class:`BatchReport` per stage, the controller status and the
    communication edges posted (``{"src", "dst", "rate"}``)."""

    batch_id: int
    epoch: int
    stages: list[BatchReport]
    controller: str = "ok"
    controller_seconds: float = 0.0
    plan_received: bool = False
    communication: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class OperatorChain(ControllerLink):
    """Keyed operators in sequence inside ``foreachBatch``, rebalanced as one controller job.

    Args:
        spark: the SparkSession.
        stages: one mapping per operator, in order, of :class:`RebalancingDriver` arguments — ``operator`` (its id,
            unique), ``key``, ``aggregations`` or ``function``, ``key_groups``, and optionally ``snapshot_every``,
            ``retain_versions``, ``state_stats``, ``send_bytes``. Stage ``i + 1``'s key columns must be in what
            stage ``i`` emits.
        client, job_id, partitions, algorithm, params, budget, window_batches, time_limit_s, auto,
        cooldown_batches, load_distance_threshold, min_gain, noise_sigmas, load, async_plans, backoff_s,
        max_backoff_s: as for :class:`RebalancingDriver`, for the whole job.
        checkpoint_location / state_dir: the state root (default ``<checkpointLocation>/rebalancer-state``); stage
            ``op`` keeps its versions under ``<root>/<op>``.
        output: ``f(rows_df, batch_id)`` gets the last stage's output (e.g. :class:`clients.spark.sink.BatchIdSink`).
        on_batch: callback called with each :class:`ChainReport`.
    """

    def __init__(self, spark, *, stages: Sequence[Mapping[str, Any]], client: RebalancerClient | None = None,
                 job_id: str = "spark-job", partitions: int = 8, checkpoint_location: str | None = None,
                 state_dir: str | None = None, output: Callable[[Any, int], None] | None = None,
                 algorithm: str | None = None, params: Mapping[str, Any] | None = None,
                 budget: Mapping[str, Any] | None = None, window_batches: int = 3, time_limit_s: float = 1.0,
                 auto: bool = False, cooldown_batches: int = 1, load_distance_threshold: float | None = None,
                 min_gain: float = 0.02, noise_sigmas: float | None = 3.0, load: str = "records",
                 async_plans: bool = True, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 on_batch: Callable[[ChainReport], None] | None = None):
        if not stages:
            raise ValueError("an operator chain needs at least one stage")
        ops = [str(s.get("operator", "")) for s in stages]
        if len(set(ops)) != len(ops) or not all(ops):
            raise ValueError(f"every stage needs a unique 'operator' id, got {ops}")
        for s in stages:
            bad = sorted(set(s) & set(_JOB_ARGS))
            if bad:
                raise ValueError(f"stage {s['operator']!r}: {bad} belong to the chain (the job), not to a stage")
        self._init_link(client=client, job_id=job_id, partitions=partitions, algorithm=algorithm, params=params,
                        budget=budget, window_batches=window_batches, time_limit_s=time_limit_s, auto=auto,
                        cooldown_batches=cooldown_batches, load_distance_threshold=load_distance_threshold,
                        min_gain=min_gain, noise_sigmas=noise_sigmas, load=load, extra_operators=(),
                        async_plans=async_plans, backoff_s=backoff_s, max_backoff_s=max_backoff_s)
        root = state_dir or (checkpoint_location.rstrip("/") + "/rebalancer-state" if checkpoint_location else None)
        self._emitted: dict[int, Any] = {}
        self.stages: list[RebalancingDriver] = []
        for i, s in enumerate(stages):
            sink = self._capture(i, then=output if i == len(stages) - 1 else None)
            self.stages.append(RebalancingDriver(
                spark, client=None, partitions=self.n, load=load, window_batches=window_batches,
                state_dir=None if root is None else f"{root.rstrip('/')}/{s['operator']}", output=sink, **s))
        self.on_batch = on_batch
        self.reports: list[ChainReport] = []

    def _capture(self, i: int, then: Callable[[Any, int], None] | None = None) -> Callable[[Any, int], None]:
        def sink(df, batch_id: int) -> None:
            self._emitted[i] = df
            if then is not None:
                then(df, batch_id)
        return sink

    # ------------------------------------------------------------------ hooks of ControllerLink
    def _owned(self) -> list[tuple[str, int]]:
        return [(st.operator, st.G) for st in self.stages]

    def _layout(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for st in self.stages:
            out.update(st.routing.assignment())
        return out

    def _relabel(self, epoch: int) -> None:
        self.epoch = int(epoch)
        for st in self.stages:
            st._relabel(epoch)

    def _has_layout(self) -> bool:
        return any(st._has_layout() for st in self.stages)

    def _boundary_switch_allowed(self) -> bool:
        return all(st._boundary_switch_allowed() for st in self.stages)

    def _switch(self, epoch: int, assignment: Mapping[str, str]) -> None:
        for st in self.stages:
            st._switch(epoch, st._own(assignment))
        self.epoch = int(epoch)
        self.batches_since_change = 0

    def start(self) -> bool:
        """Load every stage's last committed state, then register the job with every stage as an operator."""
        for st in self.stages:
            st._recover()
        self.epoch = max(st.epoch for st in self.stages)
        return super().start()

    # ------------------------------------------------------------------ per batch
    def foreach_batch(self, df, batch_id: int) -> None:
        """The ``foreachBatch`` function: ``stream.writeStream.foreachBatch(chain.foreach_batch)``."""
        self.process(df, batch_id)

    def process(self, df, batch_id: int) -> ChainReport:
        """Run every stage on the batch (stage ``i + 1`` on what stage ``i`` emitted), then post all statistics
        and the communication between the stages in one call."""
        t0 = time.perf_counter()
        batch_id = int(batch_id)
        if self.pending is not None:  # the batch boundary: every stage takes its part of the plan
            epoch, assignment = self.pending
            for st in self.stages:
                st.pending = (epoch, st._own(assignment))
            self.epoch, self.pending, self.batches_since_change = int(epoch), None, 0
        reports: list[BatchReport] = []
        stats: list[dict[str, Any]] = []
        edges: list[dict[str, Any]] = []
        data = df
        for i, st in enumerate(self.stages):
            self._emitted.pop(i, None)
            rep = st.process(data, batch_id)
            reports.append(rep)
            if not rep.replayed:
                stats += st.last_stats
            if i + 1 < len(self.stages):
                data = self._emitted.pop(i)
                nxt = self.stages[i + 1]
                try:
                    edges += communication_stats(data, st.keys, nxt.keys, src_operator=st.operator,
                                                 dst_operator=nxt.operator, src_key_groups=st.G,
                                                 dst_key_groups=nxt.G)
                except Exception as exc:  # noqa: BLE001 - statistics are best effort, the batch goes on
                    log.warning("communication %s -> %s failed: %s", st.operator, nxt.operator, exc)
        self.epoch = max(self.epoch, *(r.epoch for r in reports))
        report = ChainReport(batch_id=batch_id, epoch=self.epoch, stages=reports, communication=edges)
        if stats:
            t_talk = time.perf_counter()
            report.controller = self._talk(batch_id, stats, edges or None, report)
            report.controller_seconds = time.perf_counter() - t_talk
            self.batches_since_change += 1
        else:
            report.controller = "replayed"
        report.seconds = time.perf_counter() - t0
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    def wait_for_plan(self, timeout: float | None = None) -> None:
        """Wait until a background proposal (``async_plans``) has finished."""
        if self._inflight is not None:
            self._inflight.result(timeout)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for st in self.stages:
            st.close()
