"""benchmarks.bench_mixed_load runs end to end against a real server (tiny sizes: what the JSON holds, not speed)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow  # starts a real server and loads it for a few seconds
def test_bench_mixed_load_quick_run_against_a_real_server(tmp_path):
    from benchmarks.bench_mixed_load import main

    argv = ["--quick", "--scale", "400", "--seconds", "1", "--clients", "4", "--key-groups", "50", "--rate", "20",
            "--probe-rate", "5", "--whatif", "1", "--workers", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "mixed_load.json").read_text())
    assert set(doc["mixed"]["heavy"]) == {"plan", "what_if_big", "put_200k", "what_if_0"}
    for phase in ("baseline", "mixed"):
        assert doc[phase]["stats"]["requests"] > 0 and doc[phase]["healthz"]["requests"] > 0
        assert doc[phase]["bare"]["requests"] > 0 and doc[phase]["bare"]["errors"] == 0  # the server doing nothing
        lag = doc[phase]["event_loop_lag"]  # the server's own samples, every 0.1 s of the phase
        assert lag["samples"] >= 1 and lag["samples"] >= lag["over_25ms"] >= lag["over_50ms"] >= 0
    assert set(doc["side_by_side (baseline, mixed)"]["healthz p99_ms"]) and len(doc["targets"]) == 4
    assert set(doc["p99_slowdown (mixed / baseline)"]) == {"stats", "bare"}
    assert (tmp_path / "mixed_load.png").exists()
