"""The py4j side of the integration's file-system and observation access: the JVM of a session, its Hadoop
configuration, a directory's listing and an ``Observation``'s values read in a few calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from rebalancer_client.spark.exprs import shared

if TYPE_CHECKING:
    from pyspark.sql import Column, Observation, SparkSession


def jvm(spark: SparkSession) -> Any:
    """The JVM of ``spark``'s py4j gateway (py4j objects have no static types)."""
    return cast(Any, spark.sparkContext)._jvm


def hadoop_conf(spark: SparkSession) -> Any:
    """``spark``'s Hadoop configuration (a py4j object)."""
    return cast(Any, spark.sparkContext)._jsc.hadoopConfiguration()


def names_in(spark: SparkSession, fs: Any, directory: Any) -> list[str]:
    """The names in ``directory`` (a Hadoop ``Path`` of the file system ``fs``) in a few JVM calls whatever their
    number (reading each entry's name through py4j is three calls an entry, ~200 for the records a state store
    keeps): the listing's paths as one text, ``[<dir>/<name>, <dir>/<name>, ...]``, built in the JVM and read in
    pieces (:func:`text_of`), cut at the directory's own qualified path. (py4j matches a ``Path[]`` to no
    ``Object[]`` parameter: the paths are copied into one first.)"""
    j, sc = jvm(spark), cast(Any, spark.sparkContext)
    file_util, obj, system, arrays = shared(("listing classes",), lambda: (
        j.org.apache.hadoop.fs.FileUtil, j.java.lang.Object, j.java.lang.System, j.java.util.Arrays))
    paths = file_util.stat2Paths(fs.listStatus(directory))
    n = len(paths)
    if n == 0:
        return []
    objects = sc._gateway.new_array(obj, n)
    system.arraycopy(paths, 0, objects, 0, n)
    listing = j.java.lang.StringBuilder().append(arrays.asList(objects))  # the list's text, "[a, b]", in the JVM
    body, prefix = text_of(listing)[1:-1], str(fs.makeQualified(directory).toString()) + "/"
    if not body.startswith(prefix):  # (a listing names what it holds under the qualified directory)
        return [str(paths[i].getName()) for i in range(n)]
    return body[len(prefix):].split(", " + prefix)


#: the longest text a py4j answer carries without a stall: the JVM writes an answer through an 8,192-character
#: buffer, and an answer that needs a second write waits for the first one's acknowledgement, which the receiving
#: side delays (Nagle's algorithm against delayed ACKs) — measured on local[2]: 0.3 ms for 8,000 characters,
#: 44 ms for every length from 8,300 to 128,000
PY4J_PIECE = 8000


def text_of(chars: Any) -> str:
    """The text of a JVM ``CharSequence`` (a ``StringBuilder``, a ``StringWriter``'s buffer), read in pieces of at
    most :data:`PY4J_PIECE` characters: a JVM method that returns a longer ``String`` stalls."""
    n = int(chars.length())
    return "".join(str(chars.subSequence(a, min(n, a + PY4J_PIECE))) for a in range(0, n, PY4J_PIECE))


def text_pieces(text: Column) -> Column:
    """The text column ``text`` as an array of pieces of at most :data:`PY4J_PIECE` characters, in order, for an
    observation that :func:`observed_values` reads without the stall (an empty array for an empty text);
    :func:`joined` puts them together again."""
    from pyspark.sql import functions as F

    return F.regexp_extract_all(text, F.lit(f"(?s).{{1,{PY4J_PIECE}}}"), F.lit(0))


def joined(value: Any) -> str:
    """The text of an observed value built by :func:`text_pieces` (a list of pieces; None or a text as it is)."""
    return "".join(value) if isinstance(value, list) else (value or "")


def observed_values(obs: Observation) -> dict[str, Any]:
    """An ``Observation``'s values. Read from the JVM row one value at a time (text and numbers pass py4j as they
    are; an array of texts as a list, one piece per call), not through ``Observation.get``, which pickles the row
    and has py4j decode the bytes one by one (0.15 s for a 350 kB row); values of other types take that path."""
    from py4j.protocol import Py4JError

    try:
        jrow = cast(Any, obs)._jo.getRow()
        names = list(jrow.schema().fieldNames())
        out: dict[str, Any] = {}
        for i, name in enumerate(names):
            v = jrow.get(i)
            if v is not None and not isinstance(v, (str, int, float, bool)):
                try:  # a Scala sequence: its elements one at a time
                    v = [v.apply(k) for k in range(int(v.length()))]
                except Py4JError:
                    return dict(obs.get)
                if not all(isinstance(x, str) for x in v):
                    return dict(obs.get)
            out[name] = v
        return out
    except AttributeError:  # an Observation without the JVM object (e.g. Spark Connect)
        return dict(obs.get)
