"""The py4j side of the integration's file-system and observation access: the JVM of a session, its Hadoop
configuration, and an ``Observation``'s values read without pickling."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pyspark.sql import Observation, SparkSession


def jvm(spark: SparkSession) -> Any:
    """The JVM of ``spark``'s py4j gateway (py4j objects have no static types)."""
    return cast(Any, spark.sparkContext)._jvm


def hadoop_conf(spark: SparkSession) -> Any:
    """``spark``'s Hadoop configuration (a py4j object)."""
    return cast(Any, spark.sparkContext)._jsc.hadoopConfiguration()


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
