"""The integration's per-batch figures next to Spark's own streaming progress.

:class:`RebalancerProgressListener` is a Spark ``StreamingQueryListener``: register it with
``spark.streams.addListener(RebalancerProgressListener(driver))`` and, for every progress event Spark publishes
(``onQueryProgress``: batch id, input rows, durations), it emits one record that carries Spark's fields and the
driver's :class:`~rebalancer_client.spark.reports.BatchReport` of the same batch id — max/mean records per partition,
moved key groups and bytes, the committed state version, bytes written, the controller's status and latency — to
``sink`` (default: the ``rebalancer.spark`` logger, one JSON line). Works for a
:class:`~rebalancer_client.spark.driver.RebalancingDriver` and an :class:`~rebalancer_client.spark.chain.OperatorChain`
(one entry per stage). The listener runs in the driver's Python process (PySpark calls it back from the JVM's listener
bus, after the batch's ``foreachBatch`` has returned), so the report it looks up is complete.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger("rebalancer.spark")

_FIGURES = ("epoch", "records", "rebalanced_max_over_mean", "migrations", "moved_bytes", "moved_rows",
            "state_version", "state_bytes", "written_bytes", "commit_seconds", "controller", "controller_seconds",
            "replayed", "recovered", "seconds")


def _figures(report: Any) -> dict[str, Any]:
    out = {k: getattr(report, k) for k in _FIGURES}
    if isinstance(out["rebalanced_max_over_mean"], float) and math.isnan(out["rebalanced_max_over_mean"]):
        out["rebalanced_max_over_mean"] = None  # an empty or replayed batch; NaN is not JSON
    return out


def batch_figures(owner: Any, batch_id: int) -> dict[str, Any] | None:
    """The figures of ``batch_id`` from a driver's or a chain's reports (the latest report of that id), or None."""
    for rep in reversed(owner.reports):
        if rep.batch_id != batch_id:
            continue
        if hasattr(rep, "stages"):  # an OperatorChain report
            return {"epoch": rep.epoch, "controller": rep.controller, "controller_seconds": rep.controller_seconds,
                    "communication_edges": len(rep.communication), "seconds": rep.seconds,
                    "stages": {st.operator: _figures(r) for st, r in zip(owner.stages, rep.stages, strict=True)}}
        return _figures(rep)
    return None


class RebalancerProgressListener(StreamingQueryListener):
    """Joins Spark's ``QueryProgressEvent`` with the driver's report of the same batch (see the module docstring).

    Args:
        owner: a :class:`RebalancingDriver` or an :class:`OperatorChain`.
        sink: ``f(record)`` for each joined record; default: log it as one JSON line.
        query_name: only events of the query with this name (default: every query).

    The joined records are also kept in :attr:`events` (in arrival order).
    """

    def __init__(self, owner: Any, sink: Callable[[dict[str, Any]], None] | None = None,
                 query_name: str | None = None):
        self.owner = owner
        self.sink = sink
        self.query_name = query_name
        self.events: list[dict[str, Any]] = []

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 - Spark's listener API
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        p = event.progress
        if self.query_name is not None and p.name != self.query_name:
            return
        record = {"id": str(p.id), "runId": str(p.runId), "name": p.name, "batchId": int(p.batchId),
                  "timestamp": p.timestamp, "numInputRows": int(p.numInputRows),
                  "durationMs": dict(p.durationMs), "rebalancer": batch_figures(self.owner, int(p.batchId))}
        self.events.append(record)
        try:
            if self.sink is not None:
                self.sink(record)
            else:
                log.info("progress %s", json.dumps(record, default=str))
        except Exception as exc:  # noqa: BLE001 - a listener must never break Spark's listener bus
            log.warning("progress sink failed: %s", exc)

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass
