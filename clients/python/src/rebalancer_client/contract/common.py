"""What every document of the contract shares: limits, constrained field types, the planner's status."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from rebalancer_client.wire import Check

MAX_INT64 = 2**63 - 1
#: the longest id (job, node, key group, operator, resource) in characters
MAX_ID_LENGTH = 256
#: job ids are one URL path segment
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"

Id = Annotated[str, Check(min_length=1, max_length=MAX_ID_LENGTH)]
Ref = Annotated[str, Check(max_length=MAX_ID_LENGTH)]
Name = Annotated[str, Check("a planner name (GET /v1/algorithms)", min_length=1, max_length=100)]
Amount = Annotated[float, Check(ge=0, finite=True)]
Positive = Annotated[float, Check(gt=0, finite=True)]
Int64 = Annotated[int, Check(ge=0, le=MAX_INT64)]
TimeLimit = Annotated[float | None, Check("seconds the planner may take (default and maximum: the server's "
                                          "settings)", gt=0, finite=True)]
Params = Annotated[dict[str, Any], Check("planner parameters (GET /v1/algorithms lists them)")]
Status = Literal["optimal", "feasible", "heuristic"]
