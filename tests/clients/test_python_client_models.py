"""The client reads every answer with the one generic reader (:func:`rebalancer_client.wire.read`) into the contract's
documents: here on the REAL controller's answers, one endpoint after another.

For every answer: the JSON object of each document has exactly the document's fields (nothing the client drops,
nothing it expects that the server leaves out); the typed document written back (:func:`wire.dump`) is the JSON it
was read from; and each scalar of it replaced by a value of the wrong type is a ``MalformedResponse`` naming that
field. Together the answers cover every response document of the contract. Also: the client imports nothing but
httpx and the standard library.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
import time
import types
import typing
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import httpx
import pytest

from rebalancer_client import MalformedResponse, RebalancerClient, contract
from rebalancer_client.wire import RESPONSE, dump, read, wire_name

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = {"nodes": [{"id": "w0"}, {"id": "w1"}, {"id": "w2", "removing": True}],
           "key_groups": [{"id": "a", "node": "w0", "load": 30, "state_bytes": 1024},
                          {"id": "b", "node": "w0", "load": 20}, {"id": "c", "node": "w1", "load": 10},
                          {"id": "d", "node": "w2", "load": 15}],
           "budget": {"max_migrations": 2}}
LOADS = [50.0, 40.0, 30.0, 20.0, 1.0, 1.0, 1.0, 1.0]
RESPONSES = {cls for _, cls in vars(contract).items()
             if isinstance(cls, type) and dataclasses.is_dataclass(cls)
             and getattr(cls, "__pydantic_config__", {}).get("extra") == RESPONSE["extra"] and cls is not
             contract.PlanInput}


class Recorder(httpx.HTTPTransport):
    """The client's HTTP transport, keeping every answer's decoded JSON body."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[tuple[str, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        if response.headers.get("content-type", "").startswith("application/json"):
            self.bodies.append((f"{request.method} {request.url.path}", response.json()))
        return response


def _strip(tp: Any) -> tuple[Any, bool]:
    """``tp`` without ``Annotated`` and ``None``; whether ``None`` was allowed."""
    if get_origin(tp) is Annotated:
        return _strip(get_args(tp)[0])
    if get_origin(tp) in (Union, types.UnionType):
        members = [m for m in get_args(tp) if m is not type(None)]
        if len(members) == 1:
            return _strip(members[0])[0], type(None) in get_args(tp)
    return tp, False


def _leaves(tp: Any, value: Any, path: str, seen: set[type], out: list[str]) -> None:
    """Check the keys of every document in ``value`` (of type ``tp``), collect the document classes in ``seen``
    and the paths of the scalars the reader checks in ``out``."""
    tp, _ = _strip(tp)
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        seen.add(tp)
        hints = typing.get_type_hints(tp, include_extras=True)
        fields = {wire_name(f.name): f.name for f in dataclasses.fields(tp)}
        assert set(value) == set(fields), f"{path or tp.__name__}: {sorted(set(value) ^ set(fields))}"
        for key, name in fields.items():
            _leaves(hints[name], value[key], f"{path}.{key}" if path else key, seen, out)
    elif get_origin(tp) in (Union, types.UnionType):  # the member the value has the shape of
        for member in (_strip(m)[0] for m in get_args(tp)):
            if isinstance(value, dict) and (dataclasses.is_dataclass(member) or get_origin(member) is dict) or \
                    isinstance(value, list) and get_origin(member) is list or \
                    type(value) is member or (member is float and type(value) is int):
                _leaves(member, value, path, seen, out)
                break
    elif get_origin(tp) is list and isinstance(value, list):
        for i, v in enumerate(value):
            _leaves(get_args(tp)[0], v, f"{path}[{i}]", seen, out)
    elif get_origin(tp) is dict and isinstance(value, dict):
        for k, v in value.items():
            _leaves(get_args(tp)[1], v, f"{path}.{k}", seen, out)
    elif tp in (int, float, str, bool) or get_origin(tp) is Literal:
        out.append(path)


def _set(doc: Any, path: str, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    parts = [p for p in path.replace("[", ".[").split(".") if p]
    target = doc
    for p in parts[:-1]:
        target = target[int(p[1:-1])] if p.startswith("[") else target[p]
    last = parts[-1]
    target[int(last[1:-1]) if last.startswith("[") else last] = value
    return doc


def _shape(path: str) -> str:
    import re

    return re.sub(r"\[\d+\]", "[]", path)


def check_answer(cls: Any, raw: Any, seen: set[type]) -> None:
    """``raw`` is exactly a ``cls`` document; read and written back it is unchanged; a wrong type anywhere is a
    MalformedResponse naming the field."""
    typed = read(cls, raw)
    paths: list[str] = []
    _leaves(cls, raw, "", seen, paths)
    assert _nonnull(dump(typed)) == _nonnull(raw)
    shapes: set[str] = set()
    for path in paths:  # one of each shape (every move of a plan has the same fields)
        if _shape(path) in shapes:
            continue
        shapes.add(_shape(path))
        fields = []
        for wrong in ([path], {"x": path}):  # a list, or an object, where a scalar belongs
            try:
                read(cls, _set(raw, path, wrong))
            except MalformedResponse as exc:
                fields.append(exc.field)
        assert fields and all(f.startswith(path) for f in fields), (path, fields)


def _nonnull(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _nonnull(v) for k, v in doc.items() if v is not None}
    if isinstance(doc, list):
        return [_nonnull(v) for v in doc]
    return doc


DOCUMENTS = {  # the answers of each route, by "METHOD path" with the ids replaced
    "GET /healthz": contract.Health, "GET /v1/algorithms": list[contract.Algorithm],
    "POST /v1/plans": contract.Plan, "POST /v1/evaluate": contract.Evaluation,
    "POST /v1/what-if/scaling": contract.WhatIfReport, "GET /v1/jobs": list[contract.JobSummary],
    "PUT /v1/jobs/J": contract.JobState, "GET /v1/jobs/J": contract.JobState,
    "POST /v1/jobs/J/stats": contract.StatsAck, "POST /v1/jobs/J/proposals": contract.Proposal,
    "GET /v1/jobs/J/proposals/P": contract.Proposal, "POST /v1/jobs/J/proposals/P/execute": contract.Execution,
    "POST /v1/jobs/J/nodes": contract.JobState, "POST /v1/jobs/J/scale": contract.Scaled,
    "POST /v1/jobs/J/what-if": contract.WhatIfReport, "GET /v1/jobs/J/history": contract.History,
}


def _route(call: str, jobs: list[str]) -> str:
    method, path = call.split(" ", 1)
    parts = path.split("/")
    if len(parts) > 3 and parts[3] in jobs:
        parts[3] = "J"
    if len(parts) > 5 and parts[4] == "proposals":
        parts[5] = "P"
    return f"{method} {'/'.join(parts)}"


def test_every_answer_of_the_real_controller_is_read_exactly(controller):
    jid, auto = "m-" + uuid.uuid4().hex[:10], "a-" + uuid.uuid4().hex[:10]
    recorder = Recorder()
    with RebalancerClient(controller.url, timeout=30, transport=recorder) as rc:
        assert rc.health() == contract.Health(status="ok")
        assert {"flux", "albic-milp"} <= {a.name for a in rc.algorithms()}
        plan = rc.plan(PROBLEM, "flux")
        assert plan.metrics.before.load_on_removing == 15 and plan.solver.status == "heuristic"
        ev = rc.evaluate(PROBLEM, plan)
        assert ev.after == plan.metrics.after and ev.within_budget
        rep = rc.what_if_scaling(PROBLEM, [2, 3], target_load_distance=10, algorithm="flux")
        assert [c.nodes for c in rep.candidates] == [2, 3]

        job = rc.put_job(jid, nodes=["p0", {"id": "p1", "capacity": 2.0}], operators=[{"id": "agg", "key_groups": 8}],
                         algorithm="flux", budget={"max_migrations": 2}, window_batches=1,
                         policy={"cooldown_batches": 0, "max_bytes_per_gain": 1e12})
        assert job.nodes[1] == contract.NodeState(id="p1", capacity=2.0, removing=False, key_groups=4)
        assert rc.put_job(jid, nodes=["p0", {"id": "p1", "capacity": 2.0}],
                          operators=[{"id": "agg", "key_groups": 8}], algorithm="flux", budget={"max_migrations": 2},
                          window_batches=1, policy={"cooldown_batches": 0, "max_bytes_per_gain": 1e12}).epoch == 0
        assert contract.JobSummary(job_id=jid, epoch=0, nodes=2, key_groups=8) in rc.list_jobs()
        ack = rc.post_stats(jid, batch_id=0, epoch=0, load=LOADS, state_bytes=[64.0] * 8)
        assert ack.decision.reason == "significant" and ack.apply is None
        assert rc.get_job(jid).metrics.total_load == sum(LOADS)
        prop = rc.create_proposal(jid)
        assert prop.decision.worth and prop.decision.bytes_allowed is not None
        assert rc.get_proposal(jid, prop.id) == prop
        ex = rc.execute_proposal(jid, prop.id)
        assert ex.epoch == 1 and ex.moves == prop.plan.moves
        assert rc.post_stats(jid, batch_id=1, epoch=0, load=LOADS).apply.placement == ex.placement
        assert rc.change_nodes(jid, add=["p2"]).epoch == 2
        what = rc.job_what_if(jid, [1, 3], algorithm="flux")
        assert [c.nodes for c in what.candidates] == [1, 3]
        scaled = rc.scale(jid, nodes=["p1", "p2"], algorithm="flux")
        assert scaled.epoch == 3 and scaled.nodes == ["p1", "p2"] and set(scaled.placement) <= {0, 1}
        hist = rc.history(jid)
        assert [e.kind for e in hist.epochs] == ["register", "execute", "nodes", "scale"]
        assert hist.epochs[1].decision == prop.decision and hist.epochs[1].moves == ex.moves

        rc.put_job(auto, nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 8}], algorithm="flux",
                   window_batches=1, auto=True, policy={"cooldown_batches": 0})
        assert rc.post_stats(auto, batch_id=0, epoch=0, load=LOADS).decision.reason == "started"
        deadline = time.monotonic() + 120  # the round is solved in the background (the bound only ends a hang)
        while rc.get_job(auto).decision.reason == "started" and time.monotonic() < deadline:
            time.sleep(0.02)
        ack = rc.post_stats(auto, batch_id=1, epoch=0, load=LOADS)  # the next answer carries its placement
        assert ack.apply is not None and ack.apply.epoch == 1
        rc.delete_job(jid)
        rc.delete_job(auto)

    seen: set[type] = set()
    routes = set()
    for call, raw in recorder.bodies:
        route = _route(call, [jid, auto])
        routes.add(route)
        check_answer(DOCUMENTS[route], raw, seen)
    assert routes == set(DOCUMENTS)
    # the errors are documents too
    with httpx.Client(base_url=controller.url) as http:
        err = http.post("/v1/plans", json={"problem": {"nodes": []}}).json()
        check_answer(contract.Error, err, seen)
        check_answer(contract.Error, http.get("/v1/jobs/nope-nope").json(), seen)
    missing = {cls.__name__ for cls in RESPONSES - seen}
    assert not missing, f"no answer carried {sorted(missing)}"


def test_a_missing_field_or_a_wrong_literal_is_malformed_and_unknown_fields_are_ignored():
    ack = {"job_id": "j", "batch_id": 1, "epoch": 0, "counted": True, "duplicate": False,
           "window": {"size": 1, "batches": [1], "covered_batches": 1, "coverage": 1.0, "key_groups_covered": 2,
                      "key_groups": 2, "ready": True},
           "decision": {"worth": False, "reason": "noise", "message": "m"}, "newer": {"x": 1}}
    assert read(contract.StatsAck, ack).decision.reason == "noise"  # a newer server's extra field is ignored
    for path, value in (("window.ready", ...), ("decision.reason", "bored"), ("epoch", 1.5), ("counted", 1),
                        ("window.batches[0]", "1"), ("decision.noise", "0.1"), ("epoch", None)):
        bad = copy.deepcopy(ack)
        if value is ...:
            del bad["window"]["ready"]
        else:
            bad = _set(bad, path, value)
        with pytest.raises(MalformedResponse) as info:
            read(contract.StatsAck, bad)
        assert info.value.field == path, str(info.value)


def test_numbers_beyond_a_float_are_malformed_not_an_overflow():
    metrics = {"load_distance": 1.0, "load_on_removing": 0.0, "total_load": 1.0, "max_utilisation": 1.0}
    for bad in (float("nan"), float("inf")):
        with pytest.raises(MalformedResponse):
            read(contract.StateMetrics, {**metrics, "load_distance": bad})


def test_an_integer_beyond_a_float_is_malformed_not_an_overflow():
    metrics = {"load_distance": 10**400, "load_on_removing": 0.0, "total_load": 1.0, "max_utilisation": 1.0}
    with pytest.raises(MalformedResponse):
        read(contract.StateMetrics, json.loads(json.dumps(metrics)))


def _imported_by(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    return {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}


def test_client_imports_only_httpx_and_the_standard_library():
    modules = _imported_by("from rebalancer_client import RebalancerClient")
    heavy = {"fastapi", "pydantic", "starlette", "numpy", "scipy", "ortools", "pulp", "sqlalchemy", "pymetis",
             "networkx", "api", "controller", "solvers", "cli", "evaluation", "pyspark", "pandas"}
    assert modules & heavy == set(), sorted(modules & heavy)
    assert "httpx" in modules
    # the contract alone (what the server and the CLI read) loads no HTTP client: a cold CLI starts faster
    assert "httpx" not in _imported_by("from rebalancer_client import contract")


def test_the_job_document_reads_node_capacities_and_the_communication_cost():
    """What the Spark driver's pre-check judges a job by (a job it cannot judge alone is left to the controller)."""
    doc = {"job_id": "j", "epoch": 3, "key_groups": ["agg/0"], "placement": [0], "algorithm": "flux", "params": {},
           "budget": {}, "window_batches": 1, "communication_cost": 0.5, "time_limit_s": 1, "auto": False,
           "policy": {}, "created_at": 0, "updated_at": 0,
           "window": {"size": 1, "batches": [], "covered_batches": 0, "coverage": 0, "key_groups_covered": 0,
                      "key_groups": 1, "ready": False},
           "nodes": [{"id": "p0", "capacity": 2.0, "removing": False, "key_groups": 1},
                     {"id": "p1", "capacity": 1, "removing": False, "key_groups": 0},
                     {"id": "p2", "capacity": 1.0, "removing": True, "key_groups": 0}]}
    job = read(contract.JobState, doc)
    assert [nd.capacity for nd in job.nodes] == [2.0, 1.0, 1.0] and job.communication_cost == 0.5
    assert [nd.id for nd in job.nodes if nd.removing] == ["p2"] and job.assignment == {"agg/0": "p0"}
    assert job.policy == contract.Policy() and job.budget == contract.Budget()
    with pytest.raises(MalformedResponse) as info:
        read(contract.JobState, {**doc, "communication_cost": None})
    assert info.value.field == "communication_cost"
