"""Controller errors; the API maps each to one HTTP status (InvalidInput from the foundation is 422)."""

from __future__ import annotations


class NotFound(Exception):
    """Unknown job or proposal (404)."""


class Conflict(Exception):
    """State conflict: stale epoch, proposal not executable, topology mismatch (409)."""


class TooLarge(Exception):
    """Request exceeds a configured size cap (413)."""


class Busy(Exception):
    """Too many solves in flight (429)."""


class QuotaExceeded(Busy):
    """A server-wide quota is used up (jobs, bytes of statistics windows): 429 until something is freed."""
