"""Fixtures of the API tests (servers come from :mod:`tests.helpers.server`).

``server`` is one in-process app (``httpx.ASGITransport``, lifespan run, a SQLite file) for the whole session and
``client`` a synchronous ``httpx.Client`` on it: every API behaviour test runs without a port or a process start.
Tests where the process matters (kill -9 and restart, PostgreSQL) start a :class:`Server` of their own: a real
``rebalancer serve`` in its own process group.
"""

from __future__ import annotations

import pytest

from tests.helpers.server import InProcessServer, ServerProcess, free_port

#: a real server process with the test settings (``from conftest import Server`` in the test modules).
Server = ServerProcess

__all__ = ["InProcessServer", "Server", "free_port"]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("server")
    with InProcessServer(database_url=f"sqlite:///{d}/rebalancer.db").start() as srv:
        yield srv


@pytest.fixture(scope="session")
def client(server: InProcessServer):
    with server.client() as c:
        yield c
