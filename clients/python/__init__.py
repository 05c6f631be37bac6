"""Python HTTP client of the Rebalancer controller (issue 7's /v1 API); needs only httpx and the standard library."""

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
from clients.python.models import (
    AlgorithmInfo,
    ApplyPlan,
    Evaluation,
    Execution,
    History,
    HistoryEntry,
    Job,
    JobSummary,
    PlanResult,
    Proposal,
    ScalingCandidate,
    ScalingReport,
    StateMetrics,
    StatsAck,
)

__all__ = [
    "RebalancerClient", "RebalancerError", "APIError", "AuthenticationError", "BadRequestError", "ConflictError",
    "ControllerUnavailable", "DeadlineExceeded", "InvalidArgument", "MalformedResponse", "NotFoundError",
    "PayloadTooLargeError", "RateLimitedError", "ResponseTooLarge", "ServerError", "ValidationError",
    "AlgorithmInfo", "ApplyPlan", "Evaluation", "Execution", "History", "HistoryEntry", "Job", "JobSummary",
    "PlanResult", "Proposal", "ScalingCandidate", "ScalingReport", "StateMetrics", "StatsAck",
]
