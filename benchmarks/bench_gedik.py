"""Benchmark: reproduction of Gedik's experiments (§5, Fig. 3–8 and 12–14) → bench-results/gedik.json + PNGs.

Protocol of §5.1: Zipf(z) frequencies over a domain of |D| keys (the k-th most frequent key has f ∝ 1/k^z);
start at N = 1 and build the function for N = 1, 2, …, N_max, each from the previous one; report the metrics of
the last step (N−1 → N): relative imbalance b and b_k (Eq. 11, over the whole domain), relative migration m
(Eq. 12, over the whole domain), explicit-hash size and construction time; average over 5 runs (seeds of the
key hash and of the ring). Defaults (Table 1): N = 10, z = 1, |D| = 10^6, α = 1.2, LCL, σ = 0.1, U^APM, consistent
hash with 1000 replicas. Algorithms: scan, redist, readj and the baselines uniform and consistent hash.

The frequencies are the exact Zipf frequencies (what lossy counting converges to for ε → 0); the tracked items
are those with f ≥ δ (Eq. 17 / §4.1.3). Untracked keys are routed with the consistent hash; their loads and
migrations are computed exactly over all |D| keys (cached per N, shared by all algorithms).

Also measured: ``partition route`` throughput through the CLI (keys/s, wall incl. start-up, and CPU), the
construction-time targets (CPU seconds of the construction, ``time.process_time``; wall seconds are recorded too but
are inflated on a shared machine), and an ablation of readj's stopping rule. Fig. 8 uses 2 runs for |D| ≥ 10^7.

Usage: ``python -m benchmarks.bench_gedik [--quick] [--runs R] [--max-domain D] [--tuples M] [--out DIR]``
(default: about 2 CPU-minutes, 4–5 minutes wall on the shared 2-core machine; ``--quick``: about 20 CPU-seconds).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.gedik_plots import ALGOS, plots
from benchmarks.gedik_report import fig6_deviation, table, targets
from benchmarks.gedik_route import measure_route
from solvers.gedik.construct import Instance, construct
from solvers.gedik.model import Config, balance_metrics, beta, select_tracked
from solvers.gedik.ring import ConsistentHash, uniform_lookup
from solvers.hashing import hash64_array

FN = {"C": "constant", "L": "linear", "Q": "quadratic"}
REPLICAS = 1000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Domain:
    """Key positions of a domain of |D| keys for one run (seed); cached channel arrays per N."""

    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed
        self.pos = hash64_array(np.arange(size, dtype=np.uint64), 1000 + seed)
        self._hc: dict[int, np.ndarray] = {}
        self._uni: dict[int, np.ndarray] = {}

    def hc(self, n: int) -> np.ndarray:
        if n not in self._hc:
            self._hc[n] = ConsistentHash(n, REPLICAS, seed=seed_ring(self.seed)).lookup(self.pos).astype(_small(n))
        return self._hc[n]

    def uni(self, n: int) -> np.ndarray:
        if n not in self._uni:
            self._uni[n] = uniform_lookup(self.pos, n).astype(_small(n))
        return self._uni[n]


def _small(n: int):
    return np.int8 if n <= 127 else np.int16


def seed_ring(seed: int) -> int:
    return 7 + seed


class Workload:
    """Zipf frequencies on a domain; cached per-channel loads and moved mass of the base hashes."""

    def __init__(self, dom: Domain, z: float):
        self.dom, self.z = dom, z
        w = np.arange(1, dom.size + 1, dtype=np.float64) ** (-z)
        self.f = w / w.sum()
        self._beta: dict[str, np.ndarray] = {}
        self._loads: dict = {}
        self._moved: dict = {}

    def estimate(self, n: int, tuples: int | None) -> np.ndarray:
        """Frequencies a tracker sees in period n: exact, or binomial counts over ``tuples`` tuples (top keys)."""
        if tuples is None:
            return self.f
        key = ("est", n, tuples)
        if key not in self._loads:
            rng = np.random.default_rng([self.dom.seed, n, int(round(self.z * 1000)), int(tuples)])
            top = min(len(self.f), 100_000)
            self._loads[key] = rng.binomial(int(tuples), self.f[:top]) / float(tuples)
        return self._loads[key]

    def total(self, fn: str) -> float:
        key = ("total", fn)
        if key not in self._moved:
            self._moved[key] = float(self.beta(fn).sum())
        return self._moved[key]

    def beta(self, fn: str) -> np.ndarray:
        if fn not in self._beta:
            self._beta[fn] = beta(fn, self.f)
        return self._beta[fn]

    def base(self, kind: str, n: int) -> np.ndarray:
        return self.dom.hc(n) if kind == "consistent" else self.dom.uni(n)

    def loads(self, kind: str, fn: str, n: int) -> np.ndarray:
        key = (kind, fn, n)
        if key not in self._loads:
            w = None if fn == "constant" else self.beta(fn)
            self._loads[key] = np.bincount(self.base(kind, n), weights=w, minlength=n).astype(np.float64)
        return self._loads[key]

    def moved(self, kind: str, fn: str, n: int) -> float:
        key = (kind, fn, n)
        if key not in self._moved:
            a, b = self.base(kind, n - 1), self.base(kind, n)
            self._moved[key] = float(self.beta(fn)[a != b].sum())
        return self._moved[key]


def run_sequence(wl: Workload, alg: str, cfg: Config, n_max: int, tuples: int | None = None) -> list[dict]:
    """Build the function for N = 1..n_max (§5.1) and return the metrics of every step N ≥ 2.

    The construction sees exact frequencies (``tuples`` None) or, per period, frequencies counted over a sample of
    ``tuples`` tuples (binomial counts: the noise of a real frequency tracker); metrics always use the true ones.
    """
    kind = "uniform" if alg == "uniform" else "consistent"
    out = []
    t_prev, a_prev = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    for n in range(1, n_max + 1):
        if alg in ("uniform", "consistent"):
            t, a, secs = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), (0.0, 0.0)
        else:
            fe = wl.estimate(n, tuples)
            mask = _tracked(fe, n, cfg, wl.dom.size)
            t = np.flatnonzero(mask)
            hc_new = wl.dom.hc(n)
            old = wl.dom.hc(n - 1)[t].astype(np.int64) if n > 1 else np.full(len(t), -1)
            if len(t_prev):
                pos = np.searchsorted(t_prev, t)
                pos[pos == len(t_prev)] = 0
                hit = t_prev[pos] == t
                old[hit] = a_prev[pos[hit]]
            gone = ~np.isin(t_prev, t)
            o_ids = t_prev[gone]
            inst = Instance(channels=n, freqs=fe[t], old=old, hc_new=hc_new[t],
                            o_freqs=np.where(o_ids < len(fe), fe[np.minimum(o_ids, len(fe) - 1)], 0.0),
                            o_old=a_prev[gone], o_hc_new=hc_new[o_ids], has_previous=n > 1)
            t0, c0 = time.perf_counter(), time.process_time()
            a = construct(alg, inst, cfg)
            secs = (time.process_time() - c0, time.perf_counter() - t0)
        if n >= 2:
            out.append(_metrics(wl, kind, cfg, n, t, a, t_prev, a_prev, secs))
        t_prev, a_prev = t, a
    return out


def _tracked(fe: np.ndarray, n: int, cfg: Config, size: int) -> np.ndarray:
    """select_tracked on the (descending) frequencies, looking only at the top 100,000 unless δ is lower."""
    cap = min(len(fe), 100_000)
    _, _, mask = select_tracked(fe[:cap], n, cfg, size)
    if cap < len(fe) and mask[-1]:
        _, _, mask = select_tracked(fe, n, cfg, size)
    return mask


def _metrics(wl, kind, cfg, n, t, a, t_prev, a_prev, secs) -> dict:
    """b, b_k, m over the whole domain (true frequencies) for tracked ids ``t`` mapped to ``a``."""
    f = wl.f
    base_now = wl.base(kind, n)
    loads = np.zeros((3, n))
    for k in range(3):
        fn = cfg.resources[k]
        L = wl.loads(kind, fn, n).copy()
        if len(t):
            bv = beta(fn, f[t])
            L -= np.bincount(base_now[t], weights=bv, minlength=n)
            L += np.bincount(a, weights=bv, minlength=n)
        loads[k] = L
    met = balance_metrics(loads, cfg.alpha)
    fs = cfg.resources[0]
    u = np.union1d(t, t_prev)
    base_prev = wl.base(kind, n - 1)
    bs = beta(fs, f[u])
    p_prev = base_prev[u].astype(np.int64)
    p_prev[np.searchsorted(u, t_prev)] = a_prev
    p_new = base_now[u].astype(np.int64)
    p_new[np.searchsorted(u, t)] = a
    moved = wl.moved(kind, fs, n) - float(bs[base_prev[u] != base_now[u]].sum()) + float(bs[p_prev != p_new].sum())
    ideal = wl.total(fs) / n
    b_k = met["b_k"]
    return {"N": n, "b": met["b"], "b_s": b_k["state"], "b_c": b_k["computation"], "b_n": b_k["communication"],
            "m": moved / ideal, "explicit": len(t), "seconds": secs[0], "wall_seconds": secs[1]}


# ---------------------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, runs: int, tuples: int | None = None):
        self.runs = runs
        self.tuples = tuples
        self._domains: dict = {}
        self._workloads: dict = {}

    def workload(self, size: int, seed: int, z: float) -> Workload:
        key = (size, seed, z)
        if key not in self._workloads:
            dk = (size, seed)
            if dk not in self._domains:
                # keep memory bounded: drop domains of other sizes
                for other in [d for d in self._domains if d[0] != size]:
                    del self._domains[other]
                    for w in [w for w in self._workloads if w[0] == other[0]]:
                        del self._workloads[w]
                self._domains[dk] = Domain(size, seed)
            self._workloads[key] = Workload(self._domains[dk], z)
        return self._workloads[key]

    def point(self, algs, res="LCL", z=1.0, size=10**6, sigma=0.1, utility="APM", n_max=10, alpha=1.2,
              all_steps=False, tuples="default") -> dict:
        """Average over runs of the metrics at N = n_max (or of every step when all_steps)."""
        cfg = Config(resources=tuple(FN[c] for c in res), alpha=(alpha,) * 3, sigma=sigma, utility=utility)
        out = {}
        for alg in algs:
            tp = self.tuples if tuples == "default" else tuples
            seqs = [run_sequence(self.workload(size, s, z), alg, cfg, n_max, tp) for s in range(self.runs)]
            if all_steps:
                out[alg] = [_avg([sq[i] for sq in seqs]) for i in range(len(seqs[0]))]
            else:
                out[alg] = _avg([sq[-1] for sq in seqs])
        return out


def _avg(rows: list[dict]) -> dict:
    keys = rows[0].keys()
    res = {}
    for k in keys:
        vals = [r[k] for r in rows]
        if any(v is None for v in vals):
            res[k] = None
        else:
            res[k] = float(np.mean(vals))
    res["seconds_max"] = float(max(r["seconds"] for r in rows))
    res["wall_seconds_max"] = float(max(r["wall_seconds"] for r in rows))
    return res


# ---------------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced run (< 1 minute)")
    ap.add_argument("--runs", type=int, default=None, help="runs averaged per point (default 5, quick 2)")
    ap.add_argument("--max-domain", type=float, default=None, help="largest domain size of Fig. 8 (default 1e7)")
    ap.add_argument("--out", default="bench-results", help="output directory")
    ap.add_argument("--tuples", type=float, default=None,
                    help="construct from frequencies counted over this many sampled tuples per period "
                         "(default: exact Zipf frequencies)")
    args = ap.parse_args(argv)
    quick = args.quick
    args.tuples = int(args.tuples) if args.tuples else None
    runs = args.runs or (2 if quick else 5)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    B = Bench(runs, args.tuples)
    res: dict = {"config": {"runs": runs, "quick": quick, "replicas": REPLICAS, "tuples": args.tuples, "defaults": {
        "N": 10, "z": 1.0, "domain": 10**6, "alpha": 1.2, "resources": "LCL", "sigma": 0.1, "utility": "APM"}}}

    log("[gedik] Fig. 3: resource functions")
    res["fig3_resources"] = {rc: B.point(ALGOS, res=rc) for rc in ["CCL", "LCL", "LLL", "LQL"]}

    log("[gedik] Fig. 6/13: number of channels")
    n_max = 16 if quick else 32
    steps = B.point(ALGOS, n_max=n_max, all_steps=True)
    res["fig6_channels"] = {"N": [s["N"] for s in steps["readj"]], **{a: steps[a] for a in ALGOS}}

    log("[gedik] ablation: readj that also requires a utility gain (the text's stopping rule)")
    cfg_g = Config(readj_require_gain=True)
    seqs = [run_sequence(B.workload(10**6, s, 1.0), "readj", cfg_g, n_max, args.tuples) for s in range(runs)]
    res["ablation_readj_require_gain"] = {"N": [s["N"] for s in seqs[0]],
                                          "readj": [_avg([sq[i] for sq in seqs]) for i in range(len(seqs[0]))]}
    log("[gedik] ablation: scan/redist breaking utility ties by the lowest channel (the listings)")
    cfg_i = Config(tie_break="index")
    res["ablation_tie_break_index"] = {"N": res["fig6_channels"]["N"]}
    for alg in ("scan", "redist"):
        seqs = [run_sequence(B.workload(10**6, s, 1.0), alg, cfg_i, n_max, args.tuples) for s in range(runs)]
        res["ablation_tie_break_index"][alg] = [_avg([sq[i] for sq in seqs]) for i in range(len(seqs[0]))]
    res["fig6_deviation"] = fig6_deviation(res)

    log("[gedik] Fig. 4/14: skew")
    zs = [0.5, 0.8, 1.0] if quick else [0.2, 0.4, 0.6, 0.8, 0.9, 1.0]
    zq = [0.25, 0.5] if quick else [0.25, 0.35, 0.45, 0.5]
    res["fig4_skew"] = {}
    for rc, zz in [("LCL", zs), ("LLL", zs), ("LQL", zq)]:
        pts = [B.point(ALGOS, res=rc, z=z) for z in zz]
        res["fig4_skew"][rc] = {"z": zz, **{a: [p[a] for p in pts] for a in ALGOS}}

    log("[gedik] Fig. 5/12: sigma")
    sig = [0.025, 0.1, 1.0] if quick else [0.008, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0]
    res["fig5_sigma"] = {}
    for rc in ["LCL", "LQL"]:
        pts = [B.point(ALGOS, res=rc, sigma=s) for s in sig]
        res["fig5_sigma"][rc] = {"sigma": sig, **{a: [p[a] for p in pts] for a in ALGOS}}
        log(f"[gedik]   {rc} done ({time.perf_counter() - t_start:.0f}s)")

    if quick:  # one run of the σ = 0.008 point (the full run takes it from the Fig. 5 sweep)
        res["time_sigma_0008"] = Bench(1, args.tuples).point(("scan", "redist", "readj"), sigma=0.008)
    else:
        j = sig.index(0.008)
        res["time_sigma_0008"] = {a: res["fig5_sigma"]["LCL"][a][j] for a in ("scan", "redist", "readj")}

    log("[gedik] Fig. 7: utility functions")
    res["fig7_utility"] = {}
    for rc in (["LCL"] if quick else ["CCL", "LCL", "LLL", "LQL"]):
        res["fig7_utility"][rc] = {u: B.point(("redist", "readj"), res=rc, utility=u)
                                   for u in ["A", "APM", "APLM", "ATM", "ATLM"]}

    log("[gedik] Fig. 8: domain size")
    max_dom = args.max_domain or (10**6 if quick else 10**7)
    doms = [d for d in [10**4, 10**5, 10**6, 10**7, 10**8] if d <= max_dom]
    pts = []
    for d in doms:
        # |D| >= 1e7: 2 runs (each run hashes and routes all |D| keys for every N)
        Bd = B if d < 10**7 else Bench(min(runs, 2), args.tuples)
        pts.append(Bd.point(ALGOS, size=d))
        del Bd
        log(f"[gedik]   |D|={d:.0e} done ({time.perf_counter() - t_start:.0f}s)")
    res["fig8_domain"] = {"domain": doms, **{a: [p[a] for p in pts] for a in ALGOS}}
    B._domains.clear()
    B._workloads.clear()

    log("[gedik] lookup throughput through `partition route`")
    with tempfile.TemporaryDirectory() as td:
        res["lookup"] = measure_route(2_000_000 if quick else 5_000_000, Path(td), 2 if quick else 3)

    res["targets"] = targets(res)
    res["seconds"] = time.perf_counter() - t_start
    (out_dir / "gedik.json").write_text(json.dumps(res, indent=1))
    try:
        plots(res, out_dir)
    except Exception as exc:  # plots are a convenience; never lose the JSON because of them
        log(f"[gedik] plotting failed: {exc}")
    log(table(res))
    log(f"[gedik] wrote {out_dir / 'gedik.json'} in {res['seconds']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
