"""``RebalancerClient``: the synchronous HTTP client of the controller's /v1 API (issue 7), on httpx.

Design (httpx style: small typed module, explicit exceptions, no global state):

* **Timeouts** on every call (``timeout`` seconds, connect timeout ``connect_timeout``).
* **Retries with exponential backoff and full jitter** (``backoff * 2**attempt``, capped at ``max_backoff``,
  ``Retry-After`` honoured) for *idempotent* calls only: GET/PUT/DELETE, the stateless POSTs (``/v1/plans``,
  ``/v1/evaluate``, ``/v1/what-if/scaling``, ``/v1/partitioning``) and ``POST /v1/jobs/{id}/stats``, which the
  controller counts once per ``batch_id``. Retried conditions: connection errors, timeouts, 429, 502, 503, 504.
  Non-idempotent calls (creating a proposal, executing one) are retried only when the request provably never
  reached the server (connect errors), so an execute is never sent twice.
* **Typed results** (:mod:`clients.python.models`) and **one exception class per failure**
  (:mod:`clients.python.errors`): 409 → ``ConflictError``, 404 → ``NotFoundError``, 422 → ``ValidationError``,
  401/403 → ``AuthenticationError``, 413 → ``PayloadTooLargeError``, 5xx → ``ServerError``; unreachable →
  ``ControllerUnavailable``.

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

import email.utils
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from clients.python.errors import APIError, ControllerUnavailable, ServerError, error_for_status
from clients.python.models import ApplyPlan, Execution, Job, PlanResult, Proposal, StatsAck  # noqa: F401

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class RebalancerClient:
    """Client of one controller.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000`` (the ``/v1`` prefix is added by the methods).
        token: bearer token when the controller runs with ``REBALANCER_API_TOKENS``.
        timeout: read/write/pool timeout in seconds of one attempt.
        connect_timeout: connect timeout in seconds of one attempt.
        retries: extra attempts for retryable failures (0 = try once).
        backoff: first backoff in seconds; attempt ``a`` sleeps ``uniform(0, min(max_backoff, backoff*2**a))``.
        max_backoff: cap of one sleep.
        proposal_poll_timeout: how long :meth:`create_proposal` polls a 202 task before returning it pending.
        transport: an httpx transport (tests, custom TLS); default: a normal connection pool.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 5.0,
        connect_timeout: float = 2.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        proposal_poll_timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        seed: int | None = None,
    ):
        if retries < 0:
            raise ValueError("retries must be >= 0")
        if timeout <= 0 or connect_timeout <= 0:
            raise ValueError("timeouts must be > 0")
        self.base_url = base_url.rstrip("/")
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.proposal_poll_timeout = float(proposal_poll_timeout)
        self._rng = random.Random(seed)
        headers = {"Accept": "application/json", "User-Agent": "rebalancer-python-client/0.1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            transport=transport,
        )

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RebalancerClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ transport with retries
    def _sleep_for(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            ra = response.headers.get("Retry-After")
            if ra:
                try:
                    return min(self.max_backoff, max(0.0, float(ra)))
                except ValueError:
                    parsed = email.utils.parsedate_to_datetime(ra) if ra else None
                    if parsed is not None:
                        return min(self.max_backoff, max(0.0, parsed.timestamp() - time.time()))
        return self._rng.uniform(0, min(self.max_backoff, self.backoff * (2 ** attempt)))

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
        expect: Sequence[int] = (200, 201, 202, 204),
        retries: int | None = None,
    ) -> httpx.Response:
        """Send one request with the client's retry policy; return the response or raise a typed error.

        ``idempotent`` defaults to True for GET/PUT/DELETE/HEAD. Non-idempotent requests are retried only on
        connect errors (the request was never sent).
        """
        if idempotent is None:
            idempotent = method.upper() in ("GET", "PUT", "DELETE", "HEAD", "OPTIONS")
        max_retries = self.retries if retries is None else retries
        url = path if path.startswith("/") else "/" + path
        attempt = 0
        while True:
            response: httpx.Response | None = None
            try:
                response = self._http.request(method, url, json=json, params=params)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                if attempt < max_retries:
                    time.sleep(self._sleep_for(attempt, None))
                    attempt += 1
                    continue
                raise ControllerUnavailable(f"{method} {self.base_url}{url}: cannot connect ({exc!r})") from exc
            except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                if idempotent and attempt < max_retries:
                    time.sleep(self._sleep_for(attempt, None))
                    attempt += 1
                    continue
                raise ControllerUnavailable(f"{method} {self.base_url}{url}: {type(exc).__name__} ({exc!r})") from exc
            if response.status_code in expect:
                return response
            if response.status_code in RETRY_STATUSES and idempotent and attempt < max_retries:
                time.sleep(self._sleep_for(attempt, response))
                attempt += 1
                continue
            raise self._error(method, url, response)

    def _error(self, method: str, url: str, response: httpx.Response) -> APIError:
        body: Any = None
        detail: Any = response.text
        try:
            body = response.json()
            if isinstance(body, Mapping):
                detail = body.get("detail", body.get("error", body))
            else:
                detail = body
        except ValueError:
            pass
        cls = error_for_status(response.status_code)
        return cls(response.status_code, detail, body=body, method=method, url=f"{self.base_url}{url}")

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        r = self.request(method, path, **kw)
        if r.status_code == 204 or not r.content:
            return {}
        try:
            return r.json()
        except ValueError as exc:
            raise ServerError(r.status_code, f"response is not JSON: {r.text[:200]!r}", method=method,
                              url=f"{self.base_url}{path}") from exc

    # ------------------------------------------------------------------ operations
    def health(self) -> dict[str, Any]:
        """``GET /healthz``."""
        return self._json("GET", "/healthz")

    def is_healthy(self) -> bool:
        """True when ``/healthz`` answers 200 (no retries; never raises)."""
        try:
            self.request("GET", "/healthz", retries=0)
            return True
        except Exception:  # noqa: BLE001 - a health probe reports, it does not raise
            return False

    # ------------------------------------------------------------------ stateless
    def plan(self, problem: Mapping[str, Any], algorithm: str = "albic-milp", *, params: Mapping[str, Any] | None = None,
             time_limit_s: float = 1.0) -> PlanResult:
        """``POST /v1/plans``: plan a problem document (stateless, idempotent)."""
        body = {"problem": problem, "algorithm": algorithm, "params": dict(params or {}), "time_limit_s": time_limit_s}
        return PlanResult.from_json(self._json("POST", "/v1/plans", json=body, idempotent=True))

    def evaluate(self, problem: Mapping[str, Any], plan: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/evaluate``: before/after metrics of a plan for a problem."""
        return self._json("POST", "/v1/evaluate", json={"problem": problem, "plan": plan}, idempotent=True)

    def what_if_scaling(self, problem: Mapping[str, Any], candidates: Sequence[Any], *,
                        target_load_distance: float | None = None, algorithm: str | None = None) -> dict[str, Any]:
        """``POST /v1/what-if/scaling``: load distance, migrations and rounds per candidate cluster size."""
        body: dict[str, Any] = {"problem": problem, "candidates": list(candidates)}
        if target_load_distance is not None:
            body["target_load_distance"] = target_load_distance
        if algorithm is not None:
            body["algorithm"] = algorithm
        return self._json("POST", "/v1/what-if/scaling", json=body, idempotent=True)

    def partitioning(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/partitioning``: a Gedik partitioning-function document for a spec."""
        return self._json("POST", "/v1/partitioning", json=dict(spec), idempotent=True)

    # ------------------------------------------------------------------ jobs
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
        return Job.from_json(self._json("PUT", f"/v1/jobs/{job_id}", json=body), job_id)

    def get_job(self, job_id: str) -> Job:
        """``GET /v1/jobs/{job_id}``."""
        return Job.from_json(self._json("GET", f"/v1/jobs/{job_id}"), job_id)

    def delete_job(self, job_id: str) -> None:
        """``DELETE /v1/jobs/{job_id}``."""
        self.request("DELETE", f"/v1/jobs/{job_id}")

    def post_stats(self, job_id: str, *, batch_id: int, epoch: int, key_groups: Sequence[Mapping[str, Any]],
                   communication: Sequence[Mapping[str, Any]] | None = None, retries: int | None = None) -> StatsAck:
        """``POST /v1/jobs/{job_id}/stats`` (idempotent per ``batch_id``, so retried).

        ``key_groups``: ``[{"id": "agg/5", "load": 123.0, "state_bytes": 4096}]``. Raises ``ConflictError`` when
        ``epoch`` is newer than the job's; an older epoch is accepted and the ack's ``epoch`` tells the current one.
        """
        body: dict[str, Any] = {"batch_id": int(batch_id), "epoch": int(epoch), "key_groups": list(key_groups)}
        if communication:
            body["communication"] = list(communication)
        return StatsAck.from_json(self._json("POST", f"/v1/jobs/{job_id}/stats", json=body, idempotent=True,
                                             retries=retries))

    def create_proposal(self, job_id: str, *, algorithm: str | None = None, params: Mapping[str, Any] | None = None,
                        time_limit_s: float | None = None, wait_s: float | None = None,
                        wait: bool = True) -> Proposal:
        """``POST /v1/jobs/{job_id}/proposals``: a dry-run plan from the current window.

        ``wait_s`` asks the server to wait that long for the solve before answering 202. A 202 is polled with ``GET .../proposals/{id}`` until ready or ``proposal_poll_timeout``
        when ``wait``; the returned proposal may then still be pending (``proposal.ready`` is False).
        """
        body: dict[str, Any] = {}
        if algorithm is not None:
            body["algorithm"] = algorithm
        if params is not None:
            body["params"] = dict(params)
        if time_limit_s is not None:
            body["time_limit_s"] = time_limit_s
        if wait_s is not None:
            body["wait_s"] = wait_s
        prop = Proposal.from_json(self._json("POST", f"/v1/jobs/{job_id}/proposals", json=body, idempotent=False))
        if wait and not prop.ready and prop.id:
            deadline = time.monotonic() + self.proposal_poll_timeout
            delay = 0.05
            while not prop.ready and prop.status not in ("failed", "executed") and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(1.0, delay * 2)
                prop = self.get_proposal(job_id, prop.id)
        return prop

    def get_proposal(self, job_id: str, proposal_id: str) -> Proposal:
        """``GET /v1/jobs/{job_id}/proposals/{id}``."""
        return Proposal.from_json(self._json("GET", f"/v1/jobs/{job_id}/proposals/{proposal_id}"))

    def execute_proposal(self, job_id: str, proposal_id: str) -> Execution:
        """``POST /v1/jobs/{job_id}/proposals/{id}/execute`` → the new epoch.

        Raises:
            ConflictError: the job's epoch is no longer the proposal's ``base_epoch`` (another execute won, nodes
                changed, or it was executed already), or the proposal is pending or failed (409).
        """
        return Execution.from_json(self._json("POST", f"/v1/jobs/{job_id}/proposals/{proposal_id}/execute",
                                              idempotent=False))

    def change_nodes(self, job_id: str, *, add: Sequence[Any] = (), remove: Sequence[str] = (),
                     delete: Sequence[str] = ()) -> Job:
        """``POST /v1/jobs/{job_id}/nodes``: add nodes, mark nodes removing, or delete empty removing nodes."""
        body: dict[str, Any] = {"add": list(add), "remove": list(remove)}
        if delete:
            body["delete"] = list(delete)
        return Job.from_json(self._json("POST", f"/v1/jobs/{job_id}/nodes", json=body, idempotent=True), job_id)

    def history(self, job_id: str) -> Any:
        """``GET /v1/jobs/{job_id}/history``: epochs with their plans and metrics."""
        return self._json("GET", f"/v1/jobs/{job_id}/history")
