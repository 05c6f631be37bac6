"""The restarts of ``albic-milp`` in forked processes (:mod:`solvers.albic.milp.portfolio`): a child's plan is used
when it is the best, checked like any candidate when it is not a plan, ignored when it is late or missing — the time
limit holds either way — and no child outlives the call."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from evaluation.generators import albic_synthetic
from solvers import metrics, registry
from solvers.albic.milp import phases, portfolio
from solvers.albic.milp.portfolio import processes_for


def _instance():
    """20 nodes × 400 key groups, 20 migrations: too large for the exact model, so the restarts run."""
    return albic_synthetic(20, key_groups_per_node=20, varies=0.3, seed=1, max_migrations=20)


def _children() -> set[int]:
    """The pids of this process's children (Linux ``/proc``)."""
    out: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        out |= {int(x) for x in (task / "children").read_text().split()}
    return out


def _in_child(restarts_in_child, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the restarts: forked children run ``restarts_in_child(run, end)``, this process the real ones."""
    parent, real = os.getpid(), phases.restarts

    def restarts(run, end):
        return real(run, end) if os.getpid() == parent else restarts_in_child(run, end)

    monkeypatch.setattr(phases, "restarts", restarts)


def test_a_childs_better_plan_is_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    real = phases.restarts
    parent = os.getpid()

    def restarts(run, end):  # only the child searches (0.3 s, well before the stop: a loaded machine is no matter)
        if os.getpid() != parent:
            real(run, min(end, time.perf_counter() + 0.3))

    monkeypatch.setattr(phases, "restarts", restarts)
    p = _instance()
    before = _children()
    plan = registry.solve("albic-milp", p, time_limit=1.0, processes=2)
    assert plan.details["search_processes"] == 2 and plan.details["child_plans"] == 1
    assert plan.details["origin"] == "restarts@1"
    assert plan.details["child_ruins"] > 0
    flux = registry.solve("flux", p, time_limit=10.0)
    assert metrics.load_distance(p, plan.assignment) <= metrics.load_distance(p, flux.assignment) + 1e-9
    assert int((plan.assignment != p.current).sum()) <= p.max_migrations
    assert _children() == before


def test_a_childs_answer_that_is_no_plan_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _instance()

    def everything_to_node_0(run, end):  # far over the budget of 20 migrations
        run.best.place = np.zeros_like(run.best.place)

    _in_child(everything_to_node_0, monkeypatch)
    plan = registry.solve("albic-milp", p, time_limit=1.0, processes=2)
    assert plan.details["child_plans"] == 1
    assert plan.details["origin"] != "restarts@1"
    assert int((plan.assignment != p.current).sum()) <= p.max_migrations


def test_a_late_childs_answer_is_taken_when_the_search_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    real = phases.restarts

    def late(run, end):  # answers 0.2 s after the restarts' end, after the first look (no grace here)
        real(run, end)
        time.sleep(0.2)

    _in_child(late, monkeypatch)
    monkeypatch.setattr(portfolio, "GRACE", (0.0, 0.0))
    monkeypatch.setattr(phases, "RESTART_END", 0.5)  # the restarts end at 1 s of 2, the answer long before the stop
    before = _children()
    plan = registry.solve("albic-milp", _instance(), time_limit=2.0, processes=2)
    assert plan.details["child_plans"] == 1 and plan.details["child_ruins"] > 0
    assert plan.seconds < 2.0
    assert _children() == before


@pytest.mark.parametrize("child", ["hangs", "fails"])
def test_a_late_or_failed_child_costs_nothing_and_is_ended(child: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(run, end):
        time.sleep(60)

    def fail(run, end):
        raise RuntimeError("a child that fails")

    _in_child(hang if child == "hangs" else fail, monkeypatch)
    p = _instance()
    before = _children()
    t0 = time.perf_counter()
    plan = registry.solve("albic-milp", p, time_limit=1.0, processes=2)
    wall = time.perf_counter() - t0
    assert plan.details["child_plans"] == 0 and plan.details["search_processes"] == 2
    # the limit holds as with one process (generous for a loaded machine; a wait for the child would take 60 s)
    assert wall < 5.0
    assert _children() == before
    assert int((plan.assignment != p.current).sum()) <= p.max_migrations


def test_one_process_forks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    plan = registry.solve("albic-milp", _instance(), time_limit=0.5, processes=1)
    assert forks == [] and not {"search_processes", "child_plans", "child_cpu_seconds"} & set(plan.details)


def test_processes_default_to_the_cpus_at_most_four() -> None:
    cpus = len(os.sched_getaffinity(0))
    assert processes_for(0) == max(1, min(4, cpus))
    assert processes_for(3) == 3


def test_an_error_while_taking_an_answer_ends_every_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """The children answer at once (no restarts anywhere) and the limit leaves seconds to wait for them: the answers
    are taken however loaded the machine is (with real restarts until 0.9 s of a 1 s limit, a child that answered
    late on a loaded machine was ended unread, and nothing was taken to fail)."""
    def broken(run, child):
        raise RuntimeError("a defect while taking an answer")

    import numpy.random  # noqa: F401 - the children fork only where the restarts' generator can be made in time

    monkeypatch.setattr(phases, "restarts", lambda run, end: None)
    monkeypatch.setattr(portfolio, "_take", broken)
    before = _children()
    with pytest.raises(RuntimeError, match="a defect while taking"):
        registry.solve("albic-milp", _instance(), time_limit=10.0, processes=3)
    assert _children() == before
