"""The grid's calibration (``benchmarks.albic_milp_grid.calibrate``): certified optima of named instances from the
independent exact reference, checked here against brute force on instances small enough to enumerate, and what the
grid's summary makes of them (the planner's bound against the optimum)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import albic_milp_grid as grid
from solvers import metrics
from tests.solvers.albic_exact_reference import brute_force_optimum

#: 3 nodes × 3 key groups each, budgets 1 and 2: a few hundred plans, enumerated exactly
KEYS = ["3x9/1/0.3/0", "3x9/2/0.5/1"]


def _calibrate(path: Path, keys: list[str] = KEYS) -> dict[str, list[str]]:
    return grid.calibrate(30.0, lambda _: None, path, keys, command="test")


def test_certified_optima_equal_brute_force_and_become_the_best_known(tmp_path):
    path = tmp_path / "best.json"
    out = _calibrate(path)
    assert out["proven"] == KEYS and not out["unproven"] and not out["refused"]
    best = grid.load_best_known(path)           # the stored plans check out (budget, distance)
    for key in KEYS:
        p = grid.instance(key)
        opt = float(brute_force_optimum(p))
        exact = best[key]["exact"]
        assert exact["optimum"] == pytest.approx(opt, rel=1e-9, abs=1e-12)
        assert exact["lo"] <= opt + 1e-9
        assert best[key]["best"] == pytest.approx(opt, rel=1e-9, abs=1e-12)
        assert metrics.migrations(p, grid.plan_of(p, best[key]["moves"])) <= p.max_migrations


def test_each_entry_names_the_command_for_its_own_key(tmp_path):
    path = tmp_path / "best.json"
    command = f"python -m benchmarks.bench_albic_milp --calibrate --keys {' '.join(KEYS)} --out {tmp_path}"
    grid.calibrate(30.0, lambda _: None, path, KEYS, command=command)
    doc = json.loads(path.read_text())["instances"]
    for key in KEYS:
        mine = f"python -m benchmarks.bench_albic_milp --calibrate --keys {key} --out {tmp_path}"
        assert doc[key]["exact"]["by"] == mine and doc[key]["by"] == f"{mine} (exact reference)"


def test_a_best_known_below_the_certified_optimum_is_refused(tmp_path):
    path = tmp_path / "best.json"
    key = KEYS[0]
    p = grid.instance(key)
    assert metrics.load_distance(p, p.current) > 0
    # a stored "best" of 0 that no plan reaches: the reference's optimum contradicts it
    path.write_text(json.dumps({"about": "test", "instances": {key: {"best": 0.0, "moves": [], "by": "hand"}}}))
    out = _calibrate(path, [key])
    assert out["refused"] == [key]
    assert "exact" not in json.loads(path.read_text())["instances"][key]


def test_the_summary_sets_the_planners_bound_against_the_optimum(tmp_path):
    path = tmp_path / "best.json"
    _calibrate(path)
    best = grid.load_best_known(path)
    rows = [grid.grid_row(key, [0.2]) for key in KEYS]
    cal = grid.summarise(rows, best)["per_limit"]["0.2"]["calibration"]
    assert [c["key"] for c in cal] == KEYS
    for c in cal:
        assert c["bound"] <= c["optimum"] + 1e-9 * max(1.0, c["optimum"])     # a valid bound
        assert c["plan"] >= c["optimum"] - 1e-9 * max(1.0, c["optimum"])      # no plan beats the optimum
        assert c["optimum_minus_bound"] == pytest.approx(c["optimum"] - c["bound"])


def test_an_optimum_that_contradicts_its_stored_plan_is_dropped_on_load(tmp_path, capsys):
    path = tmp_path / "best.json"
    _calibrate(path, [KEYS[0]])
    doc = json.loads(path.read_text())
    doc["instances"][KEYS[0]]["exact"]["lo"] = doc["instances"][KEYS[0]]["best"] * 2 + 1   # above the checked plan
    path.write_text(json.dumps(doc))
    best = grid.load_best_known(path)
    assert KEYS[0] in best and "exact" not in best[KEYS[0]]
    assert "below its certified optimum" in capsys.readouterr().out


def test_the_command_exits_1_on_a_refusal_and_2_naming_a_bad_key(tmp_path, capsys):
    from benchmarks.bench_albic_milp import main

    path = tmp_path / "best.json"
    path.write_text(json.dumps({"about": "test", "instances": {KEYS[0]: {"best": 0.0, "moves": [], "by": "hand"}}}))
    common = ["--calibrate", "--seconds", "30", "--best-known-file", str(path), "--out", str(tmp_path / "out")]
    assert main([*common, "--keys", KEYS[0]]) == 1
    with pytest.raises(SystemExit) as e:
        main([*common, "--keys", "3x9/1/zero/0"])
    assert e.value.code == 2
    assert "'3x9/1/zero/0' is not NODESxKGS/BUDGET/VARIES/SEED" in capsys.readouterr().err
