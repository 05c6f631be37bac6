"""Routing throughput of a Gedik partitioning function (an explicit hash of the tracked keys, the consistent hash
for the others: §4.1.3) through ``rebalancer partition route`` and in process, for :mod:`benchmarks.bench_gedik`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def measure_route(keys_count: int, tmp: Path, reps: int = 3) -> dict:
    """Throughput of ``rebalancer partition route`` (a subprocess, stdin → stdout), keys/s incl. start-up."""
    from rebalancer_client.wire import dump
    from solvers.gedik import build_document

    h = np.sum(1.0 / np.arange(1, 10**6 + 1))
    freqs = {f"k{i}": 1.0 / (i * h) for i in range(1, 3001)}
    doc = build_document({"algorithm": "readj", "channels": 10, "frequencies": freqs, "domain_size": 10**6})
    fpath = tmp / "fn.json"
    fpath.write_text(json.dumps(dump(doc)))
    rng = np.random.default_rng(0)
    ranks = rng.zipf(1.05, keys_count) % 10**6
    kpath = tmp / "keys.txt"
    kpath.write_bytes(("\n".join(f"k{r}" for r in ranks.tolist()) + "\n").encode())
    import resource

    best = None
    for _ in range(reps):
        with open(kpath, "rb") as fin:
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "cli.main", "partition", "route", "--function", str(fpath)],
                               stdin=fin, capture_output=True,
                               cwd=Path(__file__).resolve().parents[1])
            dt = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.decode())
        assert r.stdout.count(b"\n") == keys_count
        cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        if best is None or dt < best[0]:
            best = (dt, cpu)
    # in-process lookup only (hash + explicit + ring), no I/O
    from solvers.gedik import load_function
    fn = load_function(doc)
    data = kpath.read_bytes()
    t0 = time.perf_counter()
    fn.route_buffer(data)
    inproc = time.perf_counter() - t0
    return {"keys": keys_count, "cli_seconds_best": best[0], "cli_keys_per_second": keys_count / best[0],
            "cli_cpu_seconds": best[1], "cli_keys_per_cpu_second": keys_count / best[1],
            "in_process_keys_per_second": keys_count / inproc,
            "note": "wall time includes interpreter start-up and reading/writing pipes; CPU = user+sys of the child"}
