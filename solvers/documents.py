"""The documents of ``docs/design.md`` ↔ the numeric model: where the contract's typed documents
(:mod:`rebalancer_client.contract`) meet :mod:`solvers.model`.

- problem document → :class:`~solvers.model.Problem`: :func:`problem_of` (and :func:`problem_from_dict` for
  decoded JSON), and back: :func:`problem_document` / :func:`problem_to_dict`;
- :class:`~solvers.model.Plan` → plan document: :func:`plan_document` / :func:`plan_to_dict`, and a plan to
  evaluate that claims to belong to a problem → ``Plan``: :func:`plan_of` / :func:`plan_from_dict`;
- the evaluation document of ``rebalancer evaluate`` and ``POST /v1/evaluate``: :func:`evaluation`.

A document's shape and its fields' ranges are checked where it enters (the API and the CLI validate the bytes
against the contract); here the checks that need the whole document: unique ids, references to nodes and key
groups, at least one node staying, and the numbers together (:meth:`Problem.check`: sums that overflow, load /
capacity). Every error is an :class:`~solvers.errors.InvalidInput` with the document's field path
(``key_groups[3].node``) and a reason naming the offending id. Imports go one way: documents → metrics → model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rebalancer_client import contract as c
from rebalancer_client.errors import MalformedResponse
from rebalancer_client.wire import dump, read
from solvers import metrics
from solvers.errors import InvalidInput
from solvers.model import STATUSES, Plan, Problem, comm_matrix, int_if_whole

MAX_INT64 = c.MAX_INT64
MAX_ID_LENGTH = c.MAX_ID_LENGTH


# ---------------------------------------------------------------------- problem document
def problem_of(doc: c.Problem) -> Problem:
    """The numeric problem of a problem document; O(m + n + E).

    Raises:
        InvalidInput: with the path of the offending field and the offending id, for: duplicate node or key
            group ids; a key group on an unknown node; edges naming unknown key groups; every node removing; and
            every numeric violation of :meth:`Problem.check` (sums that overflow, load / capacity).
    """
    node_index: dict[str, int] = {}
    for i, nd in enumerate(doc.nodes):
        if nd.id in node_index:
            raise InvalidInput(f"nodes[{i}].id", f"duplicate node id {nd.id!r}")
        node_index[nd.id] = i
    removing = np.array([nd.removing for nd in doc.nodes], dtype=bool)
    if removing.all():
        raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")
    kgs = doc.key_groups
    m = len(kgs)
    kg_index: dict[str, int] = {}
    current = np.empty(m, dtype=np.int64)
    for k, kg in enumerate(kgs):
        if kg.id in kg_index:
            raise InvalidInput(f"key_groups[{k}].id", f"duplicate key group id {kg.id!r}")
        kg_index[kg.id] = k
        where = node_index.get(kg.node)
        if where is None:
            raise InvalidInput(f"key_groups[{k}].node", f"unknown node {kg.node!r} (key group {kg.id!r})")
        current[k] = where
    comm = comm_matrix(*_edges(doc.communication or [], kg_index), m)
    names = sorted({r for kg in kgs for r in (kg.resources or {})} | {r for nd in doc.nodes for r in (nd.limits or {})})
    r_load = r_limit = None
    if names:
        r_load = np.array([[(kg.resources or {}).get(r, 0.0) for r in names] for kg in kgs], dtype=np.float64)
        r_load = r_load.reshape(m, len(names))
        r_limit = np.array([[(nd.limits or {}).get(r, math.inf) for r in names] for nd in doc.nodes],
                           dtype=np.float64)
    budget = doc.budget or c.Budget()
    return Problem(
        node_ids=[nd.id for nd in doc.nodes], capacity=np.array([nd.capacity for nd in doc.nodes], dtype=np.float64),
        removing=removing, kg_ids=[kg.id for kg in kgs], operator=[kg.operator or "" for kg in kgs],
        load=np.array([kg.load for kg in kgs], dtype=np.float64),
        state_bytes=np.array([kg.state_bytes or 0.0 for kg in kgs], dtype=np.float64), current=current, comm=comm,
        communication_cost=doc.communication_cost or 0.0, max_migrations=budget.max_migrations,
        max_migration_bytes=budget.max_migration_bytes, resource_names=names, resource_load=r_load,
        resource_limit=r_limit,
    ).check()


def _edges(edges: list[c.Edge], kg_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(edges)
    src, dst = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    for e, edge in enumerate(edges):
        for end, name, arr in (("src", edge.src, src), ("dst", edge.dst, dst)):
            k = kg_index.get(name)
            if k is None:
                raise InvalidInput(f"communication[{e}].{end}", f"unknown key group {name!r}")
            arr[e] = k
    return src, dst, np.array([edge.rate for edge in edges], dtype=np.float64)


def read_document(cls: type[Any], doc: Any, where: str = "", checked: bool = False) -> Any:
    """Decoded JSON as a contract document, for callers that hold a ``dict`` (the library, tests, generators):
    the types are checked (an :class:`InvalidInput` naming the field); the ranges by :meth:`Problem.check`, or
    here with ``checked`` (the fields' ``Check`` bounds, for documents no later check covers)."""
    try:
        return read(cls, doc, where, checked)
    except MalformedResponse as exc:
        raise InvalidInput(exc.field or where, exc.detail) from None


def problem_from_dict(doc: Any) -> Problem:
    """:func:`problem_of` of a decoded problem document."""
    return problem_of(read_document(c.Problem, doc))


def problem_document(problem: Problem) -> c.Problem:
    """The problem document of ``problem`` (inverse of :func:`problem_of`)."""
    p = problem
    nodes = []
    for i, nid in enumerate(p.node_ids):
        limits = None
        if p.resource_names and p.resource_limit is not None:
            limits = {r: float(p.resource_limit[i, j]) for j, r in enumerate(p.resource_names)
                      if math.isfinite(p.resource_limit[i, j])} or None
        nodes.append(c.Node(id=nid, capacity=float(p.capacity[i]), removing=bool(p.removing[i]), limits=limits))
    kgs = []
    for k, kid in enumerate(p.kg_ids):
        resources = None
        if p.resource_names and p.resource_load is not None:
            resources = {r: float(p.resource_load[k, j]) for j, r in enumerate(p.resource_names)}
        kgs.append(c.KeyGroup(id=kid, operator=p.operator[k], node=p.node_ids[int(p.current[k])],
                              load=float(p.load[k]), state_bytes=int_if_whole(p.state_bytes[k]), resources=resources))
    src, dst, rate = p.edges()
    return c.Problem(
        nodes=nodes, key_groups=kgs,
        communication=[c.Edge(src=p.kg_ids[int(s)], dst=p.kg_ids[int(d)], rate=float(r))
                       for s, d, r in zip(src, dst, rate, strict=True)],
        communication_cost=p.communication_cost,
        budget=c.Budget(max_migrations=p.max_migrations, max_migration_bytes=p.max_migration_bytes))


def problem_to_dict(problem: Problem) -> dict[str, Any]:
    out: dict[str, Any] = dump(problem_document(problem), omit_none=True)
    out["budget"] = {"max_migrations": problem.max_migrations, "max_migration_bytes": problem.max_migration_bytes}
    return out


# ---------------------------------------------------------------------- plan and evaluation documents
def moves(problem: Problem, assignment: np.ndarray) -> list[c.Move]:
    """The ``moves`` of a plan document: every key group whose node differs from the current one."""
    a = np.asarray(assignment, dtype=np.int64)
    return [c.Move(key_group=problem.kg_ids[int(k)], from_=problem.node_ids[int(problem.current[k])],
                   to=problem.node_ids[int(a[k])], state_bytes=int_if_whole(problem.state_bytes[k]))
            for k in np.flatnonzero(a != problem.current)]


def _metrics(problem: Problem, assignment: np.ndarray) -> c.PlanMetrics:
    d = metrics.plan_metrics(problem, assignment)
    return c.PlanMetrics(before=c.StateMetrics(**d["before"]), after=c.StateMetrics(**d["after"]),
                         migrations=d["migrations"], migration_bytes=d["migration_bytes"])


def plan_document(problem: Problem, plan: Plan) -> c.Plan:
    """The plan document of ``docs/design.md``, with before/after metrics computed by :mod:`solvers.metrics`."""
    a = plan.assignment
    ids = problem.node_ids
    return c.Plan(
        algorithm=plan.algorithm,
        assignment={kid: ids[int(a[k])] for k, kid in enumerate(problem.kg_ids)},
        moves=moves(problem, a), metrics=_metrics(problem, a),
        solver=c.SolverInfo(status=plan.status,  # type: ignore[arg-type]
                            lower_bound=None if plan.lower_bound is None else float(f"{float(plan.lower_bound):.6g}"),
                            seconds=round(float(plan.seconds), 4)),
        details=plan.details or None)


def plan_to_dict(problem: Problem, plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = dump(plan_document(problem, plan))
    return out


def plan_of(problem: Problem, doc: c.PlanInput | c.Plan) -> Plan:
    """A plan to evaluate, checked against ``problem``: its ``assignment`` names every key group of the problem and
    nothing else, each on a node of the problem; its ``moves``, when given, list exactly the key groups whose node
    changed.

    Raises:
        InvalidInput: naming the first mismatch (paths under ``plan.``).
    """
    node_index = {nid: i for i, nid in enumerate(problem.node_ids)}
    kg_index = {kid: k for k, kid in enumerate(problem.kg_ids)}
    unknown = [kid for kid in doc.assignment if kid not in kg_index]
    if unknown:
        raise InvalidInput(f"plan.assignment.{unknown[0]}", "key group is not in the problem")
    a = np.empty(problem.n_key_groups, dtype=np.int64)
    for k, kid in enumerate(problem.kg_ids):
        node = doc.assignment.get(kid)
        if node is None:
            raise InvalidInput(f"plan.assignment.{kid}", "key group of the problem is missing from the plan")
        if node not in node_index:
            raise InvalidInput(f"plan.assignment.{kid}", f"unknown node {node!r}")
        a[k] = node_index[node]
    if doc.moves is not None:
        _check_moves(problem, a, doc.moves, kg_index)
    if isinstance(doc, c.Plan):
        status = doc.solver.status if doc.solver.status in STATUSES else "heuristic"
        return Plan(algorithm=doc.algorithm, assignment=a, status=status, lower_bound=doc.solver.lower_bound)
    return Plan(algorithm="unknown", assignment=a, status="heuristic")


def plan_from_dict(problem: Problem, doc: Any) -> Plan:
    """:func:`plan_of` of a decoded plan (a whole plan document or just its ``assignment`` and ``moves``)."""
    whole = isinstance(doc, dict) and {"algorithm", "moves", "metrics", "solver"} <= set(doc)
    typed = read_document(c.Plan, {"assignment": {}, **doc}, "plan") if whole else \
        read_document(c.PlanInput, {k: v for k, v in doc.items() if k in ("assignment", "moves")}
                      if isinstance(doc, dict) else doc, "plan")
    return plan_of(problem, typed)


def _check_moves(problem: Problem, a: np.ndarray, listed_moves: list[c.Move], kg_index: dict[str, int]) -> None:
    listed = set()
    for j, mv in enumerate(listed_moves):
        k = kg_index.get(mv.key_group)
        if k is None:
            raise InvalidInput(f"plan.moves[{j}].key_group", "must name a key group of the problem")
        here = problem.node_ids[int(problem.current[k])]
        if mv.from_ != here:
            raise InvalidInput(f"plan.moves[{j}].from", f"key group {mv.key_group!r} is on {here!r}, not "
                               f"{mv.from_!r}: the plan was computed for another assignment")
        if mv.to != problem.node_ids[int(a[k])]:
            raise InvalidInput(f"plan.moves[{j}].to", f"disagrees with the assignment of {mv.key_group!r}")
        listed.add(k)
    changed = set(np.flatnonzero(a != problem.current).tolist())
    if listed != changed:
        missing = sorted(changed - listed)
        what = problem.kg_ids[missing[0]] if missing else problem.kg_ids[sorted(listed - changed)[0]]
        raise InvalidInput("plan.moves", f"moves do not match the assignment (key group {what!r})")


def evaluation(problem: Problem, plan: Plan) -> c.Evaluation:
    """The evaluation document (``rebalancer evaluate``, ``POST /v1/evaluate``): the plan document's metrics
    (before, after, migrations, migration bytes), the ``moves`` and ``within_budget``."""
    m = _metrics(problem, plan.assignment)
    return c.Evaluation(before=m.before, after=m.after, migrations=m.migrations, migration_bytes=m.migration_bytes,
                        moves=moves(problem, plan.assignment),
                        within_budget=metrics.within_budget(problem, plan.assignment))
