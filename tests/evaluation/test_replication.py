"""The replication breakdown separates the head's extra choices from the second-choice (balance) effect."""

import numpy as np
import pytest

from evaluation.replication import pairs_per_key, paper_pkg_memory, replication_breakdown, route
from evaluation.simulator.streams import zipf_probabilities
from solvers.errors import InvalidInput


def test_pairs_per_key_counts_distinct_workers():
    keys = np.array([0, 0, 0, 1, 1, 3])
    workers = np.array([2, 2, 5, 1, 1, 0])
    assert pairs_per_key(keys, workers, 4).tolist() == [2, 1, 0, 1]
    with pytest.raises(InvalidInput):
        pairs_per_key(np.array([4]), np.array([0]), 4)


def test_paper_pkg_memory_is_min_count_two():
    assert paper_pkg_memory(np.array([0, 0, 0, 1, 2, 2]), 4) == 2 + 1 + 2 + 0


def test_breakdown_on_hand_made_routing():
    keys = np.array([0, 0, 0, 0, 1, 1, 2])
    pkg = np.array([0, 1, 0, 1, 3, 3, 4])           # key 0 on 2 workers, key 1 on 1, key 2 on 1
    other = np.array([0, 1, 2, 3, 3, 5, 4])         # key 0 on 4 workers, key 1 on 2, key 2 on 1
    r = replication_breakdown(keys, pkg, other, 3, bands=(0, 1))
    head, tail = r["bands"]
    assert head == {"ranks": [0, 1], "extra_pairs": 2, "beyond_two": 2, "second_choice": 0}
    assert tail == {"ranks": [1, 3], "extra_pairs": 1, "beyond_two": 0, "second_choice": 1}
    assert r["replication_pkg"] == pytest.approx(4 / 3)
    assert r["replication_other"] == pytest.approx(7 / 3)
    assert r["paper_mem_pkg"] == 2 + 2 + 1


def test_wchoices_excess_over_pkg_is_mostly_the_balance_effect():
    """Zipf 1.0, 10^4 keys, 50 workers (scaled to 2·10^5 messages): W-C's head (25 keys)
    accounts for its extra choices; most remaining extra pairs are tail keys on their second PKG choice."""
    rng = np.random.default_rng(3)
    keys = rng.choice(10_000, size=200_000, p=zipf_probabilities(1.0, 10_000))
    pkg = route("pkg", 50, keys, seed=3)
    wc = route("wchoices", 50, keys, seed=3)
    r = replication_breakdown(keys, pkg, wc, 10_000, bands=(0, 25, 100, 1000))
    total_extra = sum(b["extra_pairs"] for b in r["bands"])
    second = sum(b["second_choice"] for b in r["bands"])
    assert total_extra > 0
    assert r["bands"][0]["beyond_two"] >= 20 * 47                 # the head really uses (almost) all 50 workers
    assert r["bands"][-1]["beyond_two"] == 0                       # ranks ≥ 1000 never get more than PKG's two
    assert second > 0.4 * total_extra                              # the balance effect dominates the excess
    assert r["measured_over_paper_pkg"] < r["measured_over_measured_pkg"]


def test_default_warmup_keeps_boundary_keys_out_of_the_head():
    """Keys just below θ (ranks 51–1000 at n = 100, z = 1.0) must not be sprayed over all workers by chance early
    in the stream: the default warm-up (10/θ) gives them fewer extra pairs than the paper-less 1/θ warm-up."""
    from solvers.groupings import make_grouping

    n, m = 100, 400_000
    rng = np.random.default_rng(7)
    keys = rng.choice(10_000, size=m, p=zipf_probabilities(1.0, 10_000))
    pkg = route("pkg", n, keys, seed=7)

    def wc(**params):
        srcs = [make_grouping("wchoices", n, seed=7, source_index=j, **params) for j in range(5)]
        out = np.empty(m, dtype=np.int64)
        for j in range(5):
            out[j::5] = srcs[j].route(keys[j::5])
        return out

    short = replication_breakdown(keys, pkg, wc(warmup=5 * n), 10_000, bands=(0, 51, 1000))["bands"][1]
    default = replication_breakdown(keys, pkg, wc(), 10_000, bands=(0, 51, 1000))["bands"][1]
    assert default["beyond_two"] < short["beyond_two"]
