"""The CLI end to end (in process, :func:`tests.helpers.cli.run_cli`): generate -> plan -> evaluate, and clean
errors for bad input."""

import json

import pytest

from tests.helpers.cli import run_cli as rb


def test_generate_plan_evaluate(tmp_path):
    prob = tmp_path / "p.json"
    r = rb("generate", "albic-synthetic", "--nodes", "20", "--max-migrations", "10", "--seed", "3",
           "--output", str(prob))
    assert r.returncode == 0, r.stderr
    doc = json.loads(prob.read_text())
    assert len(doc["nodes"]) == 20 and len(doc["key_groups"]) == 400
    r = rb("plan", "--algorithm", "flux", "--input", str(prob))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)  # stdout holds the document and nothing else
    assert set(plan["assignment"]) == {kg["id"] for kg in doc["key_groups"]}
    assert 0 < len(plan["moves"]) <= 10
    assert plan["metrics"]["after"]["load_distance"] < plan["metrics"]["before"]["load_distance"]
    assert plan["solver"]["status"] == "heuristic"
    planf = tmp_path / "plan.json"
    planf.write_text(r.stdout)
    r = rb("evaluate", "--input", str(prob), "--plan", str(planf))
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    assert ev["after"]["load_distance"] == plan["metrics"]["after"]["load_distance"]
    assert ev["within_budget"] is True


def one_line_error(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stdout == ""
    return r.stderr


def test_invalid_problem_exit_2(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps({"nodes": [{"id": "a"}], "key_groups": [{"id": "k", "node": "a", "load": -1}]}))
    err = one_line_error(rb("plan", "--algorithm", "flux", "--input", str(f)))
    assert "key_groups[0].load" in err


@pytest.mark.parametrize("content,needle", [("{not json", "not valid JSON"), (None, "not found")])
def test_unreadable_input(tmp_path, content, needle):
    f = tmp_path / "x.json"
    if content is not None:
        f.write_text(content)
    assert needle in one_line_error(rb("plan", "--algorithm", "flux", "--input", str(f)))


def test_unknown_algorithm_and_param(tmp_path):
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"nodes": [{"id": "a"}], "key_groups": []}))
    assert "unknown algorithm" in one_line_error(rb("plan", "--algorithm", "magic", "--input", str(f)))
    assert "params.x" in one_line_error(rb("plan", "--algorithm", "flux", "--input", str(f), "--param", "x=1"))
    assert "KEY=VALUE" in one_line_error(rb("plan", "--algorithm", "flux", "--input", str(f), "--param", "x"))


def test_evaluate_rejects_a_plan_of_another_problem(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert rb("generate", "albic-synthetic", "--nodes", "4", "--output", str(a)).returncode == 0
    assert rb("generate", "albic-synthetic", "--nodes", "5", "--output", str(b)).returncode == 0
    r = rb("plan", "--algorithm", "flux", "--input", str(a))
    plan = tmp_path / "plan.json"
    plan.write_text(r.stdout)
    err = one_line_error(rb("evaluate", "--input", str(b), "--plan", str(plan)))
    assert "plan.assignment" in err


def test_algorithms_lists_flux():
    r = rb("algorithms", "--json")
    assert r.returncode == 0
    assert "flux" in {a["name"] for a in json.loads(r.stdout)}


def test_generator_validation():
    err = one_line_error(rb("generate", "skewed", "--nodes", "3", "--key-groups", "10", "--removing", "3"))
    assert "removing" in err


@pytest.mark.parametrize("gen", [["collocation", "--nodes", "6", "--operators", "4"], ["real-job-2", "--nodes", "4"]])
def test_collocation_generators_feed_albic(tmp_path, gen):
    f = tmp_path / "c.json"
    assert rb("generate", *gen, "--output", str(f)).returncode == 0
    doc = json.loads(f.read_text())
    assert doc["communication"] and doc["communication_cost"] > 0
    r = rb("plan", "--algorithm", "albic", "--input", str(f), "--time-limit", "0.5")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["metrics"]["migrations"] <= doc["budget"]["max_migrations"]
    assert plan["metrics"]["after"]["collocation_factor"] >= plan["metrics"]["before"]["collocation_factor"]


@pytest.mark.parametrize("mutation, field", [
    (lambda d: d["key_groups"][0].update(state_byte=100), "key_groups[0].state_byte"),  # a typo, silently 0 bytes
    (lambda d: d.update(bugdet={"max_migrations": 0}), "bugdet"),  # the budget ignored: any number of moves
    (lambda d: d["nodes"][0].update(id="n" * 300) or d["key_groups"][0].update(node="n" * 300), "nodes[0].id"),
], ids=["typo", "unknown-top-level", "long-id"])
def test_plan_refuses_what_the_api_refuses(tmp_path, mutation, field):
    doc = {"nodes": [{"id": "a"}, {"id": "b"}], "key_groups": [{"id": "k", "node": "a", "load": 1.0}]}
    mutation(doc)
    f = tmp_path / "p.json"
    f.write_text(json.dumps(doc))
    assert field in one_line_error(rb("plan", "--algorithm", "flux", "--input", str(f)))


@pytest.mark.parametrize(("started", "limit", "expected"), [(0.6, 1.0, 0.35), (0.6, 0.2, 0.05), (0.0, 2.0, 1.95)])
def test_the_time_limit_counts_from_the_process_start(tmp_path, monkeypatch, started, limit, expected):
    """``plan --time-limit T`` is the whole command's limit: the solver gets what start-up and reading left
    (keeping a little for writing the plan), and at least a minimum."""
    import cli.plan
    from solvers import registry

    prob = tmp_path / "p.json"
    assert rb("generate", "albic-synthetic", "--nodes", "4", "--seed", "1", "--output", str(prob)).returncode == 0
    given: list[float] = []
    solve = registry.solve

    def recording(name, problem, time_limit, **params):
        given.append(time_limit)
        return solve(name, problem, time_limit=time_limit, **params)

    monkeypatch.setattr(cli.plan, "seconds_since_start", lambda: started)
    monkeypatch.setattr(registry, "solve", recording)
    r = rb("plan", "--algorithm", "flux", "--input", str(prob), "--time-limit", str(limit))
    assert r.returncode == 0, r.stderr
    assert given == [pytest.approx(expected)]


def test_seconds_since_start_counts_this_process():
    from cli.common import seconds_since_start

    assert 0.0 < seconds_since_start() < 24 * 3600  # the test process started before this test


FRESH_PLAN = """
import json, sys
from cli.main import main
status = main(["plan", "--algorithm", "albic-milp", "--input", sys.argv[1], "--time-limit", "0.2", "--output",
               sys.argv[2]])
print(json.dumps({"status": status, "loaded": [m for m in ("scipy.sparse", "ortools") if m in sys.modules]}))
"""


@pytest.mark.parametrize("communication", [False, True])
def test_a_fresh_plan_imports_scipy_only_for_communication(tmp_path, communication):
    """``plan`` in a fresh process: scipy.sparse (0.2 s of start-up) only for a problem with communication edges,
    and with 0.2 s OR-tools (0.3 s) not at all."""
    import subprocess
    import sys
    from pathlib import Path

    doc = {"nodes": [{"id": "a"}, {"id": "b"}],
           "key_groups": [{"id": f"k{i}", "node": "a", "load": 1.0 + i} for i in range(4)]}
    if communication:
        doc.update(communication=[{"src": "k0", "dst": "k1", "rate": 1.0}], communication_cost=0.1)
    prob, out = tmp_path / "p.json", tmp_path / "plan.json"
    prob.write_text(json.dumps(doc))
    r = subprocess.run([sys.executable, "-c", FRESH_PLAN, str(prob), str(out)], capture_output=True, text=True,
                       timeout=120, cwd=Path(__file__).resolve().parents[2], check=True)
    res = json.loads(r.stdout)
    assert res == {"status": 0, "loaded": ["scipy.sparse"] if communication else []}
    details = json.loads(out.read_text())["details"]
    assert details["ortools"] in ("not needed", "not imported (too little time)")
    assert {"startup_seconds", "startup_cpu_seconds", "wall_seconds", "cpu_seconds"} <= set(details)


def test_a_fresh_plan_ends_without_teardown_and_loses_no_output(tmp_path):
    """Run as a process's own command, ``plan`` ends with ``os._exit`` after flushing (no interpreter teardown): its
    plan, piped to stdout, arrives whole; an error still says why and exits 2. In process, ``main`` returns (every
    in-process CLI test)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    doc = {"nodes": [{"id": "a"}, {"id": "b"}],
           "key_groups": [{"id": f"k{i}", "node": "a", "load": 1.0 + i} for i in range(3)]}
    prob = tmp_path / "p.json"
    prob.write_text(json.dumps(doc))
    cmd = [sys.executable, "-m", "cli.main", "plan", "--algorithm", "flux", "--input", str(prob)]
    root = Path(__file__).resolve().parents[2]
    # a pipe, block-buffered (not PYTHONUNBUFFERED), and a plan smaller than the buffer (a bigger write goes through
    # at once): without the flush before os._exit it would be lost
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert len(plan["assignment"]) == 3 and "startup_seconds" in plan["details"]
    bad = subprocess.run([*cmd[:-1], str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=120,
                         cwd=root, env=env)
    assert bad.returncode == 2 and "problem file not found" in bad.stderr and "Traceback" not in bad.stderr
