"""The offline grouping simulator: s sources fed by shuffle, n workers with capacities, a discrete-time queue model.

Model (the papers' simulation DAG: D-C paper §V-A "Simulation", CG paper §7.1 and §6 "Supermarket Model"):

* The stream arrives at ``arrival_rate`` messages per simulated second (default ``load`` × total service rate).
  Message i goes to source i mod s (shuffle grouping upstream; the start offset rotates so every source gets its
  share). Each source routes its messages, in order, with its own instance of the grouping (local state).
* Time advances in ticks of ``tick`` simulated seconds (the chunk of messages arriving in a tick is routed as one
  array). Groupings with wall-clock rules (DKG, CG) get the tick's start time; CG gets the workers' utilisation
  at the end of each tick (its own period t0 limits how often it acts).
* Worker w serves ``service_rate`` × c_w messages per second, FIFO, deterministic service (fluid at tick
  resolution): q ← q + arrivals; served = min(q, μ_w·dt). Utilisation (CG paper Table 4, "ratio between
  queue length and capacity of worker") = queue length / (``queue_capacity`` · c_w), where ``queue_capacity``
  defaults to one second of service of a unit-capacity worker (so utilisation reads "seconds of backlog");
  busy fraction (the CPU utilisation of the CG paper's simulations) = served / (μ_w·dt).
* CG's busy/idle signals use the busy fraction by default (``signal="busy"``) or the queue utilisation
  (``signal="queue"``); see the benchmark notes for why the queue signal drives fast workers to saturation.
* Latency of the messages arriving at worker w in tick k: departure time of their middle message read off the
  cumulative service curve (linear within a tick), minus the middle of the tick; at least one service time.
  Messages still queued at the end are extrapolated at the final service rate. Percentiles are weighted by
  message counts.
* Capacity changes (``capacity_changes``: list of ``(fraction_of_messages, capacities)``) model the CG paper's
  Fig. 12.

Metrics (docs/design.md "Stream groupings", :mod:`solvers.groupings.metrics`): worker load L_w = messages routed to
w; imbalance I = max L/m − avg L/m (D-C paper §II-B, normalised by messages; ``imbalance_messages`` is the same in
messages), normalised imbalance (max − avg)/avg (CG paper Table 1), replication = Σ_keys |workers that saw the
key| / |keys seen|; throughput at saturation = the largest arrival
rate no worker exceeds: min_w μ_w / share_w (and relative to Σ μ_w).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evaluation.simulator.config import SimulationConfig
from evaluation.simulator.streams import Stream
from solvers.errors import InvalidInput
from solvers.groupings import make_grouping
from solvers.groupings.metrics import imbalance, imbalance_messages, normalized_imbalance

__all__ = ["SimulationConfig", "simulate", "weighted_percentiles"]

#: largest number of (key, worker) cells tracked with a dense table; beyond, a set of codes is used
DENSE_REPLICATION_CELLS = 20_000_000
MAX_CHUNK = 65_536


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> list[float]:
    """Percentiles (q in [0, 100]) of ``values`` where value i occurs ``weights[i]`` times."""
    mask = weights > 0
    v = values[mask]
    w = weights[mask].astype(float)
    if v.size == 0:
        return [0.0 for _ in qs]
    order = np.argsort(v, kind="stable")
    v = v[order]
    cw = np.cumsum(w[order])
    total = cw[-1]
    out = []
    for q in qs:
        idx = int(np.searchsorted(cw, q / 100.0 * total, side="left"))
        out.append(float(v[min(idx, v.size - 1)]))
    return out


class _Replication:
    """Distinct (key, worker) pairs seen: a dense boolean table when small, else sorted unique pair codes merged
    in batches (numpy only)."""

    MERGE_AT = 4_000_000

    def __init__(self, n_keys: int, n: int):
        self.n = n
        self.dense = n_keys * n <= DENSE_REPLICATION_CELLS
        if self.dense:
            self.table = np.zeros((n_keys, n), dtype=bool)
        else:
            self._merged = np.empty(0, dtype=np.int64)
            self._pending: list[np.ndarray] = []
            self._pending_size = 0

    def add(self, keys: np.ndarray, workers: np.ndarray) -> None:
        if self.dense:
            self.table[keys, workers] = True
            return
        codes = np.unique(keys * self.n + workers)
        self._pending.append(codes)
        self._pending_size += codes.size
        if self._pending_size >= self.MERGE_AT:
            self._merge()

    def _merge(self) -> None:
        if self._pending:
            self._merged = np.unique(np.concatenate([self._merged, *self._pending]))
            self._pending = []
            self._pending_size = 0

    def counts(self) -> tuple[int, int]:
        """(distinct (key, worker) pairs, distinct keys)."""
        if self.dense:
            per_key = self.table.sum(axis=1)
            return int(per_key.sum()), int(np.count_nonzero(per_key))
        self._merge()
        keys = self._merged // self.n           # sorted, so distinct keys = number of value changes
        distinct_keys = int(keys.size and 1 + np.count_nonzero(np.diff(keys)))
        return int(self._merged.size), distinct_keys

    def value(self) -> float:
        pairs, keys = self.counts()
        return pairs / keys if keys else 0.0


def _downsample(idx_count: int, points: int) -> np.ndarray:
    if idx_count <= points:
        return np.arange(idx_count)
    return np.unique(np.linspace(0, idx_count - 1, points).round().astype(int))


class _Run:
    """One simulation as it advances a tick at a time: the sources' groupings, the workers' loads and queues, the
    rows the latency is computed from at the end and the time series (see the module docstring)."""

    SERIES = ("time", "messages", "imbalance", "imbalance_normalized", "queue_spread", "utilisation_spread",
              "busy_spread", "max_queue")

    def __init__(self, stream: Stream, config: SimulationConfig):
        self.config = config
        self.n = n = int(config.workers)
        self.s = int(config.sources)
        self.caps = np.ones(n) if config.capacities is None else np.asarray(config.capacities, dtype=float)
        self.mu = self.caps * config.service_rate
        self.lam = config.arrival_rate if config.arrival_rate is not None else config.load * float(self.mu.sum())
        self.qcap_unit = config.queue_capacity if config.queue_capacity is not None else config.service_rate
        self.chunk = int(min(MAX_CHUNK, max(1, round(self.lam * config.tick))))
        self.m_total = m_total = int(stream.n_messages)
        self.changes = sorted(((int(round(float(f) * m_total)), np.asarray(c, dtype=float))
                               for f, c in config.capacity_changes), key=lambda x: x[0])
        self.sources = [make_grouping(config.grouping, n, seed=config.seed, source_index=j, **dict(config.params))
                        for j in range(self.s)]
        self.uses_signals = self.sources[0].uses_signals
        self.rep = _Replication(int(stream.n_keys), n)
        self.loads = np.zeros(n, dtype=np.int64)
        self.q = np.zeros(n)
        self.served_cum = np.zeros(n)
        self.rows: dict[str, list[Any]] = {k: [] for k in ("arrivals", "served", "start", "dt", "mu")}
        self.ser: dict[str, list[float]] = {k: [] for k in self.SERIES}
        self.now = 0.0
        self.done = 0
        self.offset = 0
        self.route_seconds = 0.0

    def _route(self, keys: np.ndarray) -> np.ndarray:
        """The worker of each message of the tick: message i goes to source i mod s, which routes its share."""
        m, s = len(keys), self.s
        workers = np.empty(m, dtype=np.int64)
        t0 = time.perf_counter()
        for j in range(s):
            first = (j - self.offset) % s
            if first >= m:
                continue
            sel = slice(first, m, s)
            workers[sel] = self.sources[j].route(keys[sel], self.now)
        self.route_seconds += time.perf_counter() - t0
        self.offset = (self.offset + m) % s
        return workers

    def tick(self, keys: np.ndarray) -> None:
        """Route one tick's messages, serve the queues, tell the groupings that want them the workers' signals."""
        while self.changes and self.changes[0][0] <= self.done:
            self.caps = self.changes.pop(0)[1]
            self.mu = self.caps * self.config.service_rate
        m = len(keys)
        dt = m / self.lam
        workers = self._route(keys)
        counts = np.bincount(workers, minlength=self.n)
        self.loads += counts
        self.rep.add(keys, workers)
        # queue model
        self.q += counts
        served = np.minimum(self.q, self.mu * dt)
        self.q -= served
        self.served_cum += served
        rows = self.rows
        rows["arrivals"].append(counts)
        rows["served"].append(self.served_cum.copy())
        rows["start"].append(self.now)
        rows["dt"].append(dt)
        rows["mu"].append(self.mu.copy())
        self.now += dt
        self.done += m
        util = self.q / (self.qcap_unit * self.caps)
        busy = served / (self.mu * dt)
        if self.uses_signals:
            sig = busy if self.config.signal == "busy" else util
            for g in self.sources:
                g.observe(self.now, sig)
        self._record(util, busy)

    def _record(self, util: np.ndarray, busy: np.ndarray) -> None:
        ser, q = self.ser, self.q
        ser["time"].append(self.now)
        ser["messages"].append(self.done)
        ser["imbalance"].append(imbalance(self.loads))
        ser["imbalance_normalized"].append(normalized_imbalance(self.loads))
        ser["queue_spread"].append(float(q.max() - q.min()))
        ser["utilisation_spread"].append(float(util.max() - util.min()))
        ser["busy_spread"].append(float(busy.max() - busy.min()))
        ser["max_queue"].append(float(q.max()))

    def latency(self) -> tuple[np.ndarray, np.ndarray]:
        """(arrivals, latency), both (ticks, n), from the cumulative arrival and service curves."""
        n = self.n
        A = np.asarray(self.rows["arrivals"], dtype=float)   # (ticks, n) arrivals per tick
        S = np.asarray(self.rows["served"], dtype=float)     # (ticks, n) cumulative service at tick end
        T0 = np.asarray(self.rows["start"])
        DT = np.asarray(self.rows["dt"])
        MU = np.asarray(self.rows["mu"])
        A_before = np.cumsum(A, axis=0) - A
        mid = A_before + A / 2.0
        # per worker: the first tick whose cumulative service reaches the middle message (all workers at once: the
        # columns of S are non-decreasing, so offsetting column w by w·BIG makes the flattened array sorted)
        S_start = np.vstack([np.zeros((1, n)), S[:-1]])
        T = len(T0)
        big = float(max(S[-1].max(), mid.max()) + 1.0)
        offs = np.arange(n, dtype=float) * big
        flat = (S + offs).T.ravel()
        idx = np.searchsorted(flat, (mid + offs).T.ravel(), side="left").reshape(n, T).T - np.arange(n) * T
        inside = idx < T
        kk = np.minimum(idx, T - 1)
        cols = np.broadcast_to(np.arange(n), kk.shape)
        s_end = S[kk, cols]
        s_beg = S_start[kk, cols]
        span = s_end - s_beg
        frac = np.where(span > 0, (mid - s_beg) / np.where(span > 0, span, 1.0), 1.0)
        dep = np.where(inside, T0[kk] + np.clip(frac, 0.0, 1.0) * DT[kk], self.now + (mid - S[-1]) / self.mu)
        arr_t = (T0 + DT / 2.0)[:, None]
        return A, np.maximum(dep - arr_t, 1.0 / MU)

    def result(self, stream: Stream, wall_start: float) -> dict[str, Any]:
        """The metrics document (see the module docstring)."""
        config, loads, done, mu = self.config, self.loads, self.done, self.mu
        A, lat = self.latency()
        p50, p95, p99, pmax = weighted_percentiles(lat.ravel(), A.ravel(), [50, 95, 99, 100])
        shares = loads / done
        pos = shares > 0
        sat = float(np.min(mu[pos] / shares[pos])) if pos.any() else 0.0
        result: dict[str, Any] = {
            "grouping": config.grouping,
            "params": {k: v for k, v in dict(config.params).items()},
            "workers": self.n,
            "sources": self.s,
            "capacities": [float(c) for c in self.caps],
            "stream": stream.describe(),
            "messages": int(done),
            "keys_seen": self.rep.counts()[1],
            "imbalance": imbalance(loads),
            "imbalance_normalized": normalized_imbalance(loads),
            "imbalance_messages": imbalance_messages(loads),
            "replication": self.rep.value(),
            "worker_loads": [int(x) for x in loads],
            **self._spreads(),
            "latency": {"p50": p50, "p95": p95, "p99": p99, "max": pmax,
                        "mean": float((lat * A).sum() / max(A.sum(), 1.0))},
            "throughput_at_saturation": {"messages_per_second": sat, "relative": sat / float(mu.sum())},
            "arrival_rate": float(self.lam),
            "simulated_seconds": float(self.now),
            "seconds": time.perf_counter() - wall_start,
            "routing_seconds": self.route_seconds,
            "routing_rate": done / self.route_seconds if self.route_seconds > 0 else None,
            "series": self._series(A, lat),
        }
        return {**result, **self._grouping_figures()}

    def _spreads(self) -> dict[str, Any]:
        util_arr = np.asarray(self.ser["utilisation_spread"])
        busy_arr = np.asarray(self.ser["busy_spread"])
        qs_arr = np.asarray(self.ser["queue_spread"])
        last = slice(int(len(util_arr) * 0.75), None)
        return {"queue_length_spread": {"final": float(qs_arr[-1]), "mean": float(qs_arr.mean()),
                                        "max": float(qs_arr.max())},
                "utilisation_spread": {"final": float(util_arr[-1]), "mean": float(util_arr.mean()),
                                       "last_quarter_mean": float(util_arr[last].mean())},
                "busy_spread": {"final": float(busy_arr[-1]), "last_quarter_mean": float(busy_arr[last].mean())}}

    def _series(self, A: np.ndarray, lat: np.ndarray) -> dict[str, list[float]]:
        """The time series, down-sampled to ``config.series_points``, with the mean and max latency per tick."""
        with np.errstate(invalid="ignore", divide="ignore"):
            lat_mean_tick = np.where(A.sum(1) > 0, (lat * A).sum(1) / np.maximum(A.sum(1), 1), 0.0)
        lat_max_tick = np.where(A > 0, lat, 0.0).max(axis=1)
        picked = _downsample(len(self.ser["time"]), self.config.series_points)
        series = {k: [float(v[i]) for i in picked] for k, v in self.ser.items()}
        series["latency_mean"] = [float(lat_mean_tick[i]) for i in picked]
        series["latency_max"] = [float(lat_max_tick[i]) for i in picked]
        return series

    def _grouping_figures(self) -> dict[str, Any]:
        """What some groupings report of themselves: CG's virtual workers, the D-Choices family's d."""
        out: dict[str, Any] = {}
        if self.uses_signals and hasattr(self.sources[0], "virtual_worker_counts"):
            cg: Any = self.sources[0]  # ConsistentGrouping
            out["virtual_workers"] = [int(x) for x in cg.virtual_worker_counts()]
            out["virtual_worker_moves"] = len(cg.moves)
        if hasattr(self.sources[0], "max_d"):
            heads: list[Any] = list(self.sources)  # D-Choices / W-Choices / RR
            out["max_d"] = int(max(g.max_d for g in heads))
            out["d"] = [int(g.d) for g in heads]
        return out


def _progress_bar(config: SimulationConfig, total: int) -> Any:
    """A tqdm bar on stderr when ``config.progress`` asks for one, else None."""
    if not config.progress:
        return None
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="msg", unit_scale=True, file=sys.stderr, desc=f"simulate {config.grouping}",
                    leave=False)
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None


def simulate(stream: Stream, config: SimulationConfig,
             on_tick: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run ``config.grouping`` on ``stream``; return the metrics document (see the module docstring)."""
    config.validate()
    run = _Run(stream, config)
    t_start = time.perf_counter()
    bar = _progress_bar(config, run.m_total)
    for keys in stream.chunks(run.chunk):
        run.tick(keys)
        if bar is not None:
            bar.update(len(keys))
        if on_tick is not None:
            on_tick(run.done, run.m_total)
    if bar is not None:
        bar.close()
    if run.done == 0:
        raise InvalidInput("messages", "the stream is empty")
    return run.result(stream, t_start)
