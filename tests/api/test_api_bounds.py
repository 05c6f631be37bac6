"""Bodies the contract cannot read answer 422 on every route of a real server: JSON nested a million levels deep
(arrays or objects; it once answered 500 ``RecursionError`` after 11.5 s) and objects that name a key twice (a
parser keeps one of the values silently). And the spec: 401 and 403 are in the OpenAPI document, a 405 lists every
method the path allows, a job id is at most ``MAX_ID_LENGTH`` characters and an invalid one is always the field
``job_id``."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.helpers.server import ThreadServer

JOB = "bounds-1"
DEPTH = 1_200_000  # 2.4 MB
TOKEN = "bounds-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Any:
    d = tmp_path_factory.mktemp("bounds")
    with ThreadServer(f"sqlite:///{d}/db.sqlite", settings={"api_tokens": TOKEN}).start() as s:
        with s.client(headers=AUTH) as c:
            r = c.put(f"/v1/jobs/{JOB}", json={"nodes": ["a", "b"], "operators": [{"id": "op", "key_groups": 4}],
                                               "algorithm": "flux", "window_batches": 2})
            assert r.status_code == 201, r.text
        yield s


def body_routes(c: httpx.Client) -> list[tuple[str, str]]:
    """Every operation of the OpenAPI document that takes a body, with its path parameters filled in."""
    doc = c.get("/openapi.json").json()
    out = []
    for path, ops in doc["paths"].items():
        for method in ops:
            if method in ("post", "put", "patch"):
                url = re.sub(r"\{job_id\}", JOB, path)
                out.append((method.upper(), re.sub(r"\{\w+\}", "abc", url)))
    return out


@pytest.mark.parametrize("nested", [b"[" * DEPTH + b"]" * DEPTH, b'{"a":' * DEPTH + b"1" + b"}" * DEPTH],
                         ids=["arrays", "objects"])
def test_deeply_nested_json_is_a_422_on_every_route(srv, nested):
    with srv.client(timeout=60, headers=AUTH) as c:
        routes = body_routes(c)
        assert len(routes) >= 11, routes
        for method, path in routes:
            r = c.request(method, path, content=nested, headers={"content-type": "application/json"})
            assert r.status_code == 422, (method, path, r.status_code, r.text[:300])
            assert r.json()["detail"][0]["field"] == "body", (method, path, r.text[:300])
        assert c.get("/healthz").status_code == 200


@pytest.mark.parametrize("body", [
    b'{"batch_id": 1, "epoch": 0, "batch_id": 2, "load": [1, 1, 1, 1]}',
    b'{"batch_id": 1, "epoch": 0, "key_groups": [{"id": "op/0", "load": 1, "load": 5}]}',
    b'{"batch_id": 1, "epoch": 0, "key_groups": [{"id": "op/0", "load": 1, "id": "op/1"}]}',
    b'{"batch_id" : 1, "epoch" : 0, "load" : [1, 1, 1, 1], "load" : [2, 2, 2, 2]}',
], ids=["top", "key-group", "key-group-id", "spaced"])
def test_a_stats_body_with_a_duplicate_key_is_a_422_and_not_counted(srv, body):
    with srv.client(headers=AUTH) as c:
        r = c.post(f"/v1/jobs/{JOB}/stats", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert "given twice" in r.json()["detail"][0]["reason"]
        assert c.get(f"/v1/jobs/{JOB}").json()["window"]["batches"] == []


def test_duplicate_keys_are_refused_on_other_routes_and_plain_bodies_pass(srv):
    with srv.client(headers=AUTH) as c:
        spec = b'{"nodes": ["a"], "nodes": ["b"], "operators": [{"id": "op", "key_groups": 1}]}'
        assert c.put("/v1/jobs/dup-1", content=spec).status_code == 422
        plan = (b'{"problem": {"nodes": [{"id": "a"}], '
                b'"key_groups": [{"id": "k", "node": "a", "load": 1, "node": "a"}]}}')
        assert c.post("/v1/plans", content=plan).status_code == 422
        ok = b'{"batch_id": 7, "epoch": 0, "load": [1, 2, 3, 4], "communication": []}'  # a default given: still fine
        assert c.post(f"/v1/jobs/{JOB}/stats", content=ok).status_code == 202


def test_the_openapi_document_has_401_and_403_on_every_operation_that_needs_a_token(srv):
    with srv.client() as c:
        doc = c.get("/openapi.json").json()
    missing = [(path, method) for path, ops in doc["paths"].items() if path not in ("/healthz", "/readyz")
               for method, op in ops.items() if not {"401", "403"} <= set(op["responses"])]
    assert not missing, missing
    assert "401" not in doc["paths"]["/healthz"]["get"]["responses"]


@pytest.mark.parametrize("method, path, allowed", [
    ("PATCH", f"/v1/jobs/{JOB}", {"GET", "PUT", "DELETE"}), ("DELETE", "/v1/jobs", {"GET"}),
    ("GET", "/v1/plans", {"POST"}), ("PUT", f"/v1/jobs/{JOB}/stats", {"POST"})])
def test_a_405_lists_every_method_the_path_allows(srv, method, path, allowed):
    with srv.client(headers=AUTH) as c:
        r = c.request(method, path)
    assert r.status_code == 405, r.text
    got = {m.strip() for m in r.headers["allow"].split(",")}
    assert allowed <= got and method not in got, r.headers["allow"]
    assert all(m in r.json()["detail"] for m in allowed)


def test_a_job_id_is_at_most_max_id_length_and_an_invalid_one_is_the_field_job_id(srv):
    from rebalancer_client.contract import MAX_ID_LENGTH

    with srv.client(headers=AUTH) as c:
        assert c.get("/v1/jobs/" + "j" * MAX_ID_LENGTH).status_code == 404  # valid, not registered
        for bad in ("j" * (MAX_ID_LENGTH + 1), "-j", "a%2Fb", "a%20b"):
            r = c.get(f"/v1/jobs/{bad}")
            assert r.status_code == 422 and [d["field"] for d in r.json()["detail"]] == ["job_id"], (bad, r.text)
        r = c.get(f"/v1/jobs/{JOB}/history", params={"limit": 0})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "limit", r.text
