"""The solver pool's errors: each says why a solve could not finish (the API maps :class:`SolverUnavailable` to
503: the pool's fault, not the request's, and a retry can succeed)."""

from __future__ import annotations


class SolverUnavailable(RuntimeError):
    """The solve could not finish for a reason of the pool, not of the request (503: a retry can succeed)."""


class SolveTimeout(SolverUnavailable):
    """The solve overran its time limit (× ``kill_factor`` + grace); its worker was killed and replaced."""


class WorkerDied(SolverUnavailable):
    """The worker running the solve died (killed, out of memory, a crash in native code); it was replaced."""


class PoolBroken(SolverUnavailable):
    """No solver worker can be started (the pool keeps trying; meanwhile the liveness probe fails)."""


class SolveCancelled(RuntimeError):
    """The solve was cancelled (its owner, e.g. a deleted job, no longer wants it) before it finished."""
