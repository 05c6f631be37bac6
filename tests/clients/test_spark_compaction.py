"""A clean close writes the latest version's state whole (compaction), so that the next start reads one directory;
a close whose state is ahead of the store writes nothing; a compaction cut short is ignored by loading and expiry.
Real local Spark, state directories on the local disk."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark")

from rebalancer_client.spark.store import StateStore  # noqa: E402
from tests.clients import test_spark_state as st  # noqa: E402


def _run(spark, root, frames, **kw):
    d = st._driver(spark, root, **kw)
    for b, f in enumerate(frames):
        d.process(spark.createDataFrame(f), b)
    return d


def _read_dirs(spark, root) -> set[str]:
    """The version directories (``v…/delta`` or ``v…/snapshot``) a load of the latest version reads."""
    df, _ = StateStore(spark, str(root)).load(dedup=False)
    return {"/".join(f.split("/")[-3:-1]) for f in df.inputFiles()}


def test_a_clean_close_writes_the_latest_version_whole_and_the_next_start_reads_only_it(spark, tmp_path):
    frames = st._batches(n=5, seed=21)
    v3 = "v00000000000000000003"
    for on_close, root in ((False, tmp_path / "off"), (True, tmp_path / "on")):
        _run(spark, root, frames[:4], snapshot_on_close=on_close).close()  # v0 snapshot, deltas v1..v3
        marker = root / "_commits" / f"{v3[1:]}.snapshot"
        assert marker.exists() == on_close
        read = _read_dirs(spark, root)
        assert read == ({f"{v3}/snapshot"} if on_close else
                        {"v00000000000000000000/snapshot", *(f"v{v:020d}/delta" for v in (1, 2, 3))}), read

    d = st._driver(spark, tmp_path / "on")
    d.process(spark.createDataFrame(frames[4]), 4)
    st._eq(st._state(d), st._expected(frames))
    rec = StateStore(spark, str(tmp_path / "on")).latest()
    assert rec.version == 4 and rec.kind == "delta" and rec.snapshot == 3     # the next version builds on it
    d.close()


def test_a_close_after_a_batch_that_failed_before_its_commit_writes_nothing(spark, tmp_path):
    """The failed batch's state is in memory but not in the store: written as the last version's snapshot, the
    batch would count twice when Spark runs it again."""
    frames = st._batches(n=4, seed=22)

    def fail(point, version):
        if point == "data-written" and version == 3:
            raise OSError("the disk is gone")

    d = _run(spark, tmp_path / "s", frames[:3], on_event=fail)
    with pytest.raises(OSError, match="the disk is gone"):
        d.process(spark.createDataFrame(frames[3]), 3)
    d.close()
    assert not list((tmp_path / "s" / "_commits").glob("*.snapshot"))
    d2 = st._driver(spark, tmp_path / "s")
    d2.process(spark.createDataFrame(frames[3]), 3)                  # Spark runs the batch again
    st._eq(st._state(d2), st._expected(frames))
    d2.close()


def test_a_compaction_cut_short_is_ignored_by_loading_and_by_expiry(spark, tmp_path):
    """Files of a compaction without its marker (a crash while they were written) are neither read nor a base
    that lets expiry delete the versions before it."""
    frames = st._batches(n=5, seed=23)
    root = tmp_path / "s"

    def crash(point, version):
        if point == "compacted-written":
            raise OSError("killed")

    _run(spark, root, frames[:4], snapshot_every=4, retain_versions=2, on_event=crash).close()
    half = sorted((root / "v00000000000000000003" / "snapshot").glob("*.parquet"))
    assert half and not list((root / "_commits").glob("*.snapshot"))
    half[0].unlink()                                                  # (written in part)
    d = st._driver(spark, root, snapshot_every=4, retain_versions=2)
    d.process(spark.createDataFrame(frames[4]), 4)                    # v4 a snapshot: expiry runs, cutoff 3
    st._eq(st._state(d), st._expected(frames))
    d.close()
    df, rec = StateStore(spark, str(root)).load(version=3)           # v3's chain (from v0) is still whole
    assert rec.version == 3
    got = df.toPandas().set_index("key").sort_index()[["count", "total", "top"]]
    st._eq(got, st._expected(frames[:4]))


def test_records_and_markers_are_listed_under_a_directory_whose_name_looks_like_them(spark, tmp_path):
    """The listing reads the names of ``_commits`` as one text (``StateStore._names``): a state directory whose own
    name has the text's separator and records' names changes nothing."""
    frames = st._batches(n=4, seed=25)
    root = tmp_path / "7.json, 8.snapshot"
    _run(spark, root, frames[:3]).close()                                # v0 snapshot, v1 v2 deltas, v2 compacted
    store = StateStore(spark, str(root))
    assert store.versions() == [0, 1, 2] and store._compacted == {2}
    assert _read_dirs(spark, root) == {"v00000000000000000002/snapshot"}
    d = st._driver(spark, root)
    d.process(spark.createDataFrame(frames[3]), 3)
    st._eq(st._state(d), st._expected(frames))
    d.close()


def test_a_state_directory_whose_name_has_glob_characters_is_read_as_named(spark, tmp_path):
    """Spark's reader globs the paths it is given: the store escapes them. Unescaped, ``job[1]{a,b}*`` was no
    directory of its own to the reader but a pattern matching its sibling ``job1a-other``, whose state a restart read
    instead of its own."""
    frames, other = st._batches(n=3, seed=27), st._batches(n=2, seed=28)
    root = tmp_path / "job[1]{a,b}*"
    _run(spark, tmp_path / "job1a-other", other).close()               # same versions, other rows
    _run(spark, root, frames[:2]).close()
    d = st._driver(spark, root)
    d.process(spark.createDataFrame(frames[2]), 2)
    st._eq(st._state(d), st._expected(frames))
    d.close()
