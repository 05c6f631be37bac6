"""The CLI in process (``cli.main.main(argv)``): no silent omissions, and ``--param time_limit`` as listed."""

from __future__ import annotations

import json

import pytest

from cli import main as cli


def test_a_command_module_that_does_not_import_is_an_error(monkeypatch):
    # issue 11 §5: build_parser skipped a command whose module was missing ("not built yet")
    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "cli.ghost_command"])
    with pytest.raises(ModuleNotFoundError):
        cli.build_parser()


@pytest.fixture
def problem(tmp_path):
    f = tmp_path / "p.json"
    kgs = [{"id": "k0", "node": "a", "load": 3}, {"id": "k1", "node": "a", "load": 1}]
    f.write_text(json.dumps({"nodes": [{"id": "a"}, {"id": "b"}], "key_groups": kgs}))
    return str(f)


def test_algorithms_lists_time_limit_and_plan_accepts_it_as_a_param(problem, capsys):
    # issue 14.3: `rebalancer algorithms` listed time_limit, `--param time_limit=5` was refused as unknown
    assert cli.main(["algorithms"]) == 0
    assert "time_limit" in capsys.readouterr().out
    assert cli.main(["plan", "--algorithm", "flux", "--input", problem, "--param", "time_limit=0.5"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["algorithm"] == "flux" and plan["metrics"]["migrations"] == 1


@pytest.mark.parametrize("argv, needle", [
    (["--param", "time_limit=0"], "time_limit"),
    (["--param", "time_limit=soon"], "time_limit"),
    (["--time-limit", "2", "--param", "time_limit=1"], "disagree"),
])
def test_bad_or_conflicting_time_limits(problem, capsys, argv, needle):
    assert cli.main(["plan", "--algorithm", "flux", "--input", problem, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_evaluate_prints_the_evaluation_document(problem, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"assignment": {"k0": "b", "k1": "a"}}))
    assert cli.main(["evaluate", "--input", problem, "--plan", str(plan)]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert list(ev) == ["before", "after", "migrations", "migration_bytes", "moves", "within_budget"]
