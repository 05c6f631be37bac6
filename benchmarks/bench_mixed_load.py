"""Mixed load: statistics and ``/healthz`` stay fast while big bodies are read, built and solved.
``python -m benchmarks.bench_mixed_load [--quick]``

Starts a real server (``python -m cli.main serve``, :class:`tests.helpers.server.ServerProcess`) on 127.0.0.1 with a
fresh SQLite database and ``--clients`` jobs of ``--key-groups`` key groups, then runs two phases with the same
open-loop load (latency measured from each request's scheduled send time, so a stalled server cannot hide it):
statistics posts at ``--rate``/s spread over the jobs, and ``GET /healthz`` at ``--probe-rate``/s.

1. baseline: that load alone for ``--seconds``;
2. mixed: that load from 1 s before until 1 s after these requests, all sent at once from threads:
   a ~50 MB ``POST /v1/plans`` (120,000 key groups, 640,000 edges, flux), a ~60 MB ``POST /v1/what-if/scaling``
   (140,000 key groups, 770,000 edges, flux, 2 candidates), a ``PUT`` of a job with 200,000 explicit key groups
   (~11 MB) and ``--whatif`` what-ifs (2,000 key groups, albic-milp, 5 candidates, ``time_limit_s`` 2). With
   ``--quick`` the big bodies are a fifth of that.

The statistics and probe latencies of both phases are reported side by side, with the server's RSS, the load
average and the server's own view of its event loop (``rebalancer_event_loop_lag_seconds`` read from ``/metrics``
before and after each phase: samples late by more than 25 and 50 ms). Targets: ``/healthz`` p99 ≤ 50 ms under
mixed load; statistics p99 under mixed load ≤ 2 × the baseline's. Writes ``<out>/mixed_load.json`` and
``mixed_load.png`` (:mod:`benchmarks.harness`); progress goes to stderr.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import functools
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.api_load import open_loop
from benchmarks.bench_api import (
    StatsWorkload,
    big_plan_body,
    make_jobs,
    rss_bytes,
    stats_bodies,
    wait_workers,
)
from benchmarks.harness import Bench, scratch
from tests.helpers.server import ServerProcess, free_port

HEALTHZ_P99_MS = 50.0
STATS_P99_FACTOR = 2.0
LEAD_S = TAIL_S = 1.0


def whatif_body(candidates: list[int], time_limit_s: float = 2.0) -> bytes:
    """``POST /v1/what-if/scaling``: 8 nodes, 2,000 key groups, albic-milp over ``candidates`` cluster sizes."""
    rng = np.random.default_rng(1)
    prob = {"nodes": [{"id": f"n{j}"} for j in range(8)],
            "key_groups": [{"id": f"k{i}", "node": f"n{i % 8}", "load": float(x)}
                           for i, x in enumerate(rng.random(2000))]}
    return json.dumps({"problem": prob, "candidates": candidates, "algorithm": "albic-milp",
                       "time_limit_s": time_limit_s}).encode()


def big_whatif_body(key_groups: int, edges: int, candidates: list[int]) -> bytes:
    """A ``POST /v1/what-if/scaling`` body around the same kind of problem as :func:`big_plan_body` (flux)."""
    doc = json.loads(big_plan_body(key_groups, edges, seed=1))
    doc.pop("algorithm")
    return json.dumps({**doc, "candidates": candidates, "algorithm": "flux"}).encode()


def explicit_job_body(key_groups: int, nodes: int = 100) -> bytes:
    """A ``PUT /v1/jobs/{id}`` body placing ``key_groups`` explicit key groups on ``nodes`` nodes."""
    return json.dumps({"nodes": [f"w{i}" for i in range(nodes)], "window_batches": 5, "algorithm": "flux",
                       "key_groups": [{"id": f"big/{k}", "operator": "big", "node": f"w{k % nodes}"}
                                      for k in range(key_groups)]}).encode()


def send(url: str, method: str, path: str, body_file: str) -> dict[str, Any]:
    """One request from a client process: its status, time and answer size (an error is recorded, not raised)."""
    body = Path(body_file).read_bytes()
    t0 = time.perf_counter()
    try:
        with httpx.Client(base_url=url, timeout=900) as c:
            r = c.request(method, path, content=body, headers={"content-type": "application/json"})
        out: dict[str, Any] = {"status": r.status_code, "response_bytes": len(r.content)}
        if r.status_code >= 300:
            out["detail"] = r.text[:300]
    except httpx.HTTPError as exc:
        out = {"status": None, "error": repr(exc)[:300]}
    return {**out, "body_mb": round(len(body) / 1e6, 1), "seconds": round(time.perf_counter() - t0, 2)}


def senders(n: int) -> cf.ProcessPoolExecutor:
    """``n`` client processes for the heavy requests, started before the measurement: sending 120 MB from threads
    of the measuring process would stall its own event loop (the GIL) and starting processes takes the CPU, so the
    latencies measured would be the client's."""
    pool = cf.ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"))
    list(pool.map(time.sleep, [0.5] * n))
    return pool


async def phase(srv: ServerProcess, args: Any, wl: StatsWorkload, heavy: dict[str, Callable[[], dict[str, Any]]],
                pool: cf.Executor | None = None, bare_port: int | None = None) -> dict[str, Any]:
    """Statistics and probes (open loop) for ``--seconds`` (no ``heavy``), or from ``LEAD_S`` before the
    ``heavy`` requests until ``TAIL_S`` after the last one answered; server RSS sampled every second. With
    ``bare_port``, the server that does nothing (:mod:`benchmarks.bare_asgi`) is probed as ``/healthz`` is."""
    stop, rss = asyncio.Event(), [rss_bytes(srv.pid)]
    done: dict[str, dict[str, Any]] = {}
    times: dict[str, list[float]] = {"stats": [], "healthz": [], "bare": []}

    async def driver() -> float:
        await asyncio.sleep(0.2 + (LEAD_S if heavy else args.seconds))
        t0 = time.perf_counter()
        if heavy:
            loop = asyncio.get_running_loop()
            answers = await asyncio.gather(*(loop.run_in_executor(pool, fn) for fn in heavy.values()))
            done.update(zip(heavy, answers, strict=True))
            await asyncio.sleep(TAIL_S)
        stop.set()
        return time.perf_counter() - t0

    async def sample() -> None:
        while not stop.is_set():
            rss.append(rss_bytes(srv.pid))
            await asyncio.sleep(1.0)

    sampler = asyncio.create_task(sample())
    lag0 = loop_lag(srv.url)

    def probe(port: int, what: str) -> Any:
        return open_loop(port, 2, args.probe_rate, 900.0, lambda i, k: ("GET", "/healthz", None, (200,)),
                         stop=stop, times=times[what])

    (stats, s_lat), (hz, h_lat), wall, *bare = await asyncio.gather(
        open_loop(srv.port, args.clients, args.rate, 900.0, wl, stop=stop, times=times["stats"]),
        probe(srv.port, "healthz"), driver(), *([probe(bare_port, "bare")] if bare_port else []))
    sampler.cancel()
    lag = {k: v - lag0.get(k, 0.0) for k, v in loop_lag(srv.url).items()}
    out = {"stats": stats, "healthz": hz, "server_rss_mb": {"start": rss[0] >> 20, "max": max(rss) >> 20},
           "event_loop_lag": {"samples": int(lag["count"]), "over_50ms": int(lag["count"] - lag["0.05"]),
                              "over_25ms": int(lag["count"] - lag["0.025"]), "sum_s": round(lag["sum"], 3)},
           "loadavg_1m_end": round(os.getloadavg()[0], 2),
           "series": {"stats": [times["stats"], s_lat], "healthz": [times["healthz"], h_lat]}}
    if bare:
        out["bare"] = bare[0][0]
        out["series"]["bare"] = [times["bare"], bare[0][1]]
    if heavy:
        out.update({"heavy": done, "heavy_wall_s": round(wall, 2)})
    return out


def loop_lag(url: str) -> dict[str, float]:
    """The server's ``rebalancer_event_loop_lag_seconds`` histogram now: its count, sum and cumulative buckets
    (by upper bound) — how late the server's event loop ran its 0.1 s timer, as the server itself saw it."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=30).text
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "rebalancer_event_loop_lag_seconds":
            for smp in fam.samples:
                out[smp.labels["le"] if "le" in smp.labels else smp.name.rsplit("_", 1)[1]] = smp.value
    return out


def heavy_requests(url: str, args: Any, log: Callable[[str], None],
                   tmp: Path) -> dict[str, Callable[[], dict[str, Any]]]:
    """The heavy requests, each body in a file of ``tmp`` (read by the client process that sends it)."""
    scale = args.scale or (5 if args.quick else 1)
    log("building the bodies")
    bodies = {"plan": ("POST", "/v1/plans", big_plan_body(120_000 // scale, 640_000 // scale)),
              "what_if_big": ("POST", "/v1/what-if/scaling", big_whatif_body(140_000 // scale, 770_000 // scale,
                                                                              [90, 110])),
              "put_200k": ("PUT", "/v1/jobs/big", explicit_job_body(200_000 // scale))}
    small = whatif_body([4, 6, 8, 10, 12], time_limit_s=2.0)
    bodies.update({f"what_if_{i}": ("POST", "/v1/what-if/scaling", small) for i in range(args.whatif)})
    log("bodies: " + ", ".join(f"{k} {len(b) / 1e6:.1f} MB" for k, (_, _, b) in bodies.items()))
    for k, (_, _, b) in bodies.items():
        (tmp / f"{k}.json").write_bytes(b)
    return {k: functools.partial(send, url, m, p, str(tmp / f"{k}.json")) for k, (m, p, _) in bodies.items()}


class BareServer:
    """:mod:`benchmarks.bare_asgi` in its own process on a free port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bare_asgi", str(self.port)],
                                     cwd=Path(__file__).resolve().parents[1])
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2).raise_for_status()
                return
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the bare server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def side_by_side(base: dict[str, Any], mixed: dict[str, Any]) -> dict[str, Any]:
    keys = ("requests", "errors", "throughput_rps", "p50_ms", "p99_ms", "max_ms")
    return {f"{what} {k}": [base[what][k], mixed[what][k]] for what in ("stats", "healthz", "bare") for k in keys}


def main(argv: list[str] | None = None) -> int:
    bench = Bench("mixed_load", __doc__)
    ap = bench.parser
    ap.add_argument("--seconds", type=float, default=None, help="baseline duration (default 20, quick 8)")
    ap.add_argument("--clients", type=int, default=50, help="jobs, one statistics connection each")
    ap.add_argument("--key-groups", type=int, default=1000, help="key groups per statistics post")
    ap.add_argument("--rate", type=float, default=200.0, help="statistics posts/s (open loop)")
    ap.add_argument("--probe-rate", type=float, default=20.0, help="GET /healthz per second (open loop)")
    ap.add_argument("--whatif", type=int, default=4, help="small what-ifs sent with the big bodies")
    ap.add_argument("--workers", type=int, default=2, help="solver worker processes of the server")
    ap.add_argument("--scale", type=int, default=None, help="divide the big bodies' sizes by this (default 1, quick 5)")
    args = bench.parse(argv)
    args.seconds = args.seconds or (8.0 if args.quick else 20.0)
    with scratch("bench-mixed-", bench.log) as tmp:
        srv = ServerProcess(f"sqlite:///{tmp}/bench.db",
                            settings={"solver_workers": args.workers, "request_wait_s": 300},
                            test_settings=False, log_path=tmp / "server.log")
        srv.start()
        bench.log(f"server {srv.url}, log {tmp}/server.log")
        bare = BareServer()
        try:
            wait_workers(srv, args.workers)
            httpx.get(srv.url + "/v1/jobs", timeout=120)  # the first request builds the routes' state
            wl = StatsWorkload(make_jobs(srv.port, args.clients, args.key_groups, nodes=20),
                               stats_bodies(args.key_groups, variants=8), first_batch=1)
            heavy = heavy_requests(srv.url, args, bench.log, tmp)
            pool = senders(len(heavy))
            bench.log(f"baseline: {args.rate:.0f} stats/s + {args.probe_rate:.0f} healthz/s for {args.seconds:.0f} s")
            base = asyncio.run(phase(srv, args, wl, {}, bare_port=bare.port))
            bench.log(f"  stats p99 {base['stats']['p99_ms']} ms, healthz p99 {base['healthz']['p99_ms']} ms, bare "
                      f"server p99 {base['bare']['p99_ms']} ms; server event-loop lag {base['event_loop_lag']}")
            bench.log(f"mixed: the same load around {', '.join(heavy)}")
            mixed = asyncio.run(phase(srv, args, wl, heavy, pool, bare_port=bare.port))
            pool.shutdown()
            bench.log(f"  stats p99 {mixed['stats']['p99_ms']} ms, healthz p99 {mixed['healthz']['p99_ms']} ms, bare "
                      f"server p99 {mixed['bare']['p99_ms']} ms; server "
                      f"event-loop lag {mixed['event_loop_lag']}; heavy "
                      + ", ".join(f"{k} {v['status']} in {v['seconds']} s" for k, v in mixed["heavy"].items()))
        finally:
            srv.stop()
            bare.stop()
    report(bench, args, base, mixed)
    return bench.finish()


def report(bench: Bench, args: Any, base: dict[str, Any], mixed: dict[str, Any]) -> None:
    plot(bench, base, mixed)
    for ph in (base, mixed):
        ph.pop("series")
    bench.result.update({"config": vars(args) | {"cpus": os.cpu_count()}, "baseline": base, "mixed": mixed,
                         "side_by_side (baseline, mixed)": side_by_side(base, mixed)})
    hz, ratio = mixed["healthz"]["p99_ms"], mixed["stats"]["p99_ms"] / max(base["stats"]["p99_ms"], 1e-9)
    codes = {k: v["status"] for k, v in mixed["heavy"].items()}
    served = base["stats"]["throughput_rps"]
    note = (f"baseline healthz p99 {base['healthz']['p99_ms']} ms; heavy {codes}; load average at the end "
            f"{mixed['loadavg_1m_end']} on {os.cpu_count()} CPUs"
            + (f"; SATURATED: the baseline served {served} of {args.rate:g} stats/s" if served < 0.95 * args.rate
               else ""))
    bench.target(f"/healthz p99 <= {HEALTHZ_P99_MS:.0f} ms under mixed load", hz, HEALTHZ_P99_MS,
                 hz <= HEALTHZ_P99_MS and mixed["healthz"]["errors"] == 0, note)
    bench.target(f"stats p99 under mixed load <= {STATS_P99_FACTOR:g} x the baseline's", round(ratio, 2),
                 STATS_P99_FACTOR, ratio <= STATS_P99_FACTOR and mixed["stats"]["errors"] == 0,
                 f"{mixed['stats']['p99_ms']} vs {base['stats']['p99_ms']} ms; {mixed['stats']['errors']} errors")
    slow = {what: round(mixed[what]["p99_ms"] / max(base[what]["p99_ms"], 1e-9), 2) for what in ("stats", "bare")}
    bench.result["p99_slowdown (mixed / baseline)"] = slow
    bench.target(f"stats p99 slowdown <= {STATS_P99_FACTOR:g} x the bare server's (proposed)",
                 round(slow["stats"] / max(slow["bare"], 1e-9), 2), STATS_P99_FACTOR,
                 slow["stats"] <= STATS_P99_FACTOR * slow["bare"] and mixed["stats"]["errors"] == 0,
                 f"stats {slow['stats']}x, a server that does nothing {slow['bare']}x (bare p99 "
                 f"{base['bare']['p99_ms']} -> {mixed['bare']['p99_ms']} ms): the machine's own slow-down")
    bench.target("every heavy request answered 2xx", sum(1 for c in codes.values() if c and c < 300), len(codes),
                 all(c is not None and c < 300 for c in codes.values()), str(codes))


def plot(bench: Bench, base: dict[str, Any], mixed: dict[str, Any]) -> None:
    with bench.figure("mixed_load.png", "latency by scheduled send time: baseline, then mixed load",
                      figsize=(7.5, 3.6)) as fig:
        if fig is None:
            return
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (name, ph) in zip(axes, (("baseline", base), ("mixed", mixed)), strict=True):
            for what, marker in (("stats", "."), ("healthz", "x"), ("bare", "+")):
                t, lat = ph["series"][what]
                n = min(len(t), len(lat))
                ax.plot(np.array(t[:n]) - (t[0] if t else 0), np.array(lat[:n]) * 1000, ls="none", marker=marker,
                        ms=2, label=f"{what} (p99 {ph[what]['p99_ms']} ms)")
            ax.axhline(HEALTHZ_P99_MS, color="gray", ls="--", lw=1, label="healthz p99 target (50 ms)")
            ax.set_yscale("log")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("scheduled send time (s)")
            ax.legend(fontsize=6)
        axes[0].set_ylabel("latency (ms)")


if __name__ == "__main__":
    sys.exit(main())
