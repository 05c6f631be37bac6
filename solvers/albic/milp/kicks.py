"""Kicks of the ALBIC MILP planner's restarts (§4.3.1): small exchanges among the nodes a plan already touches.

When the budget nears the node count the plan's worst node is often one it has already rebalanced, and no single
move or swap through that node keeps every other node inside the band: a plateau of the local search
(:func:`solvers.albic.milp.search.improve`). A *kick* changes the plan without spending budget — exchanges that
move key groups between touched nodes only:

- **destination swap**: two migrated units trade their destinations (each still leaves its home: same cost);
- **rotation**: a migrated unit goes back home and a unit that never left that home takes its place at the
  destination (one migration freed, one spent).

One to three kicks (about half of them through the worst node, so that the plateau's node is the one re-tuned),
then the local search repairs the band; the restarts accept the result as their next start when it is within a
small margin of the best plan (record-to-record travel), so that the search walks along the plateau instead of
restarting from the same plan. Only plain units (every key group its own unit, no allowed-node lists, no resource
limits): a kick that breaks the byte budget is undone.
"""

from __future__ import annotations

import numpy as np

from solvers.albic.milp.state import State, drain_floor


def kickable(s: State) -> bool:
    """Kicks apply: plain units (no spread units, no allowed-node lists, no resource limits)."""
    u = s.units
    return not u.mixed and not u.allowed and s.res is None


def kick(s: State, rng: np.random.Generator, n_kicks: int) -> int:
    """Apply up to ``n_kicks`` zero-cost exchanges among touched nodes to ``s`` (see the module docstring);
    returns how many were applied."""
    U = s.units
    done = 0
    for _ in range(n_kicks):
        moved = np.flatnonzero(s.place != U.home)
        if moved.size == 0:
            break
        worst = int(np.argmax(s.devs()))
        near = moved[(s.place[moved] == worst) | (U.home[moved] == worst)]
        x = int(rng.choice(near if near.size and rng.random() < 0.5 else moved))
        a, hx = int(s.place[x]), int(U.home[x])
        if rng.random() < 0.5:
            ys = moved[(s.place[moved] != a) & (U.home[moved] != a)]
            if ys.size == 0:
                continue
            y = int(rng.choice(ys))
            b = int(s.place[y])
            if U.home[x] == b:
                continue
            steps = [(x, b), (y, a)]
        else:
            zs = np.flatnonzero((s.place == hx) & (U.home == hx))
            if zs.size == 0:
                continue
            z = int(rng.choice(zs))
            steps = [(x, hx), (z, a)]
        back = [(u, int(s.place[u])) for u, _ in steps]
        for u, j in steps:
            s.move(u, j)
        if not s.feasible_budget():
            for u, j in reversed(back):
                s.move(u, j)
            continue
        done += 1
    if done and U.problem.removing.any():
        s.floor = drain_floor(U, s.place)
    return done


def free_step(s: State, u: np.ndarray, d: float, scale: float, room_c: float = 0.0
              ) -> tuple[str, int, int, int, int] | None:
    """When the local search is stuck with the budget spent (``room_c`` < 2 migrations left; plain units, see
    :func:`kickable`): an exchange among touched nodes that frees budget
    without raising the distance ``d`` — a migrated unit ``x`` (home ``a``, now on ``b``) goes back home and,
    optionally, a unit ``y`` that migrated onto ``a`` takes its place on ``b`` (one or two migrations freed). The
    freed migration lets the next step reach the worst node, e.g. an untouched one that only a swap can fix.
    Returns the exchange as a chain ``("chain", x, a, y, b)`` (``y = -1``: none), the one freeing the most budget
    and leaving both nodes closest to the target; None if none keeps both inside ``d``."""
    if room_c >= 2 or not kickable(s):
        return None
    U = s.units
    G = np.flatnonzero(s.place != U.home)          # migrated units
    M = G[s.act[U.home[G]]]                          # never back onto a removing node (the drain objective)
    if M.size == 0:
        return None
    W, cap, t = U.load, s.cap, s.t
    # candidates: x alone (y = -1), and x with each unit y that migrated onto x's home (a segment of G by node)
    go = G[np.argsort(s.place[G], kind="stable")]
    gp = s.place[go]
    lo = np.searchsorted(gp, U.home[M], side="left")
    cnt = np.searchsorted(gp, U.home[M], side="right") - lo
    xi = np.concatenate([np.arange(M.size), np.repeat(np.arange(M.size), cnt)])
    yi = np.concatenate([np.full(M.size, -1), go[np.repeat(lo, cnt) + np.arange(int(cnt.sum()))
                                                 - np.repeat(np.cumsum(cnt) - cnt, cnt)]])
    x = M[xi]
    a, b = U.home[x], s.place[x]
    net = W[x] - np.where(yi >= 0, W[yi], 0.0)
    newmax = np.maximum(np.abs(u[a] + net / cap[a] - t), np.abs(u[b] - net / cap[b] - t))
    ok = newmax < d - 1e-9 * scale
    if not ok.any():
        return None
    freed = 1 + ((yi >= 0) & (U.home[yi] == b))
    k = int(np.argmin(np.where(ok, newmax / scale - 10.0 * freed, np.inf)))
    return ("chain", int(x[k]), int(a[k]), int(yi[k]), int(b[k]))
