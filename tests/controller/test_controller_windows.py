"""Statistics windows, Flink ranges, round counting and the repository's epoch compare-and-set."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import history
from controller import repository as repo
from controller.jobs import flink_ranges
from controller.windows import Batch, Window
from solvers.scaling import rounds_needed as _rounds

M = 6


def _batch(bid: int, loads: dict[int, float], state: dict[int, float] | None = None, order: int = 0) -> Batch:
    """``order``: the key groups sorted (0), reversed (1) or rotated by one (2) — a post by id in another order."""
    keys = sorted(loads)
    keys = keys[::-1] if order == 1 else keys[1:] + keys[:1] if order == 2 else keys
    idx = np.array(keys, dtype=np.int32)
    st_arr = None
    if state:
        st_arr = np.array([state.get(int(k), np.nan) for k in idx])
    return Batch(bid, 0, idx, np.array([loads[int(k)] for k in idx]), st_arr)


batches_st = st.lists(
    st.tuples(st.integers(0, 30), st.dictionaries(st.integers(0, M - 1), st.floats(0, 1e6), min_size=0, max_size=M),
              st.integers(0, 2)),
    min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(size=st.integers(1, 6), posts=batches_st)
def test_window_equals_recomputation_from_scratch(size, posts):
    w = Window(size=size, m=M)
    accepted: dict[int, dict[int, float]] = {}  # insertion order = order received
    for bid, loads, order in posts:
        counted, dup, evict = w.classify(bid)
        late = len(accepted) == size and min(accepted) - size <= bid < min(accepted)
        assert dup == (bid in accepted) and counted == (not dup and not late)
        if counted:  # (each key group's state: its load + the batch id, so that the latest report is known)
            w.add(_batch(bid, loads, {k: v + bid for k, v in loads.items()}, order), evict)
            accepted[bid] = loads
            if evict is not None:
                assert evict == next(iter(accepted))
                del accepted[evict]
    # the window holds the last `size` distinct batch ids received, each counted once
    assert list(w.batches) == list(accepted) and len(accepted) <= size
    assert w.state().batches == list(accepted)
    expect = np.zeros(M)
    for loads in accepted.values():
        for k, v in loads.items():
            expect[k] += v
    np.testing.assert_allclose(w.mean_load(), expect / len(accepted), rtol=1e-9, atol=1e-6)
    latest = np.full(M, -1.0)  # the state of the latest batch received that reports the key group
    for bid, loads in accepted.items():
        for k, v in loads.items():
            latest[k] = v + bid
    np.testing.assert_allclose(w.latest_state(np.full(M, -1.0)), latest, rtol=1e-12)
    if len(accepted) >= 2:
        per_batch = np.array([[loads.get(k, 0.0) for k in range(M)] for loads in accepted.values()])
        np.testing.assert_allclose(w.load_variance(), per_batch.var(axis=0, ddof=1), rtol=1e-6,
                                   atol=1e-12 * float(np.square(per_batch).sum()))
    assert w.state().key_groups_covered == len({k for loads in accepted.values() for k in loads})


def test_duplicates_late_reposts_and_the_received_order():
    w = Window(size=2, m=M)
    for bid in (5, 6):
        counted, dup, ev = w.classify(bid)
        w.add(_batch(bid, {0: 1.0}), ev)
    assert w.classify(5) == (False, True, None)
    assert w.classify(4) == (False, False, None)  # a late re-post of an evicted batch
    assert w.classify(3) == (False, False, None)
    assert w.classify(2) == (True, False, 5)  # far below: a restarted numbering counts
    assert w.classify(7) == (True, False, 5)


def test_a_far_future_batch_id_is_pushed_out_like_any_other():
    """After batch 2^63 - 1, later batches with small ids still count."""
    w = Window(size=1, m=M)
    for bid in (1, 2**63 - 1, 3):
        counted, dup, ev = w.classify(bid)
        assert counted and not dup
        w.add(_batch(bid, {0: float(bid % 7)}), ev)
    assert list(w.batches) == [3] and w.mean_load()[0] == 3.0


def test_resize_drops_the_earliest_received():
    w = Window(size=5, m=M)
    for bid in (1, 2, 3, 4, 5):
        w.add(_batch(bid, {0: float(bid)}), w.classify(bid)[2])
    assert w.dropped_by(2) == [1, 2, 3]
    assert w.resize(2) == [1, 2, 3] and list(w.batches) == [4, 5] and w.size == 2
    assert w.mean_load()[0] == 4.5
    assert w.resize(10) == [] and w.classify(1) == (True, False, None)


def test_latest_state_and_serialisation_roundtrip():
    w = Window(size=3, m=M)
    reg = np.full(M, 7.0)
    b1 = _batch(1, {0: 1.0, 1: 2.0}, {0: 100.0})
    b2 = _batch(2, {0: 3.0}, {0: 200.0})
    b2.src, b2.dst, b2.rate = np.array([0], np.int32), np.array([1], np.int32), np.array([4.0])
    for b in (b1, b2):
        w.add(repo.batch_from_row(repo.batch_row("j", b, 0.0)), None)
    np.testing.assert_allclose(w.latest_state(reg), [200.0, 7, 7, 7, 7, 7])
    src, dst, rate = w.mean_comm()
    assert src.tolist() == [0] and dst.tolist() == [1] and rate.tolist() == [2.0]
    np.testing.assert_allclose(w.mean_load()[:2], [2.0, 1.0])


@pytest.mark.parametrize("k, p", [(128, 3), (10, 4), (7, 7), (5, 8), (1000, 40)])
def test_flink_ranges_contiguous_and_balanced(k, p):
    a = flink_ranges(k, p)
    assert np.all(np.diff(a) >= 0)  # contiguous ranges in key group order
    counts = np.bincount(a, minlength=p)
    assert counts.max() - counts.min() <= 1 and counts.sum() == k
    # Flink's KeyGroupRangeAssignment: operator index of key group g is g * parallelism // max_parallelism
    assert all(a[g] == g * p // k for g in range(k))


def test_rounds():
    assert _rounds(0, 0, 3, None) == 0
    assert _rounds(7, 0, 3, None) == 3
    assert _rounds(7, 10.0, None, 4.0) == 3
    assert _rounds(2, 10.0, 5, 2.0) == 5
    assert _rounds(3, 0, 0, None) is None
    assert _rounds(3, 0, None, None) == 1


def test_epoch_compare_and_set_exactly_one_wins(tmp_path):
    """Two writers (two engines, as two server processes would have) race to advance the same base epoch."""
    url = f"sqlite:///{tmp_path}/cas.db"
    engines = [repo.make_engine(url) for _ in range(4)]
    repo.create_schema(engines[0])
    row = {"job_id": "j", "spec": "{}", "registration": "{}", "kgs": "{}", "nodes": "[]", "assignment": "[]",
           "epoch": 0, "last_round_batch": None, "created_at": 0.0, "updated_at": 0.0}
    erow = {"job_id": "j", "epoch": 0, "kind": "register", "proposal_id": None, "nodes": "[]", "assignment": "[]",
            "plan": None, "created_at": 0.0}
    with engines[0].begin() as c:
        repo.insert_job(row, erow)(c)
    results: list[bool] = []
    barrier = threading.Barrier(len(engines))

    def go(i: int) -> None:
        op = repo.advance_epoch("j", 0, {"assignment": f'["{i}"]'},
                                {**erow, "epoch": 1, "kind": "execute", "assignment": f'["{i}"]'})
        barrier.wait()
        with engines[i].begin() as c:
            results.append(op(c))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(engines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * (len(engines) - 1) + [True]
    hist = history.read(engines[0], "j")
    assert [h["epoch"] for h in hist] == [0, 1]
    with engines[0].connect() as c:
        job = c.execute(repo.jobs.select()).first()
    assert job.epoch == 1 and job.assignment == hist[1]["assignment"]


def test_a_database_of_the_previous_version_gets_the_new_columns_and_loads(tmp_path):
    """Startup adds the ``generation`` columns (and the proposals' ``decision``) to a database of the version
    before them (and before the migration history: no ``alembic_version``); its jobs load as one registration,
    their configuration (``auto`` an object then) read into today's."""
    url = f"sqlite:///{tmp_path}/old.db"
    engine = repo.make_engine(url)
    repo.create_schema(engine)
    with engine.begin() as c:
        for table in ("jobs", "proposals"):
            c.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN generation")
        c.exec_driver_sql("ALTER TABLE proposals DROP COLUMN decision")
        c.exec_driver_sql("DROP TABLE alembic_version")
        c.exec_driver_sql("DROP TABLE leader_lease")
        c.exec_driver_sql(
            "INSERT INTO jobs (job_id, spec, registration, kgs, nodes, assignment, epoch, last_round_batch, "
            "created_at, updated_at) VALUES ('j', '{\"algorithm\": \"flux\", \"params\": {}, \"budget\": {}, "
            "\"window_batches\": 2, \"communication_cost\": 0.0, \"time_limit_s\": 1.0, \"auto\": {\"enabled\": true, "
            "\"cooldown_batches\": 7}}', '{}', "
            "'{\"ids\": [\"k0\", \"k1\"], \"operators\": [\"\", \"\"], \"state_bytes\": [0, 0]}', "
            "'[{\"id\": \"a\", \"capacity\": 1.0, \"removing\": false}, {\"id\": \"b\", \"capacity\": 1.0, "
            "\"removing\": false}]', '[\"a\", \"b\"]', 3, NULL, 0, 0)")
        c.exec_driver_sql("INSERT INTO epochs VALUES ('j', 3, 'execute', NULL, '[]', '[\"b\", \"a\"]', NULL, 0)")
    repo.create_schema(engine)
    (job,) = repo.load_all(engine)
    assert job.generation == "" and job.epoch == 3
    assert job.node_ids == ["a", "b"] and job.assignment.tolist() == [1, 0]  # the latest snapshot in the history wins
    assert job.config.auto is True and job.config.policy.cooldown_batches == 7
    assert job.config.policy.load_distance_threshold is None and job.config.time_limit_s == 1.0
    with engine.connect() as c:
        assert "decision" in [r[1] for r in c.exec_driver_sql("PRAGMA table_info(proposals)")]


def test_a_group_commit_where_one_batch_evicts_another_of_the_group_keeps_disk_equal_to_memory(tmp_path):
    """Two statistics batches in one transaction, the second evicting the first (a window of one): written in
    order, not as two executemany calls (deletes first would leave batch 6 behind, inserts first would collide
    when an evicted id comes back)."""
    from controller.writer import add_batch, execute_group

    engine = repo.make_engine(f"sqlite:///{tmp_path}/g.db")
    repo.create_schema(engine)
    w = Window(size=1, m=M)
    ops = []
    for bid in (5, 6, 7, 5):
        _c, _d, ev = w.classify(bid)
        b = _batch(bid, {0: 1.0})
        w.add(b, ev)
        ops.append(add_batch("j", b, ev, float(bid)))
    with engine.begin() as c:
        execute_group(c, ops[:1])
    with engine.begin() as c:
        execute_group(c, ops[1:])
    with engine.connect() as c:
        on_disk = [r.batch_id for r in c.execute(repo.stats.select())]
    assert on_disk == list(w.batches) == [5]
