"""The documents of DESIGN.md ↔ the numeric model: the one place JSON-shaped data meets :mod:`solvers.model`.

- problem document → :class:`~solvers.model.Problem`: :func:`problem_from_dict` (the only validator of the problem
  document: the API's pydantic ``ProblemDoc`` only documents it in OpenAPI), and back: :func:`problem_to_dict`;
- :class:`~solvers.model.Plan` → plan document: :func:`plan_to_dict`, and a plan document that claims to belong to
  a problem → ``Plan``: :func:`plan_from_dict`;
- the evaluation document of ``rebalancer evaluate`` and ``POST /v1/evaluate``: :func:`evaluation`.

Structure is checked here (objects, known fields, ids, references, types); numbers are checked once, vectorised,
by :meth:`Problem.check`. Every error is an :class:`~solvers.errors.InvalidInput` with the document's field path
(``key_groups[3].load``) and a reason naming the offending id. Imports go one way: documents → metrics → model.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from itertools import chain, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers import metrics
from solvers.errors import InvalidInput
from solvers.model import STATUSES, Plan, Problem, check_range, int_if_whole

MAX_INT64 = 2**63 - 1
#: the longest id (node, key group, operator, resource name) a document may carry, in characters
MAX_ID_LENGTH = 256

PROBLEM_FIELDS = ("nodes", "key_groups", "communication", "communication_cost", "budget")
NODE_FIELDS = ("id", "capacity", "removing", "limits")
KEY_GROUP_FIELDS = ("id", "operator", "node", "load", "state_bytes", "resources")
EDGE_FIELDS = ("src", "dst", "rate")
BUDGET_FIELDS = ("max_migrations", "max_migration_bytes")
_KG_FAST_FIELDS = frozenset(KEY_GROUP_FIELDS) - {"resources"}
_get_id, _get_node, _get_load = itemgetter("id"), itemgetter("node"), itemgetter("load")
_get_src, _get_dst, _get_rate = itemgetter("src"), itemgetter("dst"), itemgetter("rate")


# ---------------------------------------------------------------------- problem document
def problem_from_dict(doc: Any) -> Problem:
    """Validate a problem document (DESIGN.md) and build the numeric problem; O(m + n + E).

    Raises:
        InvalidInput: with the path of the offending field and the offending id, for: a document that is not
            an object; unknown, missing or mistyped fields (booleans are not numbers); empty or over-long ids
            (:data:`MAX_ID_LENGTH`); duplicate node or key group ids; a key group on an unknown node; edges
            naming unknown key groups; and every numeric violation of :meth:`Problem.check` (negative, NaN or
            infinite numbers, capacity ≤ 0, every node removing, sums that overflow).
    """
    _check_object(doc, "", PROBLEM_FIELDS)
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise InvalidInput("nodes", "must be a non-empty list of nodes")
    node_ids: list[str] = []
    node_index: dict[str, int] = {}
    capacity, removing = np.empty(len(nodes)), np.zeros(len(nodes), dtype=bool)
    limits: list[dict[str, float]] = []
    for i, nd in enumerate(nodes):
        where = f"nodes[{i}]"
        nid = _entry(nd, where, NODE_FIELDS, node_index, "node")
        node_index[nid] = i
        node_ids.append(nid)
        who = f"node {nid!r}"
        capacity[i] = _number(nd.get("capacity", 1.0), f"{where}.capacity", who)
        rem = nd.get("removing", False)
        if not isinstance(rem, bool):
            raise InvalidInput(f"{where}.removing", f"must be true or false ({who})")
        removing[i] = rem
        limits.append(_resource_map(nd.get("limits"), f"{where}.limits", who))
    check_range(capacity, "nodes", "capacity", node_ids, "node", positive=True)  # nodes first, then key groups
    if removing.all():
        raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")

    kgs = doc.get("key_groups", [])
    if not isinstance(kgs, list):
        raise InvalidInput("key_groups", "must be a list of key groups")
    m = len(kgs)
    kg_ids, operator, load, state, current, res_rows = _fast_key_groups(kgs, node_index) or \
        _key_groups(kgs, node_index)
    check_range(load, "key_groups", "load", kg_ids, "key group")
    check_range(state, "key_groups", "state_bytes", kg_ids, "key group")
    kg_index = {kid: k for k, kid in enumerate(kg_ids)}

    edges = [] if doc.get("communication") is None else doc["communication"]
    if not isinstance(edges, list):
        raise InvalidInput("communication", "must be a list of {src, dst, rate}")
    src, dst, rate = _fast_edges(edges, kg_index) or _edges(edges, kg_index)
    comm = sp.csr_matrix((rate, (src, dst)), shape=(m, m))
    comm.sum_duplicates()
    ccost = 0.0 if doc.get("communication_cost") is None else _number(doc["communication_cost"], "communication_cost")

    budget = {} if doc.get("budget") is None else doc["budget"]
    _check_object(budget, "budget", BUDGET_FIELDS)
    mm = budget.get("max_migrations")
    if mm is not None:
        if isinstance(mm, bool) or not isinstance(mm, int):
            raise InvalidInput("budget.max_migrations", f"must be an integer or null, got {str(mm)[:40]!r}")
        if not 0 <= mm <= MAX_INT64:
            raise InvalidInput("budget.max_migrations", f"must be in [0, 2^63 - 1], got {mm}")
    mb = budget.get("max_migration_bytes")
    mb = None if mb is None else _number(mb, "budget.max_migration_bytes")

    names = sorted({r for row in res_rows for r in row} | {r for lim in limits for r in lim})
    r_load = r_limit = None
    if names:
        r_load = np.array([[row.get(r, 0.0) for r in names] for row in res_rows], dtype=np.float64)
        r_load = r_load.reshape(m, len(names))
        r_limit = np.array([[lim.get(r, math.inf) for r in names] for lim in limits], dtype=np.float64)
    return Problem(
        node_ids=node_ids, capacity=capacity, removing=removing, kg_ids=kg_ids, operator=operator,
        load=load, state_bytes=state, current=current, comm=comm, communication_cost=ccost,
        max_migrations=mm, max_migration_bytes=mb,
        resource_names=names, resource_load=r_load, resource_limit=r_limit,
    ).check()


KeyGroups = tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray, list[dict[str, float]]]


def _key_groups(kgs: list[Any], node_index: dict[str, int]) -> KeyGroups:
    """Key groups one by one: the error of the first offending field (the fast path's fallback)."""
    m = len(kgs)
    kg_ids, operator, res_rows = [], [], []
    seen: set[str] = set()
    load, state, current = np.empty(m), np.empty(m), np.empty(m, dtype=np.int64)
    for k, kg in enumerate(kgs):
        where = f"key_groups[{k}]"
        kid = _entry(kg, where, KEY_GROUP_FIELDS, seen, "key group")
        seen.add(kid)
        kg_ids.append(kid)
        who = f"key group {kid!r}"
        op = kg.get("operator")
        operator.append("" if op is None else _id(op, f"{where}.operator", who, allow_empty=True))
        node = kg.get("node")
        if not isinstance(node, str):
            raise InvalidInput(f"{where}.node", f"must be a node id ({who})")
        if node not in node_index:
            raise InvalidInput(f"{where}.node", f"unknown node {node[:MAX_ID_LENGTH]!r} ({who})")
        current[k] = node_index[node]
        if "load" not in kg:
            raise InvalidInput(f"{where}.load", f"is required ({who})")
        load[k] = _number(kg["load"], f"{where}.load", who)
        sb = kg.get("state_bytes")
        state[k] = 0.0 if sb is None else _number(sb, f"{where}.state_bytes", who)
        res_rows.append(_resource_map(kg.get("resources"), f"{where}.resources", who))
    return kg_ids, operator, load, state, current, res_rows


def _fast_key_groups(kgs: list[Any], node_index: dict[str, int]) -> KeyGroups | None:
    """The same result as :func:`_key_groups` in a few C-level passes for regular documents, or ``None`` for
    anything irregular (then the slow path names the error)."""
    m = len(kgs)
    if not m or set(map(type, kgs)) != {dict} or not _KG_FAST_FIELDS.issuperset(chain.from_iterable(kgs)):
        return None
    try:
        ids, nodes, loads = list(map(_get_id, kgs)), list(map(_get_node, kgs)), list(map(_get_load, kgs))
        ops = list(map(dict.get, kgs, repeat("operator", m)))
        sbs = list(map(dict.get, kgs, repeat("state_bytes", m)))
        if not (_all_ids(ids, 1) and _all_ids(nodes, 0) and len(set(ids)) == m
                and {str, type(None)}.issuperset(map(type, ops)) and _all_numbers(loads, False)
                and _all_numbers(sbs, True) and max(map(len, filter(None, ops)), default=0) <= MAX_ID_LENGTH):
            return None
        current = np.fromiter(map(node_index.__getitem__, nodes), dtype=np.int64, count=m)
        load = np.array(loads, dtype=np.float64)
        state = np.array([0.0 if v is None else v for v in sbs], dtype=np.float64)
    except (KeyError, OverflowError):
        return None
    return ids, ["" if op is None else op for op in ops], load, state, current, [{}] * m


def _edges(edges: list[Any], kg_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src, dst, rate = np.empty(len(edges), dtype=np.int64), np.empty(len(edges), dtype=np.int64), np.empty(len(edges))
    for e, edge in enumerate(edges):
        where = f"communication[{e}]"
        _check_object(edge, where, EDGE_FIELDS)
        for end, arr in (("src", src), ("dst", dst)):
            name = edge.get(end)
            if not isinstance(name, str):
                raise InvalidInput(f"{where}.{end}", "must be a key group id")
            if name not in kg_index:
                raise InvalidInput(f"{where}.{end}", f"unknown key group {name[:MAX_ID_LENGTH]!r}")
            arr[e] = kg_index[name]
        rate[e] = _number(edge.get("rate"), f"{where}.rate")
        if not (math.isfinite(rate[e]) and rate[e] >= 0):  # the matrix sums duplicates: check before
            raise InvalidInput(f"{where}.rate", f"must be finite and ≥ 0, got {rate[e]}")
    return src, dst, rate


def _fast_edges(edges: list[Any], kg_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`_edges` in C-level passes for regular lists, or ``None`` (then :func:`_edges` names the error)."""
    n = len(edges)
    if not n or set(map(type, edges)) != {dict} or sum(map(len, edges)) != 3 * n:
        return None
    try:
        lookup = kg_index.__getitem__
        src = np.fromiter(map(lookup, map(_get_src, edges)), dtype=np.int64, count=n)
        dst = np.fromiter(map(lookup, map(_get_dst, edges)), dtype=np.int64, count=n)
        rates = list(map(_get_rate, edges))
        if not _all_numbers(rates, False):
            return None
        rate = np.array(rates, dtype=np.float64)
    except (KeyError, TypeError, OverflowError):  # unhashable or unknown ids, a missing field, a huge integer
        return None
    return (src, dst, rate) if np.isfinite(rate).all() and rate.min() >= 0 else None


def _all_ids(values: list[Any], shortest: int) -> bool:
    return set(map(type, values)) == {str} and shortest <= min(map(len, values)) and \
        max(map(len, values)) <= MAX_ID_LENGTH


def _all_numbers(values: list[Any], nullable: bool) -> bool:
    return ({int, float, type(None)} if nullable else {int, float}).issuperset(map(type, values))


def problem_to_dict(problem: Problem) -> dict[str, Any]:
    """The problem document of ``problem`` (inverse of :func:`problem_from_dict`)."""
    p = problem
    nodes = []
    for i, nid in enumerate(p.node_ids):
        nd: dict[str, Any] = {"id": nid, "capacity": float(p.capacity[i]), "removing": bool(p.removing[i])}
        if p.resource_names and p.resource_limit is not None:
            lim = {r: float(p.resource_limit[i, j]) for j, r in enumerate(p.resource_names)
                   if math.isfinite(p.resource_limit[i, j])}
            if lim:
                nd["limits"] = lim
        nodes.append(nd)
    kgs = []
    for k, kid in enumerate(p.kg_ids):
        kg: dict[str, Any] = {"id": kid, "operator": p.operator[k], "node": p.node_ids[int(p.current[k])],
                              "load": float(p.load[k]), "state_bytes": int_if_whole(p.state_bytes[k])}
        if p.resource_names and p.resource_load is not None:
            kg["resources"] = {r: float(p.resource_load[k, j]) for j, r in enumerate(p.resource_names)}
        kgs.append(kg)
    src, dst, rate = p.edges()
    return {
        "nodes": nodes,
        "key_groups": kgs,
        "communication": [{"src": p.kg_ids[int(s)], "dst": p.kg_ids[int(d)], "rate": float(r)}
                          for s, d, r in zip(src, dst, rate, strict=True)],
        "communication_cost": p.communication_cost,
        "budget": {"max_migrations": p.max_migrations, "max_migration_bytes": p.max_migration_bytes},
    }


# ---------------------------------------------------------------------- plan and evaluation documents
def moves(problem: Problem, assignment: np.ndarray) -> list[dict[str, Any]]:
    """The ``moves`` of a plan document: every key group whose node differs from the current one."""
    a = np.asarray(assignment, dtype=np.int64)
    return [{"key_group": problem.kg_ids[int(k)], "from": problem.node_ids[int(problem.current[k])],
             "to": problem.node_ids[int(a[k])], "state_bytes": int_if_whole(problem.state_bytes[k])}
            for k in np.flatnonzero(a != problem.current)]


def plan_to_dict(problem: Problem, plan: Plan) -> dict[str, Any]:
    """The plan document of DESIGN.md, with before/after metrics computed by :mod:`solvers.metrics`."""
    a = plan.assignment
    doc: dict[str, Any] = {
        "algorithm": plan.algorithm,
        "assignment": {kid: problem.node_ids[int(a[k])] for k, kid in enumerate(problem.kg_ids)},
        "moves": moves(problem, a),
        "metrics": metrics.plan_metrics(problem, a),
        "solver": {
            "status": plan.status,
            "lower_bound": None if plan.lower_bound is None else float(f"{float(plan.lower_bound):.6g}"),
            "seconds": round(float(plan.seconds), 4),
        },
    }
    if plan.details:
        doc["details"] = plan.details
    return doc


def plan_from_dict(problem: Problem, doc: Any) -> Plan:
    """Read a plan document and check that it belongs to ``problem``.

    The plan's ``assignment`` must name every key group of the problem and nothing else, each on a node of the
    problem; its ``moves``, when present, must list exactly the key groups whose node changed. ``algorithm`` and
    ``solver`` are read when well-formed and otherwise ignored (they do not change the evaluation).

    Raises:
        InvalidInput: naming the first mismatch (paths under ``plan.``).
    """
    if not isinstance(doc, Mapping):
        raise InvalidInput("plan", "must be a JSON object")
    assignment = doc.get("assignment")
    if not isinstance(assignment, Mapping):
        raise InvalidInput("plan.assignment", "must be an object mapping key group id -> node id")
    node_index = {nid: i for i, nid in enumerate(problem.node_ids)}
    kg_index = {kid: k for k, kid in enumerate(problem.kg_ids)}
    unknown = [kid for kid in assignment if kid not in kg_index]
    if unknown:
        raise InvalidInput(f"plan.assignment.{str(unknown[0])[:MAX_ID_LENGTH]}", "key group is not in the problem")
    a = np.empty(problem.n_key_groups, dtype=np.int64)
    for k, kid in enumerate(problem.kg_ids):
        if kid not in assignment:
            raise InvalidInput(f"plan.assignment.{kid}", "key group of the problem is missing from the plan")
        node = assignment[kid]
        if not isinstance(node, str) or node not in node_index:
            raise InvalidInput(f"plan.assignment.{kid}", f"unknown node {str(node)[:MAX_ID_LENGTH]!r}")
        a[k] = node_index[node]
    if doc.get("moves") is not None:
        _check_moves(problem, a, doc["moves"], kg_index)
    solver: Mapping[str, Any] = doc["solver"] if isinstance(doc.get("solver"), Mapping) else {}
    status, lb, algorithm = solver.get("status", "heuristic"), solver.get("lower_bound"), doc.get("algorithm")
    return Plan(algorithm=algorithm if isinstance(algorithm, str) else "unknown", assignment=a,
                status=status if status in STATUSES else "heuristic",
                lower_bound=float(lb) if isinstance(lb, (int, float)) and not isinstance(lb, bool) else None)


def _check_moves(problem: Problem, a: np.ndarray, listed_moves: Any, kg_index: dict[str, int]) -> None:
    if not isinstance(listed_moves, list):
        raise InvalidInput("plan.moves", "must be a list")
    listed = set()
    for j, mv in enumerate(listed_moves):
        if not isinstance(mv, Mapping) or not isinstance(mv.get("key_group"), str) or mv["key_group"] not in kg_index:
            raise InvalidInput(f"plan.moves[{j}].key_group", "must name a key group of the problem")
        k = kg_index[mv["key_group"]]
        here = problem.node_ids[int(problem.current[k])]
        if mv.get("from") != here:
            raise InvalidInput(f"plan.moves[{j}].from", f"key group {mv['key_group']!r} is on {here!r}, not "
                               f"{str(mv.get('from'))[:MAX_ID_LENGTH]!r}: the plan was computed for another assignment")
        if mv.get("to") != problem.node_ids[int(a[k])]:
            raise InvalidInput(f"plan.moves[{j}].to", f"disagrees with the assignment of {mv['key_group']!r}")
        listed.add(k)
    changed = set(np.flatnonzero(a != problem.current).tolist())
    if listed != changed:
        missing = sorted(changed - listed)
        what = problem.kg_ids[missing[0]] if missing else problem.kg_ids[sorted(listed - changed)[0]]
        raise InvalidInput("plan.moves", f"moves do not match the assignment (key group {what!r})")


def evaluation(problem: Problem, plan: Plan) -> dict[str, Any]:
    """The evaluation document (``rebalancer evaluate``, ``POST /v1/evaluate``): the plan document's ``metrics``
    block (before, after, migrations, migration_bytes), the ``moves`` and ``within_budget``."""
    doc = metrics.plan_metrics(problem, plan.assignment)
    doc["moves"] = moves(problem, plan.assignment)
    doc["within_budget"] = metrics.within_budget(problem, plan.assignment)
    return doc


# ---------------------------------------------------------------------- helpers
def _check_object(obj: Any, where: str, allowed: tuple[str, ...]) -> None:
    if not isinstance(obj, Mapping):
        raise InvalidInput(where, "must be a JSON object" if where else "the problem must be a JSON object")
    for key in obj:
        if key not in allowed:
            shown = str(key)[:MAX_ID_LENGTH]
            raise InvalidInput(f"{where}.{shown}" if where else shown,
                               f"unknown field; expected one of {list(allowed)}")


def _entry(obj: Any, where: str, fields: tuple[str, ...], seen: Container[str], what: str) -> str:
    """Check one node or key group object (known fields, an id not in ``seen``) and return its id."""
    _check_object(obj, where, fields)
    oid = _id(obj.get("id"), f"{where}.id")
    if oid in seen:
        raise InvalidInput(f"{where}.id", f"duplicate {what} id {oid!r}")
    return oid


def _id(value: Any, where: str, who: str = "", allow_empty: bool = False) -> str:
    of = f" ({who})" if who else ""
    if not isinstance(value, str) or (not value and not allow_empty):
        raise InvalidInput(where, f"must be a non-empty string{of}")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidInput(where, f"must be at most {MAX_ID_LENGTH} characters, got {len(value)}{of}")
    return value


def _number(value: Any, where: str, who: str = "") -> float:
    """A JSON number (not a boolean), else InvalidInput naming ``where`` and, in the reason, ``who``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        of = f" ({who})" if who else ""
        shown = repr(value) if not isinstance(value, str) else repr(value[:40])
        raise InvalidInput(where, f"must be a number, got {shown}{of}")
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range
        raise InvalidInput(where, f"must be finite, got a {len(str(value))}-digit integer") from None


def _resource_map(obj: Any, where: str, who: str) -> dict[str, float]:
    """``{"resource": amount}`` of a node's limits or a key group's extra resource loads (ranges: Problem.check)."""
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise InvalidInput(where, f"must be an object of resource name -> amount ({who})")
    out = {}
    for r, v in obj.items():
        name = _id(r, where, who)
        out[name] = _number(v, f"{where}.{name}", who)
        if not (math.isfinite(out[name]) and out[name] >= 0):  # limits are not range-checked by Problem.check
            raise InvalidInput(f"{where}.{name}", f"must be finite and ≥ 0, got {out[name]} ({who})")
    return out
