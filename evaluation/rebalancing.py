"""Rebalancing runs against a controller: synthetic statistics streams posted batch by batch, the controller's
placements applied as a driver applies them, migrations and imbalance recorded per batch.

Streams (per batch, the load of each key group; Poisson counts around a rate per key group):

* ``steady`` — every key group at the same rate: any imbalance is sampling noise;
* ``drifting`` — each key group's rate follows a slow multiplicative random walk (the load shifts gradually);
* ``shifting`` — a block of hot key groups (``hot`` × the rate) that jumps to another block at ``shift_at``.

:func:`run` drives one job like the Spark driver does: it posts each batch's loads as an array in the job's key
group order with the epoch it ran under; a placement in the answer (``apply``) is adopted from the next batch on.
In proposal mode it asks for a proposal when the controller's verdict is ``significant`` and executes it when the
proposal's verdict says it is worth it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

STREAMS = ("steady", "drifting", "shifting")


def stream(kind: str, *, key_groups: int = 120, batches: int = 30, rate: float = 208.0, hot: float = 3.0,
           block: int = 15, shift_at: int | None = None, drift: float = 0.05, seed: int = 0) -> Iterator[np.ndarray]:
    """The loads of each batch (float64, one per key group)."""
    rng = np.random.default_rng(seed)
    lam = np.full(key_groups, float(rate))
    if kind == "shifting":
        at = batches // 2 if shift_at is None else shift_at
        first, second = np.arange(block), (np.arange(block) + key_groups // 2) % key_groups
    elif kind not in STREAMS:
        raise ValueError(f"stream must be one of {STREAMS}, got {kind!r}")
    for b in range(batches):
        if kind == "drifting":
            lam *= np.exp(rng.normal(0.0, drift, key_groups))
        elif kind == "shifting":
            lam = np.full(key_groups, float(rate))
            lam[first if b < at else second] *= hot
        yield rng.poisson(lam).astype(np.float64)


def load_distance(loads: np.ndarray, placement: np.ndarray, nodes: int) -> float:
    """max over nodes of |node load − mean node load| (equal capacities)."""
    per_node = np.bincount(placement, weights=loads, minlength=nodes)
    return float(np.abs(per_node - per_node.mean()).max())


@dataclass
class Trace:
    """One run: per batch, the epoch it ran under, the key groups moved before it, its load distance under the
    placement it ran with, and the controller's verdict."""

    epochs: list[int] = field(default_factory=list)
    migrations: list[int] = field(default_factory=list)
    load_distance: list[float] = field(default_factory=list)
    mean_node_load: list[float] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)
    proposals: int = 0

    @property
    def total_migrations(self) -> int:
        return int(sum(self.migrations))

    def first_migration(self, after: int = 0) -> int | None:
        """The first batch at or after ``after`` that ran on a new placement."""
        return next((b for b, m in enumerate(self.migrations) if b >= after and m), None)

    def as_dict(self) -> dict[str, Any]:
        return {"epochs": self.epochs, "migrations": self.migrations, "load_distance": self.load_distance,
                "mean_node_load": self.mean_node_load, "reasons": self.reasons, "proposals": self.proposals,
                "total_migrations": self.total_migrations}


def run(client: Any, job_id: str, loads: Iterator[np.ndarray], *, nodes: int = 8, key_groups: int = 120,
        auto: bool = True, policy: dict[str, Any] | None = None, algorithm: str | None = None,
        window_batches: int = 5, time_limit_s: float | None = None, wait_rounds: bool = True) -> Trace:
    """Register ``job_id`` (operator ``agg`` with ``key_groups`` key groups on ``nodes`` nodes) and post every
    batch of ``loads``; ``client`` is a :class:`rebalancer_client.RebalancerClient`. ``wait_rounds``: after a post
    that started an automatic round, wait until the round has concluded before the next batch (as when a batch
    takes longer than the solve), so the run does not depend on the machine's speed."""
    spec: dict[str, Any] = {"nodes": [f"p{i}" for i in range(nodes)],
                            "operators": [{"id": "agg", "key_groups": key_groups}],
                            "window_batches": window_batches, "auto": auto, "policy": policy or {}}
    if algorithm:
        spec["algorithm"] = algorithm
    if time_limit_s is not None:
        spec["time_limit_s"] = time_limit_s
    job = client.put_job(job_id, spec)
    placement, epoch, pending = np.array(job.placement), job.epoch, None
    trace = Trace()
    for b, batch in enumerate(loads):
        moved = 0
        if pending is not None:  # a placement received after the previous batch applies from this one on
            moved = int(np.count_nonzero(pending[1] != placement))
            epoch, placement, pending = pending[0], pending[1], None
        ack = client.post_stats(job_id, batch_id=b, epoch=epoch, load=batch.tolist())
        trace.epochs.append(epoch)
        trace.migrations.append(moved)
        trace.load_distance.append(load_distance(batch, placement, nodes))
        trace.mean_node_load.append(float(batch.sum() / nodes))
        trace.reasons.append(None if ack.decision is None else ack.decision.reason)
        if ack.apply is not None:
            pending = (ack.apply.epoch, np.array(ack.apply.placement))
        elif not auto and ack.decision is not None and ack.decision.reason == "significant":
            trace.proposals += 1
            prop = client.create_proposal(job_id)
            if prop.decision is not None and prop.decision.worth:
                ex = client.execute_proposal(job_id, prop.id)
                pending = (ex.epoch, np.array(ex.placement))
        if wait_rounds and ack.decision is not None and ack.decision.reason == "started":
            _wait_for_round(client, job_id)
    return trace


def _wait_for_round(client: Any, job_id: str, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        decision = client.get_job(job_id).decision
        if decision is None or decision.reason != "started":
            return
        time.sleep(0.02)
    raise TimeoutError(f"the automatic round of {job_id!r} did not conclude within {timeout:g} s")
