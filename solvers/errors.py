"""The error types shared by every layer: the user's input (:class:`InvalidInput`) and the server's own failures
(:class:`ServerError`).

Solvers raise :class:`InvalidInput` with the path of the offending field (``key_groups[3].load``) and the reason;
the API turns it into HTTP 422 with that path, the CLI into one line on stderr and exit status 2. A
:class:`ServerError` (such as :class:`PlannerError`) is a bug or a broken component, never the input: the API answers
500 with a request id and logs the traceback under that id.
"""

from __future__ import annotations


class InvalidInput(ValueError):
    """Input that does not satisfy the contract: ``field`` names where, ``reason`` says what is wrong."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}" if field else reason)

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class ServerError(RuntimeError):
    """A failure on the server's side — a bug or a broken component, never the user's input (HTTP 500)."""


class PlannerError(ServerError):
    """A planner returned a plan that breaks its problem's constraints (``solvers.registry.check_plan``)."""
