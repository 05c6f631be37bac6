"""Proposal mode of a job's conversation with the controller (``ControllerConfig.auto=False``): a proposal is asked
for only when a statistics answer's verdict says ``significant``, executed only when the controller judged it
``worth`` it, and asked for off the batch's critical path (a background thread) unless ``async_plans`` is off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rebalancer_client import RebalancerClient
from rebalancer_client import contract as c

if TYPE_CHECKING:
    from rebalancer_client.spark.config import ControllerConfig
    from rebalancer_client.spark.layout import Routed, Target

log = logging.getLogger("rebalancer.spark")


class Proposing:
    """The proposal-mode part of :class:`rebalancer_client.spark.control.ControllerLink`."""

    client: RebalancerClient | None
    job_id: str
    config: ControllerConfig
    owner: Routed
    pending: Target | None
    nodes: list[str]
    decision: c.Decision | None
    proposals: int
    _cooldown: int
    _ask_after: int
    _pool: ThreadPoolExecutor | None
    _inflight: Future[str] | None

    def _guarded(self, what: str, fn: Callable[[], object], conflict: bool = False) -> str:
        raise NotImplementedError

    def _resync(self) -> None:
        raise NotImplementedError

    def _adopt(self, epoch: int, placement: Sequence[int], nodes: Sequence[Any], *, at_once: bool = False) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ proposal mode
    def _propose_in_background(self, batch_id: int) -> str:
        """Ask for (and execute) a proposal on a background thread: the batch does not wait for the solver; the
        placement lands in ``pending`` and is applied at the first batch boundary after it arrived."""
        if self.pending is not None or (self._inflight is not None and not self._inflight.done()):
            return "ok"  # a placement waits for its boundary, or a proposal is being computed
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rebalancer-plan")
        self._inflight = self._pool.submit(self._guarded, "proposal", lambda: self._propose_and_execute(batch_id))
        return "ok"

    def _propose_and_execute(self, batch_id: int) -> None:
        prop = self.propose(batch_id)
        if prop is not None:
            self.execute(prop)

    def propose(self, batch_id: int = -1) -> c.Proposal | None:
        """A proposal from the current window, when the controller judged it worth executing; else ``None``
        (and no proposal is asked for before ``cooldown_batches`` more batches)."""
        assert self.client is not None
        self.proposals += 1
        prop = self.client.create_proposal(self.job_id, wait_s=max(2.0, 2 * (self.config.time_limit_s or 1.0)))
        if prop.status != "ready" or prop.decision is None or not prop.decision.worth:
            self._ask_after = batch_id + max(1, self._cooldown)
            if prop.decision is not None:
                self.decision = prop.decision
            return None
        if prop.base_epoch != self.owner.epoch:
            self._resync()
            return None
        return prop

    def execute(self, prop: c.Proposal) -> None:
        """Execute a proposal; its placement is applied at the next batch boundary. Raises ConflictError when the
        job moved past the proposal's base epoch."""
        assert self.client is not None
        ex = self.client.execute_proposal(self.job_id, prop.id)
        self._adopt(ex.epoch, ex.placement, self.nodes)

    def apply_proposal(self, prop: c.Proposal) -> str:
        """Execute ``prop`` and never raise: ``"ok"`` (applied at the next boundary), ``"conflict"`` (the job had
        moved on: its current placement is adopted at the next boundary instead) or ``"down"``."""
        return self._guarded("execute", lambda: self.execute(prop))

    def wait_for_plan(self, timeout: float | None = None) -> None:
        """Wait until a background proposal has finished (tests, orderly shutdown)."""
        if self._inflight is not None:
            self._inflight.result(timeout)
