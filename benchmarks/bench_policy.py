"""The rebalancing policy: migrations and imbalance over time, with the controller's policy and without it.

A real controller (``rebalancer serve``, SQLite) runs one job per (stream, policy, planner): 120 key groups on 8
nodes, a window of 5 batches; :func:`evaluation.rebalancing.run` posts each batch's loads as the
Spark driver does and adopts every placement the controller sends back. Streams (:func:`evaluation.rebalancing.
stream`): ``steady`` (Poisson counts at one rate: any imbalance is noise), ``drifting`` (rates in a slow random
walk) and ``shifting`` (a block of hot key groups at 3× the rate jumps elsewhere halfway). "With the policy" is the
default :class:`~rebalancer_client.contract.Policy` (noise guard 3 sigmas, min gain 2 %, cooldown 3 batches);
"without" turns the noise guard and the minimum gain off (a round whenever a plan improves the load distance, the
controller's behaviour before the policy), same cooldown.

Each in automatic and in proposal mode. Reported per run: migrations in all, the batches that ran on a new placement,
the load distance per batch under the placement it ran with (in % of the mean node load), and its median over the second
half. Targets: 0 migrations on the steady stream with the policy for every planner; on the shifting stream the first
rebalancing after the shift within the first full window (decided at shift + 4 at the latest: runs by shift + 6 in
automatic mode, whose solve runs in the background while the next batch runs).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import Bench
from evaluation.rebalancing import STREAMS, run, stream
from rebalancer_client import RebalancerClient
from tests.helpers.server import ServerProcess

WINDOW = 5
POLICIES = {"with policy": {}, "without": {"noise_sigmas": None, "min_gain": 0.0}}
PLANNERS = ("albic-milp", "albic", "flux", "cola", "drain-then-balance")
#: automatic mode (the controller executes the plans it judges worth it) and proposal mode (the client asks for a
#: proposal when the verdict is ``significant`` and executes it when the proposal's verdict says it is worth it)
MODES = ("auto", "proposal")


def _run(rc: RebalancerClient, job: str, kind: str, batches: int, policy: dict[str, Any], algorithm: str,
         seed: int, mode: str) -> dict[str, Any]:
    trace = run(rc, job, stream(kind, batches=batches, seed=seed), auto=mode == "auto", policy=policy,
                algorithm=algorithm, window_batches=WINDOW)
    rel = [100.0 * d / m if m else 0.0 for d, m in zip(trace.load_distance, trace.mean_node_load, strict=True)]
    out = trace.as_dict()
    out["load_distance_pct"] = rel
    out["median_load_distance_pct_second_half"] = float(np.median(rel[batches // 2:]))
    out["rounds"] = sum(1 for m in trace.migrations if m)
    out["first_migration_after_shift"] = trace.first_migration(after=batches // 2)
    rc.delete_job(job)
    return out


def main(argv: list[str] | None = None) -> int:
    bench = Bench("policy", __doc__)
    bench.parser.add_argument("--batches", type=int, default=60, help="batches per stream")
    bench.parser.add_argument("--seeds", type=int, default=3, help="seeds per stream and policy (median reported)")
    args = bench.parse(argv)
    batches, seeds = (30, 1) if bench.quick else (args.batches, args.seeds)
    planners = ("albic-milp", "flux") if bench.quick else PLANNERS
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, ServerProcess(f"sqlite:///{Path(tmp) / 'policy.db'}",
                                                             settings={"solver_workers": 2}).start() as srv:
        rc = RebalancerClient(srv.url, timeout=60)
        for mode in MODES:
            for kind in STREAMS:
                for label, pol in POLICIES.items():
                    for algorithm in (planners if kind == "steady" else ("albic-milp",)):
                        for seed in range(seeds):
                            key = f"{mode}/{kind}/{label}/{algorithm}/{seed}"
                            bench.log(key)
                            runs[key] = _run(rc, key.replace("/", "-").replace(" ", "_"), kind, batches, pol,
                                             algorithm, seed, mode)
    bench.result["runs"] = runs
    bench.result["setup"] = {"nodes": 8, "key_groups": 120, "rate": 208, "window_batches": WINDOW,
                             "batches": batches, "seeds": seeds, "planners": list(planners), "modes": list(MODES)}
    _targets(bench, runs, batches, planners, seeds)
    _plot(bench, runs, batches)
    return bench.finish()


def _targets(bench: Bench, runs: dict[str, Any], batches: int, planners: tuple[str, ...], seeds: int) -> None:
    def total(mode: str, label: str, a: str) -> int:
        return sum(runs[f"{mode}/steady/{label}/{a}/{s}"]["total_migrations"] for s in range(seeds))

    steady = {f"{m}/{a}": total(m, "with policy", a) for m in MODES for a in planners}
    bench.result["steady_migrations"] = steady
    bench.target("steady stream, with the policy: 0 migrations for every planner in both modes", value=steady,
                 threshold=0, holds=all(v == 0 for v in steady.values()),
                 note=f"{batches} batches × {seeds} seeds each")
    without = {m: sum(total(m, "without", a) for a in planners) for m in MODES}
    bench.target("steady stream, without the policy (for comparison)", value=without, threshold=None, holds=None)
    shift, lag = batches // 2, 1
    bound = shift + WINDOW + lag
    for m in MODES:
        firsts = [runs[f"{m}/shifting/with policy/albic-milp/{s}"]["first_migration_after_shift"]
                  for s in range(seeds)]
        bench.target(f"{m} mode, shifting hot keys: first rebalancing after the shift runs by shift + window + 1",
                     value=firsts, threshold=bound, holds=all(f is not None and f <= bound for f in firsts),
                     note="decided on the window, applied from the batch after the one that answers")


def _plot(bench: Bench, runs: dict[str, Any], batches: int) -> None:
    title = "migrations and load distance per batch, with and without the policy (albic-milp, automatic mode, seed 0)"
    with bench.figure("policy.png", title, figsize=(12, 9)) as fig:
        axes = fig.subplots(len(STREAMS), 2, sharex=True)
        for row, kind in enumerate(STREAMS):
            for label, style in (("with policy", "-"), ("without", "--")):
                r = runs[f"auto/{kind}/{label}/albic-milp/0"]
                xs = list(range(batches))
                axes[row][0].plot(xs, np.cumsum(r["migrations"]), style, label=f"{label} ({r['rounds']} rounds)")
                axes[row][1].plot(xs, r["load_distance_pct"], style, label=label)
            axes[row][0].set_ylabel(f"{kind}\ncumulative key groups moved")
            axes[row][1].set_ylabel("load distance (% of mean node load)")
            for ax in axes[row]:
                ax.legend(loc="upper left", fontsize=8)
        for ax in axes[-1]:
            ax.set_xlabel("batch")


if __name__ == "__main__":
    raise SystemExit(main())
