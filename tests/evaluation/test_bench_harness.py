"""benchmarks.harness: the JSON every benchmark writes, the targets table, and the plot rules:
every line labelled, ``--quick`` in the title, nothing clamped silently, the D-C/W-C memory lines drawn against the
target only where the target checks them."""

from __future__ import annotations

import json
import math
import tempfile

import pytest

pytest.importorskip("matplotlib")

from benchmarks.bench_groupings import plot_dchoices  # noqa: E402
from benchmarks.groupings_memory import plot_memory  # noqa: E402
from benchmarks.harness import QUICK_NOTE, Bench, check_labelled, plot_positive, pyplot, scratch  # noqa: E402


def _bench(tmp_path, *argv: str) -> Bench:
    b = Bench("demo", "A demo benchmark.\n\nMore text.", keep_figures=True)
    b.parser.add_argument("--size", type=int, default=3)
    b.parse([*argv, "--out", str(tmp_path)])
    return b


def test_finish_writes_the_json_and_the_targets_table(tmp_path, capsys):
    b = _bench(tmp_path, "--quick", "--size", "5")
    assert b.quick and b.args.size == 5
    b.result["numbers"] = {"a": 1}
    b.target("a holds", 1, 2, True)
    b.target("a miss", 3, 2, False, "too big")
    b.target("not applicable", 0, 1, None, "quick")
    assert b.finish() == 0
    doc = json.loads((tmp_path / "demo.json").read_text())
    assert doc["benchmark"] == "demo" and doc["quick"] is True and doc["numbers"] == {"a": 1}
    assert doc["command"].endswith("--quick --size 5 --out " + str(tmp_path))
    assert [t["holds"] for t in doc["targets"]] == [True, False, None]
    assert set(doc["machine"]) == {"cpus", "loadavg_start", "loadavg_end"}
    err = capsys.readouterr().err
    assert "[MISS] a miss: 3 (threshold 2) — too big" in err and "targets holding: 1/2 (1 not applicable)" in err


def test_nan_is_refused_not_written(tmp_path):
    b = _bench(tmp_path)
    b.result["x"] = math.nan
    with pytest.raises(ValueError):
        b.finish()


def test_an_unlabelled_line_is_an_error(tmp_path):
    b = _bench(tmp_path)
    with pytest.raises(ValueError, match="without a label"), b.figure("bad.png", "t") as fig:
        ax = fig.subplots()
        ax.plot([1, 2], [3, 4], label="ok")
        ax.axhline(1.3)  # a target line nobody named
    assert not (tmp_path / "bad.png").exists()


def test_quick_runs_say_so_in_the_title(tmp_path):
    for argv, expect in (((), False), (("--quick",), True)):
        b = _bench(tmp_path, *argv)
        with b.figure("t.png", "my title") as fig:
            fig.subplots().plot([0, 1], [0, 1], label="x")
        title = b.figures["t.png"]._suptitle.get_text()
        assert title.startswith("my title") and (QUICK_NOTE in title) == expect
        assert (tmp_path / "t.png").exists()


def test_values_below_the_floor_are_marked_not_hidden():
    plt = pyplot()
    fig, ax = plt.subplots()
    plot_positive(ax, [1, 2, 3], [0.5, 0.0, 1e-9], 1e-4, label="series")
    lines = ax.get_lines()
    assert list(lines[0].get_ydata()) == [0.5, 1e-4, 1e-4]
    marked = [ln for ln in lines if ln.get_label().startswith("below")]
    assert len(marked) == 1 and list(marked[0].get_xdata()) == [2, 3]
    check_labelled(fig)
    plt.close(fig)


def _dchoices_doc() -> dict:
    zs, ns = [0.8, 2.0], [10, 100]
    res = {str(n): {str(z): {a: {"imbalance": 0.0 if a == "rr" else 1e-3, "replication": rep}
                             for a, rep in (("pkg", 1.0), ("dchoices", 2.6), ("wchoices", 2.7), ("rr", 9.0),
                                            ("sg", 20.0))} for z in zs} for n in ns}
    model = {str(n): {str(z): {"dc_over_pkg": 1.2, "wc_over_pkg": 1.25, "dc_over_sg": 0.1, "wc_over_sg": 0.12}
                      for z in zs} for n in ns}
    return {"config": {"n": ns, "z": zs, "sources": 5, "eps": 1e-4, "messages": 1000}, "results": res,
            "memory_model_m1e7": model, "spot_check_paper_scale": None}


def _target_axes(fig, value: float) -> list:
    return [ax for ax in fig.axes if any(ln.get_label().startswith("target") and list(ln.get_ydata())[0] == value
                                         for ln in ax.get_lines())]


def test_the_measured_memory_ratio_is_not_drawn_against_the_target_it_is_not_checked_by(tmp_path):
    b = _bench(tmp_path, "--quick")
    plot_dchoices(b, _dchoices_doc())
    fig = b.figures["groupings_memory.png"]
    on_target = _target_axes(fig, 1.3)
    assert len(on_target) == 1
    labels = [ln.get_label() for ln in on_target[0].get_lines()]
    assert all("checked" in lab or lab.startswith("target") for lab in labels), labels
    assert max(max(ln.get_ydata()) for ln in on_target[0].get_lines()) < 2  # the 2.6x measured ratio is elsewhere
    elsewhere = [ln for ax in fig.axes if ax not in on_target for ln in ax.get_lines()]
    assert any(max(ln.get_ydata()) == pytest.approx(2.6) for ln in elsewhere)


def test_fig5_draws_the_checked_points_at_the_paper_scale(tmp_path):
    zs = [1.0, 2.0]
    point = {a: {"measured_over_paper_pkg": 1.1, "measured_over_measured_pkg": 2.4} for a in ("dchoices", "wchoices")}
    model = {"dc_over_pkg": 1.0, "wc_over_pkg": 1.05}
    d = {"config": {"n": [50], "z": zs, "messages": 1000},
         "results": {"50": {str(z): {"model": model, **point} for z in zs}},
         "paper_scale_m1e7": {"50/1.0": point, "50/2.0": point}}
    b = _bench(tmp_path)
    plot_memory(b, d)
    fig = b.figures["groupings_memory_fig5.png"]
    (top,) = _target_axes(fig, 1.3)
    checked = [ln for ln in top.get_lines() if ln.get_label().endswith("(checked)")]
    assert len(checked) == 2 and all(list(ln.get_xdata()) == zs for ln in checked)
    assert all(max(ln.get_ydata()) < 2 for ln in top.get_lines())  # measured / measured PKG: the other panel


@pytest.mark.slow  # runs a reduced benchmark (about 20 s)
def test_bench_groupings_quick_run_writes_json_and_plots(tmp_path):
    from benchmarks.bench_groupings import main

    assert main(["--quick", "--only", "dkg", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "groupings.json").read_text())
    assert doc["benchmark"] == "groupings" and doc["quick"] is True and "dkg" in doc
    assert doc["targets"] and all(set(t) == {"target", "value", "threshold", "holds", "note"} for t in doc["targets"])
    assert doc["plots"] == [str(tmp_path / "groupings_dkg.png")] and (tmp_path / "groupings_dkg.png").exists()


@pytest.mark.slow  # starts a real server and loads it for a few seconds
def test_bench_api_quick_run_against_a_real_server(tmp_path):
    from benchmarks.bench_api import main

    argv = ["--quick", "--seconds", "1", "--soak-seconds", "2", "--clients", "4", "--key-groups", "50",
            "--workers", "1", "--plan-seconds", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "api.json").read_text())
    assert doc["benchmark"] == "api" and doc["quick"] is True
    assert doc["config"]["stats_form"] == "dense"  # what the clients send
    assert doc["plans_40x800"]["requests"] > 0 and doc["plans_40x800"]["errors"] == 0
    assert doc["healthz"]["requests"] > 0 and doc["healthz"]["errors"] == 0
    assert doc["stats_saturation"]["requests"] > 0 and doc["stats_saturation"]["errors"] == 0
    assert doc["stats_at_rate"]["requests"] > 0
    assert doc["soak"]["errors"] == 0 and doc["soak"]["rss_samples"]
    # the four targets: stats throughput, stats p99 at the offered rate, soak errors, soak memory growth
    names = [t["target"] for t in doc["targets"]]
    assert len(names) == 4, names
    assert names[0].startswith("stats throughput") and names[1].startswith("stats p99")
    assert names[2] == "soak: no errors" and names[3].startswith("soak: server RSS growth")
    assert all(isinstance(t["value"], (int, float)) and not isinstance(t["value"], bool) for t in doc["targets"])
    assert [t["value"] for t in doc["targets"]] == [doc["stats_saturation"]["throughput_rps"],
                                                   doc["stats_at_rate"]["p99_ms"], doc["soak"]["errors"],
                                                   doc["soak"]["memory_growth"]]
    assert "mixed" not in doc  # the mixed-load phase is benchmarks.bench_mixed_load's
    assert (tmp_path / "api_soak.png").exists()


def test_a_working_folder_is_removed_after_a_run_and_kept_after_a_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    said: list[str] = []
    with scratch("bench-x-", said.append) as work:
        (work / "server.log").write_text("fine")
    assert not work.exists() and not said
    with pytest.raises(RuntimeError), scratch("bench-x-", said.append) as work:
        (work / "server.log").write_text("what went wrong")
        raise RuntimeError("the run failed")
    assert (work / "server.log").read_text() == "what went wrong"
    assert said == [f"the run failed; its working folder is kept: {work}"]
    assert work.parent == tmp_path
