"""Authentication on (REBALANCER_API_TOKENS) and off, and the request size caps (413): the app's middleware, in
process (no request here needs a solver worker)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.helpers.server import InProcessServer

TOKENS = ("s3cret-a", "s3cret-b")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("secured")
    with InProcessServer(database_url=f"sqlite:///{d}/db.sqlite", warm=False, api_tokens=",".join(TOKENS),
                         max_body_bytes=200_000, max_key_groups=500, max_edges=100).start() as srv:
        yield srv


ROUTES = [("GET", "/v1/jobs"), ("GET", "/v1/jobs/j1"), ("PUT", "/v1/jobs/j1"), ("DELETE", "/v1/jobs/j1"),
          ("POST", "/v1/jobs/j1/stats"), ("POST", "/v1/jobs/j1/proposals"), ("GET", "/v1/jobs/j1/proposals/abc"),
          ("POST", "/v1/jobs/j1/proposals/abc/execute"), ("POST", "/v1/jobs/j1/nodes"),
          ("GET", "/v1/jobs/j1/history"), ("POST", "/v1/plans"), ("POST", "/v1/evaluate"),
          ("POST", "/v1/what-if/scaling"), ("POST", "/v1/partitioning"), ("GET", "/v1/algorithms"),
          ("GET", "/metrics")]
OPEN = ["/healthz", "/readyz", "/docs", "/redoc", "/openapi.json", "/docs-assets/swagger-ui-bundle.js"]


@pytest.mark.parametrize("method, path", ROUTES)
def test_every_route_but_healthz_needs_a_token(secured, method, path):
    with secured.client(timeout=30) as c:
        r = c.request(method, path, json={} if method in ("POST", "PUT") else None)
        assert r.status_code == 401, (path, r.status_code)
        assert r.headers["www-authenticate"] == "Bearer"
        r = c.request(method, path, json={} if method in ("POST", "PUT") else None,
                      headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = c.request(method, path, json={} if method in ("POST", "PUT") else None,
                      headers={"Authorization": f"Bearer {TOKENS[1]}"})
        assert r.status_code != 401


@pytest.mark.parametrize("path", OPEN)
def test_probes_and_docs_are_open(secured, path):
    with secured.client(timeout=30) as c:
        r = c.get(path)
    assert r.status_code in (200, 503), (path, r.status_code)  # /readyz: 503 while no solver worker is ready


def test_openapi_declares_the_bearer_scheme(secured):
    """/docs is usable with tokens: an Authorize button (securitySchemes), the probes marked open, and the
    Swagger UI assets served by this server, not a CDN."""
    c = secured.client()
    doc = c.get("/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "one of REBALANCER_API_TOKENS"}
    assert doc["security"] == [{"bearer": []}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []
    assert doc["paths"]["/readyz"]["get"]["security"] == []
    assert "security" not in doc["paths"]["/v1/plans"]["post"]  # the global requirement applies
    page = c.get("/docs").text
    if importlib.util.find_spec("fastapi_offline") is None:
        pytest.skip("fastapi-offline (the Swagger UI assets) is not installed: /docs uses the CDN")
    assert 'src="/docs-assets/swagger-ui-bundle.js"' in page and "cdn" not in page.lower()
    redoc = c.get("/redoc").text
    assert 'src="/docs-assets/redoc.standalone.js"' in redoc and "cdn" not in redoc.lower()


def test_auth_off_by_default(client):
    assert client.get("/v1/jobs").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_body_and_count_caps(secured):
    h = {"Authorization": f"Bearer {TOKENS[0]}"}
    with secured.client(timeout=30, headers=h) as c:
        # body bytes: Content-Length over the cap
        big = {"problem": {"nodes": [{"id": f"n{i:07d}"} for i in range(20000)]}}
        assert c.post("/v1/plans", json=big).status_code == 413
        # body bytes, chunked (no Content-Length): counted while streaming

        def chunks():
            yield b'{"problem": {"nodes": ['
            for i in range(20000):
                yield b'{"id": "n%07d"},' % i
            yield b'{"id": "last"}]}}'

        r = c.post("/v1/plans", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        # key group and edge counts
        assert c.put("/v1/jobs/big", json={"nodes": ["a"], "operators": [{"id": "o", "key_groups": 501}]}
                     ).status_code == 413
        kgs = [{"id": f"k{i}", "node": "a", "load": 1} for i in range(501)]
        assert c.post("/v1/plans", json={"problem": {"nodes": [{"id": "a"}], "key_groups": kgs}}).status_code == 413
        assert c.put("/v1/jobs/small", json={"nodes": ["a"], "operators": [{"id": "o", "key_groups": 2}]}
                     ).status_code == 201
        edges = [{"src": "o/0", "dst": "o/1", "rate": 1}] * 101
        r = c.post("/v1/jobs/small/stats", json={"batch_id": 1, "epoch": 0, "communication": edges})
        assert r.status_code == 413
        # within the caps everything works, with the token
        r = c.post("/v1/jobs/small/stats", json={"batch_id": 1, "epoch": 0,
                                                  "key_groups": [{"id": "o/0", "load": 1}]})
        assert r.status_code == 202
