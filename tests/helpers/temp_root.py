"""One temporary folder per test run, removed when the run passes.

The processes the tests start leave files in the temporary directory when they are killed (the point of several
tests): a Spark JVM its ``spark-*``, ``blockmgr-*`` and ``artifacts-*`` folders and the native libraries it
unpacked, a Python process its ``pymp-*`` folder. Measured on 2026-12-07: about 50 entries (3.6 MB) in ``/tmp`` per
run of the suite, never removed. The run's first process (pytest, or pytest-xdist's controller) makes a folder in the
system's temporary directory and sets it as ``TMPDIR``, which every process it starts inherits (xdist's workers too),
and Spark's JVMs take it as ``java.io.tmpdir`` (:func:`java_option`). The folder is removed when the run passes and
kept, and named, when it fails. The first process's own temporary files stay where they were: pytest's ``tmp_path``
folders (pytest keeps the last three runs'), and its multiprocessing folder, which it removes at its exit, after
the run's folder is gone (a run with ``-n 0`` otherwise ended with a traceback from that removal).
"""

from __future__ import annotations

import os
import shutil
import tempfile

#: the run's folder, for the processes of the run (xdist's workers inherit it)
ENV = "TESTS_RUN_TMPDIR"  # (not REBALANCER_*: the server refuses settings it does not know)
#: the temporary directory before the run, for what outlives the run (the CDS archive's background build)
PARENT_ENV = "TESTS_RUN_TMPDIR_PARENT"


def enter() -> tuple[str, bool]:
    """(the run's folder, whether this process made it and removes it): made by the run's first process; ``TMPDIR``
    of this process and its children from now on."""
    root = os.environ.get(ENV)
    owner = not root or not os.path.isdir(root)
    if owner:
        parent = tempfile.gettempdir()
        root = tempfile.mkdtemp(prefix="rebalancer-tests-", dir=parent)
        os.chmod(root, 0o711)  # the PostgreSQL tests run initdb as another user in a folder inside it
        os.environ[ENV], os.environ[PARENT_ENV] = root, parent
    assert root is not None
    os.environ["TMPDIR"] = root
    # the first process keeps its own temporary files where they were: it removes the folder at its end, before its
    # own multiprocessing folder is removed (the last thing it does) — that one is removed as usual
    tempfile.tempdir = os.environ[PARENT_ENV] if owner else None
    return root, owner


def parent() -> str:
    """The temporary directory the run started with."""
    return os.environ.get(PARENT_ENV) or tempfile.gettempdir()


def java_option(root: str) -> str:
    """The JVM option that puts a JVM's temporary files (and Spark's local folders) in ``root``."""
    return f"-Djava.io.tmpdir={root}"


def leave(root: str, passed: bool) -> str | None:
    """End of the run: remove ``root`` when the run passed; otherwise keep it and return a line that names it."""
    if passed:
        shutil.rmtree(root, ignore_errors=True)
        return None
    return f"the run's temporary files are kept in {root}"
