"""Python HTTP client of the Rebalancer controller; needs only httpx and the standard library.

:class:`RebalancerClient` speaks the controller's /v1 API with the documents of :mod:`clients.python.contract`
(the controller's own definitions); every failure is a :class:`RebalancerError`.
"""

from clients.python import contract
from clients.python.client import RebalancerClient
from clients.python.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ControllerUnavailable,
    DeadlineExceeded,
    InvalidArgument,
    MalformedResponse,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    RebalancerError,
    ResponseTooLarge,
    ServerError,
    ValidationError,
)

__all__ = [
    "RebalancerClient", "contract", "RebalancerError", "APIError", "AuthenticationError", "BadRequestError",
    "ConflictError", "ControllerUnavailable", "DeadlineExceeded", "InvalidArgument", "MalformedResponse",
    "NotFoundError", "PayloadTooLargeError", "RateLimitedError", "ResponseTooLarge", "ServerError",
    "ValidationError",
]
