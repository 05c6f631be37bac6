"""What the ALBIC collocation benchmark reports: its plots (ALBIC paper Figures 10–12 analogs), its targets and its
Markdown table. Used by ``python -m benchmarks.bench_albic_collocation``.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from benchmarks.plotting import pyplot

__all__ = ["plot", "targets", "format_table"]


def plot(results: dict[str, Any], out_dir: str) -> list[str]:
    plt = pyplot()
    if plt is None:
        return []
    files = []
    colors = {"albic": "tab:blue", "cola": "tab:orange", "albic-milp": "tab:green"}
    for topo, sweep in results.get("sweep", {}).items():
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        xs = sorted(int(x) for x in sweep)
        for name in results["planners"]:
            cf = [sweep[str(x)][name]["summary"]["collocation_factor_last5"] * 100 for x in xs if name in sweep[str(x)]]
            ld = [sweep[str(x)][name]["summary"]["load_distance_pct_last5"] for x in xs if name in sweep[str(x)]]
            axes[0].plot(xs[: len(cf)], cf, "o-", label=name, color=colors.get(name))
            axes[1].plot(xs[: len(ld)], ld, "o-", label=name, color=colors.get(name))
        axes[0].set(xlabel="one-to-one key groups x (%)", ylabel="collocation factor (%)",
                    title=f"Collocation, {topo} topology (§5.3, Fig. 10)")
        axes[1].set(xlabel="one-to-one key groups x (%)", ylabel="load distance (% of target)", title="Load distance")
        axes[0].legend()
        fig.tight_layout()
        f = os.path.join(out_dir, f"albic_collocation_sweep_{topo}.png")
        fig.savefig(f, dpi=100)
        plt.close(fig)
        files.append(f)
    sizes = results.get("sizes", {}).get("results", {})
    if sizes:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        labels = list(sizes)
        width = 0.8 / max(1, len(results["planners"]))
        for j, name in enumerate(results["planners"]):
            cf = [sizes[s][name]["summary"]["collocation_factor_last5"] * 100 if name in sizes[s] else 0
                  for s in labels]
            ld = [sizes[s][name]["summary"]["load_distance_pct_last5"] if name in sizes[s] else 0 for s in labels]
            pos = np.arange(len(labels)) + j * width
            axes[0].bar(pos, cf, width, label=name, color=colors.get(name))
            axes[1].bar(pos, ld, width, label=name, color=colors.get(name))
        for ax in axes:
            ax.set_xticks(np.arange(len(labels)) + width * (len(results["planners"]) - 1) / 2)
            ax.set_xticklabels(labels)
        axes[0].set(ylabel="collocation factor (%)", title="Cluster sizes at x = 50 (§5.3, Fig. 11)")
        axes[1].set(ylabel="load distance (% of target)")
        axes[0].legend()
        fig.tight_layout()
        f = os.path.join(out_dir, "albic_collocation_sizes.png")
        fig.savefig(f, dpi=100)
        plt.close(fig)
        files.append(f)
    rj = results.get("real_job_2", {})
    if rj:
        fig, axes = plt.subplots(1, 4, figsize=(16, 3.6))
        keys = [("collocation_factor", "collocation factor"), ("load_distance_pct", "load distance (%)"),
                ("load_index", "load index"), ("migrations", "#migrations")]
        for name, res in rj.items():
            if not isinstance(res, dict) or "series" not in res:
                continue
            for ax, (key, label) in zip(axes, keys, strict=False):
                ys = res["series"][key]
                ax.plot(range(1, len(ys) + 1), ys, label=name, color=colors.get(name))
                ax.set(xlabel="round", title=label)
        axes[3].set_yscale("symlog")
        axes[0].legend()
        fig.suptitle("Real Job 2-like (§5.4, Fig. 12)")
        fig.tight_layout()
        f = os.path.join(out_dir, "albic_collocation_real_job_2.png")
        fig.savefig(f, dpi=100)
        plt.close(fig)
        files.append(f)
    return files


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's targets, evaluated on the mean of the last 5 rounds."""
    out: dict[str, Any] = {}
    cmp = {}
    groups = [(f"{topo} x={x}", v) for topo, sw in results.get("sweep", {}).items() for x, v in sw.items()]
    groups += [(k, v) for k, v in results.get("sizes", {}).get("results", {}).items() if k != "40/800/20"]
    for label, res in groups:
        if "albic" in res and "cola" in res:
            a, c = res["albic"]["summary"], res["cola"]["summary"]
            cmp[label] = {
                "ld_le_cola": a["load_distance_pct_last5"] <= c["load_distance_pct_last5"],
                "cf_ge_cola": a["collocation_factor_last5"] >= c["collocation_factor_last5"] - 1e-9,
                "albic_within_budget": a["all_within_budget"],
                "cola_max_migrations": c["max_migrations_per_round"],
                "albic_cf_split": a.get("final_cf_split"), "cola_cf_split": c.get("final_cf_split"),
                "budget_bound": res.get("budget_bound"),
            }
    for label, c in results.get("convergence", {}).items():
        key = label if label in cmp else next((k for k in cmp if k.endswith(label)), label)
        if key in cmp:
            sm = c["summary"]
            cmp[key][f"after_{c['rounds']}_rounds"] = {
                "cf_ge_cola": c["first_round_albic_cf_last5_ge_cola"] is not None,
                "first_round": c["first_round_albic_cf_last5_ge_cola"],
                "albic_cf_last5": sm["collocation_factor_last5"], "albic_ld_last5": sm["load_distance_pct_last5"]}
    out["albic_vs_cola"] = cmp
    out["albic_cf_and_ld_at_least_colas"] = f"{sum(c['ld_le_cola'] and c['cf_ge_cola'] for c in cmp.values())}"\
        f" of {len(cmp)} (target: >= 10 of 12)"
    rj = results.get("real_job_2", {}).get("albic")
    if rj:
        out["real_job_2_load_index_le_0.6_within_30"] = rj["first_round_load_index_le_0.6"] is not None
        out["real_job_2_max_migrations_le_10"] = rj["summary"]["max_migrations_per_round"] <= 10
    tm = results.get("timing", {})
    out["metis_10000_lt_0.5s"] = tm.get("metis_split_10000_s", math.inf) < 0.5
    if "albic_round_60_1200_s" in tm:
        out["albic_round_60_1200_le_2s"] = tm["albic_round_60_1200_s"] <= 2.0
    return out


def format_table(results: dict[str, Any]) -> str:
    lines = ["| scenario | planner | CF (last 5) | LD % (last 5) | load index | max migr/round |",
             "|---|---|---|---|---|---|"]
    rows = [(f"§5.3 {topo} x={x}", v) for topo, sw in results.get("sweep", {}).items() for x, v in sw.items()]
    rows += [(f"§5.3 {k} x=50", v) for k, v in results.get("sizes", {}).get("results", {}).items()
             if k != "40/800/20"]
    rows += [(f"{k}, {v['rounds']} rounds", {"albic": v}) for k, v in results.get("convergence", {}).items()]
    rows += [("Real Job 2", results.get("real_job_2", {}))]
    for label, res in rows:
        for name in results["planners"]:
            if name not in res:
                continue
            s = res[name]["summary"]
            lines.append(f"| {label} | {name} | {s['collocation_factor_last5']:.3f}"
                         f" | {s['load_distance_pct_last5']:.2f}"
                         f" | {s['load_index_last5']:.3f} | {s['max_migrations_per_round']} |")
    return "\n".join(lines)
