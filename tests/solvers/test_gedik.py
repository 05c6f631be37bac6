"""Tests of Gedik's partitioning functions (solvers/gedik): hashing, consistent hash, δ, lossy counting,
construction algorithms, build_document and route_keys."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.edge import Invalid, parse
from rebalancer_client import contract
from rebalancer_client.contract import PartitioningSpec
from rebalancer_client.wire import dump
from solvers.errors import InvalidInput
from solvers.gedik import (
    Config,
    ConsistentHash,
    Instance,
    LossyCounter,
    SlidingLossyCounter,
    build_document,
    construct,
    load_function,
    route_keys,
    select_tracked,
)
from solvers.gedik._hash import hash_lines, hash_strings, split_lines
from solvers.gedik.model import delta_for, theta
from solvers.hashing import hash64, hash64_array

ROOT = Path(__file__).resolve().parents[2]


def zipf_freqs(n_keys, z=1.0, domain=10**6):
    h = np.sum(1.0 / np.arange(1, domain + 1) ** z)
    return {f"k{i}": float(1.0 / (i ** z * h)) for i in range(1, n_keys + 1)}


def spec(**kw):
    s = {"algorithm": "readj", "channels": 10, "previous": None, "frequencies": zipf_freqs(300),
         "domain_size": 10**6, "resources": {"state": "linear", "computation": "constant",
                                             "communication": "linear"},
         "imbalance_tolerance": 1.2, "sigma": 0.1, "utility": "APM"}
    s.update(kw)
    return s


# ---------------------------------------------------------------- hashing -----------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40).filter(lambda b: b"\n" not in b and not b.endswith(b"\r")), max_size=30),
       st.integers(0, 2**64 - 1))
def test_bulk_line_hash_equals_shared_hash(keys, seed):
    data = b"\n".join(keys) + (b"\n" if keys else b"")
    got = hash_lines(data, seed)
    assert len(got) == len(keys)
    assert got.tolist() == [hash64(k, seed) for k in keys]


def test_split_lines_crlf_and_empty_lines():
    starts, lengths = split_lines(b"ab\r\n\ncd")
    assert lengths.tolist() == [2, 0, 2]
    assert starts.tolist() == [0, 4, 5]


def test_hash_strings_equals_shared_hash_for_unicode():
    keys = ["", "é", "ключ", "k" * 100, "a\x00b"]
    assert hash_strings(keys, 7).tolist() == hash64_array(keys, 7).tolist()


# ---------------------------------------------------------------- consistent hash ---------------------------
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 300), st.integers(0, 2**32))
def test_bucketed_lookup_equals_binary_search(n, replicas, seed):
    ring = ConsistentHash(n, replicas, seed)
    pos = hash64_array(np.arange(5000, dtype=np.uint64), seed + 1)
    pos = np.concatenate([pos, ring.points, ring.points - np.uint64(1), ring.points + np.uint64(1),
                          np.array([0, 2**64 - 1], dtype=np.uint64)])
    assert np.array_equal(ring.lookup(pos), ring.lookup_bisect(pos))
    # the definition: owner of the smallest point >= position, wrapping around
    for p in pos[:50].tolist():
        above = [(pt, int(o)) for pt, o in zip(ring.points.tolist(), ring.owner.tolist(), strict=False) if pt >= p]
        expect = above[0][1] if above else int(ring.owner[0])
        assert int(ring.lookup(np.array([p], dtype=np.uint64))[0]) == expect


def test_adding_a_channel_moves_keys_only_to_the_new_channel():
    pos = hash64_array(np.arange(200_000, dtype=np.uint64), 11)
    a = ConsistentHash(7, 200, 3).lookup(pos)
    b = ConsistentHash(8, 200, 3).lookup(pos)
    moved = a != b
    assert np.all(b[moved] == 7)
    assert 0.08 < moved.mean() < 0.17          # about 1/8 of the keys
    assert np.allclose(np.bincount(b) / len(b), 1 / 8, atol=0.03)


def test_lookup_is_stable_across_processes():
    doc = build_document(spec(channels=6))
    keys = [f"k{i}" for i in range(2000)] + ["", "é", "x y"]
    here = route_keys(doc, keys).tolist()
    code = ("import json,sys; from solvers.gedik import route_keys; d=json.load(sys.stdin); "
            "print(json.dumps(route_keys(d['doc'], d['keys']).tolist()))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps({"doc": dump(doc), "keys": keys}),
                         capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == here
    # explicit keys route to their entry, others to the ring
    for k, c in doc.explicit.items():
        assert here[keys.index(k)] == c


# ---------------------------------------------------------------- δ (Eq. 15-17) ------------------------------
@pytest.mark.parametrize("n", [2, 10, 32])
@pytest.mark.parametrize("alpha", [1.1, 1.2, 2.0])
def test_delta_matches_eq17(n, alpha):
    sigma, dom = 0.1, 10**6
    th = (alpha - 1) * (1 + alpha / (n - 1)) ** -1
    assert theta(alpha, n) == pytest.approx(th)
    assert delta_for("constant", sigma, th, n, dom) == 1.0
    assert delta_for("linear", sigma, th, n, dom) == pytest.approx(sigma * th / n)
    assert delta_for("quadratic", sigma, th, n, dom) == pytest.approx(math.sqrt(sigma * th / (dom * n)))
    f = np.array(list(zipf_freqs(5000).values()))
    d, dk, mask = select_tracked(f, n, Config(resources=("linear", "constant", "linear"), alpha=(alpha,) * 3), dom)
    assert d == pytest.approx(sigma * th / n) and dk["computation"] == 1.0
    assert np.array_equal(mask, f >= d)


def test_quadratic_post_processing_raises_delta():
    n, dom, sigma = 10, 10**6, 0.1
    f = np.array(list(zipf_freqs(20000).values()))
    cfg = Config(resources=("linear", "quadratic", "linear"))
    th = theta(1.2, n)
    d0 = math.sqrt(sigma * th / (dom * n))
    tracked = f[f >= d0]
    lbar = (np.sum(tracked**2) + (dom - len(tracked)) * ((1 - tracked.sum()) / (dom - len(tracked)))**2) / n
    d, dk, mask = select_tracked(f, n, cfg, dom)
    assert dk["computation"] == pytest.approx(math.sqrt(sigma * th * lbar))
    assert dk["computation"] > d0
    assert d == pytest.approx(min(dk["computation"], sigma * th / n))
    assert mask.sum() == (f >= d).sum()


# ---------------------------------------------------------------- lossy counting ----------------------------
streams = st.lists(st.integers(0, 30), min_size=1, max_size=3000).map(
    lambda xs: np.array([x * x % 37 if i % 3 else x % 5 for i, x in enumerate(xs)], dtype=np.uint64))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams, st.sampled_from([0.5, 0.1, 0.05, 0.01, 0.003]), st.floats(0.01, 0.6), st.integers(1, 500))
def test_lossy_counting_bounds(stream, eps, extra, chunk):
    support = eps + extra  # the guarantee is for a support δ > ε (§4.1.2)
    lc = LossyCounter(eps)
    for i in range(0, len(stream), chunk):  # chunking must not matter
        lc.update(stream[i:i + chunk])
    u, c = np.unique(stream, return_counts=True)
    true = dict(zip(u.tolist(), (c / len(stream)).tolist(), strict=False))
    keys, est = lc.frequent(support)
    got = dict(zip(keys.tolist(), est.tolist(), strict=False))
    for k, f in true.items():
        if f >= support:
            assert k in got, "a key above the support was missed"
    for k, fh in got.items():
        assert true[k] - eps - 1e-12 <= fh <= true[k] + 1e-12
    assert lc.n == len(stream)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams, st.sampled_from([0.1, 0.02, 0.005]), st.floats(0.02, 0.5), st.integers(2, 400),
       st.integers(1, 300))
def test_sliding_lossy_counting_bounds_over_its_window(stream, eps, extra, window, chunk):
    support = eps + extra
    slc = SlidingLossyCounter(eps, window)
    for i in range(0, len(stream), chunk):
        slc.update(stream[i:i + chunk])
    n = slc.n
    w = slc.window
    if len(stream) >= w:
        assert w <= n <= 1.5 * w
    recent = stream[len(stream) - n:]
    u, c = np.unique(recent, return_counts=True)
    true = dict(zip(u.tolist(), (c / n).tolist(), strict=False))
    keys, est = slc.frequent(support)
    got = dict(zip(keys.tolist(), est.tolist(), strict=False))
    for k, f in true.items():
        if f >= support:
            assert k in got
    for k, fh in got.items():
        assert true[k] - eps - 1e-12 <= fh <= true[k] + 1e-12


def test_sliding_counter_follows_a_change_of_hot_key():
    slc = SlidingLossyCounter(0.01, 1000)
    slc.update(np.full(5000, 1, dtype=np.uint64))
    slc.update(np.tile(np.array([2, 3], dtype=np.uint64), 2000))
    keys, est = slc.frequent(0.3)
    assert 1 not in keys.tolist() and {2, 3} <= set(keys.tolist())


# ---------------------------------------------------------------- construction ------------------------------
def _rho(loads, thetas):
    mean = loads.mean(axis=1)
    r = (loads.max(axis=1) - loads.min(axis=1)) / (thetas * mean)
    return float(np.prod(r) ** (1 / len(r)))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(1, 60), st.sampled_from(["scan", "redist", "readj"]),
       st.sampled_from(["LCL", "LLL", "LQL", "CCL", "QQQ"]), st.sampled_from(["A", "APM", "APLM", "ATM", "ATLM"]),
       st.integers(0, 1000), st.booleans())
def test_every_algorithm_returns_channels_in_range(n, r, alg, res, util, seed, prev):
    rng = np.random.default_rng(seed)
    f = rng.dirichlet(np.ones(r) * 0.3) * rng.uniform(0.1, 1)
    fn = {"L": "linear", "C": "constant", "Q": "quadratic"}
    cfg = Config(resources=tuple(fn[c] for c in res), utility=util)
    old = rng.integers(0, max(n - 1, 1), r) if prev else np.full(r, -1)
    inst = Instance(channels=n, freqs=f, old=old, hc_new=rng.integers(0, n, r), has_previous=prev)
    out = construct(alg, inst, cfg)
    assert out.shape == (r,) and out.dtype.kind == "i"
    assert np.all((0 <= out) & (out < n))


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 12), st.integers(2, 80), st.integers(0, 10**6), st.sampled_from(["LCL", "LLL", "LQL"]),
       st.booleans())
def test_readj_never_applies_a_step_that_increases_rho(n, r, seed, res, prev):
    rng = np.random.default_rng(seed)
    f = np.sort(rng.pareto(1.0, r) + 1)[::-1]
    f = f / f.sum() * 0.6
    fn = {"L": "linear", "C": "constant", "Q": "quadratic"}
    cfg = Config(resources=tuple(fn[c] for c in res))
    old = rng.integers(0, n - 1, r) if prev else np.full(r, -1)
    inst = Instance(channels=n, freqs=f, old=old, hc_new=rng.integers(0, n, r), has_previous=prev)
    stats = {"trace": True}
    out = construct("readj", inst, cfg, stats)
    act = [k for k, c in enumerate(cfg.resources) if c != "constant"]
    B = np.array([f if cfg.resources[k] == "linear" else f * f for k in act])
    th = np.array([theta(1.2, n)] * len(act))
    ch = np.array(stats["readj_start"])
    def loads(c):
        return np.array([np.bincount(c, weights=b, minlength=n) for b in B])
    rho = _rho(loads(ch), th)
    for d1, d2, i, j in stats["readj_trace"]:
        assert ch[d1] == i and (d2 < 0 or ch[d2] == j)
        ch[d1] = j
        if d2 >= 0:
            ch[d2] = i
        new = _rho(loads(ch), th)
        assert new < rho + 1e-12, "readj applied a step that does not reduce the balance penalty"
        rho = new
    assert np.array_equal(ch, out)
    counts = np.bincount([t[0] for t in stats["readj_trace"]] + [t[1] for t in stats["readj_trace"] if t[1] >= 0],
                         minlength=r)
    assert counts.max(initial=0) <= cfg.move_limit


def test_readj_balances_better_than_consistent_hash_on_skew():
    s = spec(frequencies=zipf_freqs(3000), channels=1)
    docs = {}
    for alg in ["consistent", "readj", "scan", "redist"]:
        prev = None
        for n in range(1, 11):
            prev = build_document(dict(s, algorithm=alg, channels=n, previous=prev))
        docs[alg] = prev
    b = {a: d.metrics["b_k"]["communication"] for a, d in docs.items()}
    assert b["readj"] < b["consistent"] and b["scan"] < b["consistent"] and b["redist"] < b["consistent"]


# ---------------------------------------------------------------- build_document ----------------------------
def test_function_built_with_previous_only_migrates_what_its_metrics_say():
    s = spec(frequencies=zipf_freqs(2000), domain_size=200_000)
    p = build_document(dict(s, channels=5))
    q = build_document(dict(s, channels=6, previous=p))
    keys = list(s["frequencies"])
    f = np.array([s["frequencies"][k] for k in keys])
    moved = route_keys(p, keys) != route_keys(q, keys)
    mig = q.metrics["migration"]
    assert mig["tracked_moved"] == pytest.approx(float(f[moved].sum()), rel=1e-9, abs=1e-15)
    # untracked keys: fraction of a large random key sample whose channel changed, times their mass
    sample = [f"u{i}" for i in range(100_000)]
    frac = float(np.mean(route_keys(p, sample) != route_keys(q, sample)))
    rest = 1 - f.sum()
    assert mig["untracked_moved_expected"] == pytest.approx(rest * frac, rel=0.05)
    ideal = (1.0) / 6
    assert q.metrics["m"] == pytest.approx((mig["tracked_moved"] + mig["untracked_moved_expected"]) / ideal)
    # nothing moves between old channels for untracked keys: only to the new channel 5
    a, b = route_keys(p, sample), route_keys(q, sample)
    assert np.all(b[a != b] == 5)


def test_uniform_hash_migrates_far_more_than_ideal():
    s = spec(frequencies={}, algorithm="uniform", domain_size=10**6)
    p = build_document(dict(s, channels=9))
    q = build_document(dict(s, channels=10, previous=p))
    assert q.metrics["m"] > 6
    c = build_document(dict(s, algorithm="consistent", channels=10,
                            previous=build_document(dict(s, algorithm="consistent", channels=9))))
    assert 0.7 < c.metrics["m"] < 1.3


def test_document_round_trip_and_explicit_map():
    d = build_document(spec())
    assert d.channels == 10 and d.metrics["explicit_entries"] == len(d.explicit) > 0
    fr = zipf_freqs(300)
    assert set(d.explicit) == {k for k, v in fr.items() if v >= d.delta}
    assert all(0 <= c < 10 for c in d.explicit.values())
    fn = load_function(json.loads(json.dumps(dump(d))))
    assert fn.route_keys(list(d.explicit)).tolist() == list(d.explicit.values())


@pytest.mark.parametrize("patch,field", [
    ({"algorithm": "magic"}, "algorithm"),
    ({"channels": 0}, "channels"),
    ({"channels": 2.5}, "channels"),
    ({"frequencies": {"a": -0.1}}, "frequencies.a"),
    ({"frequencies": {"a": float("nan")}}, "frequencies.a"),
    ({"resources": {"state": "cubic"}}, "resources.state"),
    ({"resources": {"memory": "linear"}}, "resources.memory"),
    ({"imbalance_tolerance": 1.0}, "imbalance_tolerance"),
    ({"imbalance_tolerance": {"state": 0.5}}, "imbalance_tolerance.state"),
    ({"sigma": 0}, "sigma"),
    ({"sigma": 1.5}, "sigma"),
    ({"utility": "XYZ"}, "utility"),
    ({"previous": [1, 2]}, "previous"),
    ({"previous": {"channels": 0}}, "previous.channels"),
    ({"bogus": 1}, "bogus"),
])
def test_the_contract_refuses_what_a_field_alone_breaks(patch, field):
    """A spec's shapes and ranges are the contract's: the API and the CLI parse the bytes with it (the builder
    does not check them again)."""
    with pytest.raises(Invalid) as e:
        parse(PartitioningSpec, json.dumps(spec(**patch)))
    assert e.value.items[0].field == field


@pytest.mark.parametrize("patch,field", [
    ({"frequencies": {"a": 0.7, "b": 0.6}}, "frequencies"),
    ({"previous": {"channels": 3, "explicit": {"a": 7}, "consistent_hash": {"replicas": 10}}},
     "previous.explicit.a"),
    ({"previous": {"channels": 3, "hash": {"seed": 1}, "consistent_hash": {"seed": 2}}},
     "previous.consistent_hash.seed"),
    ({"previous": {"channels": 3, "lookup": "uniform", "explicit": {"a": 1}}}, "previous.explicit"),
    ({"domain_size": 1}, "domain_size"),
])
def test_the_builder_refuses_what_fields_break_together(patch, field):
    parse(PartitioningSpec, json.dumps(spec(**patch)))  # each field alone is fine
    with pytest.raises(InvalidInput) as e:
        build_document(spec(**patch))
    assert e.value.field == field


def test_a_uniform_previous_needs_no_consistent_hash_and_a_dict_is_read_once():
    p = build_document(spec(algorithm="uniform", channels=4, frequencies={}))
    assert p.consistent_hash is None and p.lookup == "uniform"
    q = build_document(spec(channels=5, previous={"channels": 4, "lookup": "uniform"}))  # hand-written, minimal
    assert q.metrics["m"] is not None and q.hash.seed == 0 and q.consistent_hash.replicas == 1000
    with pytest.raises(InvalidInput) as e:  # decoded JSON is read as the contract's document: types checked
        build_document(spec(channels="5"))
    assert e.value.field == "channels"


def test_the_value_lists_and_defaults_are_the_contracts():
    from solvers.gedik import ALGORITHMS
    from solvers.gedik.model import FUNCTIONS, RESOURCES, UTILITIES

    assert ALGORITHMS is contract.PARTITIONING_ALGORITHMS and RESOURCES is contract.RESOURCES
    assert FUNCTIONS is contract.RESOURCE_FUNCTIONS and UTILITIES is contract.UTILITIES
    for cls in (contract.Tolerances, contract.ResourceFunctions):
        assert tuple(f.name for f in dataclasses.fields(cls)) == RESOURCES
    cfg, d, p = Config(), contract.PartitioningSpec(channels=2), contract.PartitionParams()
    r = d.resources
    assert cfg.resources == (r.state, r.computation, r.communication) and cfg.alpha == (d.imbalance_tolerance,) * 3
    assert (cfg.sigma, cfg.utility, cfg.move_limit) == (d.sigma, d.utility, d.move_limit) == \
        (p.sigma, p.utility, p.move_limit)


def test_frequencies_within_tolerance_are_accepted():
    d = build_document(spec(frequencies={"a": 0.5, "b": 0.5 + 1e-9}, channels=3))
    assert set(d.explicit) == {"a", "b"}


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 16), st.integers(0, 10**6), st.sampled_from(["scan", "redist"]),
       st.sampled_from(["LCL", "LLL", "LQL"]))
def test_from_scratch_builds_use_every_channel(n, seed, alg, res):
    """ρ only sees max and min, so with several empty channels all placements tie; ties must not pile items onto
    the first channels (every channel gets an item when there are at least 2N items)."""
    rng = np.random.default_rng(seed)
    r = 2 * n + int(rng.integers(0, 20))
    f = np.sort(rng.pareto(1.5, r) + 0.01)[::-1]
    f = f / f.sum() * 0.5
    fn = {"L": "linear", "C": "constant", "Q": "quadratic"}
    cfg = Config(resources=tuple(fn[c] for c in res))
    inst = Instance(channels=n, freqs=f, old=np.full(r, -1), hc_new=rng.integers(0, n, r), has_previous=False)
    out = construct(alg, inst, cfg)
    assert set(out.tolist()) == set(range(n))
