"""The paper's grid for :mod:`benchmarks.bench_albic_milp` (ALBIC §5.1, Figures 2–4) and its stored best-known plans.

108 instances: clusters (20, 400), (40, 800), (60, 1200) × max migrations {10, 20, 30, 40} × varies {0.1, 0.3, 0.5}
× seeds {0, 1, 2}, each ``albic_synthetic(nodes, key_groups_per_node=20, varies, seed, max_migrations)``.

``benchmarks/data/albic_milp_best_known.json`` holds, per instance, the best plan any offline run found (its moves,
its load distance, which run found it) — reference data, so that "within 5 % at 1 s" means within 5 % of what is
achievable rather than of a bound that may be far from the optimum. :func:`update_best_known` runs the planner with
long limits and several seeds and keeps whatever is better; the benchmark checks every stored plan again (budget,
distance) before it uses it. :func:`calibrate` adds the certified optimum of a few named instances, computed offline
by the independent exact reference: how far the planner's bound at 1 s is below the optimum, and whether the best
known is optimal.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.generators import albic_synthetic
from solvers import metrics, registry
from solvers.model import Problem

CLUSTERS = [(20, 400), (40, 800), (60, 1200)]
BUDGETS = [10, 20, 30, 40]
VARIES = [0.1, 0.3, 0.5]
SEEDS = [0, 1, 2]
BEST_KNOWN = Path(__file__).resolve().parent / "data" / "albic_milp_best_known.json"
#: "within the best known": plan ≤ best + max(REL × best, ABS) (load distance in % of the mean node load)
REL, ABS = 0.05, 0.02
#: "proven": plan − bound ≤ this many points
GAP_POINTS = 0.1
#: the named instances of :func:`calibrate`: the reference proves each in 2–3 min with two CP-SAT workers (not
#: 20x400/20/0.3/1 or 40x800/10/0.3/1 in 8 min)
CALIBRATION_KEYS = ["20x400/10/0.1/0", "20x400/10/0.3/0", "20x400/20/0.3/0"]


def keys(seeds: list[int] | None = None) -> list[str]:
    """Every grid instance's key ``NODESxKGS/BUDGET/VARIES/SEED``, in the benchmark's order."""
    return [f"{n}x{k}/{mm}/{v}/{s}" for n, k in CLUSTERS for mm in BUDGETS for v in VARIES
            for s in (SEEDS if seeds is None else seeds)]


def instance(key: str) -> Problem:
    """The instance of a key ``NODESxKGS/BUDGET/VARIES/SEED`` (ValueError naming the key if it is not one)."""
    try:
        cluster, mm, v, s = key.split("/")
        nodes, kgs = (int(x) for x in cluster.split("x"))
        if nodes < 1 or kgs < nodes:
            raise ValueError("at least one node and one key group per node")
        return albic_synthetic(nodes, key_groups_per_node=kgs // nodes, varies=float(v), seed=int(s),
                               max_migrations=int(mm))
    except ValueError as exc:
        raise ValueError(f"instance key {key!r} is not NODESxKGS/BUDGET/VARIES/SEED, e.g. 20x400/10/0.3/0 "
                         f"({exc})") from None


def plan_of(p: Problem, moves: list[list[int]]) -> np.ndarray:
    a = p.current.copy()
    for k, j in moves:
        a[int(k)] = int(j)
    return a


def load_best_known(path: Path = BEST_KNOWN) -> dict[str, dict[str, Any]]:
    """The stored best-known plans, each checked again: its moves keep the budget and give the stored distance
    (else the entry is dropped, with a note on stderr)."""
    if not path.exists():
        return {}
    doc = json.loads(path.read_text())
    out = {}
    for key, entry in doc["instances"].items():
        p = instance(key)
        a = plan_of(p, entry["moves"])
        d = metrics.load_distance(p, a)
        if metrics.within_budget(p, a) and not np.any(p.removing[a[a != p.current]]) \
                and abs(d - entry["best"]) <= 1e-9 * max(1.0, d):
            out[key] = {**entry, "best": d}
            exact = entry.get("exact")
            if exact is not None and not exact["lo"] <= d + 1e-9 * max(1.0, d):
                print(f"best known {key}: below its certified optimum {exact['optimum']} ({d}): optimum dropped")
                del out[key]["exact"]
        else:
            print(f"best known {key}: the stored plan does not check out (distance {d}, stored {entry['best']})")
    return out


def update_best_known(seconds: float, seeds: list[int], log: Callable[[str], None], path: Path = BEST_KNOWN,
                      only: list[str] | None = None, command: str = "") -> dict[str, Any]:
    """Run ``albic-milp`` for ``seconds`` with each planner seed on every grid instance (or ``only``) and keep the
    better plans in ``path``; returns the number of instances improved."""
    doc = _read(path)
    improved = 0
    for key in only or keys():
        p = instance(key)
        for seed in seeds:
            plan = registry.solve("albic-milp", p, time_limit=seconds, seed=seed)
            d = metrics.load_distance(p, plan.assignment)
            old = doc["instances"].get(key)
            if old is None or d < old["best"] - 1e-12:
                moves = [[int(k), int(plan.assignment[k])] for k in np.flatnonzero(plan.assignment != p.current)]
                doc["instances"][key] = {"best": d, "lower_bound": plan.lower_bound, "moves": moves,
                                         "by": f"{for_key(command, key)} (albic-milp seed {seed}, {seconds:g} s)"}
                improved += 1
                log(f"[best known] {key}: {d:.4f} (was {old['best'] if old else None}, bound "
                    f"{plan.lower_bound:.4f}, seed {seed})")
        _write(path, doc)
    return {"improved": improved, "instances": len(doc["instances"])}


def calibrate(seconds: float, log: Callable[[str], None], path: Path = BEST_KNOWN, only: list[str] | None = None,
              command: str = "", workers: int = 1) -> dict[str, Any]:
    """Certified optima of ``only`` (default ``CALIBRATION_KEYS``) by the independent exact reference
    (``tests/solvers/albic_exact_reference.py``: CP-SAT on the paper's model, §4.3.1, its optimum verified without
    presolve; ``workers`` CP-SAT workers), at most ``seconds`` each; stored as the entry's ``exact`` (``optimum``,
    the certified ``lo`` below it, ``seconds``, ``by``). A certified plan better than the best known becomes the
    best known; an optimum above the best known would mean a wrong reference or a wrong stored plan, and is refused
    (reported, not stored)."""
    from tests.solvers.albic_exact_reference import optimum_interval

    doc = _read(path)
    out: dict[str, list[str]] = {"proven": [], "unproven": [], "refused": []}
    for key in only or CALIBRATION_KEYS:
        p = instance(key)
        t0 = time.perf_counter()
        cert = optimum_interval(p, seconds=seconds, workers=workers)
        took = round(time.perf_counter() - t0, 1)
        if cert is None:
            log(f"[calibrate] {key}: not proven in {seconds:g} s")
            out["unproven"].append(key)
            continue
        opt, entry = float(cert.hi), doc["instances"].get(key)
        if entry is not None and float(cert.lo) > entry["best"] + 1e-9 * max(1.0, entry["best"]):
            log(f"[calibrate] {key}: REFUSED, certified optimum {opt} above the stored best known {entry['best']}")
            out["refused"].append(key)
            continue
        if entry is None or opt < entry["best"] - 1e-12:
            moves = [[int(k), int(cert.plan[k])] for k in np.flatnonzero(cert.plan != p.current)]
            entry = doc["instances"][key] = {**(entry or {}), "best": metrics.load_distance(p, cert.plan),
                                             "moves": moves, "by": f"{for_key(command, key)} (exact reference)"}
        entry["exact"] = {"optimum": opt, "lo": float(cert.lo), "seconds": took, "by": for_key(command, key)}
        log(f"[calibrate] {key}: optimum {opt:.6f} (certified ≥ {float(cert.lo):.6f}) in {took} s; best known "
            f"{entry['best']:.6f}")
        out["proven"].append(key)
        _write(path, doc)
    return out


def for_key(command: str, key: str) -> str:
    """``command`` as it reproduces the entry of ``key``: its ``--keys`` list (any number of instances) replaced by
    that one key (the file kept every run's whole list in every entry: 139 KB, mostly repeated key lists)."""
    return re.sub(r"--keys(?: (?!--)\S+)+", f"--keys {key}", command)


def _read(path: Path) -> dict[str, Any]:
    if path.exists():
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    return {"about": "best known albic-milp plans of the paper's grid (benchmarks/albic_milp_grid.py): reference data "
                     "for bench_albic_milp, from long offline runs; 'by' names the run that found each; 'exact' the "
                     "certified optimum of a calibration run", "instances": {}}


def _write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")


#: the planner modules whose deadlines :func:`cpu_clock` switches to CPU seconds
CLOCKED_MODULES = ("solvers.albic.milp", "solvers.albic.milp.phases", "solvers.albic.milp.search",
                   "solvers.albic.milp.submodel", "solvers.albic.milp.bounds", "solvers.albic.milp.cpsat",
                   "solvers.albic.milp.levels", "solvers.baselines.flux", "solvers.albic.collocation",
                   "solvers.albic.collocation_moves", "solvers.albic.collocation_sets",
                   "solvers.albic.milp.lagrange")


def cpu_clock(patch: Callable[[Any, str, Any], None] = setattr) -> None:
    """The planner's deadlines count this process's CPU seconds instead of wall seconds, so that a run on a shared
    machine searches as long as it would on a quiet one (CP-SAT keeps its own wall clock). Offline runs
    (``--update-best-known --cpu-clock``) patch for good; a test passes ``monkeypatch.setattr`` (undone after it)."""
    import importlib
    import types

    shim = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
    shim.perf_counter = time.process_time
    for name in CLOCKED_MODULES:
        mod = importlib.import_module(name)
        if hasattr(mod, "time"):
            patch(mod, "time", shim)


def run_grid(limits: list[float], seeds: list[int], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every grid instance: complete Flux, then ``albic-milp`` at each limit (plan, bound, status, wall)."""
    rows = []
    ks = keys(seeds)
    for i, key in enumerate(ks, start=1):
        row = grid_row(key, limits)
        m = row["milp"][str(limits[0])]
        log(f"[grid {i}/{len(ks)}] {key}: flux {row['flux']:.3f} milp {m['load_distance']:.4f} "
            f"lb {m['lower_bound']:.4f} ({m['status']}, {m['wall']:.2f} s)")
        rows.append(row)
    return rows


def grid_row(key: str, limits: list[float]) -> dict[str, Any]:
    """One instance's row of :func:`run_grid`."""
    p = instance(key)
    t0 = time.perf_counter()
    fl = registry.solve("flux", p, time_limit=60.0)
    row: dict[str, Any] = {"key": key, "initial": metrics.load_distance(p, p.current),
                           "flux": metrics.load_distance(p, fl.assignment),
                           "flux_seconds": time.perf_counter() - t0, "milp": {}}
    for tl in limits:
        t0 = time.perf_counter()
        pl = registry.solve("albic-milp", p, time_limit=tl)
        row["milp"][str(tl)] = {"load_distance": metrics.load_distance(p, pl.assignment),
                                "lower_bound": pl.lower_bound, "status": pl.status,
                                "wall": time.perf_counter() - t0, "cpu": pl.details.get("cpu_seconds"),
                                "origin": pl.details.get("origin")}
    return row


def within(d: float, best: float) -> bool:
    return d <= best + max(REL * best, ABS) + 1e-12


def summarise(rows: list[dict[str, Any]], best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per time limit: the share within the best known, the instances worse than complete Flux, the share with
    plan − bound ≤ ``GAP_POINTS``; per cluster and budget the means at the first limit."""
    out: dict[str, Any] = {"instances": len(rows), "with_best_known": sum(r["key"] in best for r in rows),
                           "per_limit": {}}
    for tl in rows[0]["milp"] if rows else []:
        ms = [r["milp"][tl] for r in rows]
        known = [(r, r["milp"][tl]) for r in rows if r["key"] in best]
        out["per_limit"][tl] = {
            "share_within_best_known": float(np.mean([within(m["load_distance"], best[r["key"]]["best"])
                                                      for r, m in known])) if known else None,
            "misses": [r["key"] for r, m in known if not within(m["load_distance"], best[r["key"]]["best"])],
            "worse_than_flux": [r["key"] for r, m in zip(rows, ms, strict=True)
                                if m["load_distance"] > r["flux"] + 1e-9],
            "share_gap_within_0.1": float(np.mean([m["load_distance"] - m["lower_bound"] <= GAP_POINTS
                                                   for m in ms])),
            "median_plan_over_best": statistics.median([m["load_distance"] / max(best[r["key"]]["best"], 1e-9)
                                                        for r, m in known]) if known else None,
            "max_wall": max(m["wall"] for m in ms),
            "share_optimal": float(np.mean([m["status"] == "optimal" for m in ms])),
            # the named instances with a certified optimum (:func:`calibrate`): how far the bound is below it
            "calibration": [{"key": r["key"], "optimum": best[r["key"]]["exact"]["optimum"],
                             "best_known": best[r["key"]]["best"], "plan": m["load_distance"],
                             "bound": m["lower_bound"], "status": m["status"],
                             "optimum_minus_bound": best[r["key"]]["exact"]["optimum"] - m["lower_bound"]}
                            for r, m in known if "exact" in best[r["key"]]],
        }
    return out


def plot(bench: Any, rows: list[dict[str, Any]], best: dict[str, dict[str, Any]]) -> None:
    """Plan at each limit against the best known (log axes), the bound hollow, the tolerance band dashed."""
    known = [r for r in rows if r["key"] in best]
    if not known:
        return
    limits = list(known[0]["milp"])
    with bench.figure("albic_milp_grid.png", "albic-milp on the paper's grid vs the best known plans",
                      figsize=(6 * len(limits), 5)) as fig:
        if fig is None:
            return
        for i, tl in enumerate(limits):
            ax = fig.add_subplot(1, len(limits), i + 1)
            xs = [best[r["key"]]["best"] for r in known]
            for (n, _), marker in zip(CLUSTERS, "os^", strict=True):
                sel = [r for r in known if r["key"].startswith(f"{n}x")]
                ax.scatter([best[r["key"]]["best"] for r in sel], [r["milp"][tl]["load_distance"] for r in sel],
                           marker=marker, label=f"{n} nodes: plan at {tl} s")
            ax.scatter(xs, [max(r["milp"][tl]["lower_bound"], 1e-3) for r in known], marker="x", c="grey", s=12,
                       label="proven bound (≥ 1e-3 drawn)")
            grid = np.geomspace(max(min(xs), 1e-3), max(xs), 50)
            ax.plot(grid, grid, "k-", lw=0.8, label="best known")
            ax.plot(grid, grid + np.maximum(REL * grid, ABS), "k--", lw=0.8, label="+ max(5 %, 0.02)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("best known load distance (% of the mean)")
            ax.set_ylabel("albic-milp load distance / bound")
            ax.legend(fontsize=7)
