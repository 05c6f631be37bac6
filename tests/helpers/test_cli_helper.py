"""run_cli behaves like ``subprocess.run([rebalancer, …], capture_output=True)``: exit statuses, separate streams,
stdin, and an environment and working directory that are restored afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_document_on_stdout_errors_on_stderr(tmp_path: Path):
    out = tmp_path / "p.json"
    r = run_cli("generate", "albic-synthetic", "--nodes", "3", "--seed", "1", "--output", str(out))
    assert r.returncode == 0 and r.stdout == "", r.stderr
    assert json.loads(out.read_text())["nodes"]
    bad = run_cli("plan", "--algorithm", "flux", "--input", str(tmp_path / "missing.json"))
    assert bad.returncode == 2 and bad.stdout == "" and "rebalancer plan: error:" in bad.stderr
    assert run_cli("plan", "--no-such-option").returncode == 2  # argparse's SystemExit


def test_same_result_as_a_subprocess(tmp_path: Path):
    args = ("simulate", "--grouping", "pkg", "--workers", "4", "--keys", "50", "--messages", "2000", "--seed", "1",
            "--json", "--no-progress")
    inproc = run_cli(*args)
    sub = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert inproc.returncode == sub.returncode == 0, (inproc.stderr, sub.stderr)
    a, b = json.loads(inproc.stdout), json.loads(sub.stdout)
    for doc in (a, b):
        doc.pop("seconds", None)
        doc.pop("routing_rate", None)
        doc.pop("routing_seconds", None)
    assert a == b


def test_stdin_bytes_env_and_cwd_are_restored(tmp_path: Path):
    before_env, before_cwd = dict(os.environ), os.getcwd()
    r = run_cli("serve", "--port", "0", env={**os.environ, "REBALANCER_MAX_TIME_LIMIT_S": "abc"}, cwd=tmp_path,
                stdin=b"ignored", text=False)
    assert r.returncode == 2 and isinstance(r.stderr, bytes) and b"REBALANCER_MAX_TIME_LIMIT_S" in r.stderr
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd
