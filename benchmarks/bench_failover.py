"""Failover of the controller's replicas on PostgreSQL: ``python -m benchmarks.bench_failover [--quick]``.

Starts a throwaway PostgreSQL cluster (or uses ``--database``) and ``--replicas`` real servers
(:class:`tests.helpers.server.ServerProcess`), each reaching the database through its own TCP proxy
(:mod:`benchmarks.failover_faults`, so that one replica's connection can be cut). A driver posts statistics
continuously with the Python client given every replica's URL (a fresh job per trial). At a random point of the
writes the leader is hit by one of:

* ``kill9``: kill -9 of its process group (the replica is then started again, as a standby);
* ``sigstop``: SIGSTOP; SIGCONT once another replica leads;
* ``cut``: its proxy closes every connection and refuses new ones; restored once another replica leads.

Per trial: the **failover time** (from the fault to the first statistics batch acknowledged by another replica),
**acknowledged batches lost** (acknowledged, but not in the new leader's window), **writes of the fenced leader**
(batches the old leader acknowledged once woken up or reconnected, posted to it directly, plus rows in the database
that the new leader's window does not hold) and **client-visible errors** (calls that raised after the client's
retries). Writes ``<out>/failover.json`` and ``<out>/failover.png``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.failover_faults import Proxies, postgres
from benchmarks.harness import Bench, scratch
from tests.helpers.server import HOST, ServerProcess, free_port

SCENARIOS = ("kill9", "sigstop", "cut")
KEY_GROUPS = 64
JOB = {"nodes": [f"n{i}" for i in range(4)], "operators": [{"id": "op", "key_groups": KEY_GROUPS}],
       "algorithm": "flux", "window_batches": 1000}
PROBE_BASE = 10**9  # batch ids of the posts sent to the old leader directly


# ---------------------------------------------------------------------- the replicas
class Cluster:
    def __init__(self, database: str, n: int, tmp: Path, lease: dict[str, float]):
        self.database, self.tmp, self.lease = database, tmp, lease
        self.proxies = Proxies(int(database.rsplit(":", 1)[1].split("/")[0]), n)
        self.ports = [free_port() for _ in range(n)]
        self.urls = [f"http://{HOST}:{p}" for p in self.ports]
        self.servers = [self._server(i) for i in range(n)]

    def _server(self, i: int) -> ServerProcess:
        host_port = self.database.split("@", 1)[1].split("/", 1)[0]
        url = self.database.replace(host_port, f"{HOST}:{self.proxies.ports[i]}")
        return ServerProcess(url, port=self.ports[i], log_path=self.tmp / f"replica{i}.log", log_level="info",
                             settings={**self.lease, "advertised_url": self.urls[i], "solver_workers": 1})

    def start(self) -> None:
        for i, s in enumerate(self.servers):
            s.start()
            self.wait_warm(i)

    def restart(self, i: int) -> None:
        self.servers[i].kill9()
        self.servers[i] = self._server(i)
        self.servers[i].start()
        self.wait_warm(i)

    def wait_warm(self, i: int, timeout: float = 180.0) -> None:
        """Until replica ``i`` has a solver worker ready (its warm-up would otherwise compete for the CPU with
        the next trial)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pool = httpx.get(self.urls[i] + "/readyz", timeout=5.0).json().get("solver_pool") or {}
                if pool.get("ready_workers", 0) >= 1:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"replica {i} did not warm up within {timeout} s")

    def leader(self, skip: int | None = None) -> int | None:
        for i, u in enumerate(self.urls):
            if i == skip:  # a frozen replica would hold the poll for its whole timeout
                continue
            try:
                if httpx.get(u + "/readyz", timeout=1.0).json().get("role") == "leader":
                    return i
            except (httpx.HTTPError, ValueError):
                continue
        return None

    def wait_leader(self, other_than: int | None = None, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            who = self.leader(skip=other_than)
            if who is not None:
                return who
            time.sleep(0.05)
        raise RuntimeError(f"no leader other than {other_than} within {timeout} s")

    def stop(self) -> None:
        for s in self.servers:
            s.stop()
        self.proxies.stop()


# ---------------------------------------------------------------------- the driver
def drive(urls: list[str], job: str, epoch: int, out: str) -> None:
    """The driver's process: posts statistics batches 1, 2, … to ``job`` through a client given every URL until a
    line arrives on stdin; then writes each acknowledged batch (its end time, the URL that answered) and the
    client-visible errors to ``out`` (JSON)."""
    import json
    import sys

    from rebalancer_client import RebalancerClient

    halt = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), halt.set()), daemon=True).start()
    acked: list[tuple[int, float, str]] = []
    errors: list[str] = []
    rng = np.random.default_rng(0)
    batch = 0
    with RebalancerClient(urls, timeout=1.0, connect_timeout=0.5, retries=40, backoff=0.05, max_backoff=0.25,
                          deadline=30.0) as client:
        while not halt.is_set():
            batch += 1
            load = rng.uniform(1.0, 3.0, KEY_GROUPS).tolist()
            try:
                client.post_stats(job, batch_id=batch, epoch=epoch, load=load)
                acked.append((batch, time.monotonic(), client.base_url))
                if len(acked) == 1:
                    print("posting", flush=True)
            except Exception as exc:  # noqa: BLE001 - a client-visible error, counted
                errors.append(f"batch {batch}: {type(exc).__name__}: {str(exc)[:200]}")
            time.sleep(0.01)
    Path(out).write_text(json.dumps({"acked": acked, "errors": errors}))


class Driver:
    """:func:`drive` in a process of its own (the benchmark's own work — killing, polling — does not slow it)."""

    def __init__(self, urls: list[str], job: str, epoch: int, tmp: Path):
        import sys

        self.out = tmp / f"driver-{job}.json"
        code = f"from benchmarks.bench_failover import drive; drive({urls!r}, {job!r}, {epoch}, {str(self.out)!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=Path(__file__).resolve().parents[1])
        self.acked: list[tuple[int, float, str]] = []
        self.errors: list[str] = []
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "posting":  # the first batch is acknowledged
            raise RuntimeError("the driver did not start posting")

    def stop(self) -> None:
        import json

        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        self.proc.wait(120)
        doc = json.loads(self.out.read_text())
        self.acked = [(int(b), float(t), str(u)) for b, t, u in doc["acked"]]
        self.errors = doc["errors"]


def fault(cluster: Cluster, scenario: str, i: int) -> None:
    srv = cluster.servers[i]
    if scenario == "kill9":  # its process group; reaped when it is started again
        os.killpg(srv.pid, signal.SIGKILL)
    elif scenario == "sigstop":
        os.kill(srv.pid, signal.SIGSTOP)
    else:
        cluster.proxies.cut(i)


def recover(cluster: Cluster, scenario: str, i: int) -> None:
    if scenario == "kill9":
        cluster.restart(i)
    elif scenario == "sigstop":
        os.kill(cluster.servers[i].pid, signal.SIGCONT)
    else:
        cluster.proxies.restore(i)


def probe(url: str, job: str, n: int = 5) -> int:
    """Post ``n`` batches straight to ``url`` (a fenced old leader); the number it acknowledged."""
    ok = 0
    with httpx.Client(timeout=10.0) as c:
        for k in range(n):
            body = {"batch_id": PROBE_BASE + k, "epoch": 0, "load": [1.0] * KEY_GROUPS}
            try:
                ok += c.post(f"{url}/v1/jobs/{job}/stats", json=body).is_success
            except httpx.HTTPError:
                pass
    return ok


def stored_batches(database: str, job: str) -> set[int]:
    import psycopg

    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT batch_id FROM stats_batches WHERE job_id = %s", (job,)).fetchall()
    return {int(r[0]) for r in rows}


def trial(cluster: Cluster, scenario: str, k: int, rng: random.Random, log: Any) -> dict[str, Any]:
    job = f"{scenario}{k}"
    old = cluster.wait_leader()
    r = httpx.put(f"{cluster.urls[old]}/v1/jobs/{job}", json=JOB, timeout=30)
    r.raise_for_status()
    driver = Driver(cluster.urls, job, r.json()["epoch"], cluster.tmp)
    time.sleep(rng.uniform(0.2, 1.5))  # a random point of the writes
    t_fault, wall = time.monotonic(), time.time()
    fault(cluster, scenario, old)
    new = cluster.wait_leader(other_than=old)
    seen = time.monotonic() - t_fault
    time.sleep(0.5)
    recover(cluster, scenario, old)
    accepted = probe(cluster.urls[old], job) if scenario != "kill9" else 0
    time.sleep(1.0)  # writes go on with the new leader
    driver.stop()
    after = [t for _b, t, url in driver.acked if t > t_fault and url != cluster.urls[old]]
    failover = (min(after) - t_fault) if after else None
    window = set(httpx.get(f"{cluster.urls[new]}/v1/jobs/{job}", timeout=30).json()["window"]["batches"])
    acked = {b for b, _t, _u in driver.acked}
    stored = stored_batches(cluster.database, job)
    out = {"scenario": scenario, "trial": k, "fault_at": time.strftime("%H:%M:%S", time.localtime(wall))
           + f".{int(wall % 1 * 1000):03d}", "old_leader": old, "new_leader": new,
           "failover_s": None if failover is None else round(failover, 3), "new_leader_ready_s": round(seen, 3),
           "acked": len(acked),
           "acked_lost": len(acked - window), "fenced_acks": accepted, "stored_not_in_window": len(stored - window),
           "client_errors": len(driver.errors), "errors": driver.errors[:3],
           "acks_around_fault": [(round(t - t_fault, 3), cluster.urls.index(u)) for _b, t, u in driver.acked
                                 if -0.5 < t - t_fault < (failover or 0) + 0.5][:20]}
    httpx.delete(f"{cluster.urls[new]}/v1/jobs/{job}", timeout=30)  # the next takeover loads a small database
    log(f"{scenario} #{k}: leader {old} -> {new} (its /readyz after {seen:.2f} s), failover {out['failover_s']} s, "
        f"acked {len(acked)}, "
        f"lost {out['acked_lost']}, fenced acks {accepted}, client errors {len(driver.errors)} {driver.errors[:1]}")
    return out


def summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    times = [t["failover_s"] for t in trials if t["failover_s"] is not None]
    a = np.array(times) if times else np.zeros(1)
    return {"trials": len(trials), "failover_p50_s": round(float(np.percentile(a, 50)), 3),
            "failover_max_s": round(float(a.max()), 3), "no_failover_measured": len(trials) - len(times),
            "acked": sum(t["acked"] for t in trials), "acked_lost": sum(t["acked_lost"] for t in trials),
            "fenced_writes": sum(t["fenced_acks"] + t["stored_not_in_window"] for t in trials),
            "client_errors": sum(t["client_errors"] for t in trials)}


def plot(bench: Bench, trials: list[dict[str, Any]]) -> None:
    with bench.figure("failover.png", "failover of the leader (first batch acknowledged by another replica)",
                      figsize=(8, 4)) as fig:
        if fig is None:
            return
        ax = fig.subplots()
        for x, sc in enumerate(SCENARIOS):
            ys = [t["failover_s"] for t in trials if t["scenario"] == sc and t["failover_s"] is not None]
            if not ys:
                continue
            ax.plot([x + random.uniform(-0.15, 0.15) for _ in ys], ys, "o", alpha=0.6, label=f"{sc} ({len(ys)})")
            ax.plot([x - 0.3, x + 0.3], [float(np.median(ys))] * 2, "-", color="black",
                    label=f"median {sc}")
        ax.axhline(2.0, ls="--", color="tab:green", label="target p50 2 s")
        ax.axhline(5.0, ls=":", color="tab:red", label="target max 5 s")
        ax.set_xticks(range(len(SCENARIOS)), SCENARIOS)
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)


def main(argv: list[str] | None = None) -> int:
    bench = Bench("failover", __doc__)
    ap = bench.parser
    ap.add_argument("--replicas", type=int, default=3, help="controller replicas")
    ap.add_argument("--trials", type=int, default=None, help="trials per scenario (default 20, quick 2)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of " + ", ".join(SCENARIOS))
    ap.add_argument("--lease-ttl", type=float, default=1.5, help="REBALANCER_LEASE_TTL_S of the replicas")
    ap.add_argument("--lease-renew", type=float, default=0.3, help="REBALANCER_LEASE_RENEW_S of the replicas")
    ap.add_argument("--database", default=None, help="a PostgreSQL URL (default: a throwaway cluster)")
    ap.add_argument("--seed", type=int, default=1)
    args = bench.parse(argv)
    n_trials = args.trials or (2 if args.quick else 20)
    scenarios = [s for s in args.scenarios.split(",") if s]
    rng = random.Random(args.seed)
    with scratch("bench-failover-", bench.log) as tmp:
        lease = {"lease_ttl_s": args.lease_ttl, "lease_renew_s": args.lease_renew}
        bench.result["config"] = {"replicas": args.replicas, "trials_per_scenario": n_trials, "scenarios": scenarios,
                                  **lease, "client": {"timeout_s": 1.0, "connect_timeout_s": 0.5}}
        trials: list[dict[str, Any]] = []
        with nullcontext(args.database) if args.database else postgres(tmp) as database:
            cluster = Cluster(database, args.replicas, tmp, lease)
            bench.log(f"{args.replicas} replicas on {database} (logs in {tmp})")
            try:
                cluster.start()
                for sc in scenarios:
                    for k in range(n_trials):
                        trials.append(trial(cluster, sc, k, rng, bench.log))
            finally:
                cluster.stop()
    bench.result["trials"] = trials
    for sc in scenarios:
        s = summary([t for t in trials if t["scenario"] == sc])
        bench.result.setdefault("summary", {})[sc] = s
        bench.log(f"{sc}: {s}")
        timed = sc in ("kill9", "sigstop")
        bench.target(f"{sc}: acknowledged batches lost = 0", s["acked_lost"], 0, s["acked_lost"] == 0)
        bench.target(f"{sc}: writes accepted from a fenced leader = 0", s["fenced_writes"], 0, s["fenced_writes"] == 0)
        bench.target(f"{sc}: failover p50 <= 2 s", s["failover_p50_s"], 2.0,
                     (s["failover_p50_s"] <= 2.0) if timed else None, "" if timed else "no target for this fault")
        bench.target(f"{sc}: failover max <= 5 s", s["failover_max_s"], 5.0,
                     (s["failover_max_s"] <= 5.0) if timed else None, "" if timed else "no target for this fault")
        bench.target(f"{sc}: client-visible errors", s["client_errors"], 0, s["client_errors"] == 0)
    plot(bench, trials)
    return bench.finish()


if __name__ == "__main__":
    raise SystemExit(main())
