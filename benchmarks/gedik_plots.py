"""The figures of ``benchmarks.bench_gedik`` (analogs of Gedik's Figs. 3–8) from its results document.

Every axis says what it shows; log axes are labelled with plain numbers; the legend sits under the panels; the
resource profiles (CCL, LCL, …) are explained in a caption.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.plotting import pyplot

ALGOS = ("uniform", "consistent", "scan", "redist", "readj")

COLORS = {"uniform": "tab:gray", "consistent": "tab:purple", "scan": "tab:blue", "redist": "tab:green",
          "readj": "tab:red"}
#: what each plotted metric is, for the y axes
METRIC_LABELS = {"m": "relative migration m", "b": "relative imbalance b", "b_s": "imbalance of state",
                 "b_c": "imbalance of computation", "b_n": "imbalance of communication",
                 "seconds": "construction time (s)"}
RESOURCE_CAPTION = ("Resource profiles: how a key's state, computation and communication cost grow with its "
                    "frequency, C = constant, L = linear, Q = quadratic (CCL: constant state, constant computation, "
                    "linear communication; LCL: linear state, ...). m: moved state over the ideal; b: the "
                    "geometric mean over the resources of (max load / mean load) / imbalance tolerance.")


def _val(x: dict, k: str) -> float:
    return np.nan if x[k] is None else x[k]


def _plain_log_axis(ax, axis: str = "y") -> None:
    """A log axis labelled 0.5, 1, 2, 5 … instead of 5 × 10⁻¹, 2 × 10⁰."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def _legend_below(fig, ax, caption: str | None = None) -> None:
    """The algorithms' legend in one row under the panels (never over a bar or a line), and the caption under it."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.06 if caption else 0.0))
    if caption:
        fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=7.5, wrap=True)


def figure_resources(plt, f3: dict) -> object:
    """Fig. 3 analog: per resource profile, each algorithm's migration and imbalances, one panel per metric."""
    fig, axes = plt.subplots(1, 5, figsize=(18, 4.4))
    for ax, key in zip(axes, ["m", "b", "b_s", "b_c", "b_n"], strict=True):
        x = np.arange(len(f3))
        for i, a in enumerate(ALGOS):
            ax.bar(x + (i - 2) * 0.16, [_val(f3[rc][a], key) for rc in f3], 0.16, label=a, color=COLORS[a])
        ax.set_xticks(x, list(f3))
        ax.set_xlabel("resource profile")
        ax.set_ylabel(METRIC_LABELS[key] + " (log)")
        if key != "b_c":
            ax.axhline(1, color="k", lw=0.6)
        ax.set_yscale("log")
        _plain_log_axis(ax)
    fig.suptitle("Fig. 3 analog: resource profiles (N = 10 channels, Zipf z = 1)")
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.3, top=0.88, wspace=0.35)
    _legend_below(fig, axes[0], RESOURCE_CAPTION)
    return fig


def figure_lines(plt, data: dict, xkey: str, title: str, logx: bool = False,
                 metrics: tuple[str, ...] = ("m", "b", "seconds")) -> object:
    """Fig. 4/5/6/8 analogs: each metric against ``xkey``, one row per group (resource profile) when there are."""
    groups = [(None, data)] if xkey in data else list(data.items())
    fig, axes = plt.subplots(len(groups), len(metrics), figsize=(5 * len(metrics), 3.4 * len(groups) + 0.8),
                             squeeze=False)
    for row, (g, d) in enumerate(groups):
        xs = d[xkey]
        for col, mk in enumerate(metrics):
            ax = axes[row][col]
            for a in ALGOS:
                if mk == "seconds" and a in ("uniform", "consistent"):
                    continue
                ax.plot(xs, [_val(p, mk) for p in d[a]], marker="o", ms=3, label=a, color=COLORS[a])
            ax.set_xlabel({"N": "channels N"}.get(xkey, xkey))
            ax.set_ylabel(METRIC_LABELS[mk] + (" (log)" if mk in ("m", "seconds") else ""))
            if g:
                ax.set_title(f"{g}")
            if mk in ("m", "seconds"):
                ax.set_yscale("log")
                _plain_log_axis(ax)
            if logx:
                ax.set_xscale("log")
    fig.suptitle(title)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.14 + 0.1 / len(groups), top=0.9, wspace=0.3, hspace=0.45)
    _legend_below(fig, axes[0][0], "C = constant, L = linear, Q = quadratic growth of a key's state, computation "
                                   "and communication cost with its frequency (LCL: linear, constant, linear).")
    return fig


def plots(res: dict, out: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig = figure_resources(plt, res["fig3_resources"])
    fig.savefig(out / "gedik_fig3_resources.png", dpi=110)
    plt.close(fig)
    for key, xkey, title, fname, logx in [
            ("fig4_skew", "z", "Fig. 4/14 analog: skew", "gedik_fig4_skew.png", False),
            ("fig5_sigma", "sigma", "Fig. 5/12 analog: sigma", "gedik_fig5_sigma.png", True),
            ("fig6_channels", "N", "Fig. 6/13 analog: number of channels (LCL profile)", "gedik_fig6_channels.png",
             False),
            ("fig8_domain", "domain", "Fig. 8 analog: domain size", "gedik_fig8_domain.png", True)]:
        fig = figure_lines(plt, res[key], xkey, title, logx=logx)
        fig.savefig(out / fname, dpi=110)
        plt.close(fig)
    f7 = res["fig7_utility"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 6.5))
    utils = ["A", "APM", "APLM", "ATM", "ATLM"]
    for r, a in enumerate(["readj", "redist"]):
        for c, mk in enumerate(["m", "b"]):
            ax = axes[r][c]
            x = np.arange(len(f7))
            for i, u in enumerate(utils):
                ax.bar(x + (i - 2) * 0.16, [_val(f7[rc][u][a], mk) for rc in f7], 0.16, label=f"U^{u}")
            ax.set_xticks(x, list(f7))
            ax.set_title(a)
            ax.set_ylabel(METRIC_LABELS[mk] + " (log)")
            ax.set_yscale("log")
            _plain_log_axis(ax)
    fig.suptitle("Fig. 7 analog: utility functions")
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.2, top=0.9, wspace=0.3, hspace=0.45)
    _legend_below(fig, axes[0][0], RESOURCE_CAPTION)
    fig.savefig(out / "gedik_fig7_utility.png", dpi=110)
    plt.close(fig)
