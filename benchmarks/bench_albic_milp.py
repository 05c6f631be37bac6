"""Benchmark of the ALBIC MILP planner: the planner's acceptance checks in one run, JSON + PNG.

    python -m benchmarks.bench_albic_milp                   # every section, bench-results/albic_milp.json (+ PNG)
    python -m benchmarks.bench_albic_milp --quick           # reduced: a smoke test of every section
    python -m benchmarks.bench_albic_milp --only grid --only cold
    python -m benchmarks.bench_albic_milp --update-best-known --seconds 20 --seeds 1 2 --cpu-clock
    python -m benchmarks.bench_albic_milp --calibrate --seconds 900    # certified optima of the named instances

Sections (``--only``, repeatable; see :mod:`benchmarks.albic_milp_checks`, :mod:`benchmarks.albic_milp_grid` and
:mod:`benchmarks.albic_milp_scale`):

- cold: ``rebalancer plan --algorithm albic-milp --time-limit T`` in fresh processes, T = 0.2, 1, 2, as the machine
  is and under a parallel load of 2 × the cores: wall ≤ T + 0.3 s (quiet machine), ≤ 1.1 T + the start-up of a
  fresh process (loaded), never worse than complete Flux, ``details`` that say where the time went;
- drain: 2,000 small instances with removing nodes, every plan enumerated: ``optimal`` is the lexicographic
  optimum (0 violations), and the drain example is ``optimal`` with 0.0 on its removing node;
- oracle: the exact reference against brute force on ≥ 200 tiny instances with magnitudes up to 10^12;
- grid: the paper's 108 instances at 1 s (and 0.5, 2 s): ≥ 95 % within max(5 %, 0.02 points) of the stored best
  known (``benchmarks/data/albic_milp_best_known.json``), never worse than complete Flux, plan − bound ≤ 0.1 on
  ≥ 90 %; for the instances with a certified optimum (``--calibrate``), the bound at each limit against it;
- big: 1,000 × 100,000 at 0.2, 1, 2 s: wall ≤ 1.1 T, no worse than complete Flux;
- awkward: capacities 1.3, 0.3, 2.9: proven optimal at 1 s;
- exact, scale, scalein: bounds and proofs against the exact reference, large instances in their own process,
  Figure 5's scale-in.

Load distances are in percent of the mean node load. Timing depends on the machine: the JSON records the load
average at the start and the end, and the cold section the load average of every run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks import albic_milp_checks as checks
from benchmarks import albic_milp_grid as grid
from benchmarks import albic_milp_scale as scale
from benchmarks.harness import Bench
from solvers import registry

SECTIONS = ("cold", "drain", "oracle", "grid", "big", "awkward", "exact", "scale", "scalein")


def _targets(bench: Bench, res: dict[str, Any]) -> None:
    """The planner's targets, side by side with what this run measured."""
    for name, value, threshold, holds, note in checks.cold_targets(res.get("cold", [])) if "cold" in res else []:
        bench.target(name, value, threshold, holds, note)
    if "drain" in res:
        dr = res["drain"]
        enough = dr["instances"] >= 2000
        bench.target("drain: optimal = the lexicographic optimum (>= 2,000 instances)", len(dr["violations"]), 0,
                     (not dr["violations"] and enough) if enough or dr["violations"] else None,
                     f"{dr['instances']} instances, {dr['optimal']} optimal, seeds {dr['violations'][:5]}")
        case = dr["drain_example"]
        bench.target("drain: the drain example optimal with 0.0 on the removing node", case, "optimal, 0.0",
                     case["status"] == "optimal" and case["left_on_removing"] == 0.0)
    if "oracle" in res:
        orc = res["oracle"]
        wrong = len(orc["disagreements"]) + len(orc["unproven"])
        bench.target("oracle: 0 disagreements with brute force (>= 200 tiny instances, magnitudes to 1e12)", wrong, 0,
                     wrong == 0 and orc["instances"] >= 200 if orc["instances"] >= 200 or wrong else None,
                     f"{orc['instances']} instances; disagreements {orc['disagreements'][:5]}, "
                     f"unproven {orc['unproven'][:5]}")
    g = res.get("grid", {}).get("summary", {}).get("per_limit", {}).get("1.0")
    if g:
        share = g["share_within_best_known"]
        bench.target("grid at 1 s: within max(5 %, 0.02) of the best known", share, 0.95,
                     None if share is None else share >= 0.95, f"misses: {g['misses'][:8]}")
        bench.target("grid at 1 s: never worse than complete Flux", len(g["worse_than_flux"]), 0,
                     not g["worse_than_flux"], ", ".join(g["worse_than_flux"][:5]))
        bench.target("grid at 1 s: plan - bound <= 0.1 points", g["share_gap_within_0.1"], 0.9,
                     g["share_gap_within_0.1"] >= 0.9)
    for r in res.get("big", []):
        bench.target(f"big: wall <= 1.1 T, {r['instance']}, T={r['time_limit']}", round(r["wall_over_limit"], 3), 1.1,
                     r["wall_over_limit"] <= 1.1, f"cpu/T {r['cpu_seconds'] / r['time_limit']:.2f}, load average "
                                                  f"{r['load_average']:.1f}")
        bench.target(f"big: <= complete Flux, {r['instance']}, T={r['time_limit']}", round(r["milp"], 4),
                     round(r["flux"], 4), r["milp_le_flux"])
    if "awkward" in res:
        rows = res["awkward"]
        proved = sum(r["status"] == "optimal" and r["opt"] is not None and abs(r["plan"] - r["opt"]) <= 1e-6 *
                     max(1.0, r["opt"]) for r in rows)
        bench.target("awkward capacities (1.3, 0.3, 2.9): proven optimal at 1 s", proved, len(rows),
                     proved == len(rows))
    ex = res.get("exact", {}).get("summary")
    if ex:
        bench.target("exact: 0 violations of lb <= OPT <= plan and optimal => plan = OPT", ex["violations"], 0,
                     ex["violations"] == 0, f"{ex['reference_proved']} instances proved by the reference")
        bench.target("exact: >= 99 % optimum at 1 s where the reference proves it in <= 50 ms (no communication)",
                     ex["optimum_rate_fast_no_comm"], 0.99, (ex["optimum_rate_fast_no_comm"] or 0) >= 0.99)


def main(argv: list[str] | None = None) -> int:
    bench = Bench("albic_milp", __doc__)
    ap = bench.parser
    ap.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections (repeatable)")
    ap.add_argument("--exact-instances", type=int, default=None, help="instances of the exact section")
    ap.add_argument("--drain-instances", type=int, default=None, help="instances of the drain section")
    ap.add_argument("--oracle-instances", type=int, default=None, help="instances of the oracle section")
    ap.add_argument("--grid-limits", type=float, nargs="+", default=None, help="time limits of the grid section")
    ap.add_argument("--update-best-known", action="store_true",
                    help="instead of benchmarking: long offline runs that improve the stored best-known plans")
    ap.add_argument("--calibrate", action="store_true",
                    help="instead of benchmarking: certified optima of named grid instances (the exact reference, a "
                         "CP-SAT worker per core)")
    ap.add_argument("--seconds", type=float, default=20.0, help="time limit of the offline runs")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="planner seeds of the offline runs")
    ap.add_argument("--keys", nargs="+", default=None, help="grid instances of the offline runs (default: all)")
    ap.add_argument("--cpu-clock", action="store_true", help="offline runs: limits in CPU seconds of this process")
    ap.add_argument("--best-known-file", default=str(grid.BEST_KNOWN), help="offline runs: the file to improve")
    ap.add_argument("--scale-worker", help=argparse.SUPPRESS)
    args = bench.parse(argv)
    if args.only or args.update_best_known or args.calibrate:  # a partial run keeps the full run's JSON
        part = "best_known_update" if args.update_best_known else "calibration" if args.calibrate else \
            "_".join(sorted(set(args.only)))
        bench.name = f"albic_milp_{part}"
    if args.scale_worker:
        print(json.dumps(scale.scale_worker(*json.loads(args.scale_worker))))
        return 0
    for key in args.keys or []:
        try:
            grid.instance(key)
        except ValueError as exc:
            ap.error(f"--keys: {exc}")
    command = "python -m benchmarks.bench_albic_milp " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.calibrate:
        cal = grid.calibrate(args.seconds, bench.log, Path(args.best_known_file), args.keys, command,
                             workers=os.cpu_count() or 1)
        bench.result["calibration"] = cal
        # an optimum above a stored best known is a contradiction (a wrong reference or plan), not a miss
        return bench.finish() or (1 if cal["refused"] else 0)
    if args.update_best_known:
        if args.cpu_clock:
            grid.cpu_clock()
        bench.result["best_known"] = grid.update_best_known(args.seconds, args.seeds, bench.log,
                                                            Path(args.best_known_file), args.keys, command)
        return bench.finish()
    for name in ("flux", "albic-milp", "drain-then-balance"):
        registry.get(name)
    import solvers.albic.milp.cpsat  # noqa: F401  (in process: the server's case; the cold section is fresh)
    quick = bench.quick
    sections = set(args.only or SECTIONS)
    res = bench.result
    if "cold" in sections:
        res["cold"] = checks.run_cold([1.0] if quick else [0.2, 1.0, 2.0], bench.log, loaded=not quick)
    if "drain" in sections:
        res["drain"] = checks.run_drain(args.drain_instances or (200 if quick else 2000), 0.5, bench.log)
        bench.log(f"[drain] {json.dumps({k: v for k, v in res['drain'].items() if k != 'violations'})}")
    if "oracle" in sections:
        res["oracle"] = checks.run_oracle(args.oracle_instances or (60 if quick else 300), bench.log)
    if "grid" in sections:
        limits = args.grid_limits or ([1.0] if quick else [1.0, 0.5, 2.0])
        rows = grid.run_grid(limits, [0] if quick else grid.SEEDS, bench.log)
        best = grid.load_best_known()
        res["grid"] = {"rows": rows, "summary": grid.summarise(rows, best)}
        bench.log(json.dumps(res["grid"]["summary"]["per_limit"], indent=1))
        grid.plot(bench, rows, best)
    if "big" in sections:
        res["big"] = scale.run_big([1.0] if quick else [0.2, 1.0, 2.0])
    if "awkward" in sections:
        res["awkward"] = checks.run_awkward([0, 1] if quick else [0, 1, 2, 3, 4, 5], bench.log)
    if "exact" in sections:
        res["exact"] = scale.run_exact(args.exact_instances or (100 if quick else 2000))
        bench.log(json.dumps(res["exact"]["summary"], indent=1))
    if "scale" in sections:
        res["scale"] = scale.run_scale([(200, 20000, 0.5, 0, 10.0)] if quick else [
            (200, 20000, 0.5, 0, 10.0), (1000, 100000, 0.5, 0, 10.0), (1000, 100000, 1.0, 0, 10.0)])
    if "scalein" in sections:
        res["scalein"] = scale.run_scalein(time_limit=1.0)
    _targets(bench, res)
    scale.plot(bench, res)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
