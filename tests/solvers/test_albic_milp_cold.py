"""``albic-milp`` from a cold process: Flux, the greedy start and the analytic bound run before the MILP solver is
imported, the import never holds the call up, and the plan is never worse than Flux's.

None of these tests depends on the machine's speed: they check the order of the phases and that a call returns
while an import is still under way, not how fast anything is.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from solvers import metrics, registry
from solvers.albic.milp import loader as loader_mod
from solvers.model import Problem
from tests.solvers.test_albic_milp_exact import FRACTIONAL_BYTES_CASE

ROOT = Path(__file__).resolve().parents[2]

COLD = textwrap.dedent("""
    import json, sys
    import solvers.albic.milp as milp
    from solvers import metrics, registry
    from solvers.model import Problem

    seen = {}
    bound = milp.analytic_bound

    def spy(*args, **kwargs):  # phase 2 runs after Flux and the greedy start
        seen["solver_loaded_at_bound"] = "ortools" in sys.modules
        return bound(*args, **kwargs)

    milp.analytic_bound = spy
    p = Problem.from_dict(json.loads(sys.argv[1]))
    plan = registry.solve("albic-milp", p, time_limit=float(sys.argv[2]))
    flux = registry.solve("flux", p, time_limit=10.0)
    print(json.dumps({"plan": metrics.load_distance(p, plan.assignment),
                      "moves": metrics.migrations(p, plan.assignment),
                      "flux": metrics.load_distance(p, flux.assignment), "details": plan.details, **seen}))
""")


@pytest.mark.parametrize("time_limit", [0.01, 1.0])
def test_fresh_process_runs_flux_greedy_and_bound_before_the_solver_import(time_limit):
    out = subprocess.run([sys.executable, "-c", COLD, json.dumps(FRACTIONAL_BYTES_CASE), str(time_limit)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, check=True)
    res = json.loads(out.stdout)
    assert res["solver_loaded_at_bound"] is False
    assert res["moves"] > 0 and res["plan"] <= res["flux"] + 1e-9
    details = res["details"]
    assert {"wall_seconds", "cpu_seconds", "ortools", "flux_seconds", "first_plan_seconds"} <= set(details)
    if time_limit < 0.35:  # the import (0.3 s) could not end in time: never started
        assert details["ortools"] == "not imported (too little time)"
        return
    assert details["ortools"] in ("imported", "importing (not used)")   # started after the bound, in the background
    assert details["import_start_seconds"] >= details["first_plan_seconds"]


@pytest.fixture
def slow_solver_import(tmp_path, monkeypatch):
    """The CP-SAT backend's modules replaced by one whose import takes 20 s, started however little time is left (on
    a loaded machine Flux and the bound can use enough of the limit that the import would be declined: not the
    case under test)."""
    (tmp_path / "albic_slow_solver.py").write_text("import time\ntime.sleep(20)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(loader_mod, "IMPORT_SECONDS", -math.inf)
    monkeypatch.setitem(loader_mod.MODULES, "cpsat", ("albic_slow_solver",))
    monkeypatch.setattr(loader_mod, "_LOADERS", {})


def test_a_slow_solver_import_does_not_hold_the_call_up(slow_solver_import):
    p = Problem.from_dict(json.loads(json.dumps(FRACTIONAL_BYTES_CASE)))
    t0 = time.perf_counter()
    plan = registry.solve("albic-milp", p, time_limit=0.5)
    assert time.perf_counter() - t0 < 10.0   # the import alone takes 20 s
    assert plan.details["ortools"] == "importing (not used)"
    flux = registry.solve("flux", p, time_limit=10.0)
    assert metrics.load_distance(p, plan.assignment) <= metrics.load_distance(p, flux.assignment) + 1e-9
    assert plan.lower_bound is not None and plan.lower_bound <= 58.6 + 1e-6


def test_a_failed_solver_import_is_raised(monkeypatch):
    monkeypatch.setitem(loader_mod.MODULES, "cpsat", ("albic_no_such_solver_module",))
    monkeypatch.setattr(loader_mod, "_LOADERS", {})
    p = Problem.from_dict(json.loads(json.dumps(FRACTIONAL_BYTES_CASE)))   # its proof needs the exact model
    with pytest.raises(ModuleNotFoundError):
        registry.solve("albic-milp", p, time_limit=2.0)
