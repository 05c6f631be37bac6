"""``POST /v1/plans``, ``/v1/evaluate`` and ``/v1/what-if/scaling`` take one path whatever the body's size: the raw
bytes go to a solver worker, which validates them against the contract, counts them against the size caps (413)
before building the numeric problem, solves and serialises; the event loop only moves bytes. So a body the worker
refuses answers the same 422 or 413 document as any other error, a body of a million nested brackets is a 422, and
``/healthz`` and statistics posts keep answering while a 50 MB plan is handled."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.bench_api import big_plan_body  # the benchmark's ~50 MB plan body, one generator
from tests.helpers.server import InProcessServer

sys.path.insert(0, str(Path(__file__).parent))
from procs import Serve  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    d = tmp_path_factory.mktemp("plan-path")
    with InProcessServer(database_url=f"sqlite:///{d}/db.sqlite", max_key_groups=500).start() as srv:
        yield srv


def post(srv: InProcessServer, path: str, body: Any) -> httpx.Response:
    raw = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else json.dumps(body).encode()
    with srv.client(timeout=120) as c:
        return c.post(path, content=raw, headers={"content-type": "application/json"})


PROBLEM = {"nodes": [{"id": "a", "capacity": 2}, {"id": "b"}, {"id": "c", "removing": True}],
           "key_groups": [{"id": f"k{i}", "node": "ac"[i % 2], "load": 1 + i % 5, "state_bytes": 10 * i}
                          for i in range(40)],
           "communication": [{"src": "k1", "dst": "k2", "rate": 3.0}], "communication_cost": 0.1,
           "budget": {"max_migrations": 12}}


@pytest.mark.parametrize("body", [
    {"problem": PROBLEM, "algorithm": "flux"},
    {"problem": PROBLEM, "algorithm": "drain-then-balance", "time_limit_s": 1},
    {"problem": PROBLEM},  # the server's default planner
], ids=["flux", "drain", "default"])
def test_plans(server: InProcessServer, body: dict[str, Any]) -> None:
    r = post(server, "/v1/plans", body)
    assert r.status_code == 200, r.text[:300]
    plan = r.json()
    assert r.headers["content-type"] == "application/json" and len(plan["assignment"]) == 40
    assert plan["metrics"]["after"]["load_on_removing"] < plan["metrics"]["before"]["load_on_removing"]  # drains c
    assert plan["metrics"]["migrations"] <= 12 and plan["algorithm"] == body.get("algorithm", plan["algorithm"])


BAD = [
    ("{not json", "body"),
    ({"problem": {**PROBLEM, "key_groups": [{"id": "k", "node": "a", "load": -1}]}}, "problem.key_groups[0].load"),
    ({"problem": PROBLEM, "algorithm": "no-such-planner"}, "algorithm"),
    ({"problem": PROBLEM, "algorithm": "flux", "params": {"nope": 1}}, "params.nope"),
    ({"problem": PROBLEM, "surprise": True}, "surprise"),
    ({"problem": {**PROBLEM, "key_groups": [{"id": "k", "node": "zz", "load": 1}]}}, "problem.key_groups[0].node"),
    ({"problem": PROBLEM, "time_limit_s": 0}, "time_limit_s"),
    ([1, 2], "body"),
    (b"\xff\xfe not utf-8", "body"),
]


@pytest.mark.parametrize("body, field", BAD, ids=["json", "load", "algorithm", "param", "extra", "node", "limit",
                                                  "list", "bytes"])
def test_errors_name_the_field(server: InProcessServer, body: Any, field: str) -> None:
    r = post(server, "/v1/plans", body)
    assert r.status_code == 422, r.text[:300]
    assert r.json()["detail"][0]["field"] == field and r.json()["detail"][0]["reason"]


@pytest.mark.parametrize("path", ["/v1/plans", "/v1/evaluate", "/v1/what-if/scaling"])
@pytest.mark.parametrize("prefix", [b"", b'{"problem": {"nodes": '])
def test_a_million_nested_brackets_is_a_422(server: InProcessServer, path: str, prefix: bytes) -> None:
    r = post(server, path, prefix + b"[" * 1_000_000)
    assert r.status_code == 422, r.text[:300]
    (item,) = r.json()["detail"]
    assert item["field"] == "body" and "recursion limit" in item["reason"]
    assert post(server, "/v1/plans", {"problem": PROBLEM, "algorithm": "flux"}).status_code == 200  # worker fine


def test_counts_are_checked_before_the_problem_is_built(server: InProcessServer) -> None:
    kgs = [{"id": f"k{i}", "node": "a", "load": 1} for i in range(501)]
    doc = {"problem": {"nodes": [{"id": "a"}], "key_groups": kgs}}
    assert post(server, "/v1/plans", {"problem": {"nodes": [{"id": "a"}], "key_groups": kgs[:10]}}).status_code == 200
    r = post(server, "/v1/plans", doc)
    assert r.status_code == 413
    assert r.json() == {"detail": "request too large: problem.key_groups: more than 500 key groups",
                        "request_id": None}
    r = post(server, "/v1/evaluate", {**doc, "plan": {"assignment": {}}})
    assert r.status_code == 413 and "more than 500 key groups" in r.json()["detail"]
    # every document is checked against the contract first: a wrong value anywhere is the 422 naming it
    doc["problem"]["key_groups"][-1]["load"] = "lots"
    r = post(server, "/v1/plans", doc)
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "problem.key_groups[500].load"


@pytest.mark.parametrize("plan, status, field", [
    ({"assignment": {f"k{i}": "b" if i < 5 else "ac"[i % 2] for i in range(40)}}, 200, None),
    ({"assignment": {"k0": "b"}}, 422, "plan.assignment.k1"),
    ({"assignment": {f"k{i}": "nowhere" for i in range(40)}}, 422, "plan.assignment.k0"),
    ({"assignment": {}, "moves": "sideways"}, 422, "plan.moves"),
    ({"moves": []}, 422, "plan.assignment"),
], ids=["valid", "partial", "unknown-node", "bad-moves", "no-assignment"])
def test_evaluations(server: InProcessServer, plan: dict[str, Any], status: int, field: str | None) -> None:
    r = post(server, "/v1/evaluate", {"problem": PROBLEM, "plan": plan})
    assert r.status_code == status, r.text[:300]
    if field is None:
        assert r.json()["moves"] and r.json()["within_budget"]
    else:
        assert r.json()["detail"][0]["field"] == field, r.json()


@pytest.mark.slow
def test_the_event_loop_answers_while_a_50mb_plan_is_handled(tmp_path: Path) -> None:
    """A real server (uvicorn reads the body): ``/healthz`` and statistics posts keep answering all the while;
    none of them waits for a noticeable share of the plan's time (the event loop never parses the body)."""
    body = big_plan_body(150_000, 800_000)
    assert 45e6 < len(body) < 64e6, len(body)
    srv = Serve(tmp_path, env={"REBALANCER_SOLVER_WORKERS": "1", "REBALANCER_MAX_TIME_LIMIT_S": "2"})
    try:
        srv.wait_healthy()
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            assert c.put("/v1/jobs/small", json={"nodes": ["a", "b"], "operators": [{"id": "o", "key_groups": 1000}]}
                         ).status_code == 201
        lat: dict[str, list[tuple[float, float]]] = {"healthz": [], "stats": []}  # (start, seconds)
        errors: list[str] = []
        stop = threading.Event()
        loads = [1.0 + (i % 7) for i in range(1000)]

        def probe() -> None:
            with httpx.Client(base_url=srv.url, timeout=600) as p:
                b = 0
                while not stop.is_set():
                    t = time.perf_counter()
                    if p.get("/healthz").status_code != 200:
                        errors.append("healthz")
                    lat["healthz"].append((t, time.perf_counter() - t))
                    b += 1
                    t = time.perf_counter()
                    r = p.post("/v1/jobs/small/stats", json={"batch_id": b, "epoch": 0, "load": loads})
                    lat["stats"].append((t, time.perf_counter() - t))
                    if r.status_code != 202:
                        errors.append(f"stats {r.status_code}")
                    time.sleep(0.02)

        th = threading.Thread(target=probe)
        th.start()
        while len(lat["stats"]) < 5:  # the probe runs
            time.sleep(0.05)
        try:
            t0 = time.perf_counter()
            r = httpx.post(srv.url + "/v1/plans", content=body, headers={"content-type": "application/json"},
                           timeout=600)
            t1 = time.perf_counter()
        finally:
            stop.set()
            th.join()
        assert r.status_code == 200, r.text[:500]
        assert len(r.json()["assignment"]) == 150_000
        assert not errors, errors[:5]
        for name, xs in lat.items():
            during = sorted(s for t, s in xs if t0 <= t and t + s <= t1)
            print(f"{name}: {len(during)} answered during the plan's {t1 - t0:.1f} s, p50="
                  f"{1000 * during[len(during) // 2]:.1f} ms max={1000 * during[-1]:.1f} ms")
            assert len(during) >= 10, (name, len(during))
            # relative, not absolute: a blocked event loop would hold a probe for most of the plan's time
            assert during[-1] < 0.25 * (t1 - t0), (name, during[-1], t1 - t0)
    finally:
        srv.cleanup()
