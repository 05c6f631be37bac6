"""The CLI in process (``cli.main.main(argv)``): no silent omissions, and ``--param time_limit`` as listed."""

from __future__ import annotations

import json

import pytest

from cli import main as cli


def test_a_command_module_that_does_not_import_is_an_error(monkeypatch):
    # a command whose module does not import is an error, not a command quietly left out
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
    # `rebalancer algorithms` lists time_limit, and `--param time_limit=5` is accepted
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


def test_version(capsys):
    # `rebalancer --version`
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("rebalancer ")


def _options(parser):
    """(subcommand path, action) of every option of every (sub)command."""
    import argparse

    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [(f"{name} {p}".strip(), a) for p, a in _options(sub)]
        elif action.option_strings and action.dest not in ("help", "version"):
            out.append(("", action))
    return out


def test_every_option_has_help_and_states_its_default():
    # help states the default of every option (ArgumentDefaultsHelpFormatter)
    parser = cli.build_parser()
    formatter = cli.HelpFormatter("rebalancer")
    missing = []
    for where, action in _options(parser):
        text = formatter._get_help_string(action) or ""
        if not text:
            missing.append(f"{where} {action.option_strings[0]}: no help")
        elif action.default is not None and action.default is not False and "default" not in text.lower():
            missing.append(f"{where} {action.option_strings[0]}: default not stated")
    owned_elsewhere = ("serve ", "spark-stats ")  # cli/serve.py and cli/spark.py belong to other helpers
    assert [m for m in missing if not m.startswith(owned_elsewhere)] == []
