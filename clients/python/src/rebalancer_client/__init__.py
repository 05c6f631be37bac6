"""Python HTTP client of the Rebalancer controller; needs only httpx and the standard library.

:class:`RebalancerClient` speaks the controller's /v1 API with the documents of :mod:`rebalancer_client.contract`
(the controller's own definitions); every failure is a :class:`RebalancerError`.
"""

from typing import TYPE_CHECKING, Any

from rebalancer_client import contract
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

if TYPE_CHECKING:
    from rebalancer_client.client import RebalancerClient


def __getattr__(name: str) -> Any:
    """``RebalancerClient`` is imported on first use: the contract alone (what the server reads) needs no httpx."""
    if name == "RebalancerClient":
        from rebalancer_client.client import RebalancerClient

        return RebalancerClient
    raise AttributeError(f"module 'rebalancer_client' has no attribute {name!r}")


__all__ = [
    "RebalancerClient", "contract", "RebalancerError", "APIError", "AuthenticationError", "BadRequestError",
    "ConflictError", "ControllerUnavailable", "DeadlineExceeded", "InvalidArgument", "MalformedResponse",
    "NotFoundError", "PayloadTooLargeError", "RateLimitedError", "ResponseTooLarge", "ServerError",
    "ValidationError",
]
