"""A class-data-sharing (CDS) archive of the Spark JVM for the test suite.

Every Spark JVM the tests start (each test process's session, and the drivers that the recovery, executor-loss,
benchmark and CLI tests start as processes of their own) loads and verifies some 10,000 classes from Spark's jars
before its first job. Java's dynamic CDS archive (JDK 13+, ``-XX:ArchiveClassesAtExit`` then
``-XX:SharedArchiveFile``) keeps them parsed and verified in one file mapped by every JVM: measured on 2 cores, a
small job with Parquet, a shuffle, a pandas UDF and a streaming query took 14-15 core-seconds in a new JVM and 8-9
with the archive; the recovery and executor-loss tests (seven driver JVMs) 110 core-seconds and 77.

The archive is built once per virtualenv (under ``sys.prefix``; ``make clean`` removes it, and a build removes the
archives of other flags, jars or JDKs), in the background as soon as a test process has collected Spark tests
(:func:`start_build`), from a JVM that runs :func:`_exercise`; a Spark test waits for a build under way
(:func:`jvm_options`), and every JVM started after it uses the archive. A JVM checks the archive itself and runs
without it when it does not match (another JDK, other jars); a build that fails leaves no archive (and a
``*.failed`` file saying why), and the tests run as before. A user's jobs are not concerned: this only sets a
default of the test processes' environment.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from tests.helpers import temp_root

#: the flags of every test JVM (tests/conftest.py); the archive is keyed on them
BASE_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
#: a JVM that cannot use the archive says so on standard output: the CLI tests read JSON there
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
ROOT = Path(__file__).resolve().parents[2]


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


@functools.cache
def archive_path() -> Path | None:
    """Where the archive of this JDK, these Spark jars and these flags lives (None: no Java or no pyspark)."""
    java, spec = _java(), importlib.util.find_spec("pyspark")
    if java is None or spec is None or spec.origin is None:
        return None
    jars = Path(spec.origin).parent / "jars"
    key = hashlib.sha1(f"{java} {os.stat(java).st_mtime_ns} {BASE_OPTS}".encode())
    for jar in sorted(jars.glob("*.jar")):
        key.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return Path(sys.prefix) / "var" / "rebalancer-tests" / f"spark-{key.hexdigest()[:16]}.jsa"


def _usable(path: Path, java: str) -> bool:
    """A JVM maps the archive (a truncated one crashes a JVM: only a checked file takes the final name)."""
    out = subprocess.run([java, f"-XX:SharedArchiveFile={path}", *QUIET.split(), "-version"],
                         capture_output=True, text=True, timeout=60, check=False)
    return out.returncode == 0 and "sharing" in out.stderr


def _lock(path: Path) -> IO[str] | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - the caller holds it
    except OSError:
        return None


def _building(path: Path) -> bool:
    """A process holds the build's lock."""
    lock = _lock(path)
    if lock is None:
        return False
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


_builder: subprocess.Popen[bytes] | None = None


def start_build() -> None:
    """Build the archive in the background (``python -m tests.helpers.spark_cds build``) unless it exists, a build
    failed before (``*.failed`` beside it) or another process is building it. Called once the tests to run are
    known, when they include Spark tests."""
    global _builder
    path = archive_path()
    if path is None or path.exists() or path.with_suffix(".failed").exists() or _building(path):
        return
    _builder = subprocess.Popen([sys.executable, "-m", "tests.helpers.spark_cds", "build"], cwd=ROOT,
                                env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=temp_root.parent()),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def jvm_options(wait: bool) -> str | None:
    """The options that make a JVM use the archive; None while there is none. With ``wait``, a build under way
    (this process's or another's) is waited for first."""
    path = archive_path()
    if path is None:
        return None
    if wait and not path.exists():
        if _builder is not None:
            try:
                _builder.wait(timeout=600)
            except subprocess.TimeoutExpired:
                return None
        end = time.monotonic() + 600
        while _building(path) and time.monotonic() < end:
            time.sleep(0.2)
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.exists() else None


def _build() -> int:
    """Run :func:`_exercise` in a JVM that writes the archive at its exit; check it; give it its name."""
    path, java = archive_path(), _java()
    lock = _lock(path) if path is not None else None
    if path is None or java is None or lock is None:
        return 1
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second builder waits, then finds the archive
        if path.exists():
            return 0
        for stale in path.parent.glob(f"{path.stem}.*.tmp"):  # a build killed before its end (~200 MB each)
            stale.unlink(missing_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   SPARK_SUBMIT_OPTS=f"{BASE_OPTS} -XX:ArchiveClassesAtExit={tmp} {QUIET}")
        try:
            out = subprocess.run([sys.executable, "-m", "tests.helpers.spark_cds", "exercise"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=600, check=False)
            if out.returncode == 0 and tmp.exists() and _usable(tmp, java):
                os.replace(tmp, path)
                for stale in path.parent.glob("spark-*.jsa"):  # of other flags, jars or JDK (~200 MB each)
                    if stale != path:
                        stale.unlink(missing_ok=True)
                return 0
            path.with_suffix(".failed").write_text(f"exit status {out.returncode}\n{out.stderr[-4000:]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            path.with_suffix(".failed").write_text(repr(exc))
        finally:
            tmp.unlink(missing_ok=True)
    return 1


def _exercise() -> None:
    """What the tests' JVMs load: a session, Parquet written and read, a shuffle, a join, a cached frame, Arrow to
    pandas, a pandas UDF and a streaming query with ``foreachBatch``."""
    import tempfile

    import pandas as pd
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "3")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    with tempfile.TemporaryDirectory() as d:
        df = spark.range(2000).withColumn("k", (F.col("id") % 7).cast("string")).withColumn("v", F.col("id") * 2)
        df.write.parquet(f"{d}/p")
        rows = spark.read.parquet(f"{d}/p")
        agg = rows.groupBy("k").agg(F.sum("v").alias("t"), F.count("*").alias("n"))
        agg.join(rows, "k").repartition(3, "k").cache().count()
        agg.toPandas()
        pdf = spark.createDataFrame(pd.DataFrame({"k": ["a", "b"], "v": [1, 2]}))
        pdf.groupBy("k").applyInPandas(lambda p: p, "k string, v long").collect()
        q = (spark.readStream.schema("id long, k string, v long").parquet(f"{d}/p").groupBy("k").count()
             .writeStream.outputMode("update").option("checkpointLocation", f"{d}/chk")
             .foreachBatch(lambda b, _i: b.collect()).trigger(availableNow=True).start())
        q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["exercise"]:
        _exercise()
    elif sys.argv[1:] == ["build"]:
        sys.exit(_build())
