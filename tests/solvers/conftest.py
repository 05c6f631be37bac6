"""Solver tests: import OR-tools once up front.

``albic-milp`` imports OR-tools lazily, inside the first call that needs the MILP (so that ``rebalancer plan`` does
not pay for it when the planner does not need it), and that import counts against the call's time limit. Tests
that expect a proof within a short limit would otherwise depend on whether an earlier test already paid for it.
"""

import solvers.albic.milp.cpsat  # noqa: F401
