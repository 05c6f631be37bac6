"""Benchmark: ALBIC collocation vs COLA vs the MILP alone (ALBIC paper §5.3 Figures 10–11, §5.4 Figure 12).

Runs multi-round simulations: every round the planner sees the current assignment and new loads, its plan is
applied, and the after-plan collocation factor, load distance (percent of the target utilisation), load index
(total node load / total node load before the first round, communication cost included) and migrations are
recorded.

- §5.3 sweep: 40 nodes, 800 key groups, 20 operators, max 20 migrations, x% one-to-one communication
  (x = 0, 25, 50, 75, 100), ±2% load drift on 20% of the nodes each round, R rounds.
- §5.3 sizes: 20/400/10, 40/800/20, 60/1200/30 at x = 50.
- §5.4 "Real Job 2"-like: two operators on the same key, 20 nodes × 5 key groups per operator, worst start,
  communication cost that doubles the load when nothing is collocated, max 10 migrations, 30 rounds.
- Convergence: where ALBIC's collocation trails COLA's after R rounds, ALBIC alone runs 2R rounds (COLA's figures
  are stationary: it starts from scratch every round) and the first round its collocation reaches COLA's is noted.
- Timings: METIS split of a 10,000-vertex set; one ALBIC round on 60/1200 with the default time limit.

Writes bench-results/albic_collocation.json and PNG plots; progress goes to stderr.

    python -m benchmarks.bench_albic_collocation [--quick] [--rounds R] [--time-limit S] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmarks.albic_collocation_report import format_table, plot, targets
from benchmarks.albic_collocation_rounds import budget_bound, run_rounds, summary
from evaluation.collocation_scenarios import collocation_synthetic, real_job_2
from solvers import registry
from solvers.errors import InvalidInput
from solvers.graph_partitioning import metis_parts
from solvers.model import Problem

PLANNERS = ("albic", "cola", "albic-milp")
SIZES = ((20, 10), (40, 20), (60, 30))  # nodes, operators; 20 key groups per node


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def available(planners: tuple[str, ...]) -> list[str]:
    out = []
    for name in planners:
        try:
            registry.get(name)
            if name == "albic":
                from solvers.albic.milp import solve_grouped  # noqa: F401  (ALBIC is built on it)
            out.append(name)
        except (InvalidInput, ImportError) as exc:
            log(f"  planner {name!r} unavailable: {exc}")
    return out


@dataclass
class Settings:
    """What one run of the benchmark covers (from the command line)."""

    planners: list[str]
    rounds: int
    time_limit: float
    seed: int
    quick: bool
    xs: tuple[int, ...]
    topologies: list[str]
    sizes: tuple[tuple[int, int], ...]


def planner_runs(st: Settings, p0: Problem, label: str, *, load_index: bool) -> dict[str, Any]:
    """Every planner's run of ``st.rounds`` rounds from ``p0`` under load drift, and the instance's budget bound."""
    res: dict[str, Any] = {"budget_bound": budget_bound(p0, st.rounds * 20)}
    for name in st.planners:
        t = time.perf_counter()
        s = run_rounds(p0, name, st.rounds, st.time_limit, drift=True, seed=st.seed + 1)
        res[name] = {"summary": summary(s), "series": s}
        sm = res[name]["summary"]
        li = f" LI {sm['load_index_last5']:.3f}" if load_index else ""
        log(f"  {label} {name:10s} CF {sm['collocation_factor_last5']:.3f}"
            f" LD {sm['load_distance_pct_last5']:6.2f}%{li}"
            f" migr/round max {sm['max_migrations_per_round']} ({time.perf_counter() - t:.1f}s)")
    return res


def sweep(st: Settings) -> dict[str, Any]:
    """§5.3: 40 nodes, 800 key groups, 20 operators, per topology and share x of one-to-one communication."""
    out: dict[str, Any] = {}
    for topo in st.topologies:
        out[topo] = {}
        for x in st.xs:
            p0 = collocation_synthetic(40, 20, 20, one_to_one=x / 100, topology=topo, max_migrations=20,
                                       seed=st.seed)
            out[topo][str(x)] = planner_runs(st, p0, f"{topo} x={x:3d}", load_index=True)
    return out


def cluster_sizes(st: Settings, topo0: str, sweep0: dict[str, Any]) -> dict[str, Any]:
    """§5.3 cluster sizes at x = 50 on the first topology (40/800/20 is the sweep's run)."""
    size_res: dict[str, Any] = {}
    for nodes, ops in st.sizes:
        label = f"{nodes}/{nodes * 20}/{ops}"
        if (nodes, ops) == (40, 20) and "50" in sweep0:
            size_res[label] = sweep0["50"]
            continue
        p0 = collocation_synthetic(nodes, 20, ops, one_to_one=0.5, topology=topo0, max_migrations=20,
                                   seed=st.seed)
        size_res[label] = planner_runs(st, p0, f"{label:12s}", load_index=False)
    return size_res


def convergence(st: Settings, topo0: str, sweep0: dict[str, Any], size_res: dict[str, Any]) -> dict[str, Any]:
    """Where ALBIC trails COLA: ALBIC alone for twice the rounds, and the first round it reaches COLA's collocation.

    ALBIC moves at most the budget per round, so on instances with many pairs to collocate it needs more rounds;
    COLA re-partitions from scratch every round, so its figures are stationary. Longer ALBIC-only runs on the
    configurations where ALBIC trails COLA's collocation after R rounds show when (if) it catches up."""
    conv: dict[str, Any] = {}
    long_rounds = 2 * st.rounds
    if st.quick or "albic" not in st.planners or "cola" not in st.planners:
        return conv
    # x < 50 and the "pairs" topology are left out: there the candidate-pair traffic is at the budget's bound
    # and COLA's edge is fully partitioned traffic (ALBIC's goal moves, pair_order=target, collect it slowly)
    cases = [(f"{topo0} x={x}", topo0, 40, 20, x, sweep0[str(x)]) for x in st.xs if x >= 50]
    if st.sizes:
        cases += [(label, topo0, int(label.split("/")[0]), int(label.split("/")[2]), 50, res)
                  for label, res in size_res.items() if label != "40/800/20"]
    for label, topo, nodes, ops, x, res in cases:
        cola_cf = res["cola"]["summary"]["collocation_factor_last5"]
        if res["albic"]["summary"]["collocation_factor_last5"] >= cola_cf:
            continue
        p0 = collocation_synthetic(nodes, 20, ops, one_to_one=x / 100, topology=topo, max_migrations=20,
                                   seed=st.seed)
        t = time.perf_counter()
        s = run_rounds(p0, "albic", long_rounds, st.time_limit, drift=True, seed=st.seed + 1)
        cf = s["collocation_factor"]
        reach = next((i + 1 for i in range(len(cf)) if np.mean(cf[max(0, i - 4): i + 1]) >= cola_cf), None)
        conv[label] = {"rounds": long_rounds, "cola_cf_last5": cola_cf, "summary": summary(s),
                       "first_round_albic_cf_last5_ge_cola": reach, "series": s}
        log(f"  long {label:12s} albic CF {summary(s)['collocation_factor_last5']:.3f} (COLA {cola_cf:.3f},"
            f" reached at round {reach}) LD {summary(s)['load_distance_pct_last5']:.2f}%"
            f" ({time.perf_counter() - t:.1f}s)")
    return conv


def real_job_2_runs(st: Settings) -> dict[str, Any]:
    """§5.4 "Real Job 2"-like: 30 rounds without drift from the worst start; the first round the load index is
    at most 0.6."""
    rj: dict[str, Any] = {}
    rj_rounds = 30
    p0 = real_job_2(20, 5, max_migrations=10, seed=st.seed)
    for name in st.planners:
        t = time.perf_counter()
        s = run_rounds(p0, name, rj_rounds, st.time_limit, drift=False, seed=st.seed + 2)
        li = s["load_index"]
        reach = next((i + 1 for i, v in enumerate(li) if v <= 0.6), None)
        rj[name] = {"summary": summary(s), "series": s, "first_round_load_index_le_0.6": reach}
        log(f"  RealJob2 {name:10s} LI {li[-1]:.3f} (≤0.6 at round {reach}) CF {s['collocation_factor'][-1]:.3f}"
            f" LD {s['load_distance_pct'][-1]:.2f}% migr/round max {max(s['migrations'])}"
            f" ({time.perf_counter() - t:.1f}s)")
    return rj


def metis_timing(n: int = 10_000, reps: int = 3) -> float:
    """Seconds for a METIS split of a 10,000-vertex set (ALBIC step 2 on a large collocated set), best of reps."""
    rng = np.random.default_rng(0)
    r = rng.integers(0, n, size=3 * n)
    c = rng.integers(0, n, size=3 * n)
    keep = r != c
    adj = sp.csr_matrix((rng.uniform(1, 10, keep.sum()), (r[keep], c[keep])), shape=(n, n))
    adj = (adj + adj.T).tocsr()
    w = rng.uniform(1, 5, n)
    metis_parts(adj, 2, w)
    best = math.inf
    for i in range(reps):
        t = time.perf_counter()
        metis_parts(adj, 40, w, seed=i)
        best = min(best, time.perf_counter() - t)
    return best


def timings(st: Settings, topo0: str) -> dict[str, Any]:
    """A METIS split of 10,000 vertices; one ALBIC round on 60/1200 with a 1 s time limit."""
    timing: dict[str, Any] = {"metis_split_10000_s": round(metis_timing(), 4)}
    if "albic" in st.planners:
        p = collocation_synthetic(60, 20, 30, one_to_one=0.5, topology=topo0, max_migrations=20,
                                  seed=st.seed)
        t = time.perf_counter()
        plan = registry.solve("albic", p, time_limit=1.0)
        timing["albic_round_60_1200_s"] = round(time.perf_counter() - t, 3)
        timing["albic_round_60_1200_time_limit"] = 1.0
        timing["albic_round_60_1200_load_distance_pct"] = plan.details.get("load_distance_pct")
    return timing


def parse_settings(argv: list[str] | None) -> tuple[Settings, str]:
    """The command line: the run's settings and the output folder."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced run (< 1 minute)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per §5.3 run (default 30; quick 10)")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per round (default 0.3; quick 0.15)")
    ap.add_argument("--topologies", default=None,
                    help="comma-separated §5.3 operator topologies: chain, pairs (default both; quick: chain)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench-results")
    args = ap.parse_args(argv)
    quick = args.quick
    os.makedirs(args.out, exist_ok=True)
    st = Settings(planners=[], rounds=args.rounds or (10 if quick else 30),
                  time_limit=args.time_limit or (0.15 if quick else 0.3), seed=args.seed, quick=quick,
                  xs=(0, 50, 100) if quick else (0, 25, 50, 75, 100),
                  topologies=[t for t in (args.topologies or ("chain" if quick else "chain,pairs")).split(",") if t],
                  sizes=() if quick else SIZES)
    st.planners = available(PLANNERS)
    return st, args.out


def main(argv: list[str] | None = None) -> int:
    st, out_dir = parse_settings(argv)
    t_start = time.perf_counter()
    results: dict[str, Any] = {
        "config": {"rounds": st.rounds, "time_limit_per_round": st.time_limit, "xs": list(st.xs),
                   "topologies": st.topologies, "quick": st.quick, "seed": st.seed,
                   "sizes": [list(s) for s in SIZES if s in st.sizes or s == (40, 20)],
                   "real_job_2": {"nodes": 20, "key_groups_per_operator_per_node": 5, "max_migrations": 10,
                                  "rounds": 30},
                   "units": "load distance in percent of the target utilisation; collocation factor as a share"},
        "planners": st.planners,
    }
    results["sweep"] = sweep(st)
    topo0 = st.topologies[0]
    size_res = cluster_sizes(st, topo0, results["sweep"][topo0])
    if st.sizes:
        results["sizes"] = {"topology": topo0, "results": size_res}
    results["convergence"] = convergence(st, topo0, results["sweep"][topo0], size_res)
    results["real_job_2"] = real_job_2_runs(st)
    results["timing"] = timings(st, topo0)
    log(f"  timings: {results['timing']}")
    results["targets"] = targets(results)
    results["seconds_total"] = round(time.perf_counter() - t_start, 1)
    results["plots"] = plot(results, out_dir)
    path = os.path.join(out_dir, "albic_collocation.json")
    with open(path, "w") as fh:
        json.dump(results, fh, indent=1)
    log(f"wrote {path} in {results['seconds_total']} s")
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
