"""The benchmark figures explain themselves: the Gedik figures (Fig. 3 and 6 analogs) label every y axis, keep the
legend off the panels, label log axes with plain numbers (not 2 × 10⁰) and explain CCL/LCL; the Spark demo's
figure says why the routing starts where it does."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from benchmarks.gedik_plots import ALGOS, figure_lines, figure_resources
from benchmarks.plotting import pyplot
from benchmarks.spark_demo import figure as demo_figure


@pytest.fixture(scope="module")
def plt() -> Any:
    """pyplot, imported by the test process that runs these tests (not by every one that collects them)."""
    p = pyplot()
    if p is None:
        pytest.skip("matplotlib is not installed")
    return p


def point(seed: int) -> dict:
    r = np.random.default_rng(seed)
    return {k: float(v) for k, v in zip(["m", "b", "b_s", "b_c", "b_n", "seconds"], r.uniform(0.3, 9, 6),
                                         strict=True)}


def texts(fig) -> str:
    fig.canvas.draw()  # tick labels exist only once drawn
    out = [t.get_text() for t in fig.texts] + [fig._suptitle.get_text() if fig._suptitle else ""]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_ylabel(), ax.get_xlabel()]
        out += [t.get_text() for t in ax.get_yticklabels() + ax.get_xticklabels()]
    return "\n".join(out)


def check_gedik_figure(fig) -> None:
    for ax in fig.axes:
        assert ax.get_ylabel().strip(), f"a panel without a y-axis label: {ax.get_title()!r}"
        assert ax.get_legend() is None, "the legend sits on a panel"
    assert fig.legends and sorted(t.get_text() for t in fig.legends[0].get_texts()) == sorted(ALGOS)
    text = texts(fig)
    assert not re.search(r"\\times|10\^|\\mathdefault", text), "log ticks as powers of ten"
    assert "linear" in text and "constant" in text and "LCL" in text, "CCL/LCL not explained"


def test_gedik_fig3_explains_itself(plt: Any) -> None:
    f3 = {rc: {a: point(i * 7 + j) for j, a in enumerate(ALGOS)} for i, rc in enumerate(["CCL", "LCL", "LQL"])}
    fig = figure_resources(plt, f3)
    try:
        check_gedik_figure(fig)
    finally:
        plt.close(fig)


def test_gedik_fig6_explains_itself(plt: Any) -> None:
    data = {"N": [1, 2, 3, 4], **{a: [point(10 * j + n) for n in range(4)] for j, a in enumerate(ALGOS)}}
    fig = figure_lines(plt, data, "N", "Fig. 6/13 analog: number of channels (LCL profile)")
    try:
        check_gedik_figure(fig)
    finally:
        plt.close(fig)


def test_the_demo_figure_says_why_routing_starts_where_it_does(plt: Any) -> None:
    batches = [{"batch_id": i, "epoch": 0 if i < 2 else 1, "hash_max_over_mean": 2.1,
                "rebalanced_max_over_mean": 1.62 if i < 2 else 1.03, "migrations": 12 if i == 2 else 0}
               for i in range(6)]
    doc = {"config": {"zipf": 1.1, "partitions": 8, "key_groups": 120, "algorithm": "albic-milp",
                      "window_batches": 2}, "batches": batches}
    fig = demo_figure(doc, plt)
    try:
        caption = " ".join(t.get_text() for t in fig.texts)
        assert "contiguous ranges of 15 per partition" in caption, caption
        assert "window holds 2 batches" in caption and "applied from batch 2" in caption, caption
        assert "target" not in texts(fig)
    finally:
        plt.close(fig)
