"""Every settings error of ``rebalancer serve`` is one line on stderr that names the variable, never its (secret)
value, and exit status 2: a value that is not JSON, a scoped token's bad field, a database URL's password."""

from __future__ import annotations

import os

import pytest

from tests.helpers.cli import run_cli

SECRET = "s3cr3t-t0ken"


def serve(*args: str, **env: str):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REBALANCER_")}
    return run_cli("serve", "--port", "0", *args, env={**clean, **env})


def one_line(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    return lines[0]


@pytest.mark.parametrize("scopes,expected", [
    ("not json", "setting REBALANCER_TOKEN_SCOPES: not valid JSON"),
    (f'{{"{SECRET}": {{"access": "root"}}}}', "setting REBALANCER_TOKEN_SCOPES (a token's access): Input should be"),
    (f'{{"{SECRET}": 5}}', "setting REBALANCER_TOKEN_SCOPES (a token): Input should be"),
])
def test_bad_token_scopes_are_one_line_without_the_token(scopes: str, expected: str) -> None:
    line = one_line(serve(REBALANCER_TOKEN_SCOPES=scopes))
    assert line.startswith(f"rebalancer serve: error: {expected}"), line
    assert SECRET.lower() not in line.lower(), line


def test_a_database_password_is_never_printed() -> None:
    for url in ("postgresql://user:hunter2@127.0.0.1:1/db", "nosuchdriver://user:hunter2@host/db"):
        line = one_line(serve("--database", url))
        assert "--database" in line and "hunter2" not in line and "user:***@" in line, line


def test_an_unknown_variable_without_a_close_name_points_to_the_documentation() -> None:
    name = "REBALANCER_" + "Q" * 40
    line = one_line(serve(**{name: "1"}))
    assert f"unknown setting {name} (see the configuration page of the documentation)" in line, line
