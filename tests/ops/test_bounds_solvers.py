"""COLA and ALBIC honour their time limit: the work that cannot be interrupted (a METIS partitioning) is not started
when it cannot end in time, and the searches stop at their deadline; the solver pool's kill stays a backstop.

Both tests make the work slow on purpose (a METIS call takes 20 ms more, a move evaluation 1 ms) and check when and
how much of it was done, not how fast: a slow machine only does less of it."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import metrics, registry
from solvers.model import Problem


def _problem(m: int, edges: int, nodes: int, budget: int | None = None) -> Problem:
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, m, edges), rng.integers(0, m, edges)
    keep = src != dst
    comm = sp.csr_matrix((np.full(int(keep.sum()), 1.5), (src[keep], dst[keep])), shape=(m, m))
    return Problem.from_arrays(rng.random(m), np.arange(m) % nodes, np.ones(nodes), comm=comm,
                               max_migrations=budget)


class TooMuchWork(AssertionError):
    pass


def _slowed(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, most: int, pause: float) -> list[float]:
    """``module.name`` made ``pause`` seconds slower; the list of the times it was called."""
    calls: list[float] = []
    real = getattr(module, name)

    def slow(*args: Any, **kw: Any) -> Any:
        calls.append(time.perf_counter())
        if len(calls) > most:  # fail fast: the unbounded search would go on for minutes
            raise TooMuchWork(f"{name} called {len(calls)} times under a 0.1 s limit")
        time.sleep(pause)
        return real(*args, **kw)

    monkeypatch.setattr(module, name, slow)
    return calls


def test_cola_starts_no_partitioning_that_cannot_end_within_the_limit(monkeypatch):
    import solvers.baselines.cola as cola

    p = _problem(20_000, 100_000, 100)  # one METIS bisection of the whole graph: ~0.2 M items, more than 0.1 s
    calls = _slowed(monkeypatch, cola, "metis_parts", most=20, pause=0.02)
    t0 = time.perf_counter()
    plan = registry.solve("cola", p, time_limit=0.1)  # checked: every key group on an active node
    assert all(t < t0 + 0.5 for t in calls), [round(t - t0, 2) for t in calls]  # none long after the limit
    assert plan.details["load_splits"] >= 1 and plan.details["partitions"] >= 100


def test_albic_stops_searching_moves_at_its_deadline(monkeypatch):
    import solvers.albic.collocation_moves as moves

    p = _problem(2_000, 10_000, 20, budget=200)
    calls = _slowed(monkeypatch, moves, "evaluate", most=1_000, pause=0.001)
    plan = registry.solve("albic", p, time_limit=0.1)  # checked: valid and within the budget
    assert len(calls) <= 150
    assert metrics.within_budget(p, plan.assignment)
