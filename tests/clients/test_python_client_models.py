"""The client's typed models read from the REAL controller's responses, one endpoint after another (issue 11 §2).

The models are strict (a missing key or a null where a value belongs is a ``MalformedResponse``), so parsing a real
response of every endpoint proves that every key a model reads is one the server sends; each test also checks the
typed values against the raw document. Also: the client imports nothing but httpx and the standard library
(issue 14, item 8).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from clients.python import (
    AlgorithmInfo,
    ApplyPlan,
    Evaluation,
    Execution,
    History,
    Job,
    JobSummary,
    PlanResult,
    Proposal,
    RebalancerClient,
    ScalingReport,
    StateMetrics,
    StatsAck,
)

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = {"nodes": [{"id": "w0"}, {"id": "w1"}, {"id": "w2", "removing": True}],
           "key_groups": [{"id": "a", "node": "w0", "load": 30, "state_bytes": 1024},
                          {"id": "b", "node": "w0", "load": 20}, {"id": "c", "node": "w1", "load": 10},
                          {"id": "d", "node": "w2", "load": 15}],
           "budget": {"max_migrations": 2}}


def _jid() -> str:
    return "m-" + uuid.uuid4().hex[:10]


def _stats(loads):
    return [{"id": f"agg/{k}", "load": float(v), "state_bytes": 64.0} for k, v in enumerate(loads)]


def _check_plan(plan: PlanResult) -> None:
    raw = plan.raw
    assert plan.assignment == raw["assignment"] and plan.moves == raw["moves"] and plan.solver == raw["solver"]
    assert isinstance(plan.before, StateMetrics) and plan.before.load_distance == raw["metrics"]["before"][
        "load_distance"]
    assert plan.after is not None and plan.after.load_distance == raw["metrics"]["after"]["load_distance"]
    assert plan.migrations == raw["metrics"]["migrations"]


def test_job_stats_proposal_execution_history_models(controller):
    jid = _jid()
    with RebalancerClient(controller.url, timeout=20) as rc:
        created = rc.put_job(jid, nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 8}], algorithm="flux",
                             budget={"max_migrations": 2}, window_batches=1)
        assert isinstance(created, Job) and created.job_id == jid == created.raw["job_id"]
        assert created.epoch == 0 and created.nodes == ["p0", "p1"] and created.removing == []
        assert created.window == created.raw["window"] and created.window["size"] == 1
        again = rc.put_job(jid, nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 8}], algorithm="flux",
                           budget={"max_migrations": 2}, window_batches=1)  # 200: the job as it is
        assert again.assignment == created.assignment

        summaries = rc.list_jobs()
        mine = [s for s in summaries if s.job_id == jid]
        assert all(isinstance(s, JobSummary) for s in summaries)
        assert mine == [JobSummary(jid, 0, 2, 8)]

        ack = rc.post_stats(jid, batch_id=0, epoch=0, key_groups=_stats([50, 40, 30, 20, 1, 1, 1, 1]))
        assert isinstance(ack, StatsAck) and ack.apply is None and ack.raw["apply"] is None
        assert (ack.batch_id, ack.epoch, ack.counted, ack.duplicate) == (0, 0, True, False) and ack.window_ready
        got = rc.get_job(jid)
        assert got.metrics == got.raw["metrics"] and got.metrics is not None

        prop = rc.create_proposal(jid)
        assert isinstance(prop, Proposal) and prop.status == "ready" and prop.id == prop.raw["id"]
        assert prop.base_epoch == 0 and prop.error is None and prop.executed_epoch is None
        assert prop.plan is not None
        _check_plan(prop.plan)
        assert rc.get_proposal(jid, prop.id).plan == prop.plan
        queued = rc.create_proposal(jid, algorithm="albic-milp", time_limit_s=1, wait_s=0, wait=False)  # 202
        assert queued.status == "pending" and queued.plan is None and queued.raw["plan"] is None, queued.raw
        assert queued.base_epoch == 0 and queued.id != prop.id
        for _ in range(100):
            if (polled := rc.get_proposal(jid, queued.id)).status != "pending":
                break
            time.sleep(0.05)
        assert polled.status == "ready" and polled.plan is not None

        ex = rc.execute_proposal(jid, prop.id)
        assert isinstance(ex, Execution) and (ex.epoch, ex.base_epoch, ex.proposal_id) == (1, 0, prop.id)
        assert ex.assignment == ex.raw["assignment"] == prop.plan.assignment and ex.moves == prop.plan.moves
        done = rc.get_proposal(jid, prop.id)
        assert done.status == "executed" and done.executed_epoch == 1

        scaled = rc.change_nodes(jid, add=["p2"], remove=["p0"])
        assert scaled.epoch == 2 and scaled.nodes == ["p0", "p1", "p2"] and scaled.removing == ["p0"]

        hist = rc.history(jid)
        assert isinstance(hist, History) and hist.job_id == jid and hist.epoch == 2
        assert [(e.epoch, e.kind) for e in hist.epochs] == [(e["epoch"], e["kind"]) for e in hist.raw["epochs"]]
        assert [e.epoch for e in hist.epochs] == [0, 1, 2]
        executed = hist.epochs[1]
        assert executed.proposal_id == prop.id and executed.moves == ex.moves and executed.algorithm == "flux"
        assert [e.epoch for e in rc.history(jid, limit=1).epochs] in ([0], [2])
        rc.delete_job(jid)


def test_auto_mode_apply_model(controller):
    jid = _jid()
    with RebalancerClient(controller.url, timeout=20) as rc:
        rc.put_job(jid, nodes=["p0", "p1"], operators=[{"id": "agg", "key_groups": 8}], algorithm="flux",
                   budget={"max_migrations": 2}, window_batches=1,
                   auto={"enabled": True, "load_distance_threshold": 1.0, "cooldown_batches": 0})
        ack = rc.post_stats(jid, batch_id=0, epoch=0, key_groups=_stats([50, 40, 30, 20, 1, 1, 1, 1]))
        assert isinstance(ack.apply, ApplyPlan), ack.raw
        raw = ack.raw["apply"]
        assert (ack.apply.proposal_id, ack.apply.base_epoch, ack.apply.epoch) == (raw["proposal_id"], 0, 1)
        assert ack.apply.assignment == raw["assignment"] and ack.apply.moves == raw["moves"] and ack.apply.moves
        kinds = [e.kind for e in rc.history(jid).epochs]
        assert len(kinds) == 2 and kinds[0] != kinds[1]
        rc.delete_job(jid)


def test_stateless_models(controller):
    with RebalancerClient(controller.url, timeout=30) as rc:
        plan = rc.plan(PROBLEM, "flux")
        _check_plan(plan)
        ev = rc.evaluate(PROBLEM, plan)
        assert isinstance(ev, Evaluation) and ev.within_budget is ev.raw["within_budget"] is True
        assert ev.after.load_distance == pytest.approx(plan.after.load_distance)
        assert ev.before.load_on_removing == 15 and ev.migrations == len(ev.moves) == ev.raw["migrations"]
        assert rc.evaluate(PROBLEM, plan.raw).after == ev.after

        rep = rc.what_if_scaling(PROBLEM, [2, 3, {"add": ["w9"]}], target_load_distance=10, algorithm="flux")
        assert isinstance(rep, ScalingReport) and rep.algorithm == "flux"
        assert [c.candidate for c in rep.candidates] == [c["candidate"] for c in rep.raw["candidates"]]
        assert rep.current.load_distance == rep.raw["current"]["load_distance"]
        assert rep.recommendation == rep.raw["recommendation"]
        if rep.recommended is not None:
            assert rep.recommended.meets_target and rep.recommended.nodes == rep.raw["recommended"]["nodes"]
        for c, raw in zip(rep.candidates, rep.raw["candidates"], strict=True):
            assert (c.nodes, c.added, c.removed, c.rounds, c.meets_target) == (
                raw["nodes"], raw["added"], raw["removed"], raw["rounds"], raw["meets_target"])

        algos = rc.algorithms()
        assert all(isinstance(a, AlgorithmInfo) for a in algos)
        names = {a.name for a in algos}
        assert {"flux", "albic-milp"} <= names
        assert all(isinstance(p["name"], str) for a in algos for p in a.params)
        assert rc.health() == {"status": "ok"}


def test_client_imports_only_httpx_and_the_standard_library():
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import clients.python"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    modules = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    heavy = {"fastapi", "pydantic", "starlette", "numpy", "scipy", "ortools", "pulp", "sqlalchemy", "pymetis",
             "networkx", "api", "controller", "solvers", "cli", "evaluation", "pyspark", "pandas"}
    assert modules & heavy == set(), sorted(modules & heavy)
    assert "httpx" in modules


def test_job_model_reads_node_capacities_and_the_communication_cost():
    """What ControllerLink._note_job judges a job by (a job this side cannot judge alone is left to the controller)."""
    doc = {"job_id": "j", "epoch": 3, "assignment": {"agg/0": "p0"}, "communication_cost": 0.5,
           "window": {"size": 1, "batches": [], "covered_batches": 0, "ready": False},
           "nodes": [{"id": "p0", "capacity": 2.0, "removing": False}, {"id": "p1", "removing": False},
                     {"id": "p2", "capacity": 1.0, "removing": True}]}
    job = Job.from_json(doc)
    assert job.capacity == {"p0": 2.0, "p1": 1.0, "p2": 1.0} and job.communication_cost == 0.5
    assert job.removing == ["p2"]
    assert Job.from_json({**doc, "communication_cost": None}).communication_cost == 0.0
