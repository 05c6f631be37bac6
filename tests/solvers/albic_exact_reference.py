"""An exact reference for the ALBIC load-balancing MILP (Madsen, Zhou, Cao, §4.3.1), independent of the planner.

Written straight from the paper (and DESIGN.md's metrics), sharing no code with :mod:`solvers.albic.milp`:

- binary ``x[k, j]``: key group ``k`` ends on node ``j``; (1) ``Σ_j x[k, j] = 1``; nothing moves onto a removing
  node (Lemma 1; the planner's contract);
- (2) the migration budget: ``Σ_k (1 − x[k, cur_k]) ≤ maxMigrations`` and ``Σ_k σ_k (1 − x[k, cur_k]) ≤ maxBytes``;
- (3)(4) every active node ``j``: ``|L_j / c_j − t| ≤ d`` with ``t = Σ_j L_j / Σ_{j∈A} c_j``;
- communication (DESIGN.md): an edge ``s → r`` with rate ``ρ`` adds ``cc·ρ`` to the node of ``s`` and of ``r`` when
  they differ, linearised exactly: ``z = x[s, j] ∧ ¬x[r, j]`` (``z ≥ x[s,j] − x[r,j]``, ``z ≤ x[s,j]``,
  ``z ≤ 1 − x[r,j]``), the load of ``j`` gains ``cc·ρ·(z_src + z_dst)`` and the total ``2·cc·ρ·Σ_j z_src``;
- extra resources ("Extending to Multi-Dimensional Load"): ``Σ_k r_k x[k, j] ≤ max(limit_j, usage now_j)``;
- minimise ``d``.

Every number is turned into an exact integer first (``fractions.Fraction`` of the float, scaled by the least
common denominator), so CP-SAT's optimum is the exact optimum of the problem as given — no rounding anywhere. Meant
for small instances (≤ ~10 nodes × ~20 key groups).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import scipy.sparse as sp
from ortools.sat.python import cp_model

from solvers.model import Problem


def _frac(x: float) -> Fraction:
    return Fraction(float(x)).limit_denominator(1 << 20)


def _lcm_den(values: list[Fraction]) -> int:
    out = 1
    for v in values:
        out = out * v.denominator // math.gcd(out, v.denominator)
    return out


def exact_optimum(p: Problem, time_limit: float = 20.0) -> Fraction | None:
    """The smallest load distance of ``p`` over every plan within the budget, exactly; ``None`` if CP-SAT does not
    prove it within ``time_limit``."""
    m, n = p.n_key_groups, p.n_nodes
    act = [bool(a) for a in p.active]
    cur = [int(c) for c in p.current]
    w = [_frac(x) for x in p.load]
    cap = [_frac(x) for x in p.capacity]
    src, dst, rate = p.edges()
    cc = _frac(p.communication_cost)
    edges = [(int(s), int(r), _frac(x) * cc) for s, r, x in zip(src, dst, rate, strict=True)] if cc > 0 else []
    edges = [e for e in edges if e[2] > 0]
    q = sum((cap[j] for j in range(n) if act[j]), Fraction(0))
    # u_j − t = L_j / c_j − Tot / Q; multiply by M so that every coefficient is an integer
    coefs = [wk / cap[j] for wk in w for j in range(n)] + [wk / q for wk in w]
    coefs += [e[2] / cap[j] for e in edges for j in range(n)] + [2 * e[2] / q for e in edges]
    big_m = _lcm_den(coefs)

    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{k}_{j}") if (act[j] or j == cur[k]) else None for j in range(n)] for k in range(m)]
    for k in range(m):
        model.add_exactly_one([v for v in x[k] if v is not None])
    # (2) budget
    stay = [x[k][cur[k]] for k in range(m)]
    if p.max_migrations is not None:
        model.add(sum(1 - s for s in stay) <= int(p.max_migrations))
    if p.max_migration_bytes is not None:
        b = [_frac(v) for v in p.state_bytes]
        budget = _frac(p.max_migration_bytes)
        sb = _lcm_den(b + [budget])
        model.add(sum(int(bk * sb) * (1 - s) for bk, s in zip(b, stay, strict=True)) <= int(budget * sb))
    # resources
    if p.resource_load is not None and p.resource_limit is not None:
        for r in range(len(p.resource_names)):
            rl = [_frac(v) for v in p.resource_load[:, r]]
            for j in range(n):
                lim = float(p.resource_limit[j, r])
                if not math.isfinite(lim):
                    continue
                usage = sum((rl[k] for k in range(m) if cur[k] == j), Fraction(0))
                cap_r = max(_frac(lim), usage)
                sr = _lcm_den(rl + [cap_r])
                terms = [int(rl[k] * sr) * x[k][j] for k in range(m) if x[k][j] is not None]
                model.add(sum(terms) <= int(cap_r * sr))
    # communication: z[e][j] = src on j and dst not on j; zd[e][j] = dst on j and src not on j
    node_extra: list[list] = [[] for _ in range(n)]
    total_extra = []
    for ei, (s, r, c) in enumerate(edges):
        for j in range(n):
            xs, xr = x[s][j], x[r][j]
            for who, (a, b_) in (("s", (xs, xr)), ("r", (xr, xs))):
                if a is None:
                    continue
                z = model.new_bool_var(f"z{ei}{who}{j}")
                model.add(z <= a)
                if b_ is not None:
                    model.add(z >= a - b_)
                    model.add(z <= 1 - b_)
                else:
                    model.add(z >= a)
                node_extra[j].append((c, z))
                if who == "s":
                    total_extra.append((2 * c, z))
    tot_w = sum(w, Fraction(0))
    t_expr = int(tot_w / q * big_m) + sum(int(c / q * big_m) * z for c, z in total_extra)
    d = model.new_int_var(0, 1 << 60, "d")
    for j in range(n):
        if not act[j]:
            continue
        u = sum(int(w[k] / cap[j] * big_m) * x[k][j] for k in range(m) if x[k][j] is not None)
        u = u + sum(int(c / cap[j] * big_m) * z for c, z in node_extra[j])
        model.add(u - t_expr <= d)
        model.add(t_expr - u <= d)
    model.minimize(d)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = 1
    st = solver.solve(model)
    if st != cp_model.OPTIMAL:
        return None
    return Fraction(int(solver.value(d)), big_m)


def enumerate_plans(p: Problem, max_plans: int = 2_000_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every plan of ``p`` by brute force, vectorised: (plans (P, m), load distance (P,), load on removing nodes
    (P,)) of the assignments that keep the budget (count and bytes), the resource limits (``max(limit, usage
    now)``) and Lemma 1 (nothing moved onto a removing node), in float arithmetic (DESIGN.md's metrics, written
    again here: communication charged to both ends of a cut edge)."""
    m, n = p.n_key_groups, p.n_nodes
    if n ** m > max_plans:
        raise ValueError(f"{n}^{m} plans is too many to enumerate")
    plans = np.indices((n,) * m).reshape(m, -1).T.astype(np.int64) if m else np.zeros((1, 0), dtype=np.int64)
    moved = plans != p.current[None, :]
    ok = ~np.any(moved & p.removing[plans], axis=1)
    if p.max_migrations is not None:
        ok &= moved.sum(axis=1) <= p.max_migrations
    if p.max_migration_bytes is not None:
        ok &= (moved * p.state_bytes[None, :]).sum(axis=1) <= p.max_migration_bytes * (1 + 1e-12)
    onehot = plans[:, :, None] == np.arange(n)[None, None, :]            # (P, m, n)
    if p.resource_load is not None and p.resource_limit is not None and len(p.resource_names):
        now = np.zeros((n, p.resource_load.shape[1]))
        np.add.at(now, p.current, p.resource_load)
        use = np.einsum("pmn,mr->pnr", onehot, p.resource_load)
        ok &= np.all(use <= np.maximum(p.resource_limit, now)[None] + 1e-9, axis=(1, 2))
    plans, onehot = plans[ok], onehot[ok]
    loads = np.einsum("pmn,m->pn", onehot, p.load)
    if p.communication_cost > 0 and p.comm.nnz:
        src, dst, rate = p.edges()
        cut = plans[:, src] != plans[:, dst]                                  # (P, E)
        extra = p.communication_cost * rate[None, :] * cut
        for ends in (src, dst):
            loads += np.einsum("pe,pen->pn", extra, onehot[:, ends, :])
    act = p.active
    t = loads.sum(axis=1) / p.capacity[act].sum()
    d = np.max(np.abs(loads[:, act] / p.capacity[act][None, :] - t[:, None]), axis=1)
    on_b = loads[:, p.removing].sum(axis=1)
    return plans, d, on_b


def lexicographic_best(d: np.ndarray, on_b: np.ndarray, floor: float, tol: float) -> tuple[float, float, float]:
    """The planner's drain objective over enumerated plans: the least ``max(d, floor)``, then among the plans within
    ``tol`` of it the least load on removing nodes, then among those within ``tol`` of that the least ``d``."""
    first = np.maximum(d, floor)
    f0 = float(first.min())
    sel = first <= f0 + tol
    b0 = float(on_b[sel].min())
    sel &= on_b <= b0 + tol
    return f0, b0, float(d[sel].min())


def random_problem(rng: np.random.Generator, *, fractional_bytes: bool | None = None, comm: bool | None = None,
                   resources: bool | None = None, removing: bool | None = None) -> Problem:
    """A random small instance with exact rational data (loads, bytes and capacities in halves/quarters)."""
    n = int(rng.integers(3, 7))
    m = int(rng.integers(4, 15))
    hot = rng.integers(0, n, size=int(rng.integers(1, 3)))
    current = np.where(rng.random(m) < 0.6, rng.choice(hot, size=m), rng.integers(0, n, size=m))
    load = rng.integers(1, 120, size=m).astype(float)
    if rng.random() < 0.3:
        load += rng.integers(0, 2, size=m) * 0.5
    capacity = np.ones(n) if rng.random() < 0.5 else rng.choice([0.5, 1.0, 1.5, 2.0, 4.0], size=n)
    rem = np.zeros(n, dtype=bool)
    if removing if removing is not None else rng.random() < 0.35:
        rem[rng.choice(n, size=int(rng.integers(1, min(3, n - 1) + 1)), replace=False)] = True
    fb = fractional_bytes if fractional_bytes is not None else rng.random() < 0.5
    bytes_ = rng.integers(1, 9, size=m).astype(float)
    if fb:
        bytes_ += rng.choice([0.0, 0.25, 0.5, 0.75], size=m)
    mm = None if rng.random() < 0.3 else int(rng.integers(0, m + 1))
    mb = None
    if rng.random() < 0.6:
        mb = float(rng.integers(0, int(bytes_.sum()) + 1))
        if fb and rng.random() < 0.5:
            mb += 0.5
    kw: dict = {}
    res: dict = {}
    if comm if comm is not None else rng.random() < 0.3:
        e = int(rng.integers(1, 2 * m))
        s = rng.integers(0, m, size=e)
        r = rng.integers(0, m, size=e)
        kw["comm"] = sp.csr_matrix((rng.integers(1, 20, size=e).astype(float), (s, r)), shape=(m, m))
        kw["communication_cost"] = float(rng.choice([0.25, 0.5, 1.0, 2.0]))
    if resources if resources is not None else rng.random() < 0.25:
        res["resource_names"] = ["mem"]
        res["resource_load"] = rng.integers(0, 5, size=(m, 1)).astype(float)
        usage = np.bincount(current, weights=res["resource_load"][:, 0], minlength=n)
        lim = np.where(rng.random(n) < 0.5, np.inf, np.floor(usage * rng.uniform(0.5, 1.5, size=n)) + 1)
        res["resource_limit"] = lim[:, None]
    p = Problem.from_arrays(load, current, capacity, removing=rem, state_bytes=bytes_, max_migrations=mm,
                            max_migration_bytes=mb, **kw)
    return dataclasses.replace(p, **res) if res else p


def random_drain_problem(rng: np.random.Generator) -> Problem:
    """A tiny instance (2–4 nodes, at most 4^7 plans) with one to three key groups on removing nodes: capacities
    from {0.5, 1, 2} or odd ones, loads integral, in halves or arbitrary floats (zeros included), both budgets or
    none, communication in one instance of five."""
    n = int(rng.integers(2, 5))
    m = int(rng.integers(2, {2: 11, 3: 8, 4: 7}[n] + 1))
    cap = rng.choice([0.5, 1.0, 2.0], size=n) if rng.random() < 0.7 else np.round(rng.uniform(0.2, 3.0, size=n), 2)
    kind = rng.integers(3)
    load = (rng.integers(0, 20, size=m).astype(float) if kind == 0 else
            rng.integers(0, 40, size=m) / 2.0 if kind == 1 else np.round(rng.uniform(0, 20, size=m), 3))
    rem = np.zeros(n, dtype=bool)
    rem[rng.choice(n, size=int(rng.integers(1, n)), replace=False)] = True
    current = rng.integers(0, n, size=m)
    on_b = rng.choice(m, size=int(rng.integers(1, min(3, m) + 1)), replace=False)
    current[on_b] = rng.choice(np.flatnonzero(rem), size=on_b.size)       # something on a removing node
    bytes_ = rng.integers(0, 6, size=m).astype(float)
    mm = None if rng.random() < 0.4 else int(rng.integers(0, m + 1))
    mb = None if rng.random() < 0.6 else float(rng.integers(0, int(bytes_.sum()) + 1))
    kw: dict = {}
    if rng.random() < 0.2:
        e = int(rng.integers(1, m + 1))
        s, r = rng.integers(0, m, size=e), rng.integers(0, m, size=e)
        kw["comm"] = sp.csr_matrix((rng.integers(1, 6, size=e).astype(float), (s, r)), shape=(m, m))
        kw["communication_cost"] = float(rng.choice([0.25, 0.5, 1.0]))
    return Problem.from_arrays(load, current, cap, removing=rem, state_bytes=bytes_, max_migrations=mm,
                               max_migration_bytes=mb, **kw)

