"""Schemathesis against the OpenAPI document, calling the app (in process, lifespan run: the session's ``server``
fixture): no 5xx, responses match the documented schemas, status codes and content types. Bounded: a few
generated examples per operation.

The schema is taken from ``create_app().openapi()`` at collection time (schemathesis' lazy ``from_fixture``
does not work with pytest 9); the test then also checks that the app serves exactly that document.
"""

from __future__ import annotations

import time

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks as sc

from api.app import create_app
from controller.settings import Settings

OPENAPI = create_app(Settings(database_url="sqlite:///:memory:"), warm=False).openapi()
schema = schemathesis.openapi.from_dict(OPENAPI)
schema.config.phases.update(phases=["examples", "fuzzing"])  # no exhaustive "coverage" phase: keep CI fast

CHECKS = [sc.not_a_server_error, sc.status_code_conformance, sc.content_type_conformance,
          sc.response_schema_conformance]


@pytest.fixture(scope="module")
def session(server):
    """requests (schemathesis' transport) into the in-process app, once it is ready: ``/readyz`` rightly answers
    503 while the solver workers start, which is not a server error of the fuzzed operations."""
    with server.requests_session() as s:
        deadline = time.monotonic() + 120
        while s.get(f"{server.url}/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the in-process server never became ready"
            time.sleep(0.2)
        yield s


def test_served_document_is_the_tested_one(client):
    assert client.get("/openapi.json").json() == OPENAPI


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_openapi_contract(case, server, session):
    case.call_and_validate(base_url=server.url, session=session, checks=CHECKS)
