"""The solver pool's admission: ``max_concurrent`` solve slots, ``reserved_auto`` of them for automatic rounds.

:meth:`Admission.admit` takes all of a request's slots at once, with no ``await`` between the check and the taking,
and returns a :class:`Ticket`; the request's solves then use its slots one each. Slots a request does not use go
back when it releases its ticket (``with pool.admit(n) as ticket:``). A ticket may have an *owner* (a job id):
cancelling the owner frees its tickets' unused slots, and a solve that would use one fails with
:class:`~controller.pool_errors.SolveCancelled`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from controller.errors import Busy, TooLarge
from controller.pool_errors import SolveCancelled
from controller.pool_queue import KINDS, Kind


class Ticket:
    """Solve slots admitted together (see the module docstring); a context manager that releases the slots its
    solves did not use."""

    def __init__(self, n: int, kind: Kind, owner: Hashable | None, give_back: Callable[[Ticket, int], None]):
        self.kind, self.owner = kind, owner
        self.unused = n
        self.cancelled: str | None = None  # why, once cancelled
        self._give_back = give_back

    def use(self) -> None:
        """One slot for one solve."""
        if self.cancelled is not None:
            raise SolveCancelled(self.cancelled)
        if self.unused < 1:
            raise RuntimeError("every solve slot of this admission is used (admit as many as the request solves)")
        self.unused -= 1
        if self.unused == 0:
            self._give_back(self, 0)  # nothing left to give back or to cancel

    def release(self) -> None:
        """Give back the slots no solve used (idempotent)."""
        n, self.unused = self.unused, 0
        self._give_back(self, n)

    def cancel(self, reason: str) -> None:
        """Release the unused slots; a solve that would use one gets :class:`SolveCancelled` with ``reason``."""
        self.cancelled = reason
        self.release()

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Admission:
    """The slot counts per kind (running + queued + admitted but not submitted) and the owners' tickets."""

    def __init__(self, max_concurrent: int, reserved_auto: int | None = None):
        self.max_concurrent = max_concurrent
        reserved = max(1, max_concurrent // 5) if reserved_auto is None else reserved_auto
        self.reserved_auto = min(reserved, max_concurrent - 1)
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._tickets: dict[Hashable, set[Ticket]] = {}  # by owner: the ones with slots left

    @property
    def in_flight(self) -> int:
        return sum(self.counts.values())

    def capacity(self, kind: Kind = "adhoc") -> int:
        return self.max_concurrent if kind == "auto" else self.max_concurrent - self.reserved_auto

    def check(self, n: int = 1, kind: Kind = "adhoc") -> None:
        """Raise :class:`Busy` when ``n`` more solves of ``kind`` would exceed its share, :class:`TooLarge` when
        they never could."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        cap = self.capacity(kind)
        if n > cap:
            raise TooLarge(f"{n} solves at once: at most {cap} {kind} solves are admitted "
                           f"(REBALANCER_MAX_CONCURRENT_SOLVES − REBALANCER_RESERVED_AUTO_SOLVES)")
        used = self.in_flight if kind == "auto" else self.counts["adhoc"]
        if used + n > cap or self.in_flight + n > self.max_concurrent:
            raise Busy(f"{self.in_flight} solves in flight ({self.counts['auto']} automatic); {kind} limit {cap} "
                       f"of {self.max_concurrent}; retry later")

    def admit(self, n: int = 1, kind: Kind = "adhoc", owner: Hashable | None = None) -> Ticket:
        """:meth:`check`, then take the ``n`` slots (no ``await`` in between: this is one step of the loop)."""
        self.check(n, kind)
        self.counts[kind] += n
        ticket = Ticket(n, kind, owner, self._give_back)
        if owner is not None and n > 0:
            self._tickets.setdefault(owner, set()).add(ticket)
        return ticket

    def _give_back(self, ticket: Ticket, n: int) -> None:
        self.counts[ticket.kind] -= n
        mine = self._tickets.get(ticket.owner)
        if mine is not None:
            mine.discard(ticket)
            if not mine:
                del self._tickets[ticket.owner]

    def cancel(self, owner: Hashable, why: str) -> None:
        """Cancel ``owner``'s tickets: their unused slots are freed, a solve that would use one fails."""
        for ticket in list(self._tickets.get(owner, ())):
            ticket.cancel(why)
