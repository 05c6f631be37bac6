"""Root of the test suite: makes ``tests.helpers`` importable however pytest is started (``pytest`` or
``python -m pytest``, from any directory), since ``--import-mode=importlib`` does not put the rootdir on ``sys.path``;
and selects the Hypothesis profile.

Markers (declared in pyproject.toml): ``slow``, ``spark``, ``postgres``; ``make test-fast`` deselects all three.

Hypothesis profiles (``HYPOTHESIS_PROFILE``, default ``repeatable``): ``repeatable`` draws the same examples on every
run and machine (``derandomize``: a failure is a failure of the code, reproduced by running the test again, never
a draw that happened to come up) and measures nothing against the clock (no deadline, no "too slow" health check:
a loaded machine must not fail a test); ``explore`` draws new examples each run (to look for bugs, not for CI).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.helpers import spark_cds, temp_root  # noqa: E402 - needs ROOT on sys.path
from tests.helpers.server import refused_port  # noqa: E402

#: the run's temporary folder (:mod:`tests.helpers.temp_root`), before anything makes a temporary file
_TMP, _OWNS_TMP = temp_root.enter()

#: Every Spark JVM the tests start (the session's, the drivers started as subprocesses, ``rebalancer spark-stats``)
#: compiles with C1 only and collects with the serial collector: the JVMs live for seconds to minutes and spend much
#: of that in the JIT's C2 compiler and the parallel collector's threads. On 2 cores the suite used 1,406 core-seconds
#: of CPU (98.9 % of the machine's) before and 992 after; ``tests/clients/test_spark_state.py`` alone 131 -> 76.
#: With C1 only the JVM reserves 48 MB for compiled code instead of 240: a test JVM's compiled code passed 45 MB within
#: 40 s of Spark tests (``jcmd PID Compiler.codecache``), and with less than 10 % free the JVM flushes compiled
#: methods and compiles them again. 240 MB are reserved, as with tiered compilation: a JVM running the tests of
#: ``test_spark_pandas_state.py`` and ``test_spark_state.py`` spent 17.5-19.0 core-seconds of 70.7-77.6 in its compiler
#: and sweeper threads before, 7.9-8.8 of 57.8-63.2 after, with no sweeping (two runs each, alternated).
#: A user's jobs keep the JVM's defaults (this only sets a default of the test processes' environment).
#: Once a class-data-sharing archive of the Spark JVM exists (:mod:`tests.helpers.spark_cds`, built in the background
#: once Spark tests are collected), the JVMs started after it use it too.
#: (And their temporary files go to the run's folder.)
_JVM_OPTS = f"{spark_cds.BASE_OPTS} {temp_root.java_option(_TMP)}"
_OWN_JVM_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", _JVM_OPTS) == _JVM_OPTS  # (xdist: inherited)
os.environ.setdefault("SPARK_SUBMIT_OPTS", _JVM_OPTS)
_cds_in_use = False
_kept: str | None = None  # the line naming a failed run's temporary folder

_CLOCKLESS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True, **_CLOCKLESS)
settings.register_profile("explore", print_blob=True, **_CLOCKLESS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test's fixtures: the Spark JVMs of this process use the CDS archive once it exists; a ``spark``
    test waits for a build under way."""
    global _cds_in_use
    if _cds_in_use or not _OWN_JVM_OPTS:
        return
    opts = spark_cds.jvm_options(wait=item.get_closest_marker("spark") is not None)
    if opts:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{_JVM_OPTS} {opts}"
        _cds_in_use = True


def pytest_collection_finish(session: pytest.Session) -> None:
    """The tests to run are known (``-m`` applied): with Spark tests among them, the CDS archive is built in the
    background if it is missing."""
    if _OWN_JVM_OPTS and any(item.get_closest_marker("spark") for item in session.items):
        spark_cds.start_build()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run's temporary folder is removed when the run passed or ran nothing (by the process that made it)."""
    global _kept
    if _OWNS_TMP:
        _kept = temp_root.leave(_TMP, passed=exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """A failed run names its temporary folder (kept by :func:`pytest_sessionfinish`, which runs before)."""
    if _kept:
        terminalreporter.write_sep("-", _kept)


def pytest_xdist_auto_num_workers(config: object) -> int:
    """``-n auto``: one test process per core and one more. Much of a test's time is spent waiting on a process it
    started (a server, a Spark JVM, a solver worker), so one process per core leaves the cores idle at times; but
    the suite keeps the cores busy throughout with three processes on two, and a fourth only adds contention: on 2
    cores, runs side by side, 3 processes 397 and 385 s (754 and 725 busy core-seconds), 4 processes 438 and 424 s
    (851 and 834), 2 processes 450 s (749, and a tail with a core idle)."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(config: object, items: list[Any]) -> None:
    """The longest modules first — those with tests both ``slow`` and ``spark``, then ``slow``, then ``spark`` — and
    each module's tests together, in collection order (module fixtures are set up once): with several processes, a
    long test that starts last is the suite's tail.

    pytest-xdist hands each process a first run of consecutive tests (a quarter of the suite divided by the number
    of processes): with the ``spark`` modules right after the first few tests they all went to one process, which
    ran them one after the other for 3 minutes after the others had finished (``make test`` 9:20, the machine 89 %
    busy); with the ``slow`` ones between, two processes share them (8:21, 98 % busy; two Spark JVMs instead of one
    or four). With 3 processes on 2 cores, the first two run their first runs to the end (the slow modules) while
    the third runs every other test and ends ~2 minutes before them, leaving the last ~30 s to one process."""
    rank: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        slow, spark = (item.get_closest_marker(m) is not None for m in ("slow", "spark"))
        rank[path] = min(rank.get(path, 3), 0 if slow and spark else 1 if slow else 2 if spark else 3)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


@pytest.fixture
def unused_port() -> Iterator[int]:
    """A port of 127.0.0.1 that refuses connections for the whole test: a controller that is down
    (:func:`tests.helpers.server.refused_port`; no other test process's server can be given it meanwhile)."""
    with refused_port() as port:
        yield port
