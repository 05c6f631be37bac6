"""Exception classes of the Rebalancer HTTP client (one per failure a caller handles differently).

``RebalancerError`` is the base of everything the client raises. HTTP answers with an error status become an
:class:`APIError` subclass chosen by status code (``ConflictError`` for 409, ``NotFoundError`` for 404,
``ValidationError`` for 422, ...); a controller that cannot be reached after the retries becomes
:class:`ControllerUnavailable`. Callers on the hot path of a Spark micro-batch usually catch
``ControllerUnavailable``, ``ServerError`` and ``MalformedResponse`` (or simply ``RebalancerError``) and carry on
with their last routing. Nothing else escapes a client call: a malformed body, a bad ``Retry-After`` or a
dripping server never surface as ``ValueError``/``TypeError``/``AttributeError``.
"""

from __future__ import annotations

from typing import Any


class RebalancerError(Exception):
    """Base class of every error raised by :class:`rebalancer_client.RebalancerClient`."""


class ControllerUnavailable(RebalancerError):
    """The controller could not be reached or did not answer in time (after the allowed retries)."""


class DeadlineExceeded(ControllerUnavailable):
    """The call's total deadline passed (a slow or dripping server, or retries that would outlast it)."""


class InvalidArgument(RebalancerError, ValueError):
    """An argument the client refuses before sending anything (e.g. a job id that is not one path segment)."""


class MalformedResponse(RebalancerError):
    """The controller answered 2xx with a body that is not the documented document (not JSON, a list where an
    object belongs, a null or missing field, a wrong type). ``status_code`` is the HTTP status, ``url`` the request."""

    def __init__(self, reason: str, *, status_code: int = 0, method: str = "", url: str = ""):
        self.reason = reason
        self.field = ""    # the path of the offending value, when a document was read (``nodes[2].id``)
        self.detail = reason
        self.status_code = status_code
        self.method = method
        self.url = url
        where = f"{method} {url} -> HTTP {status_code}: " if url else ""
        super().__init__(f"{where}malformed response: {reason}")


class ResponseTooLarge(MalformedResponse):
    """The response is larger than the client's ``max_response_bytes``; it was not read to the end."""


class APIError(RebalancerError):
    """The controller answered with an error status.

    Attributes:
        status_code: the HTTP status.
        detail: the decoded ``detail`` of the error body (FastAPI style), or the raw text.
        body: the whole decoded body (``None`` when not JSON).
        method, url: the request that failed.
    """

    status_code: int = 0

    def __init__(self, status_code: int, detail: Any, *, body: Any = None, method: str = "", url: str = ""):
        self.status_code = status_code
        self.detail = detail
        self.body = body
        self.method = method
        self.url = url
        super().__init__(f"{method} {url} -> HTTP {status_code}: {_short(detail)}")

    @property
    def fields(self) -> list[str]:
        """Field paths named by the error body (``loc``/``field`` entries), e.g. ``["body.key_groups.0.load"]``."""
        out: list[str] = []
        items = self.detail if isinstance(self.detail, list) else [self.detail]
        for it in items:
            if isinstance(it, dict):
                if "field" in it:
                    out.append(str(it["field"]))
                elif "loc" in it:
                    out.append(".".join(str(p) for p in it["loc"]))
        return out


class BadRequestError(APIError):
    """HTTP 400."""


class AuthenticationError(APIError):
    """HTTP 401 or 403: missing or wrong bearer token."""


class NotFoundError(APIError):
    """HTTP 404: unknown job or proposal."""


class ConflictError(APIError):
    """HTTP 409: the proposal's base epoch is no longer the job's epoch (or another state conflict)."""


class PayloadTooLargeError(APIError):
    """HTTP 413: too many key groups / edges / bytes for the controller's limits."""


class ValidationError(APIError):
    """HTTP 422: the body does not satisfy the contract; :attr:`fields` names the offending fields."""


class RateLimitedError(APIError):
    """HTTP 429."""


class ServerError(APIError):
    """HTTP 5xx."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationError,
    429: RateLimitedError,
}


def error_for_status(status_code: int) -> type[APIError]:
    """The exception class for an HTTP error status."""
    if status_code >= 500:
        return ServerError
    return _BY_STATUS.get(status_code, APIError)


def _short(detail: Any, limit: int = 300) -> str:
    text = detail if isinstance(detail, str) else repr(detail)
    return text if len(text) <= limit else text[: limit - 3] + "..."
