"""A job id with a '/' (URL-encoded as %2F, which the server decodes before routing) is a 422 naming ``job_id``,
on every job route — never a bare 404 or another route (``a%2Fstats`` is not job ``a``'s statistics)."""

from __future__ import annotations

import pytest

from tests.helpers.server import InProcessServer


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    d = tmp_path_factory.mktemp("ids")
    with InProcessServer(database_url=f"sqlite:///{d}/r.db", warm=False) as srv, srv.client() as c:
        yield c


@pytest.mark.parametrize("method,path", [
    ("PUT", "/v1/jobs/a%2Fb"), ("GET", "/v1/jobs/a%2Fb"), ("DELETE", "/v1/jobs/a%2fb"),
    ("POST", "/v1/jobs/a%2Fstats"), ("GET", "/v1/jobs/a%2Fb/history"), ("POST", "/v1/jobs/x%2Fy/proposals")])
def test_an_encoded_slash_in_a_job_id_is_a_422(client, method, path):
    job = {"nodes": ["n0", "n1"], "operators": [{"id": "o", "key_groups": 4}]}
    r = client.request(method, path, json=job if method in ("PUT", "POST") else None)
    assert r.status_code == 422, (path, r.status_code, r.text)
    assert r.json()["detail"][0]["field"] == "job_id" and "'/'" in r.json()["detail"][0]["reason"]


def test_job_a_is_untouched_and_valid_ids_still_work(client):
    job = {"nodes": ["n0", "n1"], "operators": [{"id": "o", "key_groups": 4}]}
    assert client.put("/v1/jobs/a", json=job).status_code == 201
    stats = {"batch_id": 1, "epoch": 0, "key_groups": [{"id": f"o/{k}", "load": 1.0} for k in range(4)]}
    assert client.post("/v1/jobs/a%2Fstats", json=stats).status_code == 422
    assert client.get("/v1/jobs/a").json()["window"]["batches"] == []  # nothing reached job a
    assert client.post("/v1/jobs/a/stats", json=stats).status_code == 202
    assert client.get("/v1/jobs/a.b:c-1").status_code == 404  # a valid id that is not registered
