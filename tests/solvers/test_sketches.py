"""SpaceSaving: the guarantees of Metwally et al. as property tests, plus the warm-up."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers.errors import InvalidInput
from solvers.sketches import SpaceSaving


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=400), st.integers(1, 25))
def test_space_saving_guarantees(stream, capacity):
    ss = SpaceSaving(capacity)
    for k in stream:
        ss.update(k)
    true = Counter(stream)
    N = len(stream)
    assert ss.n == N
    assert len(ss) <= capacity
    # every update adds exactly one to one counter
    assert sum(ss.counts.values()) == N
    for k, c in ss.counts.items():
        # over-estimate with a known error
        assert c - ss.errors[k] <= true[k] <= c
        assert ss.guaranteed(k) <= true[k] <= ss.estimate(k)
    # the minimum counter bounds every unmonitored key, and is at most N / capacity
    if len(ss) == capacity:
        assert ss.min_count == min(ss.counts.values())
        assert ss.min_count <= N / capacity
    for k, f in true.items():
        if k not in ss.counts:
            assert f <= ss.min_count
            assert ss.estimate(k) >= f
        if f > N / capacity:
            assert k in ss.counts  # every frequent key is monitored


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 15), min_size=1, max_size=300), st.integers(2, 10),
       st.floats(0.05, 0.6))
def test_heavy_hitters_contain_every_true_heavy_key(stream, capacity, theta):
    ss = SpaceSaving(capacity)
    ss.update_many(stream)
    true = Counter(stream)
    hh = ss.heavy_hitters(theta)
    for k, f in true.items():
        if f >= theta * len(stream) and f > len(stream) / capacity:
            assert k in hh
    freqs = list(hh.values())
    assert freqs == sorted(freqs, reverse=True)


def test_warmup_hides_the_head_until_enough_updates():
    ss = SpaceSaving(10, warmup=50)
    for _ in range(49):
        ss.update("hot")
    assert ss.heavy_hitters(0.1) == {}
    assert not ss.is_heavy("hot", 0.1)
    ss.update("hot")
    assert ss.is_heavy("hot", 0.1)
    assert ss.heavy_hitters(0.1) == {"hot": 1.0}


def test_eviction_replaces_the_minimum_and_inherits_its_count():
    ss = SpaceSaving(2)
    for k in ["a", "a", "a", "b", "c"]:
        ss.update(k)
    # b (count 1) was the minimum: c replaces it with count 2 and error 1
    assert ss.counts == {"a": 3, "c": 2}
    assert ss.errors["c"] == 1


def test_invalid_parameters():
    with pytest.raises(InvalidInput):
        SpaceSaving(0)
    with pytest.raises(InvalidInput):
        SpaceSaving(5, warmup=-1)
