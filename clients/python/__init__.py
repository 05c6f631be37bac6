"""Python HTTP client of the Rebalancer controller (issue 7's /v1 API)."""

from clients.python.client import RebalancerClient
from clients.python.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ControllerUnavailable,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    RebalancerError,
    ServerError,
    ValidationError,
)
from clients.python.models import ApplyPlan, Execution, Job, PlanResult, Proposal, StatsAck

__all__ = [
    "RebalancerClient", "RebalancerError", "APIError", "AuthenticationError", "BadRequestError", "ConflictError",
    "ControllerUnavailable", "NotFoundError", "PayloadTooLargeError", "RateLimitedError", "ServerError",
    "ValidationError", "ApplyPlan", "Execution", "Job", "PlanResult", "Proposal", "StatsAck",
]
