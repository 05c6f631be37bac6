"""The client-only install: the rebalancer-client wheel in a fresh virtualenv brings the client (and httpx) and
nothing of the server — no top-level api/controller/solvers/cli/evaluation, no numpy, no ``rebalancer`` command."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.helpers.server import ThreadServer

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("api", "controller", "solvers", "cli", "evaluation", "clients")


@pytest.mark.slow
def test_the_client_wheel_installs_the_client_alone(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(ROOT / "clients" / "python")], check=True)
    (wheel,) = wheels.glob("rebalancer_client-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-c", str(ROOT / "constraints.txt"), str(wheel)], check=True)
    with ThreadServer(f"sqlite:///{tmp_path / 'c.db'}").start() as srv:
        probe = subprocess.run([str(py), "-c", (
            "import importlib.util, sys, sysconfig, os\n"
            "import rebalancer_client\n"
            "from rebalancer_client import RebalancerClient, contract\n"
            "site = sysconfig.get_paths()['purelib']\n"
            f"print(sorted(n for n in {SERVER_PACKAGES!r} if os.path.exists(os.path.join(site, n))))\n"
            "print(importlib.util.find_spec('numpy') is None, 'pydantic' in sys.modules)\n"
            f"rc = RebalancerClient({srv.url!r})\n"
            "job = rc.put_job('wheel', nodes=['a', 'b'], operators=[{'id': 'agg', 'key_groups': 4}])\n"
            "print(type(job).__name__, job.placement)\n")],
            capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    top_level, deps, job = probe.stdout.splitlines()
    assert job == "JobState [0, 0, 1, 1]", job  # a typed document read from a real server
    assert top_level == "[]", f"server packages installed by the client wheel: {top_level}"
    assert deps == "True False", "the client install brought numpy, or imported pydantic"
    assert not (env_dir / "bin" / "rebalancer").exists(), "the client install brings the server's command"
