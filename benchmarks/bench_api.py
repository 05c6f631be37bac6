"""Benchmark of the controller's HTTP API: ``python -m benchmarks.bench_api [--quick]``.

Starts a real server (``python -m cli.main serve``, :class:`tests.helpers.server.ServerProcess`) on 127.0.0.1 with a
fresh SQLite database and measures, in one run, with the asyncio keep-alive client of :mod:`benchmarks.api_load`
(so that the load generator costs little CPU on a 2-core machine):

1. ``GET /healthz`` — the baseline: 50 concurrent clients, closed loop;
2. ``POST /v1/jobs/{id}/stats`` with 1,000 key groups per post, 50 concurrent clients (one job each), as arrays in
   the job's key-group order (what the Python client and the Spark driver send; ``--stats-form ids``: by key group
   id):
   a. saturation (closed loop): the throughput the server sustains, with its latencies;
   b. at the target rate (open loop, 200 posts/s spread over the 50 clients): p50/p99 latency measured from the
      scheduled send time (no coordinated omission);
3. ``POST /v1/plans`` for a 40-node / 800-key-group problem (ALBIC §5.1 synthetic; albic-milp when available);
4. the soak: stats posts at 50 requests/s for ``--soak-seconds`` (default 60; a full soak is 600), counting
   errors and sampling the server's resident memory (growth = last sample vs. the sample after the first 10 %).
The same under mixed load (big plans, what-ifs, registrations at once): :mod:`benchmarks.bench_mixed_load`.
All load goes to 127.0.0.1 only and every loop is bounded by a duration and a request cap. Writes
``<out>/api.json`` (and ``api_soak.png`` when matplotlib is present; :mod:`benchmarks.harness`). Progress goes to
stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from benchmarks.api_load import Conn, Request, closed_loop, open_loop
from benchmarks.harness import Bench, scratch
from tests.helpers.server import ServerProcess

R = TypeVar("R")

TARGET_STATS_RPS = 200.0
TARGET_P99_MS = 100.0
TARGET_MEM_GROWTH = 0.10


# ---------------------------------------------------------------------- server process
def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (seconds)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def with_cpu(pid: int, fn: Callable[[], R]) -> R:
    """Run ``fn()`` and add the server's CPU milliseconds per request to its summary."""
    c0 = cpu_seconds(pid)
    res = fn()
    summary: dict[str, Any] = res[0] if isinstance(res, tuple) else res  # type: ignore[assignment]
    used = cpu_seconds(pid) - c0
    if summary["requests"]:
        summary["server_cpu_ms_per_request"] = round(1000 * used / summary["requests"], 3)
        summary["server_cpu_share"] = round(used / summary["seconds"], 3)
    return res


def group_rss(pgid: int) -> int:
    total = 0
    for p in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            total += rss_bytes(int(p.name)) if p.name.isdigit() and os.getpgid(int(p.name)) == pgid else 0
    return total


def wait_workers(server: ServerProcess, workers: int, timeout: float = 120.0) -> None:
    """Until ``/readyz`` reports ``workers`` solver workers ready (their imports done), so that no phase measures
    a worker's start."""
    deadline = time.monotonic() + timeout
    with server.client(timeout=10) as c:
        while time.monotonic() < deadline:
            r = c.get("/readyz")
            if r.status_code == 200 and r.json()["solver_pool"]["ready_workers"] >= workers:
                return
            time.sleep(0.1)
    raise RuntimeError(f"{workers} solver workers were not ready after {timeout:.0f} s: {r.text[:300]}")


# ---------------------------------------------------------------------- workloads
def make_jobs(port: int, n_jobs: int, key_groups: int, nodes: int) -> list[str]:
    async def go() -> list[str]:
        c, ids = Conn(port), []
        for j in range(n_jobs):
            jid = f"bench-{j}"
            body = json.dumps({"nodes": [f"w{i}" for i in range(nodes)],
                               "operators": [{"id": "agg", "key_groups": key_groups}],
                               "window_batches": 5, "algorithm": "flux"}).encode()
            st, data = await c.request("PUT", f"/v1/jobs/{jid}", body)
            if st not in (200, 201):
                raise RuntimeError(f"PUT {jid}: {st} {data[:200]!r}")
            ids.append(jid)
        await c.close()
        return ids
    return asyncio.run(go())


def stats_bodies(key_groups: int, variants: int, seed: int = 0, form: str = "dense") -> list[bytes]:
    """Pre-encoded statistics after ``"batch_id":<b>,"epoch":0,`` (the client must not be the bottleneck; the batch
    id is spliced in): ``dense``, the arrays in the job's key-group order; ``ids``, by key group id."""
    rng, out = np.random.default_rng(seed), []
    for _ in range(variants):
        loads = rng.gamma(2.0, 50.0, size=key_groups)
        if form == "dense":
            body = ('"load":[' + ",".join(f"{x:.4f}" for x in loads) + '],"state_bytes":['
                    + ",".join([str(1 << 20)] * key_groups) + "]")
        else:
            body = '"key_groups":[' + ",".join(f'{{"id":"agg/{k}","load":{loads[k]:.4f},"state_bytes":{1 << 20}}}'
                                               for k in range(key_groups)) + "]"
        out.append(body.encode())
    return out


class StatsWorkload:
    def __init__(self, jobs: list[str], bodies: list[bytes], first_batch: int):
        self.jobs, self.bodies, self.next_batch = jobs, bodies, [first_batch] * len(jobs)

    def __call__(self, i: int, k: int) -> Request:
        j = i % len(self.jobs)
        b = self.next_batch[j]
        self.next_batch[j] += 1
        body = b'{"batch_id":%d,"epoch":0,' % b + self.bodies[b % len(self.bodies)] + b"}"
        return "POST", f"/v1/jobs/{self.jobs[j]}/stats", body, (202,)


def big_plan_body(key_groups: int, edges: int, nodes: int = 100, seed: int = 0) -> bytes:
    """A ``POST /v1/plans`` body of ~0.33 KB per key group + ~60 B per edge (120,000 / 640,000: ~50 MB), flux."""
    rng = np.random.default_rng(seed)
    kgs = [{"id": f"key-group-{i}", "node": f"n{i % nodes}", "load": round(float(x), 6)}
           for i, x in enumerate(rng.random(key_groups))]
    src, dst = rng.integers(0, key_groups, edges).tolist(), rng.integers(0, key_groups, edges).tolist()
    comm = [{"src": f"key-group-{a}", "dst": f"key-group-{b}", "rate": 1.5} for a, b in zip(src, dst, strict=True)]
    return json.dumps({"problem": {"nodes": [{"id": f"n{j}"} for j in range(nodes)], "key_groups": kgs,
                                   "communication": comm}, "algorithm": "flux", "time_limit_s": 1}).encode()


def main(argv: list[str] | None = None) -> int:
    bench = Bench("api", __doc__)
    ap = bench.parser
    ap.add_argument("--seconds", type=float, default=None, help="duration of each throughput phase (default 15, "
                                                                "quick 5)")
    ap.add_argument("--soak-seconds", type=float, default=None, help="soak duration (default 60, quick 15; the "
                                                                     "full soak: 600)")
    ap.add_argument("--clients", type=int, default=50, help="concurrent keep-alive connections")
    ap.add_argument("--key-groups", type=int, default=1000, help="key groups per stats post")
    ap.add_argument("--stats-form", choices=("dense", "ids"), default="dense",
                    help="statistics as arrays in the job's order (dense, what the clients send) or by key group id")
    ap.add_argument("--rate", type=float, default=TARGET_STATS_RPS, help="open-loop stats rate (posts/s)")
    ap.add_argument("--soak-rate", type=float, default=50.0, help="stats posts/s during the soak")
    ap.add_argument("--plan-seconds", type=float, default=None,
                    help="duration of the plans phase (default: the phase duration, at least 8 s: a plan takes ~1 s)")
    ap.add_argument("--workers", type=int, default=2, help="solver worker processes of the server")
    ap.add_argument("--database", default=None, help="SQLAlchemy URL (default: a fresh SQLite file)")
    args = bench.parse(argv)
    secs = args.seconds or (5.0 if args.quick else 15.0)
    soak = args.soak_seconds if args.soak_seconds is not None else (15.0 if args.quick else 60.0)
    with scratch("bench-api-", bench.log) as tmp:
        database = args.database or f"sqlite:///{tmp}/bench.db"
        server = ServerProcess(database, settings={"solver_workers": args.workers}, test_settings=False,
                               log_path=tmp / "server.log")
        server.start()
        bench.log(f"server on {server.url} ({database}); log {tmp}/server.log")
        bench.result["config"] = {"clients": args.clients, "key_groups_per_post": args.key_groups,
                                  "stats_form": args.stats_form, "phase_seconds": secs, "open_loop_rate": args.rate,
                                  "soak_seconds": soak, "soak_rate": args.soak_rate,
                                  "database": "sqlite" if database.startswith("sqlite") else database.split(":")[0],
                                  "solver_workers": args.workers}
        try:
            wait_workers(server, args.workers)
            wl = StatsWorkload(make_jobs(server.port, args.clients, args.key_groups, nodes=20),
                               stats_bodies(args.key_groups, variants=8, form=args.stats_form), first_batch=1)
            throughput(bench, server, args, secs, wl)
            soak_phase(bench, server, args, soak, wl)
        finally:
            server.stop()
    targets(bench, args, soak)
    return bench.finish()


def throughput(bench: Bench, server: ServerProcess, args: Any, secs: float, wl: StatsWorkload) -> None:
    """Phases 1-3: /healthz, statistics (saturation and at the target rate) and 40/800 plans."""
    port, pid, result = server.port, server.pid, bench.result
    bench.log(f"healthz: {args.clients} clients, closed loop, {secs:.0f} s")
    result["healthz"] = with_cpu(pid, lambda: asyncio.run(closed_loop(
        port, args.clients, secs, lambda i, k: ("GET", "/healthz", None, (200,)), max_requests=1_000_000)))
    bench.log(f"  {result['healthz']}")
    bench.log(f"stats saturation: {args.clients} clients x {args.key_groups} key groups, closed loop, {secs:.0f} s")
    result["stats_saturation"] = with_cpu(pid, lambda: asyncio.run(closed_loop(port, args.clients, secs, wl,
                                                                               max_requests=500_000)))
    bench.log(f"  {result['stats_saturation']}")
    bench.log(f"stats at {args.rate:.0f} posts/s: open loop over {args.clients} clients, {secs:.0f} s")
    result["stats_at_rate"], _ = with_cpu(pid, lambda: asyncio.run(open_loop(port, args.clients, args.rate, secs,
                                                                             wl)))
    bench.log(f"  {result['stats_at_rate']}")
    from evaluation.generators import albic_synthetic
    from solvers import registry

    algo = "albic-milp" if "albic-milp" in registry.available_names() else "flux"
    problem = albic_synthetic(40, key_groups_per_node=20, seed=1, max_migrations=40).to_dict()
    plan_body = json.dumps({"problem": problem, "algorithm": algo, "time_limit_s": 1.0}).encode()
    plan_clients, plan_secs = max(1, args.workers), args.plan_seconds or max(secs, 8.0)
    bench.log(f"plans: 40 nodes / 800 key groups, {algo}, {plan_clients} clients, closed loop, {plan_secs:.0f} s")
    pl = asyncio.run(closed_loop(port, plan_clients, plan_secs,
                                 lambda i, k: ("POST", "/v1/plans", plan_body, (200,)), max_requests=10_000))
    result["plans_40x800"] = {**pl, "algorithm": algo}
    bench.log(f"  {pl}")


def soak_phase(bench: Bench, server: ServerProcess, args: Any, soak: float, wl: StatsWorkload) -> None:
    """Phase 4: statistics at ``--soak-rate`` with the server's RSS sampled."""
    pid = server.pid
    bench.log(f"soak: {args.soak_rate:.0f} stats posts/s for {soak:.0f} s")
    samples: list[tuple[float, int, int]] = []

    def tick(t: float) -> None:
        samples.append((round(t, 1), rss_bytes(pid), group_rss(pid)))

    tick(0.0)
    soak_res, _ = asyncio.run(open_loop(server.port, args.clients, args.soak_rate, soak, wl, on_tick=tick))
    tick(soak)
    warm = [s for s in samples if s[0] >= 0.1 * soak] or samples
    base_rss = warm[0][1]
    growth = (samples[-1][1] - base_rss) / base_rss if base_rss else 0.0
    soak_res.update({"rss_start_mb": round(samples[0][1] / 2**20, 1), "rss_after_10pct_mb": round(base_rss / 2**20, 1),
                     "rss_end_mb": round(samples[-1][1] / 2**20, 1), "memory_growth": round(growth, 4),
                     "group_rss_end_mb": round(samples[-1][2] / 2**20, 1),
                     "rss_samples": [[t, round(r / 2**20, 1)] for t, r, _ in samples]})
    bench.result["soak"] = soak_res
    bench.log(f"  errors {soak_res['errors']}, rss {soak_res['rss_after_10pct_mb']} -> {soak_res['rss_end_mb']} MB "
              f"({growth:+.1%}), p99 {soak_res['p99_ms']} ms")


def targets(bench: Bench, args: Any, soak: float) -> None:
    sat, rated, soak_res = (bench.result[k] for k in ("stats_saturation", "stats_at_rate", "soak"))
    bench.target(f"stats throughput >= {TARGET_STATS_RPS:.0f} posts/s (closed loop, {args.key_groups} key groups)",
                 sat["throughput_rps"], TARGET_STATS_RPS, sat["throughput_rps"] >= TARGET_STATS_RPS)
    bench.target(f"stats p99 <= {TARGET_P99_MS:.0f} ms at {args.rate:.0f} posts/s offered (open loop)",
                 rated["p99_ms"], TARGET_P99_MS,
                 rated["p99_ms"] <= TARGET_P99_MS and rated["throughput_rps"] >= 0.95 * args.rate
                 and rated["errors"] == 0, f"served {rated['throughput_rps']}/s, {rated['errors']} errors (both count)")
    bench.target("soak: no errors", soak_res["errors"], 0, soak_res["errors"] == 0)
    bench.target(f"soak: server RSS growth <= {TARGET_MEM_GROWTH:.0%} after the first 10 %",
                 soak_res["memory_growth"], TARGET_MEM_GROWTH, soak_res["memory_growth"] <= TARGET_MEM_GROWTH,
                 f"{soak:.0f} s soak" + (" (--quick: too short to judge growth)" if args.quick else ""))
    plot_soak(bench, soak_res, args.soak_rate, args.key_groups)


def plot_soak(bench: Bench, soak_res: dict[str, Any], rate: float, key_groups: int) -> None:
    """Server RSS over the soak, with the growth target drawn from the sample after the first 10 %."""
    with bench.figure("api_soak.png", f"soak: {rate:.0f} stats posts/s x {key_groups} key groups",
                      figsize=(6.5, 3.4)) as fig:
        if fig is None:
            return
        ax = fig.subplots()
        xs = [t for t, _ in soak_res["rss_samples"]]
        ys = [r for _, r in soak_res["rss_samples"]]
        ax.plot(xs, ys, marker=".", label="server RSS (measured)")
        limit = soak_res["rss_after_10pct_mb"] * (1 + TARGET_MEM_GROWTH)
        ax.axhline(limit, color="gray", ls="--", lw=1,
                   label=f"target: <= +{TARGET_MEM_GROWTH:.0%} over the sample after 10 % ({limit:.0f} MiB)")
        ax.set_xlabel("soak time (s)")
        ax.set_ylabel("server RSS (MiB)")
        ax.set_ylim(0, 1.1 * max([limit, *ys]))
        ax.legend(fontsize=7, loc="lower right")


if __name__ == "__main__":
    sys.exit(main())
