"""Several keyed operators in one query, as the operators of ONE controller job.

A query often has more than one keyed step: per-user aggregates feeding a per-region top-N, a sessionisation
feeding per-page counts. :class:`OperatorChain` runs such steps in one ``foreachBatch``: stage ``i + 1`` consumes
what stage ``i`` emitted for the batch (its update-mode output: the changed state rows of an aggregation, the rows
a :class:`~rebalancer_client.spark.functions.KeyedFunction` returned). Every stage is a
:class:`~rebalancer_client.spark.driver.RebalancingDriver` without a controller of its own — its own keyed state,
durable under ``<state root>/<operator>``, its own routing table over the same ``partitions`` — and the chain holds the
one
:class:`~rebalancer_client.spark.control.ControllerLink` of the job:

* the job is registered with every stage as an operator (key groups ``<operator>/<k>``, nodes ``p0..p{n-1}``);
* per batch the statistics of all stages go to the controller in one post, with the **communication** between
  consecutive stages: the rows stage ``i`` emits, counted per (source key group, destination key group) by
  :func:`rebalancer_client.spark.stats.communication_stats` — the input ``albic``'s collocation needs
  (ALBIC §4.3.2; the edge ``s → r`` of the communication statistics in ``docs/design.md``);
* a placement covers every operator of the job: at the next batch boundary each stage switches to its part (a
  stage whose part did not change only takes the new epoch label).

Exactly once: each stage commits its own state version ``batch_id``. After a crash between two stages' commits,
Spark replays the batch; the stages that had committed it replay their stored output (not applied again) and the
later stages apply it — so the chain's output is exactly once when every stage's is
(:mod:`rebalancer_client.spark.driver`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from rebalancer_client.spark.config import ControllerConfig, DurabilityConfig
from rebalancer_client.spark.control import ControllerLink, LinkOwner
from rebalancer_client.spark.driver import Output, RebalancingDriver
from rebalancer_client.spark.layout import Layout, Target
from rebalancer_client.spark.reports import BatchReport
from rebalancer_client.spark.stats import communication_stats

log = logging.getLogger("rebalancer.spark")

#: RebalancingDriver arguments that belong to the chain (the job), not to a stage
_JOB_ARGS = ("controller", "durability", "partitions", "output", "on_batch")


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


class OperatorChain(LinkOwner):
    """Keyed operators in sequence inside ``foreachBatch``, rebalanced as one controller job.

    Args:
        spark: the SparkSession.
        stages: one mapping per operator, in order, of :class:`RebalancingDriver` arguments — ``operator`` (its id,
            unique), ``key``, ``aggregations`` or ``function``, ``key_groups``. Stage ``i + 1``'s key columns must
            be in what stage ``i`` emits.
        partitions: the query's partitions, shared by every stage.
        controller: the job's :class:`~rebalancer_client.spark.config.ControllerConfig` (its ``communication`` and
            ``extra_operators`` are the chain's own: the edges between the stages).
        durability: the state root (:class:`~rebalancer_client.spark.config.DurabilityConfig`); stage ``op`` keeps its
            versions under ``<root>/<op>``.
        output: ``f(rows_df, batch_id)`` gets the last stage's output (e.g.
        :class:`rebalancer_client.spark.sink.BatchIdSink`). on_batch: callback called with each :class:`ChainReport`.
    """

    def __init__(self, spark: Any, *, stages: Sequence[Mapping[str, Any]], partitions: int = 8,
                 controller: ControllerConfig | None = None, durability: DurabilityConfig | None = None,
                 output: Output | None = None, on_batch: Callable[[ChainReport], None] | None = None):
        if not stages:
            raise ValueError("an operator chain needs at least one stage")
        ops = [str(s.get("operator", "")) for s in stages]
        if len(set(ops)) != len(ops) or not all(ops):
            raise ValueError(f"every stage needs a unique 'operator' id, got {ops}")
        for s in stages:
            bad = sorted(set(s) & set(_JOB_ARGS))
            if bad:
                raise ValueError(f"stage {s['operator']!r}: {bad} belong to the chain (the job), not to a stage")
        config = controller if controller is not None else ControllerConfig(None)
        if config.communication is not None or config.extra_operators:
            raise ValueError("an operator chain counts its own communication; its stages are its operators")
        self.n = int(partitions)
        dur = durability if durability is not None else DurabilityConfig()
        self._emitted: dict[int, Any] = {}
        self.stages: list[RebalancingDriver] = []
        for i, s in enumerate(stages):
            sink = self._capture(i, then=output if i == len(stages) - 1 else None)
            self.stages.append(RebalancingDriver(
                spark, partitions=self.n, controller=replace(config, client=None),
                durability=dur.under(str(s["operator"])), output=sink, **s))
        self._epoch = 0
        self.link = (ControllerLink(config, self.n, [(st.operator, st.G) for st in self.stages], self)
                     if config.client is not None else None)
        self.on_batch = on_batch
        self.reports: list[ChainReport] = []

    def _capture(self, i: int, then: Output | None = None) -> Output:
        def sink(df: Any, batch_id: int) -> None:
            self._emitted[i] = df
            if then is not None:
                then(df, batch_id)
        return sink

    # ------------------------------------------------------------------ what the controller link sees (Routed)
    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def partitions(self) -> int:
        return self.n

    def layout(self) -> Layout:
        return {st.operator: st.routing.partition_of for st in self.stages}

    def has_layout(self) -> bool:
        return any(st.has_layout() for st in self.stages)

    def may_switch_now(self) -> bool:
        return all(st.may_switch_now() for st in self.stages)

    def switch(self, target: Target) -> None:
        for st in self.stages:
            st.switch(target)
        self._epoch, self.n = target.epoch, target.partitions

    def relabel(self, epoch: int) -> None:
        self._epoch = int(epoch)
        for st in self.stages:
            st.relabel(epoch)

    def start(self) -> bool:
        """Read every stage's last commit record, register the job with every stage as an operator (another
        partition count: the controller places the key groups), then load every stage's committed state."""
        for st in self.stages:
            st._prepare()
        self._epoch = max(st.epoch for st in self.stages)
        if self.link is not None:
            self.link.nodes = self.stages[0].nodes
        registered = self.link.start() if self.link is not None else False
        for st in self.stages:
            st._recover()
        return registered

    # ------------------------------------------------------------------ per batch
    def foreach_batch(self, df: Any, batch_id: int) -> None:
        """The ``foreachBatch`` function: ``stream.writeStream.foreachBatch(chain.foreach_batch)``."""
        self.process(df, batch_id)

    def process(self, df: Any, batch_id: int) -> ChainReport:
        """Run every stage on the batch (stage ``i + 1`` on what stage ``i`` emitted), then post all statistics
        and the communication between the stages in one call."""
        t0 = time.perf_counter()
        batch_id = int(batch_id)
        taken = self.link.take() if self.link is not None else None
        if taken is not None:  # the batch boundary: every stage takes its part of the placement
            for st in self.stages:
                st.pending = taken
            self._epoch, self.n = taken.epoch, taken.partitions
        reports: list[BatchReport] = []
        load: Layout = {}
        state_bytes: Layout = {}
        edges: list[dict[str, Any]] = []
        data = df
        for i, st in enumerate(self.stages):
            self._emitted.pop(i, None)
            rep = st.process(data, batch_id)
            reports.append(rep)
            if not rep.replayed and st.last_stats is not None:
                load[st.operator] = st.last_stats[0]
                if st.last_stats[1] is not None:
                    state_bytes[st.operator] = st.last_stats[1]
            if i + 1 < len(self.stages):
                data = self._emitted.pop(i)
                edges += self._edges(data, st, self.stages[i + 1])
        self._epoch = max(self._epoch, *(r.epoch for r in reports))
        report = ChainReport(batch_id=batch_id, epoch=self._epoch, stages=reports, communication=edges)
        if len(load) < len(self.stages):
            report.controller = "replayed"
        else:
            sizes = state_bytes if len(state_bytes) == len(load) else None
            report.controller, report.plan_received, report.controller_seconds = self._talk(
                batch_id, load, sizes, edges or None)
        report.seconds = time.perf_counter() - t0
        self.reports.append(report)
        if self.on_batch is not None:
            self.on_batch(report)
        return report

    @staticmethod
    def _edges(data: Any, st: RebalancingDriver, nxt: RebalancingDriver) -> list[dict[str, Any]]:
        """The communication from stage ``st`` to ``nxt`` of one batch (best effort)."""
        try:
            return communication_stats(data, st.keys, nxt.keys, src_operator=st.operator,
                                       dst_operator=nxt.operator, src_key_groups=st.G, dst_key_groups=nxt.G)
        except Exception as exc:  # noqa: BLE001 - statistics are best effort, the batch goes on
            log.warning("communication %s -> %s failed: %s", st.operator, nxt.operator, exc)
            return []

    def _release(self) -> None:
        for st in self.stages:
            st.close()
