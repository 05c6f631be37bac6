"""Durable, versioned keyed state on any Hadoop file system (local, HDFS, S3), one version per micro-batch.

The layout follows Spark's HDFS-backed state store (``HDFSBackedStateStoreProvider``: a delta file per version,
a snapshot every ``spark.sql.streaming.stateStore.minDeltasForSnapshot`` = 10 deltas, the last
``spark.sql.streaming.minBatchesToRetain`` = 100 versions kept), with Parquet instead of Spark's own row files::

    <root>/v00000000000000000007/delta/*.parquet      the rows that changed in batch 7 (their new values)
    <root>/v00000000000000000010/snapshot/*.parquet   the whole state after batch 10 (every ``snapshot_every``)
    <root>/_commits/00000000000000000007.json          the commit: version, routing epoch, partitions, counts
    <root>/_commits/00000000000000000013.snapshot      version 13's snapshot, written by a clean close (compact)
    <root>/_tmp/...                                    commit records being written (removed on open)

**Commit protocol.** A version's Parquet files are written into ``v<version>`` (by Spark's file committer, without
a ``_SUCCESS`` marker); then the commit record is written to a temporary name and renamed to
``_commits/<version>.json``. A version exists iff its commit record exists: the record (one small file, or one S3
object written at once) is the commit point, and nothing reads the directory of a version without one. A crash
leaves at most an uncommitted directory, which the next commit of that version (Spark replays the batch with the
same id) deletes before writing. The data is not renamed after the write (on S3 a rename is a copy).

**Compaction on a clean close** (:meth:`StateStore.compact`, like Flink's stop-with-savepoint): the whole state of
the latest version is written as that version's snapshot, then its marker ``_commits/<version>.snapshot``; from
then on loading starts there, and the next version's record names it as its snapshot. Without the marker (a crash
while it is written) the files are ignored, by loading and by expiry alike.

**Rows.** Every state row carries the key group ``_rb_kg``, the key columns and the aggregates. A delta holds the
rows its version changed; a row's version is the version of the directory it is stored in (the files carry no
version column, so that a batch's plan has no batch-specific literal and Spark reuses its generated code: a
literal that changes every batch cost ~6 Janino compilations, 0.1–0.4 s, per batch). Loading version V reads the
latest snapshot at or before V and the deltas after it, gives each row its directory's version as ``_rb_v`` and
keeps per key the row with the highest ``_rb_v`` (an upsert) — reading happens on recovery only. Files of the
first release carry ``_rb_v`` themselves (a snapshot row its own, older, version); their directory's version
replaces it, which keeps the same row per key (every delta after a snapshot is newer than the snapshot).

**Schema.** The commit record holds the stored columns' Spark schema: a restart reads every directory of the version
at once with it (inferring a Parquet schema is a Spark job per read). Records of earlier releases have none: their
directories are read one by one, each schema inferred.

**Routing.** The commit record holds the routing epoch and the key group → partition table the batch ran under,
so a restarted driver places the state as it was and resynchronises with the controller from that epoch.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rebalancer_client.spark.commit_record import Commit
from rebalancer_client.spark.exprs import shared
from rebalancer_client.spark.jvm import hadoop_conf, jvm, names_in, observed_values, text_of
from rebalancer_client.spark.stats import NamedColumns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("rebalancer.spark")

VERSION_COL = "_rb_v"
_W = 20  # digits of a version in names (sorts as text)
#: the characters Hadoop's path globbing gives a meaning (``SparkHadoopUtil.isGlobPath``)
_GLOB = re.compile(r"([\\{}\[\]*?])")


class StateStore:
    """Versioned state under ``root`` (any Hadoop path). See the module docstring for layout and protocol.

    Args:
        spark: a SparkSession (its Hadoop configuration resolves the file system of ``root``).
        root: the state directory, e.g. ``<checkpointLocation>/rebalancer-state``.
        snapshot_every: write the whole state every this many versions (Spark's default 10).
        retain_versions: keep at least this many recent versions (Spark's ``minBatchesToRetain``, 100); older
            versions are deleted once a newer snapshot makes them unnecessary.
        snapshot_on_close: :meth:`compact` writes the latest version's state whole (the driver's clean close).
        on_event: test hook ``f(point, version)`` called at ``"data-written"`` (Parquet written, record not yet
            written), ``"committed"`` and ``"compacted-written"`` (a compaction's files written, its marker not
            yet); a kill there must not lose or duplicate anything.
    """

    def __init__(self, spark: SparkSession, root: str, *, snapshot_every: int = 10, retain_versions: int = 100,
                 snapshot_on_close: bool = True, on_event: Callable[[str, int], None] | None = None):
        if snapshot_every < 1:
            raise ValueError("snapshot_every must be >= 1")
        if retain_versions < 1:
            raise ValueError("retain_versions must be >= 1")
        self.spark = spark
        self.root = str(root).rstrip("/")
        self.snapshot_every = int(snapshot_every)
        self.retain_versions = int(retain_versions)
        self.snapshot_on_close = bool(snapshot_on_close)
        self.on_event = on_event
        self._jvm, self._conf = jvm(spark), hadoop_conf(spark)
        # the classes looked up once per process: ``jvm.org.apache.hadoop.fs.Path`` is five reflective lookups
        # through py4j, the first ones failing class loads that search the whole class path (~0.7 ms a path, ~10 per
        # commit)
        self._path_class = shared(("Path class",), lambda: self._jvm.org.apache.hadoop.fs.Path)
        self._select = NamedColumns()   # the stored columns by name, built once
        self._fs = self._path(self.root).getFileSystem(self._conf)
        self._fs.mkdirs(self._path(self.root + "/_commits"))
        self._fs.delete(self._path(self.root + "/_tmp"), True)  # leftovers of a crashed writer
        self._latest: Commit | None = None
        self._latest_read = False
        self._compacted: set[int] | None = None  # versions with a snapshot of a compaction (read with the versions)
        self._schemas: dict[tuple[str, ...], str] = {}  # the stored columns' schema (JSON), found once per columns

    # ------------------------------------------------------------------ file system
    def _path(self, p: str) -> Any:
        return self._path_class(p)

    def _dir(self, version: int) -> str:
        return f"{self.root}/v{version:0{_W}d}"

    def _record(self, version: int) -> str:
        return f"{self.root}/_commits/{version:0{_W}d}.json"

    def _marker(self, version: int) -> str:
        return f"{self.root}/_commits/{version:0{_W}d}.snapshot"

    def _exists(self, p: str) -> bool:
        return bool(self._fs.exists(self._path(p)))

    def _size(self, p: str) -> int:
        return int(self._fs.getContentSummary(self._path(p)).getLength()) if self._exists(p) else 0

    def _write_text(self, p: str, text: str) -> None:
        tmp = f"{self.root}/_tmp/{uuid.uuid4().hex}.json"
        out = self._fs.create(self._path(tmp), True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        if not self._fs.rename(self._path(tmp), self._path(p)):
            raise OSError(f"cannot commit {p} (rename from {tmp} failed)")

    def _read_text(self, p: str) -> str:
        stream = self._fs.open(self._path(p))
        try:
            text = self._jvm.java.io.StringWriter()
            self._jvm.java.io.InputStreamReader(stream, "UTF-8").transferTo(text)
            return text_of(text.getBuffer())  # in pieces: a record of many key groups is longer than one
        finally:
            stream.close()

    def versions(self) -> list[int]:
        """Committed versions, ascending. The same listing finds the compaction markers (kept for :meth:`_base`)."""
        out: list[int] = []
        compacted: set[int] = set()
        for name in names_in(self.spark, self._fs, self._path(self.root + "/_commits")):
            stem, _, ext = name.partition(".")
            if stem.isdigit() and ext == "json":
                out.append(int(stem))
            elif stem.isdigit() and ext == "snapshot":
                compacted.add(int(stem))
        self._compacted = compacted
        return sorted(out)

    def _base(self, rec: Commit) -> int | None:
        """The snapshot version ``rec`` builds on: its record's, or a later one of a compaction."""
        if self._compacted is None:
            self.versions()
        assert self._compacted is not None
        return max([v for v in self._compacted if rec.snapshot is not None and rec.snapshot < v <= rec.version],
                   default=rec.snapshot)

    def commit_record(self, version: int) -> Commit:
        return Commit.from_json(self._read_text(self._record(version)))

    def latest(self) -> Commit | None:
        """The last committed version's record (``None`` for an empty store)."""
        if not self._latest_read:
            vs = self.versions()
            self._latest = self.commit_record(vs[-1]) if vs else None
            self._latest_read = True
        return self._latest

    # ------------------------------------------------------------------ writing
    def commit(self, version: int, state_df: DataFrame, *, changed: Column, keys: Sequence[str], columns: Sequence[str],
               epoch: int, partition_of: Sequence[int], delta_rows: int | None = None,
               extra: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | None = None,
               observe: Sequence[Any] = (), keep: Any = None, files: int | None = None,
               nodes: Sequence[str] | None = None) -> Commit:
        """Write version ``version``: the rows of ``state_df`` that the version changed (the predicate Column
        ``changed``; it must not name the version, see the module docstring) and the whole state when a snapshot is
        due, then the commit record. ``state_df`` must have ``columns``.

        ``observe``: aggregate columns computed over the delta rows while they are written (Spark's
        ``Observation``; no job of their own); their values are in the returned commit's ``observed`` (not stored),
        and ``delta_rows`` defaults to an observed ``keys`` column. ``keep``: a predicate of the rows to store (the
        observation sees all rows of the version). ``extra``: stored in the commit record; a callable gets the
        observed values (the record is written after the data). ``nodes``: the query's partitions as the job's nodes,
        in order (stored with their number). ``files``: write the delta and the snapshot as at
        most this many files (``coalesce``: fewer, larger tasks and files — on ``local[2]`` writing 8 small Parquet
        files cost twice as much as writing 2)."""

        t0 = time.perf_counter()
        last = self.latest()
        if last is not None and version <= last.version:
            raise ValueError(f"state version {version} is already committed (latest {last.version})")
        base = None if last is None else self._base(last)
        snapshot = base is None or version - base >= self.snapshot_every
        final = self._dir(version)
        if self._exists(final):  # an uncommitted attempt of this version (a crash before its record)
            self._fs.delete(self._path(final), True)
        cols = _stored(columns)
        delta = state_df.filter(changed)
        observed: dict[str, Any] = {}
        if observe:
            from pyspark.sql import Observation

            obs = Observation(f"rebalancer-{version}")
            delta = delta.observe(obs, *observe)
        self._write(delta, keep, cols, files, final + "/delta")
        if snapshot:
            self._write(state_df, keep, cols, files, final + "/snapshot")
        # the observation is read once the data is in place: Spark delivers it through its listener bus after the
        # write's job (~30 ms later), which the file system calls below overlap
        if observe:
            observed = observed_values(obs)
            if delta_rows is None and "keys" in observed:
                delta_rows = int(observed["keys"])
        if callable(extra):
            extra = extra(observed)
        if self.on_event is not None:
            self.on_event("data-written", version)
        rec = Commit(version=int(version), kind="snapshot" if snapshot else "delta",
                     snapshot=int(version) if snapshot else base,
                     epoch=int(epoch), partition_of=[int(p) for p in partition_of], keys=list(keys),
                     columns=cols, delta_rows=-1 if delta_rows is None else int(delta_rows),
                     written_bytes=self._size(final), seconds=0.0, committed_at=time.time(),
                     extra=dict(extra or {}), partitions=None if nodes is None else len(nodes),
                     nodes=None if nodes is None else list(nodes), schema=self._schema_of(state_df, cols))
        rec.seconds = round(time.perf_counter() - t0, 4)
        self._write_text(self._record(version), rec.to_json())
        rec.observed = observed
        self._latest, self._latest_read = rec, True
        if self.on_event is not None:
            self.on_event("committed", version)
        if snapshot:
            self._expire(version)
        return rec

    def compact(self, state_df: DataFrame, *, keep: Any = None, files: int | None = None) -> bool:
        """Write ``state_df``, the whole state of the latest version, as that version's snapshot, then its marker
        (see **Compaction** in the module docstring), so that the next start reads one directory instead of the
        versions since the last snapshot. False when there is nothing to do (``snapshot_on_close`` off, no
        version, or the latest version is a snapshot already). ``keep`` and ``files`` as in :meth:`commit`."""
        last = self.latest()
        if not self.snapshot_on_close or last is None or self._base(last) in (None, last.version):
            return False
        self._write(state_df, keep, _stored(last.columns), files, self._dir(last.version) + "/snapshot")
        if self.on_event is not None:
            self.on_event("compacted-written", last.version)
        self._write_text(self._marker(last.version), json.dumps({"version": last.version, "at": time.time()}))
        assert self._compacted is not None
        self._compacted.add(last.version)
        return True

    def _schema_of(self, df: DataFrame, columns: list[str]) -> str:
        """The Spark schema (JSON) of ``columns`` of ``df``, kept in the commit record so that a reader gives it
        instead of inferring it (inferring a Parquet schema is a Spark job per directory read). Found once per
        store and column list: the stored types do not change within a query."""
        key = tuple(columns)
        if key not in self._schemas:
            from pyspark.sql.types import StructType

            fields = {f.name: f for f in df.schema.fields}
            self._schemas[key] = StructType([fields[c] for c in columns]).json()
        return self._schemas[key]

    def _write(self, df: DataFrame, keep: Column | None, columns: Sequence[str], files: int | None, path: str) -> None:
        """Write ``columns`` of the rows of ``df`` that ``keep`` selects (None: all) as Parquet at ``path``, in at
        most ``files`` files. No ``_SUCCESS`` marker: the commit record is the version's marker (the marker cost
        two process forks per write on a local disk without Hadoop's native library, which sets file permissions
        with ``chmod``)."""
        if keep is not None:
            df = df.filter(keep)
        if files is not None:
            df = df.coalesce(max(1, int(files)))
        (df.select(*self._select(columns)).write.mode("overwrite")
         .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false").parquet(path))

    def _expire(self, version: int) -> None:
        """Delete versions older than the newest snapshot that is at least ``retain_versions`` old."""
        cutoff = version - self.retain_versions + 1
        vs = self.versions()
        compacted = self._compacted or set()
        # the newest first, so that only the records up to the base are read (a compaction's files count with their
        # marker only: a crash may have left them half written)
        keep_from = next((v for v in reversed(vs) if v <= cutoff and self._exists(self._dir(v) + "/snapshot")
                          and (v in compacted or self.commit_record(v).kind == "snapshot")), None)
        if keep_from is None:
            return
        for v in vs:
            if v >= keep_from:
                break
            self._fs.delete(self._path(self._record(v)), False)  # the record first: never a record without data
            self._fs.delete(self._path(self._marker(v)), False)
            self._fs.delete(self._path(self._dir(v)), True)

    # ------------------------------------------------------------------ reading (recovery only)
    def read_delta(self, version: int) -> DataFrame:
        """The rows changed by ``version`` (its batch's output in update mode), read with the schema of its commit
        record (no inference job; a record of an earlier release has none: inferred)."""
        last = self._latest if self._latest_read else None
        rec = last if last is not None and last.version == version else self.commit_record(version)
        return self._parquet(self._dir(version) + "/delta", rec.schema)

    def _parquet(self, path: str | list[str], schema: str | None) -> DataFrame:
        """The Parquet files at ``path`` (one or more), with the stored schema ``schema`` (JSON) when a record gives
        one."""
        paths = [_literal(p) for p in ([path] if isinstance(path, str) else path)]
        if schema is None:
            return self.spark.read.parquet(*paths)
        from pyspark.sql.types import StructType

        return self.spark.read.schema(StructType.fromJson(json.loads(schema))).parquet(*paths)

    def _read(self, path: str, rec: Commit, version: int) -> DataFrame:
        """The stored columns of ``rec`` in the Parquet files at ``path`` and ``_rb_v`` = ``version`` (see
        **Rows**). A column that files written before it existed lack (a state schema that gained a nullable
        column: the commit record lists the columns of the latest version) is null in their rows."""
        from pyspark.sql import functions as F

        version_col = F.lit(int(version)).cast("long").alias(VERSION_COL)
        df = self._parquet(path, rec.schema)
        cols = [F.col(c) if c in df.columns else F.lit(None).alias(c) for c in _stored(rec.columns)]
        return df.select(*cols, version_col)

    def _read_all(self, paths: list[str], rec: Commit) -> DataFrame:
        """The stored columns of ``rec`` in the Parquet files under ``paths`` (version directories), read at once
        with the record's schema, and ``_rb_v``, the version in the name of each file's directory: one file index
        and one scan to plan instead of one per directory."""
        from pyspark.sql import functions as F

        assert rec.schema is not None
        version = shared(("version in the file's name",), lambda: F.regexp_extract(
            F.col("_metadata.file_path"), rf"/v([0-9]{{{_W}}})/(?:delta|snapshot)/", 1).cast("long").alias(VERSION_COL))
        df = self._parquet(paths, rec.schema)
        return df.select(*self._select(_stored(rec.columns)), version)

    def load(self, version: int | None = None, *, dedup: bool = True) -> tuple[DataFrame | None, Commit | None]:
        """(state DataFrame, commit) of ``version`` (default: the latest), or ``(None, None)`` for an empty store.
        The DataFrame has the stored columns and ``_rb_v``, the version that wrote each row.

        Reads the snapshot the version builds on and the deltas after it, newest row per key wins (``dedup=False``:
        the caller keeps the newest ``_rb_v`` per key itself, e.g. after placing the rows, in the same shuffle).
        """
        from pyspark.sql import functions as F

        rec = self.latest() if version is None else self.commit_record(version)
        if rec is None:
            return None, None
        if rec.snapshot is None:
            raise OSError(f"state version {rec.version} names no snapshot")
        vs = self.versions()
        base = self._base(rec)
        assert base is not None
        dirs = [(base, self._dir(base) + "/snapshot")]
        dirs += [(v, self._dir(v) + "/delta") for v in vs if base < v <= rec.version
                 and self._exists(self._dir(v) + "/delta")]
        if rec.schema is not None:
            df = self._read_all([p for _, p in dirs], rec)
        else:  # a record of an earlier release: each directory's schema inferred
            df = self._read(dirs[0][1], rec, dirs[0][0])
            for v, p in dirs[1:]:
                df = df.unionByName(self._read(p, rec, v))
        if len(dirs) > 1 and dedup:
            others = [c for c in df.columns if c not in rec.keys]
            latest = F.max_by(F.struct(*[F.col(c) for c in others]), F.col(VERSION_COL)).alias("_rb_row")
            newest = df.groupBy(*rec.keys).agg(latest)
            df = newest.select(*rec.keys, *[F.col("_rb_row." + c).alias(c) for c in others]).select(
                *_stored(rec.columns), VERSION_COL)
        return df, rec


def _stored(columns: Sequence[str]) -> list[str]:
    """The columns files hold: ``columns`` without ``_rb_v`` (a first-release record lists it; see **Rows**)."""
    return [c for c in columns if c != VERSION_COL]


def _literal(path: str) -> str:
    """``path`` as a literal path for Spark's reader, which globs every path it is given: the glob characters
    escaped. A state directory named ``job[1]`` or ``a{b,c}`` was otherwise not found, and one named ``state*`` read
    the files of every directory the pattern matched."""
    return _GLOB.sub(r"\\\1", path)
