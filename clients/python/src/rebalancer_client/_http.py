"""The transport layer of :class:`rebalancer_client.RebalancerClient`: one call = a deadline, bounded reads, the
retry policy and the mapping of answers to typed errors (the operations live in :mod:`rebalancer_client.client`)."""

from __future__ import annotations

import email.utils
import json as jsonlib
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from rebalancer_client._transport import DeadlineTransport
from rebalancer_client.errors import (
    APIError,
    ControllerUnavailable,
    DeadlineExceeded,
    InvalidArgument,
    MalformedResponse,
    ResponseTooLarge,
    error_for_status,
)

RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: a replica that is not the leader answers with ``Rebalancer-Role: standby`` (nothing was done) and names the leader
ROLE_HEADER = "Rebalancer-Role"
LEADER_HEADER = "Rebalancer-Leader"
#: a URL that did not answer (connection refused, timeout) is passed over for this long when there are others
DOWN_FOR_S = 1.0
ERROR_BODY_BYTES = 1 << 20  # error bodies are read up to 1 MiB (a detail, not a document)
T = TypeVar("T")
S = TypeVar("S", bound="HTTPSession")


def segment(value: Any, what: str = "id") -> str:
    """``value`` as one URL path segment (percent-encoded, ``/`` included); ``.``, ``..`` and ``""`` are refused."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise InvalidArgument(f"{what} must be a non-empty string other than '.' and '..', got {value!r}")
    return quote(value, safe="")


def retry_after_seconds(value: str) -> float | None:
    """Seconds asked by a ``Retry-After`` header (delta-seconds or HTTP-date), or None when it is neither."""
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when is None:
            return None
        secs = when.timestamp() - time.time()
    return max(0.0, secs) if math.isfinite(secs) else None


class HTTPSession:
    """Deadline, bounded reads, retries and typed errors for one controller (see :class:`RebalancerClient`)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        *,
        token: str | None = None,
        timeout: float = 5.0,
        connect_timeout: float = 2.0,
        retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        deadline: float | None = None,
        max_response_bytes: int = 128 << 20,
        proposal_poll_timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        verify: Any = True,
        seed: int | None = None,
    ):
        if retries < 0:
            raise InvalidArgument("retries must be >= 0")
        if not timeout > 0 or not connect_timeout > 0 or (deadline is not None and not deadline > 0):
            raise InvalidArgument("timeouts and the deadline must be > 0")
        if max_response_bytes < 1:
            raise InvalidArgument("max_response_bytes must be >= 1")
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise InvalidArgument("base_url: give at least one URL")
        for u in urls:
            try:
                scheme = httpx.URL(u).scheme
            except (httpx.InvalidURL, TypeError) as exc:
                raise InvalidArgument(f"base_url: {exc}") from None
            if scheme not in ("http", "https"):
                raise InvalidArgument(f"base_url must start with http:// or https://, got {u!r}")
        #: the controller's replicas; requests go to ``base_urls[_current]`` (the last one that served)
        self.base_urls = [u.rstrip("/") for u in urls]
        self._current = 0
        self._down_until: dict[int, float] = {}  # URL index -> monotonic time until which it is passed over
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.deadline = float(deadline) if deadline is not None else timeout * (retries + 1) + max_backoff * retries
        self.max_response_bytes = int(max_response_bytes)
        self.proposal_poll_timeout = float(proposal_poll_timeout)
        self._rng = random.Random(seed)
        headers = {"Accept": "application/json", "User-Agent": "rebalancer-python-client/0.2"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._transport = transport if transport is not None else DeadlineTransport(verify=verify)
        self._http = httpx.Client(headers=headers, transport=self._transport,
                                  timeout=httpx.Timeout(timeout, connect=connect_timeout), trust_env=False)

    @property
    def base_url(self) -> str:
        """The URL requests go to now (of several: the replica that served last)."""
        return self.base_urls[self._current]

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._http.close()

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ transport with deadline and retries
    def _sleep_for(self, attempt: int, response: httpx.Response | None) -> float:
        ra = response.headers.get("Retry-After") if response is not None else None
        secs = retry_after_seconds(ra) if ra else None
        if secs is not None:
            return min(self.max_backoff, secs)
        return self._rng.uniform(0, min(self.max_backoff, self.backoff * (2 ** attempt)))

    def _bound(self, at: float) -> Any:
        t = self._transport
        return t.deadline(at) if isinstance(t, DeadlineTransport) else nullcontext()

    def _read(self, response: httpx.Response, at: float) -> bytes:
        """The body, read until the deadline ``at``; a document over ``max_response_bytes`` is refused, an error
        body is cut at 1 MiB (it only carries a detail)."""
        document = response.is_success
        cap = self.max_response_bytes if document else ERROR_BODY_BYTES
        length = response.headers.get("Content-Length", "")
        if document and length.isdigit() and int(length) > cap:
            raise ResponseTooLarge(f"Content-Length {length} > max_response_bytes {cap}",
                                   status_code=response.status_code, method=response.request.method,
                                   url=str(response.request.url))
        buf = bytearray()
        for chunk in response.iter_bytes():
            buf += chunk
            if len(buf) > cap:
                if not document:
                    return bytes(buf[:cap])
                raise ResponseTooLarge(f"more than max_response_bytes {cap}", status_code=response.status_code,
                                       method=response.request.method, url=str(response.request.url))
            if time.monotonic() > at:  # transports without socket-level deadlines (e.g. a custom one)
                raise httpx.ReadTimeout("deadline exceeded")
        return bytes(buf)

    def _attempt(self, method: str, base: str, url: str, end: float, json: Any,
                 params: Mapping[str, Any] | None) -> tuple[httpx.Response | None, Exception | None, bool]:
        """One attempt on ``base``: (the fully read response, None, False), or (None, the failure, whether the
        request provably never left)."""
        try:
            with self._bound(end):
                left = end - time.monotonic()
                req = self._http.build_request(method, base + url, json=json, params=params, timeout=httpx.Timeout(
                    left, connect=min(self.connect_timeout, left)))
                streamed = self._http.send(req, stream=True)
                try:
                    body = self._read(streamed, end)
                finally:
                    streamed.close()
            response = httpx.Response(streamed.status_code, headers=streamed.headers, content=body, request=req)
            return response, None, False
        except httpx.DecodingError as exc:
            raise MalformedResponse(f"undecodable body ({exc})", method=method, url=base + url) from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise InvalidArgument(f"{method} {base}{url}: {exc}") from exc
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return None, exc, True
        except httpx.HTTPError as exc:
            return None, exc, False

    def _fail_over(self, at: int, hint: str | None, failed: bool, tried: set[int]) -> bool:
        """Move on from URL ``at`` (``failed``: it did not answer, so it is passed over for ``DOWN_FOR_S``): to the
        leader a standby named (``hint``, only when it is one of the configured URLs and not passed over), else to
        the next URL neither passed over nor tried in this call, else stay (a standby that names no leader learns
        of the new one within a moment). True when the new URL was not tried yet in this call (no need to wait)."""
        now = time.monotonic()
        if failed:
            self._down_until[at] = now + DOWN_FOR_S
        n = len(self.base_urls)
        down = {i for i, until in self._down_until.items() if until > now}
        named = self.base_urls.index(hint.rstrip("/")) if hint and hint.rstrip("/") in self.base_urls else None
        if named is not None and named not in down:
            nxt = named
        else:
            fresh = [j % n for j in range(at + 1, at + n + 1) if j % n not in down and j % n not in tried]
            up = [j % n for j in range(at, at + n) if j % n not in down]
            nxt = fresh[0] if fresh else up[0] if up else min(range(n), key=lambda i: self._down_until.get(i, 0.0))
        self._current = nxt
        return nxt not in tried

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
        deadline: float | None = None,
        timeout: float | None = None,
        ok_after_retry: Sequence[int] = (),
    ) -> httpx.Response:
        """Send one request with the client's deadline, retry and failover policy; return the (fully read) response
        or raise.

        ``path`` is used as given: encode its segments with :func:`segment`. ``idempotent`` defaults to True for
        GET/PUT/DELETE/HEAD; non-idempotent requests are retried only when they provably did nothing (connect
        errors, the answer of a standby replica). ``deadline`` and ``timeout`` override the client's total seconds
        for this call and for one attempt. ``ok_after_retry``: statuses that count as success on a retry after an
        attempt that may have reached the server (404 for a DELETE whose first answer was lost). With several base
        URLs, a URL that cannot be reached or times out, and a standby (``Rebalancer-Role: standby``, naming the
        leader in ``Rebalancer-Leader``), send the request on to the leader or the next URL; moving to a URL not
        tried yet in this call costs no retry and no wait.
        """
        if idempotent is None:
            idempotent = method.upper() in ("GET", "PUT", "DELETE", "HEAD", "OPTIONS")
        max_retries = self.retries if retries is None else retries
        url = path if path.startswith("/") else "/" + path
        call_end = time.monotonic() + (self.deadline if deadline is None else deadline)
        per_attempt = self.timeout if timeout is None else timeout
        attempt, maybe_sent = 0, False
        tried: set[int] = set()
        while True:
            at = self._current
            base = self.base_urls[at]
            now = time.monotonic()
            if now >= call_end:
                raise DeadlineExceeded(f"{method} {base}{url}: no answer within the deadline")
            end = min(call_end, now + per_attempt)
            tried.add(at)
            response, failure, never_sent = self._attempt(method, base, url, end, json, params)
            if response is not None and (response.status_code in expect
                                         or (maybe_sent and response.status_code in ok_after_retry)):
                return response
            standby = response is not None and response.headers.get(ROLE_HEADER) == "standby"
            fresh = False
            if standby or response is None:  # this URL cannot serve the request: on to the leader, or the next
                fresh = self._fail_over(at, response.headers.get(LEADER_HEADER) if response is not None else None,
                                        response is None, tried)
            retryable = never_sent or standby or (idempotent and (response is None
                                                                  or response.status_code in RETRY_STATUSES))
            delay = 0.0 if fresh else self._sleep_for(attempt, None if standby else response)
            if retryable and (fresh or attempt < max_retries) and time.monotonic() + delay < call_end:
                maybe_sent = maybe_sent or (not never_sent and not standby
                                            and (response is None or response.status_code != 429))
                time.sleep(delay)
                attempt += 0 if fresh else 1
                continue
            if response is not None:
                raise self._error(method, base + url, response)
            where = f"{method} {base}{url}"
            if time.monotonic() >= end:
                raise DeadlineExceeded(f"{where}: no answer within the deadline ({failure!r})") from failure
            raise ControllerUnavailable(f"{where}: {type(failure).__name__} ({failure!r})") from failure

    def _error(self, method: str, where: str, response: httpx.Response) -> APIError:
        body: Any = None
        detail: Any = response.text
        try:
            body = jsonlib.loads(response.content)
            detail = body.get("detail", body.get("error", body)) if isinstance(body, Mapping) else body
        except (ValueError, RecursionError):
            pass
        cls = error_for_status(response.status_code)
        return cls(response.status_code, detail, body=body, method=method, url=where)

    def _json(self, method: str, path: str, **kw: Any) -> tuple[Any, int]:
        """The decoded JSON body of ``method path`` and the HTTP status."""
        r = self.request(method, path, **kw)
        try:
            return jsonlib.loads(r.content), r.status_code
        except (ValueError, RecursionError) as exc:
            raise MalformedResponse(f"not JSON: {r.content[:200]!r}", status_code=r.status_code, method=method,
                                    url=f"{self.base_url}{path}") from exc

    def _typed(self, parse: Callable[[Any], T], method: str, path: str, **kw: Any) -> T:
        """The response of ``method path`` read by ``parse``; a malformed document names the request."""
        doc, status = self._json(method, path, **kw)
        try:
            return parse(doc)
        except MalformedResponse as exc:
            raise MalformedResponse(exc.reason, status_code=status, method=method,
                                    url=f"{self.base_url}{path}") from None

