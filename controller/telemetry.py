"""Prometheus text exposition without a dependency: counters and histograms with labels.

Exposed at ``GET /metrics``: ``rebalancer_requests_total{method,route,status}``,
``rebalancer_request_seconds{route}`` (histogram), ``rebalancer_solve_seconds{algorithm}`` (histogram),
``rebalancer_plans_total{algorithm,status}``, ``rebalancer_epochs_total{kind}``,
``rebalancer_stats_batches_total{result}``, ``rebalancer_jobs``, ``rebalancer_solves_in_flight``.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SOLVE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    inner = ",".join(f'{n}="{_esc(v)}"' for n, v in zip(names, values))
    return "{" + inner + "}"


def _esc(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Counter:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = ()):
        self.name, self.help, self.labels = name, help, labels
        self.values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()

    def inc(self, *labels: str, by: float = 1.0) -> None:
        with self._lock:
            self.values[labels] = self.values.get(labels, 0.0) + by

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for lv, v in sorted(self.values.items()):
            yield f"{self.name}{_labels(self.labels, lv)} {v:g}"


class Histogram:
    def __init__(self, name: str, help: str, labels: tuple[str, ...] = (), buckets: tuple[float, ...] = LATENCY_BUCKETS):
        self.name, self.help, self.labels, self.buckets = name, help, labels, buckets
        self.series: dict[tuple[str, ...], list] = {}  # labels -> [bucket counts..., sum, count]
        self._lock = threading.Lock()

    def observe(self, value: float, *labels: str) -> None:
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            s = self.series.get(labels)
            if s is None:
                s = self.series[labels] = [0] * len(self.buckets) + [0.0, 0]
            if i < len(self.buckets):
                s[i] += 1
            s[-2] += value
            s[-1] += 1

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for lv, s in sorted(self.series.items()):
            acc = 0
            for b, c in zip(self.buckets, s):
                acc += c
                yield f"{self.name}_bucket{_labels(self.labels + ('le',), lv + (f'{b:g}',))} {acc}"
            yield f"{self.name}_bucket{_labels(self.labels + ('le',), lv + ('+Inf',))} {s[-1]}"
            yield f"{self.name}_sum{_labels(self.labels, lv)} {s[-2]:.6f}"
            yield f"{self.name}_count{_labels(self.labels, lv)} {s[-1]}"


class Gauge:
    def __init__(self, name: str, help: str, fn: Callable[[], float]):
        self.name, self.help, self.fn = name, help, fn

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} gauge"
        try:
            yield f"{self.name} {float(self.fn()):g}"
        except Exception:
            yield f"{self.name} NaN"


class Telemetry:
    """All metrics of one controller process."""

    def __init__(self) -> None:
        self.requests = Counter("rebalancer_requests_total", "HTTP requests", ("method", "route", "status"))
        self.latency = Histogram("rebalancer_request_seconds", "HTTP request latency", ("route",))
        self.solve_seconds = Histogram("rebalancer_solve_seconds", "planner wall time (including the pool hop)",
                                       ("algorithm",), SOLVE_BUCKETS)
        self.plans = Counter("rebalancer_plans_total", "plans computed", ("algorithm", "status"))
        self.epochs = Counter("rebalancer_epochs_total", "epochs created (assignment versions)", ("kind",))
        self.batches = Counter("rebalancer_stats_batches_total", "statistics batches posted", ("result",))
        self.gauges: list[Gauge] = []

    def gauge(self, name: str, help: str, fn: Callable[[], float]) -> None:
        self.gauges.append(Gauge(name, help, fn))

    def render(self) -> str:
        lines: list[str] = []
        for m in (self.requests, self.latency, self.solve_seconds, self.plans, self.epochs, self.batches,
                  *self.gauges):
            lines.extend(m.render())
        return "\n".join(lines) + "\n"
