"""Prometheus metrics with ``prometheus_client`` (one registry per controller, so that tests can run several).

Exposed at ``GET /metrics`` (text format 0.0.4):

* counters: ``rebalancer_requests_total{method,route,status}``, ``rebalancer_plans_total{algorithm,status}``,
  ``rebalancer_epochs_total{kind}``, ``rebalancer_stats_batches_total{result}``, ``rebalancer_db_commits_total``,
  ``rebalancer_db_writes_total``, ``rebalancer_db_writer_cpu_seconds_total``;
* histograms: ``rebalancer_request_seconds{route}``, ``rebalancer_solve_seconds{algorithm}``,
  ``rebalancer_event_loop_lag_seconds`` (:func:`watch_loop`);
* gauges: ``rebalancer_jobs``, ``rebalancer_solves_in_flight`` and, per job, ``rebalancer_job_epoch{job}``,
  ``rebalancer_job_load_distance{job}`` (windowed, current assignment), ``rebalancer_job_key_groups{job}``,
  ``rebalancer_job_window_batches{job}``, and the counter ``rebalancer_job_migrations_total{job}``;
* the process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``, open fds …) and the
  Python GC / platform collectors.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import Counter as _PCounter
from prometheus_client import Histogram as _PHistogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

disable_created_metrics()  # type: ignore[no-untyped-call]  # no ``*_created`` series: the classic text format, as Prometheus scrapes it

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: the event loop's lag is sampled this often (:func:`watch_loop`)
LAG_PERIOD_S = 0.1
SOLVE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
#: function-backed metrics registered through :meth:`Telemetry.gauge` that only ever grow: exposed as counters
CUMULATIVE = {"rebalancer_db_commits", "rebalancer_db_writes", "rebalancer_db_writer_cpu_seconds"}


class Counter:
    """A labelled counter with the call shape the controller uses: ``inc(*label_values, by=1)``."""

    def __init__(self, registry: CollectorRegistry, name: str, help: str, labels: tuple[str, ...] = ()):
        self.labels = labels
        self._m = _PCounter(name.removesuffix("_total"), help, labels, registry=registry)

    def inc(self, *labels: str, by: float = 1.0) -> None:
        (self._m.labels(*labels) if self.labels else self._m).inc(by)

    def value(self, *labels: str) -> float:
        return float((self._m.labels(*labels) if self.labels else self._m)._value.get())


class Histogram:
    """A labelled histogram: ``observe(value, *label_values)``."""

    def __init__(self, registry: CollectorRegistry, name: str, help: str, labels: tuple[str, ...] = (),
                 buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.labels = labels
        self._m = _PHistogram(name, help, labels, registry=registry, buckets=buckets)

    def observe(self, value: float, *labels: str) -> None:
        (self._m.labels(*labels) if self.labels else self._m).observe(value)


@dataclass
class JobSample:
    """What ``/metrics`` reports about one registered job."""

    job_id: str
    epoch: int
    key_groups: int
    window_batches: int
    load_distance: float | None


class _Functions(Collector):
    """Function-backed gauges and counters, and the per-job families."""

    def __init__(self, telemetry: Telemetry):
        self.t = telemetry

    def collect(self) -> Iterator[Metric]:
        for name, help, fn, cumulative in list(self.t.functions):
            try:
                value = float(fn())
            except (AttributeError, TypeError, ValueError, RuntimeError):
                value = float("nan")
            if cumulative:
                yield CounterMetricFamily(name, help, value=value)
            else:
                yield GaugeMetricFamily(name, help, value=value)
        samples = list(self.t.job_samples()) if self.t.job_samples is not None else []
        fams = {
            "epoch": GaugeMetricFamily("rebalancer_job_epoch", "assignment version of the job", labels=["job"]),
            "load_distance": GaugeMetricFamily("rebalancer_job_load_distance",
                                               "windowed load distance of the current assignment", labels=["job"]),
            "key_groups": GaugeMetricFamily("rebalancer_job_key_groups", "key groups of the job", labels=["job"]),
            "window_batches": GaugeMetricFamily("rebalancer_job_window_batches", "batches in the job's window",
                                                labels=["job"]),
        }
        migrations = CounterMetricFamily("rebalancer_job_migrations", "key groups moved by executed epochs",
                                         labels=["job"])
        for s in samples:
            fams["epoch"].add_metric([s.job_id], s.epoch)
            fams["key_groups"].add_metric([s.job_id], s.key_groups)
            fams["window_batches"].add_metric([s.job_id], s.window_batches)
            if s.load_distance is not None:
                fams["load_distance"].add_metric([s.job_id], s.load_distance)
            if s.job_id in self.t.migrations:  # only once the controller reports its epochs (record_epoch)
                migrations.add_metric([s.job_id], self.t.migrations[s.job_id])
        yield from fams.values()
        yield migrations


class Telemetry:
    """All metrics of one controller process."""

    def __init__(self, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(r, "rebalancer_requests_total", "HTTP requests", ("method", "route", "status"))
        self.latency = Histogram(r, "rebalancer_request_seconds", "HTTP request latency", ("route",))
        self.solve_seconds = Histogram(r, "rebalancer_solve_seconds", "planner wall time (including the pool hop)",
                                       ("algorithm",), SOLVE_BUCKETS)
        self.plans = Counter(r, "rebalancer_plans_total", "plans computed", ("algorithm", "status"))
        self.epochs = Counter(r, "rebalancer_epochs_total", "epochs created (assignment versions)", ("kind",))
        self.batches = Counter(r, "rebalancer_stats_batches_total", "statistics batches posted", ("result",))
        self.loop_lag = Histogram(r, "rebalancer_event_loop_lag_seconds", "how late the event loop ran a timer "
                                  f"due every {LAG_PERIOD_S:g} s: what a request arriving then waited", (), LAG_BUCKETS)
        self.functions: list[tuple[str, str, Callable[[], float], bool]] = []
        self.job_samples: Callable[[], Iterable[JobSample]] | None = None
        self.migrations: dict[str, int] = {}
        self._lock = threading.Lock()
        r.register(_Functions(self))
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)

    def gauge(self, name: str, help: str, fn: Callable[[], float], cumulative: bool | None = None) -> None:
        """A value read at scrape time; ``cumulative`` (default: the names in :data:`CUMULATIVE`) exposes it as a
        counter ``<name>_total``."""
        cum = name in CUMULATIVE if cumulative is None else cumulative
        self.functions.append((name.removesuffix("_total"), help, fn, cum))

    def record_epoch(self, job_id: str, kind: str, moves: int) -> None:
        """An epoch was committed for ``job_id`` with ``moves`` key groups migrated."""
        self.epochs.inc(kind)
        with self._lock:
            self.migrations[job_id] = self.migrations.get(job_id, 0) + int(moves)

    def forget_job(self, job_id: str) -> None:
        with self._lock:
            self.migrations.pop(job_id, None)

    def render(self) -> str:
        return generate_latest(self.registry).decode()


def job_sampler(jobs: Callable[[], dict[str, Any]]) -> Callable[[], Iterator[JobSample]]:
    """Per-job samples read from the controller's jobs; the load distance is recomputed only when the job's epoch
    or window changed (a scrape stays cheap with many large jobs)."""
    from solvers import metrics

    cache: dict[str, tuple[tuple[Any, ...], float | None]] = {}

    def sample() -> Iterator[JobSample]:
        live = dict(jobs())
        for jid in list(cache):
            if jid not in live:
                del cache[jid]
        for jid, job in live.items():
            batches = job.window.batches
            key = (job.epoch, len(batches), next(reversed(batches), None), len(job.nodes))
            hit = cache.get(jid)
            if hit is None or hit[0] != key:
                ld: float | None = None
                if batches:
                    problem = job.problem()
                    ld = metrics.load_distance(problem, problem.current)
                hit = cache[jid] = (key, ld)
            yield JobSample(jid, int(job.epoch), len(job.kg_ids), len(batches), hit[1])

    return sample


async def watch_loop(lag: Histogram, period: float = LAG_PERIOD_S) -> None:
    """Every ``period``, observe how late the event loop woke this task: the time a request arriving then would
    have waited before the loop read it — a callback that ran long, a thread holding the GIL, or the CPU taken by
    other processes. Runs until cancelled (at shutdown)."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)
        lag.observe(max(0.0, loop.time() - due))
