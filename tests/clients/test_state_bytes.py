"""StateBytes without Spark: when the driver's state bytes per key group are measured (a Spark job) and when they
are kept from the batches' changes or a commit record."""

from __future__ import annotations

import numpy as np

from rebalancer_client.spark.state_bytes import StateBytes


class Measure:
    def __init__(self, value: list[int]):
        self.value, self.calls = np.array(value, dtype=np.int64), 0

    def __call__(self) -> np.ndarray:
        self.calls += 1
        return self.value.copy()


def test_tracked_counts_add_each_batchs_change_and_measure_only_without_a_count_of_the_merged_state():
    m = Measure([5, 5, 5])
    sb = StateBytes(3, every=2, enabled=True, measure=m)
    assert list(sb.tracked(0, np.array([1, 2, 0]), had_state=False)) == [1, 2, 0] and m.calls == 0
    assert list(sb.tracked(1, np.array([0, 1, 4]), had_state=True)) == [1, 3, 4] and m.calls == 0
    # batch 3 after a gap (a recovery re-ran from an older version): the count is not of the merged state
    assert list(sb.tracked(3, np.array([1, 1, 1]), had_state=True)) == [5, 5, 5] and m.calls == 1
    sb.restored(7, [9, 0, 1])                        # a restart: the commit record's sizes, nothing measured
    assert list(sb.tracked(8, np.array([1, 0, 0]), had_state=True)) == [10, 0, 1] and m.calls == 1
    sb.restored(9, None)                             # a record without sizes: measured with the next batch
    assert list(sb.tracked(10, np.array([1, 0, 0]), had_state=True)) == [5, 5, 5] and m.calls == 2


def test_sampled_measures_every_n_batches_and_after_a_migration():
    m = Measure([2, 3])
    sb = StateBytes(2, every=3, enabled=True, measure=m)
    for b in range(6):
        sb.sampled(b, migrated=False)
    assert m.calls == 2                              # batches 0 and 3
    sb.sampled(6, migrated=True)
    assert m.calls == 3


def test_disabled_reports_zeros_and_never_measures():
    m = Measure([2, 3])
    sb = StateBytes(2, every=1, enabled=False, measure=m)
    assert list(sb.tracked(0, np.array([1, 1]), had_state=True)) == [0, 0]
    assert list(sb.sampled(1, migrated=True)) == [0, 0] and m.calls == 0
