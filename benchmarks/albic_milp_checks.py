"""Sections of :mod:`benchmarks.bench_albic_milp`: a cold process, the drain objective, the reference.

- :func:`run_cold` — ``rebalancer plan --algorithm albic-milp --time-limit T`` in a fresh process (T = 0.2, 1, 2)
  on four problem documents, as the machine is and under a parallel load of 2 × the cores (busy loops this
  benchmark starts and stops): process wall time, the solver's ``details``, and the plan against complete Flux.
  The start-up of a fresh process is measured alongside (``rebalancer plan --algorithm flux`` on the same file).
- :func:`run_drain` — random small instances with removing nodes, every plan enumerated: ``optimal`` must be the
  lexicographic optimum (``max(d, F)``, load left on removing nodes, ``d``); the drain example (four nodes,
  one removing) must be ``optimal`` with nothing left on its removing node.
- :func:`run_oracle` — the exact reference of ``tests/solvers/albic_exact_reference.py`` against brute force on
  tiny instances with magnitudes up to 10^12.
- :func:`run_awkward` — capacities ``[1.3, 0.3, 2.9]``: plan and bound at 1 s against the exact optimum.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.generators import albic_synthetic
from solvers import documents, metrics, registry
from solvers.model import Problem

ROOT = Path(__file__).resolve().parent.parent
BYTE_BUDGET_KEY_GROUPS = [(101, 3.5), (96, 7.5), (103, 4.5), (104, 6.5), (105, 4.5), (100, 4.5), (103, 3.5)]
BYTE_BUDGET_CASE = {"nodes": [{"id": f"w{i}"} for i in range(5)],
                    "key_groups": [{"id": f"k{i}", "node": "w3", "load": w, "state_bytes": b}
                                   for i, (w, b) in enumerate(BYTE_BUDGET_KEY_GROUPS)],
                    "budget": {"max_migrations": 15, "max_migration_bytes": 21}}
#: the drain example: capacities [0.5, 1, 2, 0.5], w3 removing; d = 3.2143 is reachable with 0.0 left on w3
DRAIN_CASE = dict(load=[0, 1, 13.25, 6, 5.5, 1.25], current=[0, 0, 0, 3, 0, 2], capacity=[0.5, 1, 2, 0.5],
                  removing=[False, False, False, True])


def cold_documents() -> dict[str, Problem]:
    return {"fractional bytes (5 nodes, byte budget)": Problem.from_dict(BYTE_BUDGET_CASE),
            "README (20 x 400, 10 migrations, seed 7)": albic_synthetic(20, 20, 0.5, 7, 10),
            "drain example (4 nodes, removing)": Problem.from_arrays(**DRAIN_CASE),
            "grid 40 x 800 / 20 / 0.3 / seed 0": albic_synthetic(40, 20, 0.3, 0, 20)}


def _cli() -> list[str]:
    script = Path(sys.executable).parent / "rebalancer"
    return [str(script)] if script.exists() else [sys.executable, "-m", "cli.main"]


def _fresh(path: Path, algorithm: str, time_limit: float) -> dict[str, Any]:
    """One fresh ``rebalancer plan`` process: its wall time and the plan document."""
    cmd = [*_cli(), "plan", "--algorithm", algorithm, "--input", str(path), "--time-limit", str(time_limit)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, check=True)
    return {"wall": time.perf_counter() - t0, "doc": json.loads(res.stdout)}


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run_cold(limits: list[float], log: Callable[[str], None], loaded: bool = True) -> list[dict[str, Any]]:
    """Fresh processes at each limit, as the machine is and (``loaded``) under 2 × cores busy loops."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, p in cold_documents().items():
            path = Path(tmp) / f"{len(files)}.json"
            path.write_text(json.dumps(documents.problem_to_dict(p)))
            flux = metrics.load_distance(p, registry.solve("flux", p, time_limit=60.0).assignment)
            files[name] = (path, flux)
        for load in (["quiet", "loaded"] if loaded else ["quiet"]):
            procs = _busy(2 * (os.cpu_count() or 1)) if load == "loaded" else []
            try:
                time.sleep(0.5 if procs else 0.0)
                for name, (path, flux) in files.items():
                    for tl in limits:
                        # under load one run's start-up varies by ±0.3 s (0.97–1.39 s across the instances of one
                        # pass): the median of 3 runs, each checked against its own start-up (cold_targets)
                        runs = sorted((_fresh(path, "albic-milp", tl) for _ in range(3 if procs else 1)),
                                      key=lambda r: r["wall"])
                        run = runs[len(runs) // 2]
                        doc = run["doc"]
                        d = doc["metrics"]["after"]["load_distance"]
                        rows.append({"instance": name, "load": load, "time_limit": tl, "wall": run["wall"],
                                     "walls": [round(r["wall"], 3) for r in runs],
                                     "load_average": os.getloadavg()[0],
                                     "solver_seconds": doc["solver"]["seconds"], "status": doc["solver"]["status"],
                                     "plan": d, "flux": flux, "moves": doc["metrics"]["migrations"],
                                     "details": doc.get("details", {})})
                        det = doc.get("details", {})
                        log(f"[cold {load}] {name} T={tl}: wall {run['wall']:.2f} s (before the solve "
                            f"{det.get('startup_seconds', math.nan):.2f} s, solver "
                            f"{doc['solver']['seconds']:.2f} s, ortools {det.get('ortools')}) plan {d:.6g} "
                            f"flux {flux:.6g} {doc['solver']['status']} (load average {rows[-1]['load_average']:.1f})")
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
    return rows


#: the most a quiet machine's 1-minute load average may be in the quiet pass: it counts this benchmark's own fresh
#: processes, run one after another, which alone keep it at about 1.0 (measured 1.0 on an otherwise idle machine)
QUIET_LOAD = 1.2


def cold_targets(rows: list[dict[str, Any]]) -> list[tuple[str, Any, Any, bool | None, str]]:
    """(target, value, threshold, holds, note) of the cold section: the planner's acceptance checks."""
    out: list[tuple[str, Any, Any, bool | None, str]] = []
    quiet = [r for r in rows if r["load"] == "quiet"]
    loaded = [r for r in rows if r["load"] == "loaded"]
    if quiet:
        worst = max(r["wall"] - r["time_limit"] for r in quiet)
        busy = max(r["load_average"] for r in quiet)
        calm = busy <= QUIET_LOAD
        out.append(("fresh process: wall <= T + 0.3 s (quiet machine)", round(worst, 3), 0.3,
                    worst <= 0.3 if calm else None,
                    f"worst wall − T; load average up to {busy:.1f}" + ("" if calm else ": not a quiet machine")))
    if loaded:
        # each run against its own start-up (``details.startup_seconds``: the process's start to the solve's, read
        # from /proc): under this load two fresh processes' start-ups differ by up to 0.4 s, more than the check's
        # margin at T = 0.2, so a start-up measured in other processes beside it decided the check by chance
        over = max(r["wall"] - 1.1 * r["time_limit"] - r["details"].get("startup_seconds", 0.0) for r in loaded)
        out.append(("fresh process under 2 x cores load: wall <= 1.1 T + its start-up", round(over, 3), 0.0,
                    over <= 0, "worst over the instances of the median of 3 runs' wall − 1.1 T − that run's own "
                    "start-up before the solve"))
    worse = [f"{r['instance']} T={r['time_limit']} ({r['load']})" for r in rows if r["plan"] > r["flux"] + 1e-6 *
             max(1.0, r["flux"])]
    out.append(("fresh process: never worse than complete Flux", len(worse), 0, not worse, "; ".join(worse[:5])))
    said = {"startup_seconds", "startup_cpu_seconds", "wall_seconds", "cpu_seconds", "ortools"}
    no_detail = [r for r in rows if not said <= set(r["details"])]
    out.append(("details say where the time went (start-up, wall, cpu, ortools import)", len(no_detail), 0,
                not no_detail, ""))
    return out


def run_drain(instances: int, time_limit: float, log: Callable[[str], None]) -> dict[str, Any]:
    """The lexicographic check on ``instances`` random instances with removing nodes, and the drain example."""
    from tests.solvers.albic_exact_reference import enumerate_plans, lexicographic_best, random_drain_problem
    violations, not_optimum, optimal = [], 0, 0
    for seed in range(instances):
        p = random_drain_problem(np.random.default_rng(seed))
        _, d, on_b = enumerate_plans(p)
        floor = _floor(p)
        tol = 1e-6 * max(metrics.target(p, metrics.node_loads(p, p.current)), 1e-9) + 1e-9
        best = lexicographic_best(d, on_b, floor, tol)
        plan = registry.solve("albic-milp", p, time_limit=time_limit)
        got = _lex(p, plan.assignment, floor)
        ok = _lex_le(got, best, tol)
        optimal += plan.status == "optimal"
        not_optimum += not ok
        if plan.status == "optimal" and not ok:
            violations.append(seed)
        if seed % 500 == 499:
            log(f"[drain] {seed + 1}/{instances}: {len(violations)} violations")
    p = Problem.from_arrays(**DRAIN_CASE)
    plan = registry.solve("albic-milp", p, time_limit=2.0)
    case = {"status": plan.status, "load_distance": metrics.load_distance(p, plan.assignment),
            "left_on_removing": metrics.load_on_removing(p, plan.assignment)}
    return {"instances": instances, "time_limit": time_limit, "violations": violations,
            "not_the_lexicographic_optimum": not_optimum, "optimal": optimal, "drain_example": case}


def _floor(p: Problem) -> float:
    on_b = p.removing[p.current]
    return float(p.load[on_b].max() / p.capacity[p.active].max()) if on_b.any() else 0.0


def _lex(p: Problem, a: np.ndarray, floor: float) -> tuple[float, float, float]:
    d = metrics.load_distance(p, a)
    return max(d, floor), metrics.load_on_removing(p, a), d


def _lex_le(got: tuple[float, ...], best: tuple[float, ...], tol: float) -> bool:
    """``got`` is no worse than ``best`` lexicographically, comparing each level within ``tol``."""
    for g, b in zip(got, best, strict=True):
        if g > b + tol:
            return False
        if g < b - tol:
            return True
    return True


def run_oracle(instances: int, log: Callable[[str], None]) -> dict[str, Any]:
    """The exact reference against brute force (exact rationals) on tiny instances with magnitudes to 10^12."""
    from tests.solvers.albic_exact_reference import brute_force_optimum, optimum_interval, random_tiny_problem
    bad, unproven, widths = [], [], []
    for seed in range(instances):
        p = random_tiny_problem(np.random.default_rng(seed))
        opt = brute_force_optimum(p)
        cert = optimum_interval(p, work=30.0)
        if cert is None:
            unproven.append(seed)
            continue
        t = float(p.load.sum()) / float(p.capacity[p.active].sum())
        if not cert.lo <= opt <= cert.hi or float(cert.hi - opt) > 1e-9 * max(t, 1e-12):
            bad.append(seed)
        widths.append(float(cert.hi - cert.lo) / max(t, 1e-300))
    log(f"[oracle] {instances} instances: {len(bad)} disagreements, {len(unproven)} unproven")
    return {"instances": instances, "disagreements": bad, "unproven": unproven,
            "max_width_over_mean": max(widths) if widths else None}


def awkward_problem(seed: int = 0) -> Problem:
    """Three nodes of capacities 1.3, 0.3 and 2.9 with 8–29 key groups of load 1–119 anywhere, a count budget on
    even seeds (instances on which the weighted full model proved nothing in 10 s)."""
    rng = np.random.default_rng(seed)
    m = int(rng.integers(8, 30))
    return Problem.from_arrays(rng.integers(1, 120, m).astype(float), rng.integers(0, 3, m), [1.3, 0.3, 2.9],
                               max_migrations=None if seed % 2 else int(rng.integers(1, m)))


def run_awkward(seeds: list[int], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Plan and bound at 1 s against the reference's optimum (proved with a generous limit)."""
    from tests.solvers.albic_exact_reference import exact_optimum
    rows = []
    for seed in seeds:
        p = awkward_problem(seed)
        opt = exact_optimum(p, work=120.0)
        plan = registry.solve("albic-milp", p, time_limit=1.0)
        d = metrics.load_distance(p, plan.assignment)
        rows.append({"seed": seed, "opt": None if opt is None else float(opt), "plan": d,
                     "lower_bound": plan.lower_bound, "status": plan.status})
        log(f"[awkward] seed {seed}: plan {d:.4f} bound {plan.lower_bound:.4f} optimum "
            f"{'?' if opt is None else f'{float(opt):.4f}'} ({plan.status})")
    return rows
