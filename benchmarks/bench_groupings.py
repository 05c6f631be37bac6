"""Benchmark: reproductions of the stream-grouping papers → bench-results/groupings.json + PNG plots.

Experiments (each scaled down from the paper where noted; the JSON records the scale used):

1. ``table1`` — Consistent Grouping paper, Table 1 analog: normalised imbalance (max − avg)/avg against
   B ∈ {10, 100, 1000, 10 000} bins for KG, PKG, PoTC, SG, PORC and CH-BL (ε = 0.3) on a Zipf stream whose top
   key has a 9.32% share (the WP dataset's p1; 10⁵ keys, z solved for p1), one source. Paper: 22M messages;
   here 10⁶ (quick 2·10⁵).
2. ``dchoices`` — D-C paper Fig. 10 analog: imbalance I(m) against n ∈ {5, 10, 20, 50, 100} for PKG, D-C, W-C,
   RR at z ∈ {0.8, 1.0, …, 2.0}, |K| = 10⁴, 5 sources, θ = 1/(5n), ε = 10⁻⁴. Paper: 10⁷ messages; here 2·10⁵
   (quick 10⁵, fewer n and z). Memory (Fig. 5/6): the simulator's measured replication of D-C and W-C against PKG
   and SG on the same (scaled-down) stream, AND the paper's memory model at the paper's scale (m = 10⁷):
   Σ_k min(f_k, c_k) with c_k = d (D-C head), n (W-C head / SG), 2 (tail, PKG), d from FINDOPTIMALCHOICES on the
   true head.
3. ``dkg`` — DKG paper §5.4 analog: one key with r% of the messages over 204 keys, 10 workers, 5 sources;
   KG, SG, PKG, DKG: StdDev of the worker shares (percent, DKG Eq. 7) and a latency proportional to the largest
   worker share (makespan: max share × n, 1 = ideal), plus the queue model's p99. Also r = 68% (the paper's
   twitter-election, Table 3). Paper: 10M messages over a real Storm run; here 5·10⁵ messages over 30 simulated
   minutes (quick 1.5·10⁵ over 15 minutes) so that DKG's wall-clock gates (15 s / 60 s) matter.
4. ``cg`` — CG paper Fig. 8 and Fig. 12 analogs: n = 10, 3 workers 5× faster, 10 virtual workers per worker,
   ε = 0.01, load 80% of the total capacity; CG, KG, SG: utilisation spread (max − min of queue length /
   capacity, CG paper Table 4) and max queue over time; then capacities changed twice mid-run (sum constant).
5. ``throughput`` — simulator routing rate for KG and PKG on one core (best of several runs).

Targets (issue 6) are evaluated and listed under ``targets`` with the measured value and whether they hold.

Usage: ``python -m benchmarks.bench_groupings [--quick] [--out DIR] [--only table1,dchoices,...]``
(default: a few minutes on one core; ``--quick``: under a minute). Progress goes to stderr.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from benchmarks.harness import Bench, logger, plot_positive, target
from evaluation.simulator import (
    SimulationConfig,
    SkewedStream,
    ZipfStream,
    simulate,
    zipf_exponent_for_top_share,
    zipf_probabilities,
)
from solvers.groupings import find_optimal_choices, make_grouping
from solvers.groupings.base import choice

P1_WP = 0.0932
log = logger("groupings")


# ---------------------------------------------------------------------------------------------- 1. Table 1
def exp_table1(quick: bool) -> dict:
    keys = 100_000
    m = 100_000 if quick else 1_000_000
    z = zipf_exponent_for_top_share(P1_WP, keys)
    bins = [10, 100, 1000, 10_000]
    groupings = [("kg", {}), ("pkg", {}), ("potc", {}), ("sg", {}), ("porc", {"eps": 0.3}), ("chbl", {"eps": 0.3})]
    stream = ZipfStream(z, keys, m, seed=7)
    p1_emp = float(np.mean(np.concatenate(list(stream.chunks(1 << 20))) == 0))
    rows = {}
    for name, params in groupings:
        rows[name] = {}
        for b in bins:
            t = time.perf_counter()
            r = simulate(stream, SimulationConfig(name, b, sources=1, params=params, seed=3, series_points=2))
            rows[name][str(b)] = {"imbalance_normalized": r["imbalance_normalized"], "replication": r["replication"],
                                  "seconds": round(time.perf_counter() - t, 3)}
            log(f"  table1 {name:5s} B={b:5d}: normalised imbalance {r['imbalance_normalized']:.4g} "
                f"({time.perf_counter() - t:.1f}s)")
    paper = {"kg": [0.8, 9.15, 93, 931], "pkg": [8e-7, 3.67, 45.59, 464], "potc": [8e-7, 8e-6, 9e-5, 1e-3],
             "sg": [4e-7, 3e-6, 4e-6, 2.8e-4], "porc": [0.3] * 4, "chbl": [0.3] * 4}
    targets = []
    for b in bins:
        kg = rows["kg"][str(b)]["imbalance_normalized"]
        exp_kg = p1_emp * b - 1
        pkg = rows["pkg"][str(b)]["imbalance_normalized"]
        exp_pkg = p1_emp * b / 2 - 1
        if exp_kg > 0:
            rel = abs(kg - exp_kg) / exp_kg
            targets.append(target(f"table1 KG B={b} within 10% of p1*B-1", round(kg, 4), round(exp_kg, 4),
                                  rel <= 0.10, f"relative deviation {rel:.1%}; refined estimate p1*(B-1) = "
                                               f"{p1_emp * (b - 1):.4g} (hot key + its bin's share of the tail)"))
        else:
            targets.append(target(f"table1 KG B={b} within 10% of p1*B-1", round(kg, 4), round(exp_kg, 4), None,
                                  "not applicable: p1*B-1 < 0 (the formula ignores the tail; paper also reports "
                                  f"0.8 here); refined estimate p1*(B-1) = {p1_emp * (b - 1):.4g}"))
        if exp_pkg > 0:
            rel = abs(pkg - exp_pkg) / exp_pkg
            targets.append(target(f"table1 PKG B={b} within 15% of p1*B/2-1", round(pkg, 4), round(exp_pkg, 4),
                                  rel <= 0.15, f"relative deviation {rel:.1%}"))
        else:
            targets.append(target(f"table1 PKG B={b} within 15% of p1*B/2-1", round(pkg, 6), round(exp_pkg, 4),
                                  pkg < 0.05, "formula < 0: PKG can balance (p1 < 2/B); checked ≈ 0 instead "
                                              "(paper: 8e-7)"))
        for g in ("porc", "chbl"):
            v = rows[g][str(b)]["imbalance_normalized"]
            targets.append(target(f"table1 {g.upper()} B={b} <= eps+0.01", round(v, 4), 0.31, v <= 0.31))
    return {"config": {"keys": keys, "messages": m, "zipf": z, "top_share": P1_WP, "top_share_realised": p1_emp,
                       "sources": 1, "eps": 0.3, "bins": bins, "paper_messages": 22_000_000},
            "normalized_imbalance": rows, "paper_wp": paper, "targets": targets}


# ---------------------------------------------------------------------------------------------- 2. D-Choices
def memory_model(z: float, n: int, keys: int = 10_000, m: int = 10_000_000, eps: float = 1e-4) -> dict:
    """The paper's memory estimate (§IV-B, Fig. 5/6): Σ_k min(f_k, choices_k) on the true distribution."""
    p = zipf_probabilities(z, keys)
    f = p * m
    theta = 1.0 / (5 * n)
    h = int(np.sum(p >= theta))
    d = find_optimal_choices(p[:h], n, eps)
    mem_pkg = float(np.minimum(f, 2).sum())
    mem_sg = float(np.minimum(f, n).sum())
    tail = float(np.minimum(f[h:], 2).sum())
    mem_dc = float(np.minimum(f[:h], d).sum()) + tail
    mem_wc = float(np.minimum(f[:h], n).sum()) + tail
    return {"head": h, "d": d, "dc_over_pkg": mem_dc / mem_pkg, "wc_over_pkg": mem_wc / mem_pkg,
            "dc_over_sg": mem_dc / mem_sg, "wc_over_sg": mem_wc / mem_sg}


def exp_dchoices(quick: bool) -> dict:
    keys = 10_000
    m = 100_000 if quick else 200_000
    ns = [10, 100] if quick else [5, 10, 20, 50, 100]
    zs = [0.8, 1.4, 2.0] if quick else [0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    algos = ["pkg", "dchoices", "wchoices", "rr", "sg"]
    res: dict = {}
    model: dict = {}
    for n in ns:
        res[str(n)] = {}
        model[str(n)] = {}
        for z in zs:
            stream = ZipfStream(z, keys, m, seed=11)
            row = {}
            for a in algos:
                r = simulate(stream, SimulationConfig(a, n, sources=5, seed=5, series_points=2))
                row[a] = {"imbalance": r["imbalance"], "replication": r["replication"], "seconds": r["seconds"]}
                if "max_d" in r:
                    row[a]["max_d"] = r["max_d"]
            res[str(n)][str(z)] = row
            model[str(n)][str(z)] = memory_model(z, n, keys)
            log(f"  dchoices n={n:3d} z={z:.1f}: " + "  ".join(
                f"{a} I={row[a]['imbalance']:.2e} rep={row[a]['replication']:.2f}" for a in algos))
    targets = []
    s, eps = 5, 1e-4
    if "100" in res:
        worst = max(res["100"][str(z)]["dchoices"]["imbalance"] for z in zs)
        targets.append(target("dchoices: D-C imbalance <= 2*s*eps at n=100 (all z)", worst, 2 * s * eps,
                              worst <= 2 * s * eps, f"worst over z in {zs}"))
    # memory: the paper's model at the paper's scale (targets) ...
    for n in ("50", "100"):
        if n not in res:
            continue
        for algo, key in (("dchoices", "dc"), ("wchoices", "wc")):
            mp = max(model[n][str(z)][f"{key}_over_pkg"] for z in zs)
            ms = max(model[n][str(z)][f"{key}_over_sg"] for z in zs)
            targets.append(target(f"dchoices: {algo} memory <= 1.3x PKG at n={n} (paper model, m=1e7, worst z)",
                                  round(mp, 3), 1.3, mp <= 1.3, "Σ_k min(f_k, choices_k) at the paper's scale"))
            targets.append(target(f"dchoices: {algo} memory <= 0.2x SG at n={n} (paper model, m=1e7, worst z)",
                                  round(ms, 3), 0.2, ms <= 0.2, "Σ_k min(f_k, choices_k) at the paper's scale"))
    # ... the measured ratios on the scaled-down stream (reported, see notes) ...
    measured = {}
    for n in ("50", "100"):
        if n in res:
            measured[n] = {algo: {"over_pkg_worst": max(res[n][str(z)][algo]["replication"]
                                                        / res[n][str(z)]["pkg"]["replication"] for z in zs),
                                  "over_sg_worst": max(res[n][str(z)][algo]["replication"]
                                                       / res[n][str(z)]["sg"]["replication"] for z in zs)}
                           for algo in ("dchoices", "wchoices")}
    # ... and a measured spot check at the paper's scale on the model's worst case (n = 100, z = 2.0)
    spot = None
    if not quick:
        ms_, n_s, z_s = 10_000_000, 100, 2.0
        stream = ZipfStream(z_s, keys, ms_, seed=29)
        spot = {"n": n_s, "z": z_s, "messages": ms_}
        for a in ("pkg", "dchoices", "wchoices", "sg"):
            r = simulate(stream, SimulationConfig(a, n_s, sources=5, seed=5, series_points=2))
            spot[a] = {"replication": r["replication"], "imbalance": r["imbalance"], "seconds": r["seconds"]}
            log(f"  dchoices spot check n=100 z=2.0 m=1e7: {a} replication {r['replication']:.3f} "
                f"imbalance {r['imbalance']:.2e} ({r['seconds']:.0f}s)")
        for a in ("dchoices", "wchoices"):
            rp = spot[a]["replication"] / spot["pkg"]["replication"]
            rs_ = spot[a]["replication"] / spot["sg"]["replication"]
            spot[a]["over_pkg"] = rp
            spot[a]["over_sg"] = rs_
            targets.append(target(f"dchoices: {a} replication <= 1.3x PKG (measured, n=100, z=2.0, m=1e7)",
                                  round(rp, 3), 1.3, rp <= 1.3, "simulator at the paper's scale, one point"))
            targets.append(target(f"dchoices: {a} replication <= 0.2x SG (measured, n=100, z=2.0, m=1e7)",
                                  round(rs_, 3), 0.2, rs_ <= 0.2, "simulator at the paper's scale, one point"))
    return {"config": {"keys": keys, "messages": m, "sources": s, "theta": "1/(5n)", "eps": eps, "n": ns, "z": zs,
                       "paper_messages": 10_000_000},
            "results": res, "memory_model_m1e7": model, "measured_replication_ratios_scaled": measured,
            "spot_check_paper_scale": spot, "targets": targets}


# ---------------------------------------------------------------------------------------------- 3. DKG
def exp_dkg(quick: bool) -> dict:
    m = 100_000 if quick else 500_000
    duration = 900.0 if quick else 1800.0
    rs = [0.0, 0.3, 0.5, 0.68, 0.9, 1.0] if quick else [round(0.1 * i, 1) for i in range(11)] + [0.68]
    rs = sorted(set(rs))
    lam = m / duration
    n = 10
    algos = ["kg", "sg", "pkg", "dkg"]
    # PKG's two hash choices of the hot key coincide with probability 1/n (then PKG is KG for that key, the
    # DKG paper's §4.4 criticism). The comparison uses the first hash seed for which they differ (the typical
    # case); the colliding case is measured separately below and reported.
    seed = next(sd for sd in range(1, 100) if choice(np.zeros(1, dtype=np.int64), n, sd, 0)[0]
                != choice(np.zeros(1, dtype=np.int64), n, sd, 1)[0])
    bad_seed = next(sd for sd in range(1, 1000) if choice(np.zeros(1, dtype=np.int64), n, sd, 0)[0]
                    == choice(np.zeros(1, dtype=np.int64), n, sd, 1)[0])
    res = {}
    for r in rs:
        stream = SkewedStream(r, keys=204, messages=m, seed=13)
        row = {}
        for a in algos:
            out = simulate(stream, SimulationConfig(a, n, sources=5, seed=seed, arrival_rate=lam,
                                                    service_rate=lam / (0.8 * n), series_points=2))
            shares = np.asarray(out["worker_loads"]) / m * 100.0
            row[a] = {"stddev": float(shares.std()), "max_share": float(shares.max() / 100.0),
                      "latency_proxy": float(shares.max() / 100.0 * n), "p99_latency": out["latency"]["p99"],
                      "replication": out["replication"]}
        res[str(r)] = row
        log(f"  dkg r={r:.2f}: " + "  ".join(f"{a} sd={row[a]['stddev']:.2f} lat={row[a]['latency_proxy']:.2f}"
                                               for a in algos))
    out = simulate(SkewedStream(0.68, keys=204, messages=m, seed=13),
                   SimulationConfig("pkg", n, sources=5, seed=bad_seed, arrival_rate=lam, service_rate=lam / (0.8 * n),
                                    series_points=2))
    shares = np.asarray(out["worker_loads"]) / m * 100.0
    colliding = {"seed": bad_seed, "r": 0.68, "stddev": float(shares.std()),
                 "latency_proxy": float(shares.max() / 100.0 * n)}
    log(f"  dkg PKG with colliding hot-key choices (seed {bad_seed}), r=0.68: sd={colliding['stddev']:.2f}")
    targets = []
    bad = [r for r in rs if r >= 0.5 and not res[str(r)]["dkg"]["stddev"] < res[str(r)]["pkg"]["stddev"]]
    worst = max(res[str(r)]["dkg"]["stddev"] - res[str(r)]["pkg"]["stddev"] for r in rs if r >= 0.5)
    targets.append(target("dkg: DKG StdDev < PKG StdDev at every r >= 50%", round(worst, 3), 0.0, not bad,
                          "value = max over r>=0.5 of (DKG - PKG) StdDev" + (f"; fails at {bad}" if bad else "")))
    paper_t3 = {"sg": {"stddev": 0.0001, "latency_rel": 1.0}, "kg": {"stddev": 20.32, "latency_rel": 3955 / 559},
                "pkg": {"stddev": 12.35, "latency_rel": 1942 / 559}, "dkg": {"stddev": 4.10, "latency_rel": 1175 / 559}}
    return {"config": {"keys": 204, "messages": m, "workers": n, "sources": 5, "simulated_seconds": duration,
                       "arrival_rate": lam, "hash_seed": seed, "paper_messages": 10_000_000},
            "results": res, "pkg_with_colliding_choices": colliding, "paper_table3_r68": paper_t3, "targets": targets}


# ---------------------------------------------------------------------------------------------- 4. CG
def exp_cg(quick: bool) -> dict:
    n = 10
    caps = [5.0, 5.0, 5.0] + [1.0] * 7
    service = 100.0
    lam = 0.8 * sum(caps) * service
    phase = 240.0 if quick else 600.0
    t0 = 2.0 if quick else 5.0
    keys = 100_000
    z = zipf_exponent_for_top_share(P1_WP, keys)
    out: dict = {"config": {"workers": n, "capacities": caps, "service_rate": service, "arrival_rate": lam,
                            "load": 0.8, "alpha": 10, "eps": 0.01, "t0": t0, "signal": "busy fraction",
                            "keys": keys, "zipf": z, "sources": 5}}
    # (a) static heterogeneous cluster (Fig. 8)
    m = int(lam * phase)
    static = {}
    for a in ("cg", "kg", "sg"):
        params = {"t0": t0} if a == "cg" else {}
        r = simulate(ZipfStream(z, keys, m, seed=17),
                     SimulationConfig(a, n, sources=5, capacities=caps, service_rate=service, params=params,
                                      seed=4, series_points=120))
        static[a] = _cg_summary(r)
        log(f"  cg static {a}: utilisation spread (last quarter) {static[a]['utilisation_spread_last_quarter']:.3f}"
            f", max queue {static[a]['max_queue_final']:.0f}, p99 {r['latency']['p99']:.2f}s")
    out["static"] = {"messages": m, "simulated_seconds": phase, "results": static}
    # (b) capacities changed twice mid-run, sum constant (Fig. 12)
    caps2 = [1.0, 1.0, 1.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0]
    caps3 = [1.0] * 7 + [5.0, 5.0, 5.0]
    m3 = int(lam * phase * 3)
    change = {}
    for a in ("cg", "kg", "sg"):
        params = {"t0": t0} if a == "cg" else {}
        r = simulate(ZipfStream(z, keys, m3, seed=19),
                     SimulationConfig(a, n, sources=5, capacities=caps, service_rate=service, params=params, seed=4,
                                      capacity_changes=[(1 / 3, caps2), (2 / 3, caps3)], series_points=180))
        summ = _cg_summary(r)
        series_u = np.asarray(r["series"]["utilisation_spread"])
        tt = np.asarray(r["series"]["time"])
        per_phase = []
        for k in range(3):
            lo, hi = k * phase + 0.75 * phase, (k + 1) * phase
            sel = (tt >= lo) & (tt <= hi)
            per_phase.append(float(series_u[sel].mean()) if sel.any() else None)
        summ["utilisation_spread_last_quarter_of_each_phase"] = per_phase
        change[a] = summ
        log(f"  cg change {a}: utilisation spread per phase (last quarter) "
            f"{[round(x, 3) if x is not None else None for x in per_phase]}")
    out["capacity_change"] = {"messages": m3, "simulated_seconds": 3 * phase, "capacities": [caps, caps2, caps3],
                              "at_fraction": [1 / 3, 2 / 3], "results": change}
    cg_u = static["cg"]["utilisation_spread_last_quarter"]
    kg_u = static["kg"]["utilisation_spread_last_quarter"]
    sg_u = static["sg"]["utilisation_spread_last_quarter"]
    targets = [
        target("cg: CG utilisation spread <= 0.1 (static, last quarter)", round(cg_u, 4), 0.1, cg_u <= 0.1),
        target("cg: KG and SG utilisation spread > 0.5 (static, last quarter)", [round(kg_u, 3), round(sg_u, 3)],
               0.5, kg_u > 0.5 and sg_u > 0.5),
    ]
    worst = max(x for x in change["cg"]["utilisation_spread_last_quarter_of_each_phase"] if x is not None)
    targets.append(target("cg: CG utilisation spread <= 0.1 after each capacity change (last quarter of phase)",
                          round(worst, 4), 0.1, worst <= 0.1))
    out["targets"] = targets
    return out


def _cg_summary(r: dict) -> dict:
    s = r["series"]
    return {
        "utilisation_spread_last_quarter": r["utilisation_spread"]["last_quarter_mean"],
        "utilisation_spread_final": r["utilisation_spread"]["final"],
        "busy_fraction_spread_last_quarter": r["busy_spread"]["last_quarter_mean"],
        "max_queue_final": s["max_queue"][-1],
        "latency": r["latency"],
        "throughput_at_saturation_relative": r["throughput_at_saturation"]["relative"],
        "replication": r["replication"],
        "virtual_workers": r.get("virtual_workers"),
        "virtual_worker_moves": r.get("virtual_worker_moves"),
        "series": {k: s[k] for k in ("time", "utilisation_spread", "max_queue", "queue_spread", "latency_mean")},
    }


# ---------------------------------------------------------------------------------------------- 5. throughput
def exp_throughput(quick: bool) -> dict:
    m = 1_000_000 if quick else 2_000_000
    repeats = 2 if quick else 3
    stream = ZipfStream(1.0, 10_000, m, seed=23)
    keys = np.concatenate(list(stream.chunks(1 << 22)))
    res = {}
    for a in ("kg", "pkg"):
        best_sim = 0.0
        best_route = 0.0
        best_e2e = 0.0
        for _ in range(repeats):
            r = simulate(stream, SimulationConfig(a, 10, sources=5, series_points=2))
            best_sim = max(best_sim, r["routing_rate"])
            best_e2e = max(best_e2e, r["messages"] / r["seconds"])
            g = make_grouping(a, 10)
            t = time.perf_counter()
            for i in range(0, m, 65_536):
                g.route(keys[i:i + 65_536])
            best_route = max(best_route, m / (time.perf_counter() - t))
        res[a] = {"simulator_routing_rate": best_sim, "simulator_end_to_end_rate": best_e2e,
                  "single_source_route_rate": best_route}
        log(f"  throughput {a}: simulator routing {best_sim:,.0f} msg/s, end to end {best_e2e:,.0f} msg/s, "
            f"route() {best_route:,.0f} msg/s")
    targets = [target(f"throughput: simulator routes >= 1M msg/s for {a.upper()} (end to end, one core)",
                      round(res[a]["simulator_end_to_end_rate"]), 1_000_000,
                      res[a]["simulator_end_to_end_rate"] >= 1_000_000,
                      f"best of {repeats} runs, machine shared with other jobs") for a in ("kg", "pkg")]
    return {"config": {"messages": m, "workers": 10, "sources": 5, "zipf": 1.0, "keys": 10_000,
                       "repeats": repeats}, "results": res, "targets": targets}


# ---------------------------------------------------------------------------------------------- plots
def plot_table1(bench: Bench, t: dict[str, Any]) -> None:
    with bench.figure("groupings_table1.png", "CG paper Table 1 analog (p1 = 9.32%)", figsize=(6, 4.2)) as fig:
        if fig is None:
            return
        ax = fig.subplots()
        bins = t["config"]["bins"]
        for g, row in t["normalized_imbalance"].items():
            plot_positive(ax, bins, [row[str(b)]["imbalance_normalized"] for b in bins], 1e-7, marker="o", label=g)
        ax.axhline(0.31, color="gray", ls=":", lw=1, label="target PORC, CH-BL: <= eps + 0.01")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("bins B")
        ax.set_ylabel("normalised imbalance (max-avg)/avg")
        ax.legend(fontsize=7)


def plot_dchoices(bench: Bench, d: dict[str, Any]) -> None:
    """Fig. 10 analog (imbalance), and the memory ratios exactly as the targets check them."""
    ns, zs = d["config"]["n"], d["config"]["z"]
    bound = 2 * d["config"]["sources"] * d["config"]["eps"]
    with bench.figure("groupings_dchoices.png", f"D-C paper Fig. 10 analog, m = {d['config']['messages']:,}",
                      figsize=(3.4 * len(ns), 3.6)) as fig:
        if fig is None:
            return
        axes = fig.subplots(1, len(ns), sharey=True, squeeze=False)[0]
        for ax, n in zip(axes, ns, strict=True):
            for a in ("pkg", "dchoices", "wchoices", "rr"):
                plot_positive(ax, zs, [d["results"][str(n)][str(z)][a]["imbalance"] for z in zs], 1e-7, marker="o",
                              label=a)
            ax.axhline(bound, color="gray", ls=":", lw=1, label=f"target D-C (n=100): <= 2·s·eps = {bound:g}")
            ax.set_yscale("log")
            ax.set_title(f"n = {n}", fontsize=9)
            ax.set_xlabel("z")
        axes[0].set_ylabel("imbalance I(m)")
        axes[0].legend(fontsize=6)
    # memory: the targets check the paper's model at m = 1e7 (and, in a full run, one measured point at m = 1e7);
    # the ratio measured on this experiment's short stream is drawn apart, as reported, not against the target
    big = [x for x in ns if x >= 50] or ns[-1:]
    with bench.figure("groupings_memory.png", "D-C / W-C memory: what the targets check", figsize=(10, 3.8)) as fig:
        if fig is None:
            return
        axes = fig.subplots(1, 3)
        spot = d.get("spot_check_paper_scale")
        for col, (ref, limit) in enumerate((("pkg", 1.3), ("sg", 0.2))):
            ax = axes[col]
            for n in big:
                mm = d["memory_model_m1e7"][str(n)]
                for algo, key, ls in (("D-C", "dc", "--"), ("W-C", "wc", ":")):
                    ax.plot(zs, [mm[str(z)][f"{key}_over_{ref}"] for z in zs], ls=ls, marker=".",
                            label=f"{algo} n={n}: paper's model, m=1e7 (checked)")
            if spot:
                for algo, mk in (("dchoices", "s"), ("wchoices", "D")):
                    ax.plot([spot["z"]], [spot[algo][f"over_{ref}"]], ls="none", marker=mk, ms=8, mfc="none",
                            label=f"{algo} n={spot['n']}: measured at m=1e7 (checked)")
            ax.axhline(limit, color="red", lw=1, label=f"target: <= {limit}x {ref.upper()}")
            ax.set_title(f"memory / {ref.upper()}", fontsize=9)
            ax.set_xlabel("z")
            ax.legend(fontsize=6)
        ax = axes[2]
        for n in big:
            r = d["results"][str(n)]
            for algo in ("dchoices", "wchoices"):
                ax.plot(zs, [r[str(z)][algo]["replication"] / r[str(z)]["pkg"]["replication"] for z in zs],
                        marker="o", label=f"{algo} n={n}")
        ax.set_title(f"reported, not checked (m = {d['config']['messages']:,})", fontsize=9)
        ax.set_xlabel("z")
        ax.set_ylabel("memory / PKG (both measured)")
        ax.legend(fontsize=6)


def plot_dkg(bench: Bench, k: dict[str, Any]) -> None:
    rs = sorted(float(r) for r in k["results"])
    with bench.figure("groupings_dkg.png", "DKG paper §5.4 analog (one hot key, 10 workers)",
                      figsize=(9, 3.6)) as fig:
        if fig is None:
            return
        axes = fig.subplots(1, 2)
        for a in ("kg", "sg", "pkg", "dkg"):
            axes[0].plot([100 * r for r in rs], [k["results"][str(r)][a]["stddev"] for r in rs], marker="o", label=a)
            axes[1].plot([100 * r for r in rs], [k["results"][str(r)][a]["latency_proxy"] for r in rs], marker="o",
                         label=a)
        axes[0].set_ylabel("StdDev of worker shares (%)")
        axes[1].set_ylabel("latency ∝ largest share (1 = ideal)")
        for ax in axes:
            ax.set_xlabel("hot key share r (%)")
            ax.legend(fontsize=8)


def plot_cg(bench: Bench, c: dict[str, Any]) -> None:
    with bench.figure("groupings_cg.png", "CG paper Fig. 8 / Fig. 12 analogs", figsize=(10, 6.4)) as fig:
        if fig is None:
            return
        axes = fig.subplots(2, 2)
        for col, part in enumerate(("static", "capacity_change")):
            for a, summ in c[part]["results"].items():
                s = summ["series"]
                plot_positive(axes[0, col], s["time"], s["utilisation_spread"], 1e-4, label=a)
                plot_positive(axes[1, col], s["time"], s["max_queue"], 1e-1, label=a)
            axes[0, col].axhline(0.1, color="gray", ls=":", lw=1, label="target CG: <= 0.1 (last quarter)")
            axes[0, col].set_yscale("log")
            axes[1, col].set_yscale("log")
            axes[0, col].set_title("heterogeneous" if part == "static" else "capacities changed at 1/3, 2/3",
                                   fontsize=9)
            axes[0, col].set_ylabel("utilisation spread (max-min)")
            axes[1, col].set_ylabel("max queue length")
            axes[1, col].set_xlabel("simulated time (s)")
            axes[0, col].legend(fontsize=7)
            axes[1, col].legend(fontsize=7)


def _exp_memory(quick: bool) -> dict[str, Any]:
    from benchmarks.groupings_memory import exp_memory

    return exp_memory(quick)


def _plot_memory(bench: Bench, d: dict[str, Any]) -> None:
    from benchmarks.groupings_memory import plot_memory

    plot_memory(bench, d)


EXPERIMENTS = {"table1": exp_table1, "dchoices": exp_dchoices, "memory": _exp_memory, "dkg": exp_dkg, "cg": exp_cg,
               "throughput": exp_throughput}
PLOTS = {"table1": plot_table1, "dchoices": plot_dchoices, "memory": _plot_memory, "dkg": plot_dkg, "cg": plot_cg}


def main(argv: list[str] | None = None) -> int:
    bench = Bench("groupings", __doc__)
    bench.parser.add_argument("--only", help=f"comma-separated subset of {','.join(EXPERIMENTS)}")
    args = bench.parse(argv)
    names = list(EXPERIMENTS) if not args.only else [x.strip() for x in args.only.split(",") if x.strip()]
    for nme in names:
        if nme not in EXPERIMENTS:
            bench.parser.error(f"unknown experiment {nme!r}")
    for nme in names:
        bench.log(f"== {nme}")
        t = time.perf_counter()
        res = bench.result[nme] = EXPERIMENTS[nme](args.quick)
        res["seconds"] = round(time.perf_counter() - t, 2)
        bench.targets.extend(res.get("targets", []))
        bench.log(f"   {nme} done in {res['seconds']:.1f}s")
        if nme in PLOTS:
            PLOTS[nme](bench, res)
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
