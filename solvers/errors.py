"""The one error type for invalid input, shared by every layer.

Solvers raise :class:`InvalidInput` with the path of the offending field (``key_groups[3].load``) and the reason;
the API turns it into HTTP 422 with that path, the CLI into one line on stderr and exit status 2.
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
