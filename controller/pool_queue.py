"""The solver pool's admission tickets.

:meth:`controller.solving.SolverPool.admit` takes all of a request's solve slots at once, with no ``await`` between
the check and the taking, and returns a :class:`Ticket`; the request's solves then use its slots one each. Slots a
request does not use go back when it releases its ticket (``with pool.admit(n) as ticket:``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

Kind = Literal["adhoc", "auto"]
KINDS: tuple[Kind, ...] = ("adhoc", "auto")


class Ticket:
    """Solve slots admitted together (see the module docstring); a context manager that releases the slots its
    solves did not use."""

    def __init__(self, n: int, kind: Kind, give_back: Callable[[Ticket, int], None]):
        self.kind = kind
        self.unused = n
        self._give_back = give_back

    def use(self) -> None:
        """One slot for one solve."""
        if self.unused < 1:
            raise RuntimeError("every solve slot of this admission is used (admit as many as the request solves)")
        self.unused -= 1

    def release(self) -> None:
        """Give back the slots no solve used (idempotent)."""
        n, self.unused = self.unused, 0
        if n:
            self._give_back(self, n)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
