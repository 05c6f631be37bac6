"""``RebalancerClient``: the synchronous HTTP client of the controller's /v1 API (issue 7), on httpx.

Design (httpx style: small typed module, explicit exceptions, no global state; only httpx and the standard library):

* **Bounded in time**: one attempt ends within ``timeout`` seconds and a whole call, retries and backoff included,
  within ``deadline`` seconds — however slowly the server sends (the default transport bounds every socket
  operation by the deadline, :mod:`clients.python._transport`). Past it: :class:`DeadlineExceeded`.
* **Bounded in memory**: a response larger than ``max_response_bytes`` is not read to the end
  (:class:`ResponseTooLarge`).
* **Retries with exponential backoff and full jitter** (``backoff * 2**attempt``, capped at ``max_backoff``; a
  numeric or HTTP-date ``Retry-After`` is honoured, anything else ignored) for *idempotent* calls only: GET, PUT,
  DELETE, the stateless POSTs (``/v1/plans``, ``/v1/evaluate``, ``/v1/what-if/scaling``, ``/v1/partitioning``) and
  ``POST /v1/jobs/{id}/stats``, which the controller counts once per ``batch_id``. Retried conditions: connection
  errors, timeouts, 429, 502, 503, 504, and only while the sleep still fits the deadline. Non-idempotent calls
  (creating or executing a proposal, changing nodes — a repeated node change is not the same change) are retried
  only when the request provably never reached the server (connect errors).
* **Path segments are URL-encoded** (a job id is one segment: ``"victim?x="`` never addresses ``victim``) and ``.``,
  ``..`` and empty ids are refused (:class:`InvalidArgument`).
* **Typed results** read strictly (:mod:`clients.python.models`: a malformed 2xx body is a
  :class:`MalformedResponse`) and **one exception class per failure** (:mod:`clients.python.errors`): 409 →
  ``ConflictError``, 404 → ``NotFoundError``, 422 → ``ValidationError``, 401/403 → ``AuthenticationError``,
  413 → ``PayloadTooLargeError``, 5xx → ``ServerError``; unreachable → ``ControllerUnavailable``. Every error is a
  :class:`RebalancerError`.

Example::

    from clients.python import RebalancerClient
    with RebalancerClient("http://127.0.0.1:8000") as rc:
        job = rc.put_job("clicks", nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 120}],
                         algorithm="flux", budget={"max_migrations": 10})
        rc.post_stats("clicks", batch_id=0, epoch=job.epoch, key_groups=[{"id": "agg/0", "load": 12.0}])
        prop = rc.create_proposal("clicks")
        ex = rc.execute_proposal("clicks", prop.id)   # ConflictError if the epoch moved meanwhile
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clients.python._http import HTTPSession, segment
from clients.python._parse import Doc
from clients.python.models import (
    AlgorithmInfo,
    Evaluation,
    Execution,
    History,
    Job,
    JobSummary,
    PlanResult,
    Proposal,
    ScalingReport,
    StatsAck,
)

__all__ = ["RebalancerClient", "segment"]


class RebalancerClient(HTTPSession):
    """Client of one controller.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000`` (the ``/v1`` prefix is added by the methods).
        token: bearer token when the controller runs with ``REBALANCER_API_TOKENS``.
        timeout: total seconds of one attempt (connect, send and the whole response).
        connect_timeout: connect timeout in seconds of one attempt.
        retries: extra attempts for retryable failures (0 = try once).
        backoff: first backoff in seconds; attempt ``a`` sleeps ``uniform(0, min(max_backoff, backoff*2**a))``.
        max_backoff: cap of one sleep.
        deadline: total seconds of one call, retries and sleeps included (default: ``timeout * (retries + 1) +
            max_backoff * retries``, the most the retry policy can use).
        max_response_bytes: the largest response body read (default 128 MiB; error bodies: 1 MiB).
        proposal_poll_timeout: how long :meth:`create_proposal` polls a 202 task before returning it pending.
        transport: an httpx transport; default: a connection pool whose every socket operation is bounded by the
            deadline (a custom transport is bounded only between the chunks of a body). Proxy variables of the
            environment are not used.
        verify: TLS verification of the default transport (``True``, a CA bundle path or an ``ssl.SSLContext``).
        seed: seed of the backoff jitter (reproducible tests).
    """

    # ------------------------------------------------------------------ operations
    def health(self) -> dict[str, Any]:
        """``GET /healthz``."""
        def read(doc: Any) -> dict[str, Any]:
            d = Doc(doc, "health")
            d.text("status")
            return dict(d.d)
        return self._typed(read, "GET", "/healthz")

    def is_healthy(self) -> bool:
        """True when ``/healthz`` answers 200 (no retries; never raises)."""
        try:
            self.request("GET", "/healthz", retries=0, expect=(200,))
            return True
        except Exception:  # noqa: BLE001 - a health probe reports, it does not raise
            return False

    def algorithms(self) -> list[AlgorithmInfo]:
        """``GET /v1/algorithms``: the planners this server runs, with their parameters."""
        return self._typed(self._list(AlgorithmInfo.from_json, "algorithms"), "GET", "/v1/algorithms")

    # ------------------------------------------------------------------ stateless
    def plan(self, problem: Mapping[str, Any], algorithm: str = "albic-milp", *,
             params: Mapping[str, Any] | None = None, time_limit_s: float = 1.0) -> PlanResult:
        """``POST /v1/plans``: plan a problem document (stateless, idempotent)."""
        body = {"problem": problem, "algorithm": algorithm, "params": dict(params or {}), "time_limit_s": time_limit_s}
        return self._typed(PlanResult.from_json, "POST", "/v1/plans", json=body, idempotent=True)

    def evaluate(self, problem: Mapping[str, Any], plan: Mapping[str, Any] | PlanResult) -> Evaluation:
        """``POST /v1/evaluate``: before/after metrics of a plan (a plan document or a :class:`PlanResult`)."""
        doc = plan.raw if isinstance(plan, PlanResult) else plan
        return self._typed(Evaluation.from_json, "POST", "/v1/evaluate", json={"problem": problem, "plan": doc},
                           idempotent=True)

    def what_if_scaling(self, problem: Mapping[str, Any], candidates: Sequence[Any], *,
                        target_load_distance: float | None = None, max_utilisation: float | None = None,
                        algorithm: str | None = None, params: Mapping[str, Any] | None = None,
                        time_limit_s: float | None = None) -> ScalingReport:
        """``POST /v1/what-if/scaling``: load distance, migrations and rounds per candidate cluster size."""
        body: dict[str, Any] = {"problem": problem, "candidates": list(candidates)}
        for name, value in (("target_load_distance", target_load_distance), ("max_utilisation", max_utilisation),
                            ("algorithm", algorithm), ("params", params), ("time_limit_s", time_limit_s)):
            if value is not None:
                body[name] = dict(value) if isinstance(value, Mapping) else value
        return self._typed(ScalingReport.from_json, "POST", "/v1/what-if/scaling", json=body, idempotent=True)

    def partitioning(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/partitioning``: a Gedik partitioning-function document for a spec."""
        return self._typed(lambda d: dict(Doc(d, "partitioning").d), "POST", "/v1/partitioning", json=dict(spec),
                           idempotent=True)

    # ------------------------------------------------------------------ jobs
    def list_jobs(self) -> list[JobSummary]:
        """``GET /v1/jobs``: every registered job with its epoch and sizes."""
        return self._typed(self._list(JobSummary.from_json, "jobs"), "GET", "/v1/jobs")

    def put_job(self, job_id: str, *, nodes: Sequence[Any], operators: Sequence[Mapping[str, Any]] | None = None,
                key_groups: Sequence[Mapping[str, Any]] | None = None, algorithm: str | None = None,
                params: Mapping[str, Any] | None = None, budget: Mapping[str, Any] | None = None,
                window_batches: int | None = None, auto: Mapping[str, Any] | None = None,
                **extra: Any) -> Job:
        """``PUT /v1/jobs/{job_id}``: register a job (201) with epoch 0 and its assignment; the same topology again
        answers 200 with the job as it is (epoch kept, settings updated); another topology is a ``ConflictError``."""
        body: dict[str, Any] = {"nodes": list(nodes)}
        if operators is not None:
            body["operators"] = [dict(o) for o in operators]
        if key_groups is not None:
            body["key_groups"] = [dict(k) for k in key_groups]
        for name, value in (("algorithm", algorithm), ("params", params), ("budget", budget),
                            ("window_batches", window_batches), ("auto", auto)):
            if value is not None:
                body[name] = dict(value) if isinstance(value, Mapping) else value
        body.update(extra)
        return self._typed(Job.from_json, "PUT", f"/v1/jobs/{segment(job_id, 'job_id')}", json=body)

    def get_job(self, job_id: str) -> Job:
        """``GET /v1/jobs/{job_id}``."""
        return self._typed(Job.from_json, "GET", f"/v1/jobs/{segment(job_id, 'job_id')}")

    def delete_job(self, job_id: str) -> None:
        """``DELETE /v1/jobs/{job_id}`` (a retry that finds the job gone after an unanswered attempt succeeds)."""
        self.request("DELETE", f"/v1/jobs/{segment(job_id, 'job_id')}", ok_after_retry=(404,))

    def post_stats(self, job_id: str, *, batch_id: int, epoch: int, key_groups: Sequence[Mapping[str, Any]],
                   communication: Sequence[Mapping[str, Any]] | None = None, retries: int | None = None) -> StatsAck:
        """``POST /v1/jobs/{job_id}/stats`` (idempotent per ``batch_id``, so retried).

        ``key_groups``: ``[{"id": "agg/5", "load": 123.0, "state_bytes": 4096}]``. Raises ``ConflictError`` when
        ``epoch`` is newer than the job's; an older epoch is accepted and the ack's ``epoch`` tells the current one.
        """
        body: dict[str, Any] = {"batch_id": int(batch_id), "epoch": int(epoch), "key_groups": list(key_groups)}
        if communication:
            body["communication"] = list(communication)
        return self._typed(StatsAck.from_json, "POST", f"/v1/jobs/{segment(job_id, 'job_id')}/stats", json=body,
                           idempotent=True, retries=retries)

    def create_proposal(self, job_id: str, *, algorithm: str | None = None, params: Mapping[str, Any] | None = None,
                        time_limit_s: float | None = None, wait_s: float | None = None,
                        wait: bool = True) -> Proposal:
        """``POST /v1/jobs/{job_id}/proposals``: a dry-run plan from the current window.

        ``wait_s`` asks the server to wait that long for the solve before answering 202 (this call's timeout and
        deadline grow by ``wait_s``). With ``wait``, a pending
        proposal is polled (``GET .../proposals/{id}``) until it is no longer pending or ``proposal_poll_timeout``
        has passed; the returned proposal may then still be pending (``proposal.ready`` is False). The call takes
        at most the POST's deadline, ``proposal_poll_timeout`` and one GET's deadline.
        """
        body: dict[str, Any] = {}
        for name, value in (("algorithm", algorithm), ("params", params), ("time_limit_s", time_limit_s),
                            ("wait_s", wait_s)):
            if value is not None:
                body[name] = dict(value) if isinstance(value, Mapping) else value
        waits = float(wait_s or 0.0)  # the server holds the answer up to wait_s: the attempt may take that longer
        prop = self._typed(Proposal.from_json, "POST", f"/v1/jobs/{segment(job_id, 'job_id')}/proposals", json=body,
                           idempotent=False, timeout=self.timeout + waits, deadline=self.deadline + waits)
        if wait and prop.status == "pending":
            for _ in self._poll(self.proposal_poll_timeout):
                prop = self._typed(Proposal.from_json, "GET", self._proposal_path(job_id, prop.id))
                if prop.status != "pending":
                    break
        return prop

    def _poll(self, seconds: float) -> Iterator[None]:
        """Sleep 0.05, 0.1, ... 1 s between polls, then yield, until ``seconds`` have passed."""
        end, delay = time.monotonic() + seconds, 0.05
        while time.monotonic() + delay < end:
            time.sleep(delay)
            delay = min(1.0, delay * 2)
            yield

    @staticmethod
    def _proposal_path(job_id: str, proposal_id: str) -> str:
        return f"/v1/jobs/{segment(job_id, 'job_id')}/proposals/{segment(proposal_id, 'proposal_id')}"

    def get_proposal(self, job_id: str, proposal_id: str) -> Proposal:
        """``GET /v1/jobs/{job_id}/proposals/{id}``."""
        return self._typed(Proposal.from_json, "GET", self._proposal_path(job_id, proposal_id))

    def execute_proposal(self, job_id: str, proposal_id: str) -> Execution:
        """``POST /v1/jobs/{job_id}/proposals/{id}/execute`` → the new epoch.

        Raises:
            ConflictError: the job's epoch is no longer the proposal's ``base_epoch`` (another execute won, nodes
                changed, or it was executed already), or the proposal is pending or failed (409).
        """
        return self._typed(Execution.from_json, "POST", self._proposal_path(job_id, proposal_id) + "/execute",
                           idempotent=False)

    def change_nodes(self, job_id: str, *, add: Sequence[Any] = (), remove: Sequence[str] = (),
                     delete: Sequence[str] = ()) -> Job:
        """``POST /v1/jobs/{job_id}/nodes``: add nodes, mark nodes removing, or delete empty removing nodes.

        Not idempotent on the server (each change is a new epoch; a repeated ``delete`` is a 422), so it is retried
        only when the request never reached the server. After a :class:`ControllerUnavailable`, :meth:`get_job`
        tells whether the change happened."""
        body: dict[str, Any] = {"add": list(add), "remove": list(remove)}
        if delete:
            body["delete"] = list(delete)
        return self._typed(Job.from_json, "POST", f"/v1/jobs/{segment(job_id, 'job_id')}/nodes", json=body,
                           idempotent=False)

    def history(self, job_id: str, *, limit: int | None = None) -> History:
        """``GET /v1/jobs/{job_id}/history``: epochs (oldest first) with their plans and metrics."""
        params = None if limit is None else {"limit": int(limit)}
        return self._typed(History.from_json, "GET", f"/v1/jobs/{segment(job_id, 'job_id')}/history",
                           params=params)
