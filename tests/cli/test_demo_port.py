"""``make demo DEMO_PORT=N`` starts the demo's controller on port N (default: a free port)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx

from benchmarks.spark_demo import start_controller
from tests.helpers.server import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_passes_the_port() -> None:
    dry = subprocess.run(["make", "-n", "demo", "DEMO_PORT=9123"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "benchmarks.spark_demo --port 9123" in dry.stdout, dry.stdout
    default = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "--port" not in default.stdout.splitlines()[-1], default.stdout


def test_the_demo_controller_listens_on_the_given_port(tmp_path: Path) -> None:
    port = free_port()
    server = start_controller(tmp_path / "demo.db", port)
    try:
        assert server.url.endswith(f":{port}")
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
    finally:
        server.stop()
