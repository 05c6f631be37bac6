"""A class-data-sharing (CDS) archive of the Spark JVM for the test suite.

Every Spark JVM the tests start (each test process's session, and the drivers that the recovery, executor-loss,
benchmark and CLI tests start as processes of their own) loads and verifies some 10,000 classes from Spark's jars
before its first job. Java's dynamic CDS archive (JDK 13+, ``-XX:ArchiveClassesAtExit`` then
``-XX:SharedArchiveFile``) keeps them parsed and verified in one file mapped by every JVM: measured on 2 cores, a
small job with Parquet, a shuffle, a pandas UDF and a streaming query took 14-15 core-seconds in a new JVM and 8-9
with the archive; the recovery and executor-loss tests (seven driver JVMs) 110 core-seconds and 77.

The archive is built once per virtualenv (under ``sys.prefix``; ``make clean`` removes it) by the first test process
that needs Spark, from a JVM that runs :func:`_exercise`, and used by the JVMs started after it. A JVM checks the
archive itself and runs without it when it does not match (another JDK, other jars); a build that fails leaves no
archive, and the tests run as before. A user's jobs are not concerned: this only sets a default of the test
processes' environment.
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
from pathlib import Path

#: the flags of every test JVM (tests/conftest.py); the archive is keyed on them
BASE_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
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
    out = subprocess.run([java, f"-XX:SharedArchiveFile={path}", QUIET.split()[0], "-version"],
                         capture_output=True, text=True, timeout=60, check=False)
    return out.returncode == 0 and "sharing" in out.stderr


def jvm_options(build: bool) -> str | None:
    """The options that make a JVM use the archive; with ``build``, the archive is built first when missing and
    no other process is building it (that process's JVMs then run without it). None: no archive to use."""
    path, java = archive_path(), _java()
    if path is None or java is None:
        return None
    use = f"-XX:SharedArchiveFile={path} {QUIET}"
    if path.exists():
        return use
    failed = path.with_suffix(".failed")
    if not build or failed.exists():
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "w")  # noqa: SIM115 - held until the build ends
    except OSError:
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        if path.exists():
            return use
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable,
                   SPARK_SUBMIT_OPTS=f"{BASE_OPTS} -XX:ArchiveClassesAtExit={tmp} {QUIET}")
        try:
            out = subprocess.run([sys.executable, "-m", "tests.helpers.spark_cds"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=600, check=False)
            if out.returncode == 0 and tmp.exists() and _usable(tmp, java):
                os.replace(tmp, path)
                return use
            failed.write_text(f"exit status {out.returncode}\n{out.stderr[-4000:]}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            failed.write_text(repr(exc))
        finally:
            tmp.unlink(missing_ok=True)
    return None


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
    _exercise()
