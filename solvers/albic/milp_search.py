"""Heuristic search for the ALBIC MILP (§4.3.1) in unit space: incumbent state, greedy moves and swaps.

The state keeps the linear-model node loads of a unit placement and the budget it uses. :func:`improve` is a
best-improvement local search on the MILP's lexicographic objective (load distance ``d`` first, then a tie-break
that spends the budget well): at each step the node with the largest deviation from the target is the only one
whose change can lower ``d``, so only moves and swaps touching it are scored — O(units on it × nodes) per step,
vectorised with numpy. It is the warm start of the MILP and, alone, the fallback for very large instances.
"""

from __future__ import annotations

import time

import numpy as np

from solvers.albic.milp_units import Units

EPS = 1e-12


class State:
    """A unit placement with its linear-model node loads and budget usage."""

    def __init__(self, units: Units, place: np.ndarray, t: float):
        p = units.problem
        self.units = units
        self.place = np.asarray(place, dtype=np.int64).copy()
        self.n = p.n_nodes
        self.cap = p.capacity
        self.act = p.active
        self.t = t
        self.L = np.bincount(self.place, weights=units.load, minlength=self.n).astype(np.float64)
        self.used_c, self.used_b = units.placement_cost(self.place)
        self.max_c = float("inf") if p.max_migrations is None else float(p.max_migrations)
        self.max_b = float("inf") if p.max_migration_bytes is None else float(p.max_migration_bytes) * (1 + 1e-12)
        self.res = None
        if units.res_load is not None:
            self.res = np.zeros((self.n, units.res_load.shape[1]))
            np.add.at(self.res, self.place, units.res_load)

    def copy(self) -> "State":
        s = State.__new__(State)
        s.__dict__.update(self.__dict__)
        s.place = self.place.copy()
        s.L = self.L.copy()
        s.res = None if self.res is None else self.res.copy()
        return s

    # ------------------------------------------------------------------ objective
    def util(self) -> np.ndarray:
        return self.L / self.cap

    def devs(self) -> np.ndarray:
        return np.where(self.act, np.abs(self.util() - self.t), -1.0)

    def key(self) -> tuple[float, float]:
        """(load distance, range of utilisation over active nodes) of the linear model."""
        u = self.util()[self.act]
        return float(np.max(np.abs(u - self.t))), float(u.max() - u.min())

    def feasible_budget(self) -> bool:
        return self.used_c <= self.max_c + 1e-9 and self.used_b <= self.max_b

    # ------------------------------------------------------------------ moves
    def move(self, u: int, j: int) -> None:
        i = int(self.place[u])
        if i == j:
            return
        U = self.units
        w = U.load[u]
        self.L[i] -= w
        self.L[j] += w
        self.used_c += int(U.cost_count_to(np.array([u]), j)[0] - U.cost_count_to(np.array([u]), i)[0])
        self.used_b += float(U.cost_bytes_to(np.array([u]), j)[0] - U.cost_bytes_to(np.array([u]), i)[0])
        if self.res is not None:
            self.res[i] -= U.res_load[u]
            self.res[j] += U.res_load[u]
        self.place[u] = j

    def set_place(self, place: np.ndarray) -> None:
        fresh = State(self.units, place, self.t)
        self.__dict__.update(fresh.__dict__)


def _rest(dev: np.ndarray, h: int, nodes: np.ndarray) -> np.ndarray:
    """max deviation over active nodes other than ``h`` and ``nodes[x]`` (vectorised over ``nodes``)."""
    top = np.argpartition(-dev, min(3, dev.size - 1))[:4] if dev.size > 4 else np.arange(dev.size)
    top = top[np.argsort(-dev[top])]
    top = top[top != h]
    if top.size == 0:
        return np.full(nodes.shape, -1.0)
    a1 = top[0]
    d2 = dev[top[1]] if top.size > 1 else -1.0
    return np.where(nodes == a1, d2, dev[a1])


def _res_ok(s: State, us: np.ndarray, dests: np.ndarray) -> np.ndarray:
    """(len(us), len(dests)) whether adding each unit to each destination keeps the resource limits."""
    if s.res is None:
        return np.ones((us.size, dests.size), dtype=bool)
    lim = s.units.res_limit
    after = s.res[dests][None, :, :] + s.units.res_load[us][:, None, :]
    return np.all(after <= lim[dests][None, :, :] + 1e-9, axis=2)


def _pick(newd: np.ndarray, dc: np.ndarray, dss: np.ndarray, ok: np.ndarray, d: float, scale: float,
          rng: np.random.Generator | None = None, topk: int = 1):
    """Index of the best improving candidate: lowest new d, then lowest budget use, then lowest Σc·dev².

    With ``rng`` one of the ``topk`` best is drawn at random (the randomised greedy of the restarts)."""
    improving = ok & ((newd < d - 1e-9 * scale) | ((newd <= d + 1e-12 * scale) & (dss < -1e-9 * scale * scale) & (dc <= 0)))
    if not improving.any():
        return None
    flat = np.flatnonzero(improving.ravel())
    nd = newd.ravel()[flat]
    if rng is not None and topk > 1 and flat.size > 1:
        # quantise d so that near-ties are ordered by budget use and Σc·dev²
        q = np.round(nd / (1e-6 * scale))
        order = np.lexsort((dss.ravel()[flat], np.broadcast_to(dc, newd.shape).ravel()[flat], q))
        pick = order[int(rng.integers(min(topk, order.size)))]
        return np.unravel_index(int(flat[pick]), newd.shape)
    best = nd.min()
    tie = nd <= best + 1e-9 * scale
    dcf = np.broadcast_to(dc, newd.shape).ravel()[flat]
    tie &= dcf == dcf[tie].min()
    score = np.where(tie, dss.ravel()[flat], np.inf)
    return np.unravel_index(int(flat[int(np.argmin(score))]), newd.shape)


def improve(s: State, deadline: float, max_steps: int = 10**9, swap_nodes: int = 8,
            rng: np.random.Generator | None = None, topk: int = 1, near: int = 48) -> int:
    """Best-improvement local search on (load distance, Σ cap·dev²); returns the number of steps taken.

    Each step looks at the node ``h`` with the largest deviation: moves of its units to the ``near`` coldest
    nodes (h hot), moves of units of the ``near`` hottest and the removing nodes onto it (h cold), and swaps with
    units of the ``swap_nodes`` most opposite nodes."""
    U = s.units
    act_nodes = np.flatnonzero(s.act)
    W = U.load
    cap = s.cap
    scale = max(s.t, 1e-12)
    steps = 0
    while steps < max_steps and time.perf_counter() < deadline:
        u = s.util()
        dev = np.where(s.act, np.abs(u - s.t), -1.0)
        h = int(np.argmax(dev))
        d = float(dev[h])
        if d <= 1e-12 * scale:
            break
        room_c = s.max_c - s.used_c
        room_b = s.max_b - s.used_b
        best = None  # (kind, data)
        if u[h] > s.t:
            R = np.flatnonzero(s.place == h)
            D = act_nodes[act_nodes != h]
            if D.size > near:  # the coldest nodes only: a hot node's load should go where it is missing
                D = D[np.argpartition(u[D], near - 1)[:near]]
                D.sort()
            if R.size and D.size:
                cc, cb = U.cost_matrix(R, D)
                c0 = U.cost_count_to(R, h)
                b0 = U.cost_bytes_to(R, h)
                dc = cc - c0[:, None]
                db = cb - b0[:, None]
                ok = U.allowed_mask(R, D) & (dc <= room_c) & (db <= room_b) & _res_ok(s, R, D)
                uh = u[h] - W[R] / cap[h]
                uj = u[D][None, :] + W[R][:, None] / cap[D][None, :]
                newd = np.maximum(np.maximum(_rest(dev, h, D)[None, :], np.abs(uh - s.t)[:, None]), np.abs(uj - s.t))
                dss = (cap[h] * ((uh - s.t) ** 2 - (u[h] - s.t) ** 2))[:, None] + cap[D][None, :] * (
                    (uj - s.t) ** 2 - (u[D] - s.t)[None, :] ** 2)
                idx = _pick(newd, dc, dss, ok, d, scale, rng, topk)
                if idx is not None:
                    best = ("move", int(R[idx[0]]), int(D[idx[1]]))
        else:
            if act_nodes.size - 1 > near:  # units of the hottest nodes and of removing nodes only
                others = act_nodes[act_nodes != h]
                hot = others[np.argpartition(-u[others], near - 1)[:near]]
                srcmask = np.zeros(s.n, dtype=bool)
                srcmask[hot] = True
                srcmask |= ~s.act
                srcmask[h] = False
                S = np.flatnonzero(srcmask[s.place])
            else:
                S = np.flatnonzero(s.place != h)
            if S.size:
                src = s.place[S]
                dc = U.cost_count_to(S, h) - U.cost_count_to(S, src)
                db = U.cost_bytes_to(S, h) - U.cost_bytes_to(S, src)
                ok = (dc <= room_c) & (db <= room_b)
                if U.allowed or s.res is not None:
                    ok &= U.allowed_mask(S, np.array([h]))[:, 0] & _res_ok(s, S, np.array([h]))[:, 0]
                us_new = u[src] - W[S] / cap[src]
                uh = u[h] + W[S] / cap[h]
                a_src = s.act[src]
                dev_src = np.where(a_src, np.abs(us_new - s.t), -1.0)
                newd = np.maximum(np.maximum(_rest(dev, h, src), np.abs(uh - s.t)), dev_src)
                dss = cap[h] * ((uh - s.t) ** 2 - (u[h] - s.t) ** 2) + np.where(
                    a_src, cap[src] * ((us_new - s.t) ** 2 - (u[src] - s.t) ** 2), 0.0)
                idx = _pick(newd, dc, dss, ok, d, scale, rng, topk)
                if idx is not None:
                    best = ("move", int(S[idx[0]]), h)
        if best is None and swap_nodes > 0:
            best = _best_swap(s, u, dev, h, d, room_c, room_b, swap_nodes, scale, rng, topk)
        if best is None:
            break
        if best[0] == "move":
            s.move(best[1], best[2])
        else:
            _, a, b = best
            ia, ib = int(s.place[a]), int(s.place[b])
            s.move(a, ib)
            s.move(b, ia)
        steps += 1
    return steps


def _best_swap(s: State, u: np.ndarray, dev: np.ndarray, h: int, d: float, room_c: float, room_b: float,
               k: int, scale: float, rng: np.random.Generator | None = None, topk: int = 1):
    """Best swap of a unit on the critical node ``h`` with a unit on one of the ``k`` most opposite nodes."""
    U = s.units
    W = U.load
    cap = s.cap
    act_nodes = np.flatnonzero(s.act)
    hot = u[h] > s.t
    others = act_nodes[act_nodes != h]
    if others.size == 0:
        return None
    order = np.argsort(u[others])
    partners = others[order[:k]] if hot else others[order[::-1][:k]]
    R = np.flatnonzero(s.place == h)
    Q = np.flatnonzero(np.isin(s.place, partners))
    if R.size == 0 or Q.size == 0:
        return None
    jq = s.place[Q]
    net = W[R][:, None] - W[Q][None, :]          # load leaving h
    uh = u[h] - net / cap[h]
    uj = u[jq][None, :] + net / cap[jq][None, :]
    newd = np.maximum(np.maximum(_rest(dev, h, jq)[None, :], np.abs(uh - s.t)), np.abs(uj - s.t))
    cR_h = U.cost_count_to(R, h)
    bR_h = U.cost_bytes_to(R, h)
    cQ_j = U.cost_count_to(Q, jq)
    bQ_j = U.cost_bytes_to(Q, jq)
    ccR, cbR = U.cost_matrix(R, partners)       # R -> partner nodes
    pos = np.searchsorted(partners, jq) if np.all(np.diff(partners) > 0) else None
    if pos is None:
        sp = np.argsort(partners)
        partners_sorted = partners[sp]
        pos = sp[np.searchsorted(partners_sorted, jq)]
    cRj = ccR[:, pos]
    bRj = cbR[:, pos]
    cQh = U.cost_count_to(Q, h)
    bQh = U.cost_bytes_to(Q, h)
    dc = cRj - cR_h[:, None] + (cQh - cQ_j)[None, :]
    db = bRj - bR_h[:, None] + (bQh - bQ_j)[None, :]
    ok = (dc <= room_c) & (db <= room_b)
    if U.allowed:
        ok &= U.allowed_mask(R, partners)[:, pos] & U.allowed_mask(Q, np.array([h]))[:, 0][None, :]
    if s.res is not None:
        rl = U.res_load
        lim = U.res_limit
        after_h = s.res[h][None, None, :] - rl[R][:, None, :] + rl[Q][None, :, :]
        after_j = s.res[jq][None, :, :] + rl[R][:, None, :] - rl[Q][None, :, :]
        ok &= np.all(after_h <= lim[h] + 1e-9, axis=2) & np.all(after_j <= lim[jq][None, :, :] + 1e-9, axis=2)
    dss = cap[h] * ((uh - s.t) ** 2 - (u[h] - s.t) ** 2) + cap[jq][None, :] * (
        (uj - s.t) ** 2 - (u[jq] - s.t)[None, :] ** 2)
    idx = _pick(newd, dc, dss, ok, d, scale, rng, topk)
    if idx is None:
        return None
    return ("swap", int(R[idx[0]]), int(Q[idx[1]]))
