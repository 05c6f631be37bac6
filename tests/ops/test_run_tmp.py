"""A test run leaves its temporary directory as it found it (:mod:`tests.helpers.temp_root`): a nested run, in one
process (``-n 0``, as ``pytest`` alone runs), of a test that kills a server with kill -9 (the killed server's
multiprocessing folder stays behind) and solves in process (the run's own multiprocessing folder is removed at its
exit): afterwards nothing but pytest's own ``pytest-of-<user>`` folder is left, and no traceback was printed."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers import temp_root

ROOT = Path(__file__).resolve().parents[2]
#: a kill -9 of a server process, and an in-process server that solves
TESTS = ["tests/api/test_api_restart.py::test_kill9_restart_keeps_everything",
         "tests/api/test_api_flow.py::test_full_flow"]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux paths")]


def test_a_passing_run_leaves_the_temporary_directory_as_it_found_it() -> None:
    base = Path(tempfile.mkdtemp(prefix="rb-run-", dir="/tmp"))  # short: sockets are made under it
    try:
        env = {k: v for k, v in os.environ.items()
               if k not in (temp_root.ENV, temp_root.PARENT_ENV, "SPARK_SUBMIT_OPTS", "PYTEST_XDIST_WORKER")}
        env["TMPDIR"] = str(base)
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *TESTS],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
        printed = out.stdout + out.stderr
        assert out.returncode == 0, printed[-3000:]
        assert "Traceback" not in printed, printed[-3000:]
        assert sorted(p.name for p in base.iterdir()) == [f"pytest-of-{getpass.getuser()}"], printed[-2000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
