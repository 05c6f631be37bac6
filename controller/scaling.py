"""Scaling a registered job: what-if on its own window, and a new node set with its key groups placed by load in
one step (a Spark query restarted with another partition count, where Spark itself can only re-hash).

A scale plans on the union of the old and the new nodes, the ones that go marked removing (ALBIC §4.3.1, the set
B of the integrated scale-in): the planner drains them and rebalances within the budget. Whatever key group a
planner leaves on a node that goes (a key group without load costs it nothing to leave) is then placed on the
least utilised new node, so the new epoch uses only the new nodes.
"""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np

from controller import planning
from controller.context import Context
from controller.errors import Conflict, TooLarge
from controller.model import Job, Node
from controller.planning import Planning, WhatIf
from controller.rounds import Rounds
from rebalancer_client import contract as c
from rebalancer_client.wire import dump
from solvers import documents, metrics, scaling
from solvers.errors import InvalidInput
from solvers.model import Plan, Problem


class Scaling:
    def __init__(self, ctx: Context, planning_: Planning, rounds: Rounds):
        self.ctx = ctx
        self.planning = planning_
        self.rounds = rounds

    async def _snapshot(self, job: Job) -> Problem:
        async with job.lock:
            self.ctx.still_registered(job)
            if not job.window.batches:
                raise Conflict(f"job {job.job_id!r} has no statistics yet: nothing to place by load")
            try:
                return job.problem().check()
            except InvalidInput as exc:
                raise Conflict(f"job {job.job_id!r} cannot be planned from its window: {exc.field}: "
                               f"{exc.reason}") from exc

    async def what_if(self, job_id: str, req: c.WhatIfQuestion) -> c.WhatIfReport:
        """:func:`controller.planning.what_if_task` on the job's window."""
        job = self.ctx.job(job_id)
        s = self.ctx.settings
        name, params = self.planning.check_algorithm(req.algorithm or job.config.algorithm, req.params)
        if len(req.candidates) > s.max_candidates:
            raise TooLarge(f"candidates: more than {s.max_candidates}")
        problem = await self._snapshot(job)
        variants = []
        for j, cand in enumerate(req.candidates):
            if isinstance(cand, int) and cand > s.max_nodes:
                raise TooLarge(f"candidates[{j}]: more than {s.max_nodes} nodes")
            variants.append(scaling.variant(problem, j, cand if isinstance(cand, int) else dump(cand)))
        request = c.WhatIfRequest(problem=c.Problem(nodes=[]), candidates=req.candidates,
                                  target_load_distance=req.target_load_distance,
                                  max_utilisation=req.max_utilisation)
        w = WhatIf(request, problem, variants, name, params, s.time_limit(req.time_limit_s))
        with self.ctx.pool.admit(len(variants), owner=job_id) as ticket:
            solved = await asyncio.gather(*(self.planning.solve(name, v.problem, w.time_limit, params, ticket=ticket)
                                            for v in variants))
        return planning.what_if_report(w, [x.plan for x in solved])

    async def scale(self, job_id: str, req: c.ScaleRequest) -> c.Scaled:
        """A new node set and the placement of every key group on it, as one new epoch (409 when the job moved
        on while the plan was solved)."""
        job = self.ctx.job(job_id)
        s = self.ctx.settings
        new_nodes = [Node.of(nd) for nd in req.nodes]
        _check_nodes(new_nodes, s.max_nodes)
        same = req.algorithm is None and req.params is None
        name, params = self.planning.check_algorithm(job.config.algorithm if same else req.algorithm,
                                                     job.config.params if same else req.params)
        tl = s.time_limit(req.time_limit_s if req.time_limit_s is not None else job.config.time_limit_s)
        base = job.epoch
        problem = _union(await self._snapshot(job), new_nodes, req.budget or c.Budget())
        solved = await self.planning.solve(name, problem, tl, params, owner=job_id)
        assignment = _off_the_nodes_that_go(problem, solved.assignment, len(new_nodes))
        plan = solved.plan
        if not np.array_equal(assignment, solved.assignment):  # placed after the planner: its proof is not this plan's
            plan = documents.plan_document(problem, Plan(algorithm=name, assignment=assignment,
                                                         seconds=plan.solver.seconds))
        async with job.lock:
            self.ctx.still_registered(job)
            if job.epoch != base:
                raise Conflict(f"job {job_id!r} moved to epoch {job.epoch} while the scale was planned; retry")
            await self.rounds.advance(job, assignment, kind="scale", plan=plan, nodes=new_nodes)
            return c.Scaled(job_id=job_id, base_epoch=base, epoch=job.epoch, nodes=job.node_ids,
                            placement=job.assignment.tolist(), moves=plan.moves, metrics=plan.metrics,
                            solver=plan.solver)


def _check_nodes(nodes: list[Node], cap: int) -> None:
    if len(nodes) > cap:
        raise TooLarge(f"nodes: more than {cap} nodes")
    seen: set[str] = set()
    for i, nd in enumerate(nodes):
        if nd.id in seen:
            raise InvalidInput(f"nodes[{i}].id", f"duplicate node id {nd.id!r}")
        seen.add(nd.id)
    if all(nd.removing for nd in nodes):
        raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")


def _union(problem: Problem, new_nodes: list[Node], budget: c.Budget) -> Problem:
    """``problem`` on the new nodes followed by the old ones that go (marked removing), with ``budget``."""
    new_ids = [nd.id for nd in new_nodes]
    going = [i for i, nid in enumerate(problem.node_ids) if nid not in set(new_ids)]
    ids = new_ids + [problem.node_ids[i] for i in going]
    index = {nid: j for j, nid in enumerate(ids)}
    current = np.array([index[problem.node_ids[i]] for i in problem.current.tolist()], dtype=np.int64)
    mandatory = int(np.count_nonzero(current >= len(new_nodes)))
    if budget.max_migrations is not None and budget.max_migrations < mandatory:
        raise InvalidInput("budget.max_migrations", f"the scale moves at least {mandatory} key groups (those on "
                                                    f"the nodes that go); allow at least that many")
    return dataclasses.replace(
        problem, node_ids=ids, current=current,
        capacity=np.array([nd.capacity for nd in new_nodes] + [problem.capacity[i] for i in going], dtype=np.float64),
        removing=np.array([nd.removing for nd in new_nodes] + [True] * len(going), dtype=bool),
        max_migrations=None if budget.max_migrations is None else budget.max_migrations,
        max_migration_bytes=budget.max_migration_bytes, resource_names=[], resource_load=None, resource_limit=None)


def _off_the_nodes_that_go(problem: Problem, assignment: np.ndarray, keep: int) -> np.ndarray:
    """``assignment`` with every key group still on a node that goes (index ≥ ``keep``) placed on the least
    utilised staying node, heaviest first (a planner may leave a key group without load where it is)."""
    a = np.asarray(assignment, dtype=np.int64).copy()
    left = np.flatnonzero(a >= keep)
    if left.size:
        util = metrics.node_loads(problem, a)[:keep] / problem.capacity[:keep]
        util[problem.removing[:keep]] = np.inf  # a staying node marked removing takes nothing new
        for k in left[np.argsort(-problem.load[left], kind="stable")].tolist():
            j = int(np.argmin(util))
            a[k] = j
            util[j] += problem.load[k] / problem.capacity[j]
    return a
