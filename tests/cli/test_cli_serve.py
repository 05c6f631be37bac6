"""``rebalancer serve`` refuses bad settings with one line and exit 2 before it starts listening (in process:
the command returns before it would listen)."""

import os

import pytest

from tests.helpers.cli import run_cli


def serve(*args, env=None):
    return run_cli("serve", *args, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args,env,needle", [
    (["--port", "70000"], None, "--port"),
    (["--port", "0", "--database", "foo://bar"], None, "not a usable database URL"),
    (["--port", "0", "--database", "sqlite:////proc/no-such-dir/x.db"], None, "cannot open"),
    (["--port", "0"], {"REBALANCER_MAX_TIME_LIMIT_S": "abc"}, "REBALANCER_MAX_TIME_LIMIT_S"),
])
def test_bad_settings_are_one_line_and_exit_2(args, env, needle):
    r = serve(*args, env=env)
    assert r.returncode == 2, (r.returncode, r.stderr[-500:])
    assert "Traceback" not in r.stderr
    assert needle in r.stderr.strip().splitlines()[-1]
