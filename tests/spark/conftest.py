"""Fixtures of the Spark process tests: a real controller over HTTP (:class:`tests.helpers.server.ThreadServer`: the
app served by uvicorn on a thread of the test process, with a temporary SQLite database; the processes these tests
kill are the drivers, never the controller)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.server import UNSTARVED, ThreadServer


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    db = tmp_path_factory.mktemp("controller") / "rebalancer.db"
    with ThreadServer(f"sqlite:///{db}", test_settings=False, settings=UNSTARVED).start() as c:
        yield c
