"""``RebalancerClient``: the synchronous HTTP client of the controller's /v1 API, on httpx.

Design (httpx style: small typed module, explicit exceptions, no global state; only httpx and the standard library):

* **Bounded in time**: one attempt ends within ``timeout`` seconds and a whole call, retries and backoff included,
  within ``deadline`` seconds — however slowly the server sends (the default transport bounds every socket
  operation by the deadline, :mod:`rebalancer_client._transport`). Past it: :class:`DeadlineExceeded`.
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
* **Typed requests and results**: the documents of :mod:`rebalancer_client.contract`, the controller's own; answers
  are read strictly (:func:`rebalancer_client.wire.read`: a malformed 2xx body is a :class:`MalformedResponse`).
* **One exception class per failure** (:mod:`rebalancer_client.errors`): 409 → ``ConflictError``, 404 →
  ``NotFoundError``, 422 → ``ValidationError``, 401/403 → ``AuthenticationError``, 413 → ``PayloadTooLargeError``,
  5xx → ``ServerError``; unreachable → ``ControllerUnavailable``. Every error is a :class:`RebalancerError`.

Example::

    from rebalancer_client import RebalancerClient
    with RebalancerClient("http://127.0.0.1:8000") as rc:
        job = rc.put_job("clicks", nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 4}],
                         algorithm="flux", budget={"max_migrations": 10})
        ack = rc.post_stats("clicks", batch_id=0, epoch=job.epoch, load=[12.0, 3.0, 5.0, 1.0])
        prop = rc.create_proposal("clicks")
        if prop.decision and prop.decision.worth:
            ex = rc.execute_proposal("clicks", prop.id)   # ConflictError if the epoch moved meanwhile
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from rebalancer_client import contract as c
from rebalancer_client._http import HTTPSession, segment
from rebalancer_client.wire import dump, read

__all__ = ["RebalancerClient", "segment"]

T = TypeVar("T")


def _document(cls: type[T], value: T | Mapping[str, Any]) -> Any:
    """A request document as JSON-ready data: a contract document, or a mapping sent as it is."""
    return dump(value) if isinstance(value, cls) else dict(value)  # type: ignore[arg-type]


class RebalancerClient(HTTPSession):
    """Client of one controller.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000`` (the ``/v1`` prefix is added by the methods), or a list of the
            URLs of the controller's replicas (PostgreSQL): a call goes to the one that served last and moves on to
            the leader a standby names (when it is one of these URLs) or to the next URL when one cannot be reached,
            times out or is a standby. A standby did nothing, so any call is sent again; after a timeout only
            idempotent calls are (statistics are counted once per ``batch_id``, an execute is guarded by its
            proposal's ``base_epoch``).
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

    def _get(self, cls: type[T], method: str, path: str, **kw: Any) -> T:
        """The answer of ``method path`` read as the document ``cls``."""
        return self._typed(lambda doc: read(cls, doc), method, path, **kw)

    def _get_list(self, cls: type[T], method: str, path: str, **kw: Any) -> list[T]:
        """The answer of ``method path`` read as a list of documents ``cls``."""
        return self._typed(lambda doc: cast("list[T]", read(list[cls], doc)), method, path,  # type: ignore[valid-type]
                           **kw)

    # ------------------------------------------------------------------ operations
    def health(self) -> c.Health:
        """``GET /healthz``."""
        return self._get(c.Health, "GET", "/healthz")

    def is_healthy(self) -> bool:
        """True when ``/healthz`` answers 200 (no retries; never raises)."""
        try:
            self.request("GET", "/healthz", retries=0, expect=(200,))
            return True
        except Exception:  # noqa: BLE001 - a health probe reports, it does not raise
            return False

    def algorithms(self) -> list[c.Algorithm]:
        """``GET /v1/algorithms``: the planners this server runs, with their parameters."""
        return self._get_list(c.Algorithm, "GET", "/v1/algorithms")

    # ------------------------------------------------------------------ stateless
    def plan(self, problem: c.Problem | Mapping[str, Any], algorithm: str | None = None, *,
             params: Mapping[str, Any] | None = None, time_limit_s: float | None = None) -> c.Plan:
        """``POST /v1/plans``: plan a problem document (stateless, idempotent)."""
        body = {"problem": _document(c.Problem, problem), "algorithm": algorithm, "params": dict(params or {}),
                "time_limit_s": time_limit_s}
        return self._get(c.Plan, "POST", "/v1/plans", json=_some(body), idempotent=True)

    def evaluate(self, problem: c.Problem | Mapping[str, Any], plan: c.Plan | Mapping[str, Any]) -> c.Evaluation:
        """``POST /v1/evaluate``: before/after metrics of a plan (a plan document, or its ``assignment``)."""
        doc = {"assignment": plan.assignment, "moves": dump(plan.moves)} if isinstance(plan, c.Plan) else dict(plan)
        body = {"problem": _document(c.Problem, problem), "plan": doc}
        return self._get(c.Evaluation, "POST", "/v1/evaluate", json=body,
                         idempotent=True)

    def what_if_scaling(self, problem: c.Problem | Mapping[str, Any], candidates: Sequence[Any], *,
                        target_load_distance: float | None = None, max_utilisation: float | None = None,
                        algorithm: str | None = None, params: Mapping[str, Any] | None = None,
                        time_limit_s: float | None = None) -> c.WhatIfReport:
        """``POST /v1/what-if/scaling``: load distance, migrations and rounds per candidate cluster."""
        body = {"problem": _document(c.Problem, problem), "candidates": dump(list(candidates)),
                "target_load_distance": target_load_distance, "max_utilisation": max_utilisation,
                "algorithm": algorithm, "params": None if params is None else dict(params),
                "time_limit_s": time_limit_s}
        return self._get(c.WhatIfReport, "POST", "/v1/what-if/scaling",
                         json=_some(body), idempotent=True)

    def partitioning(self, spec: c.PartitioningSpec | Mapping[str, Any]) -> c.PartitionFunction:
        """``POST /v1/partitioning``: the Gedik partitioning-function document built for a spec (a
        :class:`~rebalancer_client.contract.PartitioningSpec` or a mapping; its ``previous`` may be a function
        document this method returned)."""
        return self._get(c.PartitionFunction, "POST", "/v1/partitioning", json=dump(spec, omit_none=True),
                         idempotent=True)

    # ------------------------------------------------------------------ jobs
    @staticmethod
    def _job(job_id: str, tail: str = "") -> str:
        return f"/v1/jobs/{segment(job_id, 'job_id')}{tail}"

    def list_jobs(self) -> list[c.JobSummary]:
        """``GET /v1/jobs``: every registered job with its epoch and sizes."""
        return self._get_list(c.JobSummary, "GET", "/v1/jobs")

    def put_job(self, job_id: str, spec: c.JobSpec | Mapping[str, Any] | None = None, **fields: Any) -> c.JobState:
        """``PUT /v1/jobs/{job_id}``: register a job (201) with epoch 0 and its placement; the same topology again
        answers 200 with the job as it is (epoch kept, settings updated); another topology is a
        ``ConflictError``. Give a :class:`~rebalancer_client.contract.JobSpec`, a mapping, or its fields as keyword
        arguments (``nodes=[...], operators=[...], auto=True, policy={...}``)."""
        body = _document(c.JobSpec, spec) if spec is not None else {}
        body.update({k: dump(v) for k, v in fields.items() if v is not None})
        return self._get(c.JobState, "PUT", self._job(job_id), json=body)

    def get_job(self, job_id: str) -> c.JobState:
        """``GET /v1/jobs/{job_id}``."""
        return self._get(c.JobState, "GET", self._job(job_id))

    def delete_job(self, job_id: str) -> None:
        """``DELETE /v1/jobs/{job_id}`` (a retry that finds the job gone after an unanswered attempt succeeds)."""
        self.request("DELETE", self._job(job_id), ok_after_retry=(404,))

    def post_stats(self, job_id: str, *, batch_id: int, epoch: int, load: Sequence[float] | None = None,
                   state_bytes: Sequence[float | None] | None = None,
                   key_groups: Sequence[Mapping[str, Any]] | None = None,
                   communication: Sequence[Mapping[str, Any]] | None = None, retries: int | None = None) -> c.StatsAck:
        """``POST /v1/jobs/{job_id}/stats`` (idempotent per ``batch_id``, so retried).

        ``load`` (and ``state_bytes``): one number per key group of the job, in its order (``JobState.key_groups``);
        or ``key_groups``: ``[{"id": "agg/5", "load": 123.0, "state_bytes": 4096}]``. Raises ``ConflictError`` when
        ``epoch`` is newer than the job's; an older epoch is accepted and the answer's ``apply`` carries the newer
        placement.
        """
        body = {"batch_id": int(batch_id), "epoch": int(epoch),
                "load": None if load is None else [float(x) for x in load],
                "state_bytes": None if state_bytes is None else list(state_bytes),
                "key_groups": None if key_groups is None else [dict(k) for k in key_groups],
                "communication": [dict(e) for e in communication] if communication else None}
        return self._get(c.StatsAck, "POST", self._job(job_id, "/stats"),
                         json=_some(body), idempotent=True, retries=retries)

    def create_proposal(self, job_id: str, *, algorithm: str | None = None, params: Mapping[str, Any] | None = None,
                        time_limit_s: float | None = None, wait_s: float | None = None,
                        wait: bool = True) -> c.Proposal:
        """``POST /v1/jobs/{job_id}/proposals``: a dry-run plan from the current window, with the policy's verdict
        (``proposal.decision``).

        ``wait_s`` asks the server to wait that long for the solve before answering 202 (this call's timeout and
        deadline grow by ``wait_s``). With ``wait``, a pending proposal is polled (``GET .../proposals/{id}``)
        until it is no longer pending or ``proposal_poll_timeout`` has passed; the returned proposal may then still
        be pending. The call takes at most the POST's deadline, ``proposal_poll_timeout`` and one GET's deadline.
        """
        body = _some({"algorithm": algorithm, "params": None if params is None else dict(params),
                      "time_limit_s": time_limit_s, "wait_s": wait_s})
        waits = float(wait_s or 0.0)  # the server holds the answer up to wait_s: the attempt may take that longer
        prop: c.Proposal = self._get(c.Proposal, "POST", self._job(job_id, "/proposals"), json=body, idempotent=False,
                                     timeout=self.timeout + waits, deadline=self.deadline + waits)
        if wait and prop.status == "pending":
            for _ in self._poll(self.proposal_poll_timeout):
                prop = self.get_proposal(job_id, prop.id)
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

    def _proposal_path(self, job_id: str, proposal_id: str) -> str:
        return self._job(job_id, f"/proposals/{segment(proposal_id, 'proposal_id')}")

    def get_proposal(self, job_id: str, proposal_id: str) -> c.Proposal:
        """``GET /v1/jobs/{job_id}/proposals/{id}``."""
        return self._get(c.Proposal, "GET", self._proposal_path(job_id, proposal_id))

    def execute_proposal(self, job_id: str, proposal_id: str, *, force: bool = False) -> c.Execution:
        """``POST /v1/jobs/{job_id}/proposals/{id}/execute`` → the new epoch and placement.

        Raises:
            ConflictError: the job's epoch is no longer the proposal's ``base_epoch`` (another execute won, nodes
                changed, or it was executed already), the proposal is pending or failed, or the policy judged its
                plan not worth it (``force=True`` overrides the verdict) (409).
        """
        return self._get(c.Execution, "POST",
                         self._proposal_path(job_id, proposal_id) + "/execute",
                         json={"force": True} if force else None, idempotent=False)

    def change_nodes(self, job_id: str, *, add: Sequence[Any] = (), remove: Sequence[str] = (),
                     delete: Sequence[str] = ()) -> c.JobState:
        """``POST /v1/jobs/{job_id}/nodes``: add nodes, mark nodes removing, or delete empty removing nodes.

        Not idempotent on the server (each change is a new epoch; a repeated ``delete`` is a 422), so it is retried
        only when the request never reached the server. After a :class:`ControllerUnavailable`, :meth:`get_job`
        tells whether the change happened."""
        body = {"add": dump(list(add)), "remove": list(remove), "delete": list(delete)}
        return self._get(c.JobState, "POST", self._job(job_id, "/nodes"),
                         json=body, idempotent=False)

    def scale(self, job_id: str, *, nodes: Sequence[Any], budget: c.Budget | Mapping[str, Any] | None = None,
              algorithm: str | None = None, params: Mapping[str, Any] | None = None,
              time_limit_s: float | None = None) -> c.Scaled:
        """``POST /v1/jobs/{job_id}/scale``: the job's new node list and its key groups placed on it by load, as
        one new epoch (``budget`` None: a full rebalance). Not idempotent: retried only when never sent."""
        body = _some({"nodes": dump(list(nodes)), "budget": None if budget is None else _document(c.Budget, budget),
                      "algorithm": algorithm, "params": None if params is None else dict(params),
                      "time_limit_s": time_limit_s})
        return self._get(c.Scaled, "POST", self._job(job_id, "/scale"), json=body, idempotent=False)

    def job_what_if(self, job_id: str, candidates: Sequence[Any], *, target_load_distance: float | None = None,
                    max_utilisation: float | None = None, algorithm: str | None = None,
                    params: Mapping[str, Any] | None = None, time_limit_s: float | None = None) -> c.WhatIfReport:
        """``POST /v1/jobs/{job_id}/what-if``: :meth:`what_if_scaling` on the job's own window."""
        body = _some({"candidates": dump(list(candidates)), "target_load_distance": target_load_distance,
                      "max_utilisation": max_utilisation, "algorithm": algorithm,
                      "params": None if params is None else dict(params), "time_limit_s": time_limit_s})
        return self._get(c.WhatIfReport, "POST", self._job(job_id, "/what-if"), json=body, idempotent=True)

    def history(self, job_id: str, *, limit: int | None = None) -> c.History:
        """``GET /v1/jobs/{job_id}/history``: epochs (oldest first) with their plans, metrics and verdicts."""
        params = None if limit is None else {"limit": int(limit)}
        return self._get(c.History, "GET", self._job(job_id, "/history"),
                         params=params)


def _some(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` without its ``None`` fields (the server's defaults apply)."""
    return {k: v for k, v in body.items() if v is not None}
