"""Scoped tokens: a tenant's token gets 404, not 403, on another tenant's jobs (job names do not
leak), lists only its own jobs, a read token cannot change anything, /metrics is admin only."""

from __future__ import annotations

import json

import httpx
import pydantic
import pytest

from tests.helpers.server import InProcessServer

ADMIN, A, A_READ, B = "admin-tok", "tok-a", "tok-a-read", "tok-b"
SCOPES = {A: {"prefixes": ["tenant-a."], "access": "write"},
          A_READ: {"prefixes": ["tenant-a."], "access": "read"},
          B: {"prefixes": ["tenant-b.", "shared-b-"]}}
JOB = {"nodes": ["w0", "w1"], "operators": [{"id": "op", "key_groups": 4}]}
STATS = {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "op/0", "load": 5}, {"id": "op/1", "load": 1}]}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("tenants")
    with InProcessServer(database_url=f"sqlite:///{d}/db.sqlite", warm=False, api_tokens=ADMIN,
                         token_scopes=SCOPES).start() as s:
        yield s


def client(srv: InProcessServer, token: str) -> httpx.Client:
    return srv.client(headers={"Authorization": f"Bearer {token}"})


def test_tenants_see_only_their_jobs(srv: InProcessServer) -> None:
    with client(srv, A) as a, client(srv, B) as b, client(srv, ADMIN) as admin, client(srv, A_READ) as ar:
        assert a.put("/v1/jobs/tenant-a.clicks", json=JOB).status_code == 201
        assert b.put("/v1/jobs/tenant-b.orders", json=JOB).status_code == 201
        assert admin.put("/v1/jobs/ops.internal", json=JOB).status_code == 201

        # another tenant's job is exactly like a job that does not exist
        unknown = a.get("/v1/jobs/tenant-a.nothing-here")
        assert unknown.status_code == 404
        for method, path, body in [("GET", "/v1/jobs/tenant-b.orders", None),
                                   ("GET", "/v1/jobs/tenant-b.orders/history", None),
                                   ("POST", "/v1/jobs/tenant-b.orders/stats", STATS),
                                   ("POST", "/v1/jobs/tenant-b.orders/proposals", {}),
                                   ("GET", "/v1/jobs/tenant-b.orders/proposals/abc", None),
                                   ("POST", "/v1/jobs/tenant-b.orders/nodes", {"add": ["w9"]}),
                                   ("DELETE", "/v1/jobs/tenant-b.orders", None),
                                   ("GET", "/v1/jobs/ops.internal", None)]:
            r = a.request(method, path, json=body)
            assert r.status_code == 404, (method, path, r.status_code, r.text)
            job = path.split("/")[3]
            assert r.json() == {"detail": f"unknown job {job!r}"}
            assert r.json() == {"detail": unknown.json()["detail"].replace("tenant-a.nothing-here", job)}
        # registering outside its prefixes: 403 whether the job exists or not
        assert a.put("/v1/jobs/tenant-b.orders", json=JOB).status_code == 403
        assert a.put("/v1/jobs/tenant-b.new", json=JOB).status_code == 403
        assert admin.get("/v1/jobs/tenant-b.orders").status_code == 200  # untouched

        assert [j["job_id"] for j in a.get("/v1/jobs").json()] == ["tenant-a.clicks"]
        assert [j["job_id"] for j in b.get("/v1/jobs").json()] == ["tenant-b.orders"]
        assert sorted(j["job_id"] for j in admin.get("/v1/jobs").json()) == [
            "ops.internal", "tenant-a.clicks", "tenant-b.orders"]

        # read-only: reads its jobs, changes nothing
        assert ar.get("/v1/jobs/tenant-a.clicks").status_code == 200
        assert [j["job_id"] for j in ar.get("/v1/jobs").json()] == ["tenant-a.clicks"]
        assert ar.get("/v1/jobs/tenant-b.orders").status_code == 404
        assert ar.post("/v1/jobs/tenant-a.clicks/stats", json=STATS).status_code == 403
        assert ar.delete("/v1/jobs/tenant-a.clicks").status_code == 403
        assert ar.post("/v1/plans", json={"problem": {"nodes": [{"id": "a"}]}}).status_code == 403
        assert ar.get("/v1/algorithms").status_code == 200

        # write: its own jobs and the stateless routes
        assert a.post("/v1/jobs/tenant-a.clicks/stats", json=STATS).status_code == 202
        plan = a.post("/v1/plans", json={"problem": {"nodes": [{"id": "a"}, {"id": "b"}], "key_groups": [
            {"id": "k", "node": "a", "load": 1}]}, "algorithm": "flux"})
        assert plan.status_code == 200, plan.text

        # /metrics names every job: admin only
        assert a.get("/metrics").status_code == 403
        assert admin.get("/metrics").status_code == 200
        assert client(srv, "nope").get("/v1/jobs").status_code == 401
        assert a.delete("/v1/jobs/tenant-a.clicks").status_code in (200, 204)


def test_scope_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from controller.settings import Settings

    monkeypatch.setenv("REBALANCER_TOKEN_SCOPES", json.dumps({"t": {"prefixes": ["x"], "access": "owner"}}))
    with pytest.raises(pydantic.ValidationError):
        Settings()
    monkeypatch.setenv("REBALANCER_TOKEN_SCOPES", json.dumps({"t": {"prefixes": ["x"]}}))
    assert Settings().token_scopes["t"].access == "write"
    with pytest.raises(pydantic.ValidationError, match="one role"):
        Settings(api_tokens="t")
