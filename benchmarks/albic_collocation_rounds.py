"""Multi-round runs of a collocation planner and what the ALBIC collocation benchmark measures of them (ALBIC paper
§5.3–§5.4): per round the collocation factor, load distance, load index and migrations; the collocation factor
split into the candidate pairs' traffic and the rest; and an upper bound on the candidate pairs' collocation under
a migration budget. Used by ``python -m benchmarks.bench_albic_collocation``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from evaluation.collocation_scenarios import drift_loads
from solvers import metrics, registry
from solvers.albic.collocation import pair_scores
from solvers.model import Problem

__all__ = ["run_rounds", "cf_split", "budget_bound", "summary"]


def run_rounds(problem: Problem, planner: str, rounds: int, time_limit: float, *, drift: bool, seed: int,
             params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``rounds`` rounds of ``planner`` from ``problem`` and return the per-round series."""
    rng = np.random.default_rng(seed)
    params = params or {}
    first_total = float(metrics.node_loads(problem, problem.current).sum())
    a = problem.current.copy()
    cur = problem
    series: dict[str, Any] = {k: [] for k in ("collocation_factor", "load_distance_pct", "load_index", "migrations",
                                             "seconds", "within_budget")}
    for r in range(rounds):
        cur = drift_loads(cur, rng, a) if (drift and r > 0) else cur.with_current(a)
        t0 = time.perf_counter()
        # COLA is a one-shot METIS heuristic: it is not cut short by the MILP planners' per-round limit
        limit = max(time_limit, 5.0) if planner == "cola" else time_limit
        plan = registry.solve(planner, cur, time_limit=limit, **params)
        wall = time.perf_counter() - t0
        a = plan.assignment
        loads = metrics.node_loads(cur, a)
        t = metrics.target(cur, loads)
        series["collocation_factor"].append(round(metrics.collocation_factor(cur, a) or 0.0, 5))
        series["load_distance_pct"].append(round(100 * metrics.load_distance_of_loads(cur, loads) / t, 4))
        series["load_index"].append(round(float(loads.sum()) / first_total, 5))
        series["migrations"].append(metrics.migrations(cur, a))
        series["seconds"].append(round(wall, 4))
        series["within_budget"].append(bool(metrics.within_budget(cur, a)))
    series["final_cf_split"] = cf_split(cur, a)
    return series


def cf_split(problem: Problem, a: np.ndarray) -> dict[str, float]:
    """The collocation factor of ``a`` split into the traffic of ALBIC's candidate pairs (Algorithm 2's scores,
    sF = 1.5: here the one-to-one edges) and the rest (fully partitioned edges, collocated only by placement)."""
    src, dst, rate = problem.edges()
    total = float(rate.sum())
    if total <= 0:
        return {"scored": 0.0, "other": 0.0, "scored_traffic": 0.0}
    pairs = pair_scores(problem, 1.5)
    scored = np.zeros(src.size, dtype=bool)
    key = {(int(x), int(y)) for x, y in zip(pairs.src.tolist(), pairs.dst.tolist(), strict=True)}
    scored[[i for i, (x, y) in enumerate(zip(src.tolist(), dst.tolist(), strict=True)) if (x, y) in key]] = True
    local = a[src] == a[dst]
    return {"scored": round(float(rate[local & scored].sum()) / total, 5),
            "other": round(float(rate[local & ~scored].sum()) / total, 5),
            "scored_traffic": round(float(rate[scored].sum()) / total, 5)}


def budget_bound(problem: Problem, migrations: int) -> dict[str, Any] | None:
    """Upper bound on the collocation any planner can reach from ``problem.current`` with ``migrations`` key group
    moves in total, for the candidate-pair traffic, when the candidate pairs form paths (the chain and pairs
    topologies: each key group has at most one candidate edge in and one out). A collocated run v_i..v_j of a path
    sits on one node; every member not there at the start must have moved, so it costs at least (j − i + 1) − (the
    most members that start on one node). Per path a DP over runs gives the best rate for each number of moves; a
    max-plus knapsack over the paths gives the bound. Balance, rounds and the rest of the traffic are ignored
    (``other_traffic`` is the share the bound leaves out). None when the pairs do not form paths."""
    pairs = pair_scores(problem, 1.5)
    src, dst, rate = pairs.src, pairs.dst, pairs.rate
    m = problem.n_key_groups
    if src.size == 0 or np.bincount(src, minlength=m).max() > 1 or np.bincount(dst, minlength=m).max() > 1:
        return None
    nxt = {int(x): (int(y), float(r)) for x, y, r in zip(src.tolist(), dst.tolist(), rate.tolist(), strict=True)}
    starts = set(nxt) - {int(y) for y in dst.tolist()}
    total_rate = float(problem.edges()[2].sum())
    comb = np.zeros(migrations + 1)
    seen = 0
    for v in sorted(starts):
        path, rates = [v], []
        while path[-1] in nxt:
            w, r = nxt[path[-1]]
            path.append(w)
            rates.append(r)
        seen += len(rates)
        nodes = problem.current[path]
        L = len(path)
        cum = np.concatenate([[0.0], np.cumsum(rates)])
        best = np.zeros((L + 1, L + 1))  # best[j][b]: first j key groups, b moves
        for j in range(1, L + 1):
            best[j] = best[j - 1]
            for i in range(1, j):  # run v_i..v_j (1-based)
                cost = (j - i + 1) - int(np.bincount(nodes[i - 1:j]).max())
                gain = cum[j - 1] - cum[i - 1]
                if cost <= L:
                    cand = np.full(L + 1, -np.inf)
                    cand[cost:] = best[i - 1][:L + 1 - cost] + gain
                    best[j] = np.maximum(best[j], cand)
        f = np.maximum.accumulate(best[L])
        new = comb.copy()
        for k in range(1, min(L, migrations) + 1):
            new[k:] = np.maximum(new[k:], comb[:migrations + 1 - k] + f[k])
        comb = new
    if seen != src.size:  # a cycle: not paths
        return None
    return {"migrations": migrations, "scored_cf_max": round(float(comb[-1]) / total_rate, 5),
            "other_traffic": round(1.0 - float(rate.sum()) / total_rate, 5)}


def summary(series: dict[str, Any], last: int = 5) -> dict[str, Any]:
    """End-of-run figures: the last round and the mean of the last ``last`` rounds."""
    out: dict[str, Any] = {}
    for key in ("collocation_factor", "load_distance_pct", "load_index"):
        xs = series[key]
        out[key] = xs[-1]
        out[f"{key}_last{last}"] = round(float(np.mean(xs[-last:])), 5)
    out["max_migrations_per_round"] = int(max(series["migrations"]))
    out["mean_migrations_per_round"] = round(float(np.mean(series["migrations"])), 2)
    out["max_seconds_per_round"] = round(float(max(series["seconds"])), 3)
    out["all_within_budget"] = bool(all(series["within_budget"]))
    if "final_cf_split" in series:
        out["final_cf_split"] = series["final_cf_split"]
    return out
