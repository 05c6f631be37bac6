"""Python HTTP client of the Rebalancer controller; needs only httpx and the standard library.

:class:`RebalancerClient` speaks the controller's /v1 API with the documents of :mod:`rebalancer_client.contract`
(the controller's own definitions); every failure is a :class:`RebalancerError`.
"""

from rebalancer_client import contract
from rebalancer_client.client import RebalancerClient
from rebalancer_client.errors import (
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
