"""The offline simulator: conservation, the queue model, streams, validation."""

import numpy as np
import pytest

from evaluation.simulator import (
    ArrayStream,
    DriftingStream,
    FileStream,
    SimulationConfig,
    SkewedStream,
    ZipfStream,
    simulate,
    weighted_percentiles,
    zipf_exponent_for_top_share,
    zipf_probabilities,
)
from evaluation.simulator.engine import _Replication
from solvers.errors import InvalidInput
from solvers.groupings import GROUPING_NAMES, make_grouping


@pytest.mark.parametrize("name", GROUPING_NAMES)
def test_every_message_is_counted_once(name):
    stream = ZipfStream(1.1, 500, 12_345, seed=3)
    r = simulate(stream, SimulationConfig(name, 7, sources=3, service_rate=500.0))
    assert r["messages"] == 12_345
    assert sum(r["worker_loads"]) == 12_345
    assert len(r["worker_loads"]) == 7
    # the result equals routing each source's share (message i -> source i mod s) with its own instance
    keys = np.concatenate(list(stream.chunks(10**9)))
    expected = np.zeros(7, dtype=np.int64)
    if not make_grouping(name, 7).time_driven:
        for j in range(3):
            g = make_grouping(name, 7, source_index=j)
            expected += np.bincount(g.route(keys[j::3]), minlength=7)
        assert r["worker_loads"] == expected.tolist()
    assert 1.0 <= r["replication"] <= 7.0
    assert r["keys_seen"] == len(np.unique(keys))
    avg = 12_345 / 7
    assert r["imbalance"] == pytest.approx((max(r["worker_loads"]) - avg) / 12_345)
    assert r["imbalance_normalized"] == pytest.approx((max(r["worker_loads"]) - avg) / avg)


def test_replication_counts_distinct_worker_key_pairs_dense_and_sparse(monkeypatch):
    keys = np.array([0, 0, 1, 2, 2, 2])
    workers = np.array([0, 1, 1, 0, 0, 3])
    dense = _Replication(3, 4)
    dense.add(keys, workers)
    assert dense.value() == pytest.approx((2 + 1 + 2) / 3)
    monkeypatch.setattr("evaluation.simulator.engine.DENSE_REPLICATION_CELLS", 1)
    sparse = _Replication(3, 4)
    sparse.add(keys[:3], workers[:3])
    sparse.add(keys[3:], workers[3:])
    assert sparse.value() == pytest.approx(dense.value())


def test_queue_model_balanced_vs_overloaded():
    # SG at 80% load: no queue, every message waits exactly one service time
    sg = simulate(ZipfStream(1.0, 1000, 40_000, seed=1), SimulationConfig("sg", 4, sources=2, service_rate=1000.0))
    assert sg["queue_length_spread"]["max"] == pytest.approx(0.0)
    assert sg["latency"]["p99"] == pytest.approx(1e-3)
    assert sg["throughput_at_saturation"]["relative"] == pytest.approx(1.0)
    # KG with a hot key of share 0.5 on 4 workers: that worker gets >= 2x its capacity at 80% load
    kg = simulate(SkewedStream(0.5, keys=50, messages=40_000, seed=1),
                  SimulationConfig("kg", 4, sources=2, service_rate=1000.0))
    share = max(kg["worker_loads"]) / 40_000
    assert kg["throughput_at_saturation"]["relative"] == pytest.approx(0.25 / share)
    assert kg["queue_length_spread"]["final"] > 1000
    assert kg["latency"]["p99"] > 1.0
    assert kg["utilisation_spread"]["final"] > 1.0
    # queue conservation: what arrived at the busy worker minus what it could serve in the simulated time
    busy = int(np.argmax(kg["worker_loads"]))
    served = min(kg["worker_loads"][busy], 1000.0 * kg["simulated_seconds"])
    assert kg["queue_length_spread"]["final"] == pytest.approx(kg["worker_loads"][busy] - served, abs=1.0)


def test_capacities_and_capacity_changes_are_validated_and_applied():
    stream = ZipfStream(0.5, 100, 20_000)
    with pytest.raises(InvalidInput):
        simulate(stream, SimulationConfig("kg", 3, capacities=[1, 2]))
    with pytest.raises(InvalidInput):
        simulate(stream, SimulationConfig("kg", 3, capacities=[1, 0, 2]))
    with pytest.raises(InvalidInput):
        simulate(stream, SimulationConfig("kg", 3, sources=0))
    r = simulate(stream, SimulationConfig("sg", 2, sources=1, capacities=[1, 1],
                                          capacity_changes=[(0.5, [0.25, 1.75])]))
    assert r["capacities"] == [0.25, 1.75]
    # SG keeps sending half to worker 0, which now has a quarter of the service: its queue grows
    assert r["queue_length_spread"]["final"] > 0


def test_cg_reduces_utilisation_spread_on_heterogeneous_workers():
    caps = [5, 5, 5, 1, 1, 1, 1, 1, 1, 1]
    stream = ZipfStream(0.8, 5000, 300_000, seed=2)
    common = dict(sources=1, capacities=caps, service_rate=100.0)
    cg = simulate(stream, SimulationConfig("cg", 10, params={"t0": 1.0}, **common))
    sg = simulate(stream, SimulationConfig("sg", 10, **common))
    assert sum(cg["virtual_workers"]) == 100
    assert cg["virtual_worker_moves"] > 10
    assert cg["utilisation_spread"]["final"] < sg["utilisation_spread"]["final"]
    assert cg["throughput_at_saturation"]["relative"] > sg["throughput_at_saturation"]["relative"]


def test_weighted_percentiles():
    v = np.array([3.0, 1.0, 2.0])
    w = np.array([1, 1, 2])
    assert weighted_percentiles(v, w, [0, 50, 100]) == [1.0, 2.0, 3.0]
    assert weighted_percentiles(v, np.zeros(3), [50]) == [0.0]


# ---------------------------------------------------------------------------------------------- streams
def test_zipf_stream_top_share_and_exponent_solver():
    z = zipf_exponent_for_top_share(0.0932, 10_000)
    assert zipf_probabilities(z, 10_000)[0] == pytest.approx(0.0932, rel=1e-6)
    s = ZipfStream(z, 10_000, 200_000, seed=1)
    keys = np.concatenate(list(s.chunks(50_000)))
    assert len(keys) == 200_000
    assert np.mean(keys == 0) == pytest.approx(0.0932, abs=0.003)
    assert keys.min() >= 0 and keys.max() < 10_000
    # chunk size does not change the stream
    assert np.array_equal(keys[:1000], next(iter(ZipfStream(z, 10_000, 200_000, seed=1).chunks(1000))))


def test_skewed_and_drifting_streams():
    keys = np.concatenate(list(SkewedStream(0.3, keys=204, messages=50_000, seed=2).chunks(7000)))
    assert np.mean(keys == 0) == pytest.approx(0.3, abs=0.01)
    assert len(np.unique(keys)) == 204
    d = DriftingStream(1.5, 1000, 40_000, phases=2, seed=3)
    keys = np.concatenate(list(d.chunks(3000)))
    hot1 = np.bincount(keys[:20_000]).argmax()
    hot2 = np.bincount(keys[20_000:]).argmax()
    assert hot1 == 0 and hot2 != hot1


def test_file_and_array_streams(tmp_path):
    f = tmp_path / "keys.txt"
    f.write_text("b\na\n\nb\nc\n")
    s = FileStream(str(f))
    assert s.n_keys == 3 and s.n_messages == 4
    assert np.concatenate(list(s.chunks(2))).tolist() == [0, 1, 0, 2]
    with pytest.raises(InvalidInput):
        FileStream(str(tmp_path / "missing.txt"))
    a = ArrayStream([10, 5, 10, 7])
    assert a.ids.tolist() == [0, 1, 0, 2]
