"""The py4j side of the integration's file-system and observation access: the JVM of a session, its Hadoop
configuration, a directory's listing and an ``Observation``'s values read in a few calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rebalancer_client.spark.exprs import shared

if TYPE_CHECKING:
    from pyspark.sql import Observation, SparkSession


def jvm(spark: SparkSession) -> Any:
    """The JVM of ``spark``'s py4j gateway (py4j objects have no static types)."""
    return cast(Any, spark.sparkContext)._jvm


def hadoop_conf(spark: SparkSession) -> Any:
    """``spark``'s Hadoop configuration (a py4j object)."""
    return cast(Any, spark.sparkContext)._jsc.hadoopConfiguration()


def names_in(spark: SparkSession, fs: Any, directory: Any) -> list[str]:
    """The names in ``directory`` (a Hadoop ``Path`` of the file system ``fs``) in eight JVM calls whatever their
    number (reading each entry's name through py4j is three calls an entry, ~200 for the records a state store
    keeps): the listing's paths as one text, ``[<dir>/<name>, <dir>/<name>, ...]``, cut at the directory's own
    qualified path. (py4j matches a ``Path[]`` to no ``Object[]`` parameter: the paths are copied into one first.)"""
    j, sc = jvm(spark), cast(Any, spark.sparkContext)
    file_util, obj, system, arrays = shared(("listing classes",), lambda: (
        j.org.apache.hadoop.fs.FileUtil, j.java.lang.Object, j.java.lang.System, j.java.util.Arrays))
    paths = file_util.stat2Paths(fs.listStatus(directory))
    n = len(paths)
    if n == 0:
        return []
    objects = sc._gateway.new_array(obj, n)
    system.arraycopy(paths, 0, objects, 0, n)
    body, prefix = str(arrays.toString(objects))[1:-1], str(fs.makeQualified(directory).toString()) + "/"
    if not body.startswith(prefix):  # (a listing names what it holds under the qualified directory)
        return [str(paths[i].getName()) for i in range(n)]
    return body[len(prefix):].split(", " + prefix)


def observed_values(obs: Observation) -> dict[str, Any]:
    """An ``Observation``'s values. Read from the JVM row one value at a time (text and numbers pass py4j as they
    are), not through ``Observation.get``, which pickles the row and has py4j decode the bytes one by one (0.15 s
    for a 350 kB row); values of other types take that path."""
    try:
        jrow = cast(Any, obs)._jo.getRow()
        names = list(jrow.schema().fieldNames())
        out = {}
        for i, name in enumerate(names):
            v = jrow.get(i)
            if v is not None and not isinstance(v, (str, int, float, bool)):
                return dict(obs.get)
            out[name] = v
        return out
    except AttributeError:  # an Observation without the JVM object (e.g. Spark Connect)
        return dict(obs.get)
