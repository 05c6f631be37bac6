"""Heuristic search for the ALBIC MILP (§4.3.1) in unit space: incumbent state, greedy moves and swaps.

The state keeps the linear-model node loads of a unit placement and the budget it uses. :func:`improve` is a
best-improvement local search on the MILP's lexicographic objective (load distance ``d`` first, then a tie-break
that spends the budget well): at each step the node with the largest deviation from the target is the only one
whose change can lower ``d``, so only moves and swaps touching it are scored — O(units on it × nodes) per step,
vectorised with numpy. It is the warm start of the MILP and, alone, the fallback for very large instances. Stuck
with the budget spent, it first frees some among the nodes the plan touches
(:func:`~solvers.albic.milp.kicks.free_step`), so that the worst node — often an untouched one that only a swap can
fix — can be reached.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from solvers.albic.milp.kicks import free_step
from solvers.albic.milp.pick import pick
from solvers.albic.milp.state import State, drain_floor

EPS = 1e-12
SWAP_PAIRS_MAX = 200_000   # unit pairs scored per swap step


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
    assert lim is not None and s.units.res_load is not None
    after = s.res[dests][None, :, :] + s.units.res_load[us][:, None, :]
    ok: np.ndarray = np.all(after <= lim[dests][None, :, :] + 1e-9, axis=2)
    return ok


def _use(s: State, dc: np.ndarray, db: np.ndarray) -> np.ndarray:
    """The budget a candidate spends, as shares of the budgets (migrations and bytes, whichever are given): a
    byte budget makes the cheaper key group in bytes the better of two that balance alike."""
    use = dc / s.max_c if np.isfinite(s.max_c) and s.max_c > 0 else np.zeros(np.shape(dc))
    if np.isfinite(s.max_b) and s.max_b > 0:
        use = use + db / s.max_b
    elif not np.isfinite(s.max_c):
        use = np.asarray(dc, dtype=np.float64)
    return np.asarray(use, dtype=np.float64)


def improve(s: State, deadline: float, max_steps: int = 10**9, swap_nodes: int = 64,
            rng: np.random.Generator | None = None, topk: int = 1, near: int = 48,
            target: float | None = None) -> int:
    """Best-improvement local search on (load distance, Σ cap·dev²); returns the number of steps taken.

    Each step looks at the node ``h`` with the largest deviation: moves of its units to the ``near`` coldest
    nodes (h hot), moves of units of the ``near`` hottest and the removing nodes onto it (h cold), and swaps with
    units of the ``swap_nodes`` most opposite nodes; when none improves and fewer than 2 migrations are left, a
    budget-freeing exchange that keeps the distance (:func:`~solvers.albic.milp.kicks.free_step`)."""
    U = s.units
    act_nodes = np.flatnonzero(s.act)
    W, cap = U.load, s.cap
    scale = max(s.t, 1e-12)
    steps = 0
    while steps < max_steps and time.perf_counter() < deadline:
        u = s.util()
        dev = np.where(s.act, np.abs(u - s.t), -1.0)
        h = int(np.argmax(dev))
        d = float(dev[h])
        if d <= 1e-12 * scale or (target is not None and d <= target):
            break
        room_c, room_b = s.max_c - s.used_c, s.max_b - s.used_b
        best = None  # (kind, data)
        landed = False
        if s.floor > 0 and d <= s.floor + 1e-12 * scale:
            best = _drain_step(s, u, dev, max(d, s.floor), room_c, room_b, near)
            if best is not None:
                _apply(s, best)
                s.floor = drain_floor(U, s.place) if best[0] == "move" else s.floor
                steps += 1
                continue
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
                land = None
                if target is not None:
                    land = (np.abs(uh - s.t) <= target)[:, None] & (
                        np.abs(uj - s.t) <= np.maximum(target, np.abs(u[D] - s.t))[None, :])
                idx, landed = pick(newd, _use(s, dc, db), dss, ok, d, scale, rng, topk, land, R[:, None])
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
                # no byte budget: bytes cost nothing (not computed)
                db = U.cost_bytes_to(S, h) - U.cost_bytes_to(S, src) if np.isfinite(s.max_b) else np.zeros(1)
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
                land = None
                if target is not None:
                    land = (np.abs(uh - s.t) <= target) & (dev_src <= np.maximum(target, dev[src]))
                idx, landed = pick(newd, _use(s, dc, db), dss, ok, d, scale, rng, topk, land)
                if idx is not None:
                    best = ("move", int(S[idx[0]]), h)
        if swap_nodes > 0 and (best is None or (target is not None and not landed)):
            sw, sw_landed = _best_swap(s, u, dev, h, d, room_c, room_b, swap_nodes, scale, rng, topk, target)
            if sw is not None and (best is None or sw_landed):
                best = sw
        best = free_step(s, u, d, scale, room_c) if best is None and target is None else best  # budget spent?
        if best is None:
            break
        _apply(s, best)
        steps += 1
    return steps


def land(s: State, h: int, target: float, rng: np.random.Generator | None = None) -> bool:
    """Bring node ``h`` within ``target`` of the target utilisation by one swap of a unit on it with a unit of
    another node, that node left within the larger of ``target`` and its own deviation — whatever the distance
    elsewhere (:func:`_best_swap` in target mode, the cheapest such swap in the budget left; with ``rng`` one of the
    3 best drawn). Returns whether a swap was applied. The restarts' ruins call it on an untouched worst node:
    there a swap (two migrations) is the only fix, and a greedy repair spends the freed budget on the nodes the
    ruin unbalanced before it gets there (:func:`solvers.albic.milp.phases.restarts`)."""
    u = s.util()
    dev = np.where(s.act, np.abs(u - s.t), -1.0)
    op, landed = _best_swap(s, u, dev, h, float(dev.max()), s.max_c - s.used_c, s.max_b - s.used_b, 64,
                            max(s.t, 1e-12), rng, 3, target)
    if op is None or not landed:
        return False
    _apply(s, op)
    return True


def _apply(s: State, op: tuple[Any, ...]) -> None:
    if op[0] == "move":
        s.move(op[1], op[2])
    elif op[0] == "swap":
        _, a, b = op
        ia, ib = int(s.place[a]), int(s.place[b])
        s.move(a, ib)
        s.move(b, ia)
    else:  # chain: x -> j, y -> k
        _, x, j, y, k = op
        s.move(x, j)
        if y >= 0:
            s.move(y, k)
    if s.floor > 0:
        s.floor = drain_floor(s.units, s.place)


def _drain_step(s: State, u: np.ndarray, dev: np.ndarray, limit: float, room_c: float, room_b: float,
                near: int) -> tuple[Any, ...] | None:
    """A move of a unit off a removing node that keeps every active node within ``limit`` of the target: the
    heaviest such unit; else a chain x: B → j, y: j → k (two migrations) that does."""
    U = s.units
    W = U.load
    cap = s.cap
    t = s.t
    rem_nodes = np.flatnonzero(~s.act)
    X = np.flatnonzero(np.isin(s.place, rem_nodes))
    if X.size == 0:
        return None
    X = X[np.argsort(-W[X], kind="stable")[:32]]
    act_nodes = np.flatnonzero(s.act)
    D = act_nodes if act_nodes.size <= near else act_nodes[np.argpartition(u[act_nodes], near - 1)[:near]]
    cc, cb = U.cost_matrix(X, D)
    dc = cc - U.cost_count_to(X, s.place[X])[:, None]
    db = cb - U.cost_bytes_to(X, s.place[X])[:, None]
    uj = u[D][None, :] + W[X][:, None] / cap[D][None, :]
    ok = (np.abs(uj - t) <= limit + 1e-12 * max(t, 1e-12)) & (dc <= room_c) & (db <= room_b)
    ok &= U.allowed_mask(X, D) & _res_ok(s, X, D)
    if ok.any():
        # heaviest unit first, then the destination left closest to the target
        score = np.where(ok, -W[X][:, None] * 1e6 / max(t, 1e-12) + np.abs(uj - t) / max(t, 1e-12) * 1e-3, np.inf)
        a, b = np.unravel_index(int(np.argmin(score)), score.shape)
        return ("move", int(X[a]), int(D[b]))
    if room_c < 2:
        return None
    # chain with the heaviest unit x: j receives x and sends y to k
    x = int(X[0])
    J = D[: min(D.size, 16)] if D.size > 16 else D
    J = J[np.argsort(u[J])][:16]
    Y = np.flatnonzero(np.isin(s.place, J))
    if Y.size == 0:
        return None
    K = D[np.argsort(u[D])][:16]
    jy = s.place[Y]
    uj = u[jy] + (W[x] - W[Y]) / cap[jy]                      # (Y,)
    uk = u[K][None, :] + W[Y][:, None] / cap[K][None, :]       # (Y, K)
    lim = limit + 1e-12 * max(t, 1e-12)
    ok = (np.abs(uj - t) <= lim)[:, None] & (np.abs(uk - t) <= lim) & (K[None, :] != jy[:, None])
    if not ok.any():
        return None
    cx = U.cost_count_to(np.full(Y.size, x), jy) - U.cost_count_to(np.array([x]), s.place[x])[0]
    bx = U.cost_bytes_to(np.full(Y.size, x), jy) - U.cost_bytes_to(np.array([x]), s.place[x])[0]
    ccY, cbY = U.cost_matrix(Y, K)
    dcY = ccY - U.cost_count_to(Y, jy)[:, None]
    dbY = cbY - U.cost_bytes_to(Y, jy)[:, None]
    ok &= (cx[:, None] + dcY <= room_c) & (bx[:, None] + dbY <= room_b)
    ok &= U.allowed_mask(np.array([x]), J).any() & U.allowed_mask(Y, K)
    if s.res is not None:
        ok &= _res_ok(s, Y, K)
    if not ok.any():
        return None
    score = np.where(ok, np.maximum(np.abs(uj - t)[:, None], np.abs(uk - t)), np.inf)
    a, b = np.unravel_index(int(np.argmin(score)), score.shape)
    return ("chain", x, int(jy[a]), int(Y[a]), int(K[b]))


def _best_swap(s: State, u: np.ndarray, dev: np.ndarray, h: int, d: float, room_c: float, room_b: float,
               k: int, scale: float, rng: np.random.Generator | None = None, topk: int = 1,
               target: float | None = None) -> tuple[tuple[Any, ...] | None, bool]:
    """Best swap of a unit on the critical node ``h`` with a unit on one of the ``k`` most opposite nodes.

    Only pairs whose net load keeps ``h`` within ``d`` of the target are scored — any other leaves ``h`` at a
    distance ≥ d, so it can neither improve nor tie: with the partners' units sorted by load, each unit of ``h``
    has a window of partner loads (a few percent of them when ``d`` is small)."""
    U = s.units
    W = U.load
    cap = s.cap
    act_nodes = np.flatnonzero(s.act)
    others = act_nodes[act_nodes != h]
    R = np.flatnonzero(s.place == h)
    if others.size == 0 or R.size == 0:
        return None, False
    order = np.argsort(u[others])
    partners = others[order[:k]] if u[h] > s.t else others[order[::-1][:k]]
    if partners.size > 1:  # keep the pairs bounded on big instances: fewer partner nodes when they hold many units
        counts = np.bincount(s.place, minlength=s.n)[partners]
        keep = np.searchsorted(np.cumsum(counts), SWAP_PAIRS_MAX // max(1, R.size), side="right")
        partners = partners[: max(1, int(keep))]
    on_partner = np.zeros(s.n, dtype=bool)
    on_partner[partners] = True
    qmask = on_partner[s.place]
    if room_c < 1 and not U.mixed:
        # no migration left: a partner unit at home costs one, which only a unit of h going back to that very
        # node can pay for — keep the migrated units and the units on the homes of h's guests
        guest_home = np.zeros(s.n, dtype=bool)
        guest_home[U.home[R]] = True
        guest_home[h] = False
        qmask &= (s.place != U.home) | guest_home[s.place]
    Q = np.flatnonzero(qmask)
    if Q.size == 0:
        return None, False
    # net = W[r] − W[q] leaves h; inside the band iff (u_h − t − d)·c_h ≤ net ≤ (u_h − t + d)·c_h
    slack = 1e-9 * scale * cap[h]
    qo = Q[np.argsort(W[Q], kind="stable")]
    lo = np.searchsorted(W[qo], W[R] - (u[h] - s.t + d) * cap[h] - slack, side="left")
    hi = np.searchsorted(W[qo], W[R] - (u[h] - s.t - d) * cap[h] + slack, side="right")
    cnt = np.maximum(hi - lo, 0)
    if not cnt.any():
        return None, False
    ri = np.repeat(np.arange(R.size), cnt)
    r_ = R[ri]
    q_ = qo[np.repeat(lo, cnt) + np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)]
    jq = s.place[q_]
    if U.mixed:
        dc = U.cost_count_to(r_, jq) - U.cost_count_to(r_, h) + U.cost_count_to(q_, h) - U.cost_count_to(q_, jq)
    else:  # every unit on its home or not: the same counts without the general path's overhead
        hr, hq = U.home[r_], U.home[q_]
        dc = U.size[r_] * ((hr != jq).astype(np.int64) - (hr != h)) + U.size[q_] * (
            (hq != h).astype(np.int64) - (hq != jq))
    net = W[r_] - W[q_]
    uj = u[jq] + net / cap[jq]
    # drop the pairs over the budget and those whose partner ends outside the band (they can neither improve,
    # tie nor land) before scoring: with the budget spent, most of them
    keep = (np.abs(uj - s.t) <= d + 1e-9 * scale) & (dc <= room_c)
    db = np.zeros(1)
    if np.isfinite(s.max_b):  # no byte budget: bytes cost nothing
        db = U.cost_bytes_to(r_, jq) - U.cost_bytes_to(r_, h) + U.cost_bytes_to(q_, h) - U.cost_bytes_to(q_, jq)
        keep &= db <= room_b
        db = db[keep]
    if not keep.any():
        return None, False
    ri, r_, q_, jq, net, uj, dc = ri[keep], r_[keep], q_[keep], jq[keep], net[keep], uj[keep], dc[keep]
    uh = u[h] - net / cap[h]
    newd = np.maximum(np.maximum(_rest(dev, h, jq), np.abs(uh - s.t)), np.abs(uj - s.t))
    ok = np.ones(r_.size, dtype=bool)
    if U.allowed:
        ps = np.argsort(partners)
        pos = ps[np.searchsorted(partners[ps], jq)]
        ok &= U.allowed_mask(R, partners)[ri, pos] & U.allowed_mask(q_, np.array([h]))[:, 0]
    if s.res is not None:
        rl, lim = U.res_load, U.res_limit
        assert rl is not None and lim is not None
        after_h = s.res[h][None, :] - rl[r_] + rl[q_]
        after_j = s.res[jq] + rl[r_] - rl[q_]
        ok &= np.all(after_h <= lim[h] + 1e-9, axis=1) & np.all(after_j <= lim[jq] + 1e-9, axis=1)
    dss = cap[h] * ((uh - s.t) ** 2 - (u[h] - s.t) ** 2) + cap[jq] * ((uj - s.t) ** 2 - (u[jq] - s.t) ** 2)
    land = None
    if target is not None:
        land = (np.abs(uh - s.t) <= target) & (np.abs(uj - s.t) <= np.maximum(target, dev[jq]))
    idx, landed = pick(newd, _use(s, dc, db), dss, ok, d, scale, rng, topk, land, r_)
    if idx is None:
        return None, False
    return ("swap", int(r_[idx[0]]), int(q_[idx[0]])), landed
