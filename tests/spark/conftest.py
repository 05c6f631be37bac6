"""Fixtures of the Spark process tests: a real controller over HTTP (:class:`tests.helpers.server.ServerProcess`,
a subprocess with a temporary SQLite database)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.server import UNSTARVED, ServerProcess


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    db = tmp_path_factory.mktemp("controller") / "rebalancer.db"
    c = ServerProcess(f"sqlite:///{db}", test_settings=False, settings=UNSTARVED,
                      log_path=db.with_suffix(".log")).start()
    yield c
    c.stop()
