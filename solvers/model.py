"""The numeric problem and plan of DESIGN.md ("The problem and plan contract").

A :class:`Problem` is built once from the JSON problem document (:meth:`Problem.from_dict`), validated there, and
then handed to every planner as numpy arrays, so that 100,000 key groups stay cheap. A planner returns a
:class:`Plan`: the new node index of every key group plus the solver's status and bound. Turning a plan back into
the plan document (with before/after metrics) is :func:`plan_to_dict`; reading a plan document that claims to
belong to a problem is :func:`plan_from_dict`.

Indices, not ids, are used inside: ``node_ids[i]`` is node ``i``, ``kg_ids[k]`` is key group ``k``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers.errors import InvalidInput

#: plan statuses of DESIGN.md
STATUSES = ("optimal", "feasible", "heuristic")


@dataclass(eq=False)
class Problem:
    """A rebalancing instance.

    Attributes:
        node_ids: node ids, index ``i`` is node ``i``.
        capacity: (n,) float > 0, relative capacity of each node.
        removing: (n,) bool, nodes marked for scale-in (set B of the ALBIC paper, §4.3.1).
        kg_ids: key group ids, index ``k`` is key group ``k``.
        operator: (m,) operator name of each key group ("" when not given).
        load: (m,) float ≥ 0, load of each key group in the bottleneck resource.
        state_bytes: (m,) float ≥ 0, migration cost of each key group.
        current: (m,) int, index of the node each key group sits on now.
        comm: (m, m) scipy CSR matrix, directed rates ``comm[src, dst]`` (duplicates summed, no self loops kept
            in the load model since an edge inside one key group never crosses nodes).
        communication_cost: load added to each endpoint's node per unit of rate of a cut edge.
        max_migrations / max_migration_bytes: per-round budget, ``None`` = unlimited.
        resource_names: names of extra resources (multi-dimensional load, ALBIC §4.3.1); may be empty.
        resource_load: (m, R) per key group load of each extra resource.
        resource_limit: (n, R) per node limit of each extra resource (``inf`` = none).
    """

    node_ids: list[str]
    capacity: np.ndarray
    removing: np.ndarray
    kg_ids: list[str]
    operator: list[str]
    load: np.ndarray
    state_bytes: np.ndarray
    current: np.ndarray
    comm: sp.csr_matrix
    communication_cost: float = 0.0
    max_migrations: int | None = None
    max_migration_bytes: float | None = None
    resource_names: list[str] = field(default_factory=list)
    resource_load: np.ndarray | None = None
    resource_limit: np.ndarray | None = None

    # ------------------------------------------------------------------ sizes and views
    @property
    def n_nodes(self) -> int:
        return len(self.node_ids)

    @property
    def n_key_groups(self) -> int:
        return len(self.kg_ids)

    @property
    def active(self) -> np.ndarray:
        """(n,) bool: nodes not marked for removal (set A)."""
        return ~self.removing

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The communication edges as COO arrays ``(src, dst, rate)``, self loops dropped."""
        coo = self.comm.tocoo()
        keep = coo.row != coo.col
        return coo.row[keep], coo.col[keep], coo.data[keep]

    def with_budget(self, max_migrations: int | None, max_migration_bytes: float | None) -> Problem:
        """A copy of this problem with another budget (arrays are shared, not copied)."""
        import dataclasses

        return dataclasses.replace(self, max_migrations=max_migrations, max_migration_bytes=max_migration_bytes)

    def with_current(self, current: np.ndarray) -> Problem:
        """A copy of this problem whose current assignment is ``current`` (used for multi-round simulations)."""
        import dataclasses

        return dataclasses.replace(self, current=np.asarray(current, dtype=np.int64))

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        load: Sequence[float] | np.ndarray,
        current: Sequence[int] | np.ndarray,
        capacity: Sequence[float] | np.ndarray,
        *,
        removing: Sequence[bool] | np.ndarray | None = None,
        state_bytes: Sequence[float] | np.ndarray | None = None,
        comm: sp.spmatrix | None = None,
        communication_cost: float = 0.0,
        max_migrations: int | None = None,
        max_migration_bytes: float | None = None,
        operator: Sequence[str] | None = None,
        node_ids: Sequence[str] | None = None,
        kg_ids: Sequence[str] | None = None,
    ) -> Problem:
        """Build a problem directly from arrays (for generators and tests); validated like a document."""
        load = np.asarray(load, dtype=np.float64)
        capacity = np.asarray(capacity, dtype=np.float64)
        m, n = load.shape[0], capacity.shape[0]
        doc: dict[str, Any] = {
            "nodes": [
                {"id": (node_ids[i] if node_ids is not None else f"w{i}"), "capacity": float(capacity[i]),
                 "removing": bool(removing[i]) if removing is not None else False}
                for i in range(n)
            ],
            "communication_cost": communication_cost,
            "budget": {"max_migrations": max_migrations, "max_migration_bytes": max_migration_bytes},
        }
        node_names = [nd["id"] for nd in doc["nodes"]]
        names = list(kg_ids) if kg_ids is not None else [f"kg{k}" for k in range(m)]
        cur = np.asarray(current, dtype=np.int64)
        doc["key_groups"] = [
            {"id": names[k], "operator": (operator[k] if operator is not None else ""),
             "node": node_names[int(cur[k])], "load": float(load[k]),
             "state_bytes": float(state_bytes[k]) if state_bytes is not None else 0.0}
            for k in range(m)
        ]
        if comm is not None:
            coo = sp.coo_matrix(comm)
            doc["communication"] = [
                {"src": names[int(r)], "dst": names[int(c)], "rate": float(v)}
                for r, c, v in zip(coo.row, coo.col, coo.data)
            ]
        return cls.from_dict(doc)

    @classmethod
    def from_dict(cls, doc: Any) -> Problem:
        """Validate a problem document (DESIGN.md) and build the numeric problem.

        Raises:
            InvalidInput: with the path of the offending field and the offending id, for: a document that is not
                an object; missing or malformed fields; duplicate node or key group ids; a key group on an unknown
                node; a load, rate, state size or capacity that is negative, NaN or infinite (capacity must be
                > 0); no node left that is not removing; negative budgets; edges naming unknown key groups.
        """
        if not isinstance(doc, Mapping):
            raise InvalidInput("", "the problem must be a JSON object")
        known = {"nodes", "key_groups", "communication", "communication_cost", "budget"}
        for key in doc:
            if key not in known:
                raise InvalidInput(str(key), f"unknown field; expected one of {sorted(known)}")

        # ---- nodes
        nodes = doc.get("nodes")
        if not isinstance(nodes, list) or not nodes:
            raise InvalidInput("nodes", "must be a non-empty list of nodes")
        node_ids: list[str] = []
        node_index: dict[str, int] = {}
        capacity = np.empty(len(nodes))
        removing = np.zeros(len(nodes), dtype=bool)
        limits: list[dict[str, float]] = []
        for i, nd in enumerate(nodes):
            where = f"nodes[{i}]"
            _check_object(nd, where, {"id", "capacity", "removing", "limits"})
            nid = _check_id(nd.get("id"), f"{where}.id")
            if nid in node_index:
                raise InvalidInput(f"{where}.id", f"duplicate node id {nid!r}")
            node_index[nid] = i
            node_ids.append(nid)
            cap = _number(nd.get("capacity", 1.0), f"{where}.capacity", f"node {nid!r}")
            if cap <= 0:
                raise InvalidInput(f"{where}.capacity", f"must be > 0 (node {nid!r}), got {cap}")
            capacity[i] = cap
            rem = nd.get("removing", False)
            if not isinstance(rem, bool):
                raise InvalidInput(f"{where}.removing", f"must be true or false (node {nid!r})")
            removing[i] = rem
            limits.append(_resource_map(nd.get("limits"), f"{where}.limits", f"node {nid!r}"))
        if removing.all():
            raise InvalidInput("nodes", "every node is marked removing; at least one node must stay")

        # ---- key groups
        kgs = doc.get("key_groups", [])
        if not isinstance(kgs, list):
            raise InvalidInput("key_groups", "must be a list of key groups")
        m = len(kgs)
        kg_ids: list[str] = []
        kg_index: dict[str, int] = {}
        operator: list[str] = []
        load = np.empty(m)
        state = np.empty(m)
        current = np.empty(m, dtype=np.int64)
        res_rows: list[dict[str, float]] = []
        for k, kg in enumerate(kgs):
            where = f"key_groups[{k}]"
            _check_object(kg, where, {"id", "operator", "node", "load", "state_bytes", "resources"})
            kid = _check_id(kg.get("id"), f"{where}.id")
            if kid in kg_index:
                raise InvalidInput(f"{where}.id", f"duplicate key group id {kid!r}")
            kg_index[kid] = k
            kg_ids.append(kid)
            op = kg.get("operator", "")
            if op is None:
                op = ""
            if not isinstance(op, str):
                raise InvalidInput(f"{where}.operator", f"must be a string (key group {kid!r})")
            operator.append(op)
            node = kg.get("node")
            if not isinstance(node, str):
                raise InvalidInput(f"{where}.node", f"must be a node id (key group {kid!r})")
            if node not in node_index:
                raise InvalidInput(f"{where}.node", f"unknown node {node!r} (key group {kid!r})")
            current[k] = node_index[node]
            if "load" not in kg:
                raise InvalidInput(f"{where}.load", f"is required (key group {kid!r})")
            who = f"key group {kid!r}"
            load[k] = _nonnegative(kg.get("load"), f"{where}.load", who)
            state[k] = _nonnegative(kg.get("state_bytes", 0) or 0, f"{where}.state_bytes", who)
            res_rows.append(_resource_map(kg.get("resources"), f"{where}.resources", who))

        # ---- communication
        edges = doc.get("communication", []) or []
        if not isinstance(edges, list):
            raise InvalidInput("communication", "must be a list of {src, dst, rate}")
        src = np.empty(len(edges), dtype=np.int64)
        dst = np.empty(len(edges), dtype=np.int64)
        rate = np.empty(len(edges))
        for e, edge in enumerate(edges):
            where = f"communication[{e}]"
            _check_object(edge, where, {"src", "dst", "rate"})
            for end, arr in (("src", src), ("dst", dst)):
                name = edge.get(end)
                if not isinstance(name, str):
                    raise InvalidInput(f"{where}.{end}", "must be a key group id")
                if name not in kg_index:
                    raise InvalidInput(f"{where}.{end}", f"unknown key group {name!r}")
                arr[e] = kg_index[name]
            rate[e] = _nonnegative(edge.get("rate"), f"{where}.rate")
        comm = sp.csr_matrix((rate, (src, dst)), shape=(m, m))
        comm.sum_duplicates()

        ccost = _nonnegative(doc.get("communication_cost", 0.0) or 0.0, "communication_cost")

        # ---- budget
        budget = doc.get("budget") or {}
        if not isinstance(budget, Mapping):
            raise InvalidInput("budget", "must be an object")
        for key in budget:
            if key not in ("max_migrations", "max_migration_bytes"):
                raise InvalidInput(f"budget.{key}", "unknown field; expected max_migrations, max_migration_bytes")
        mm = budget.get("max_migrations")
        if mm is not None:
            if isinstance(mm, bool) or not isinstance(mm, (int, float)) or not float(mm).is_integer():
                raise InvalidInput("budget.max_migrations", f"must be a whole number or null, got {mm!r}")
            if mm < 0:
                raise InvalidInput("budget.max_migrations", f"must be ≥ 0, got {mm}")
            mm = int(mm)
        mb = budget.get("max_migration_bytes")
        if mb is not None:
            mb = _nonnegative(mb, "budget.max_migration_bytes")

        # ---- extra resources (multi-dimensional load)
        names = sorted({r for row in res_rows for r in row} | {r for lim in limits for r in lim})
        r_load = r_limit = None
        if names:
            r_load = np.array([[row.get(r, 0.0) for r in names] for row in res_rows], dtype=np.float64).reshape(m, len(names))
            r_limit = np.array([[lim.get(r, math.inf) for r in names] for lim in limits], dtype=np.float64)

        return cls(
            node_ids=node_ids, capacity=capacity, removing=removing, kg_ids=kg_ids, operator=operator,
            load=load, state_bytes=state, current=current, comm=comm, communication_cost=ccost,
            max_migrations=mm, max_migration_bytes=mb,
            resource_names=names, resource_load=r_load, resource_limit=r_limit,
        )

    def to_dict(self) -> dict[str, Any]:
        """The problem document of this problem (inverse of :meth:`from_dict`)."""
        nodes = []
        for i, nid in enumerate(self.node_ids):
            nd: dict[str, Any] = {"id": nid, "capacity": float(self.capacity[i]), "removing": bool(self.removing[i])}
            if self.resource_names:
                lim = {r: float(self.resource_limit[i, j]) for j, r in enumerate(self.resource_names)
                       if math.isfinite(self.resource_limit[i, j])}
                if lim:
                    nd["limits"] = lim
            nodes.append(nd)
        kgs = []
        for k, kid in enumerate(self.kg_ids):
            kg: dict[str, Any] = {"id": kid, "operator": self.operator[k], "node": self.node_ids[int(self.current[k])],
                                  "load": float(self.load[k]), "state_bytes": _int_if_whole(self.state_bytes[k])}
            if self.resource_names:
                kg["resources"] = {r: float(self.resource_load[k, j]) for j, r in enumerate(self.resource_names)}
            kgs.append(kg)
        src, dst, rate = self.edges()
        return {
            "nodes": nodes,
            "key_groups": kgs,
            "communication": [{"src": self.kg_ids[int(s)], "dst": self.kg_ids[int(d)], "rate": float(r)}
                              for s, d, r in zip(src, dst, rate)],
            "communication_cost": self.communication_cost,
            "budget": {"max_migrations": self.max_migrations, "max_migration_bytes": self.max_migration_bytes},
        }


@dataclass(eq=False)
class Plan:
    """The result of a planner: a new node index for every key group, and how it was obtained.

    Attributes:
        algorithm: registry name of the planner.
        assignment: (m,) int, new node index of each key group.
        status: ``optimal`` (proven), ``feasible`` (stopped by the time limit) or ``heuristic`` (no proof).
        lower_bound: proven lower bound on the after-load-distance under the same budget, or ``None``.
        seconds: wall time of the solve.
        details: planner-specific extra information (JSON-serialisable), e.g. ALBIC's collocated sets.
    """

    algorithm: str
    assignment: np.ndarray
    status: str = "heuristic"
    lower_bound: float | None = None
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.assignment = np.asarray(self.assignment, dtype=np.int64)
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def plan_to_dict(problem: Problem, plan: Plan) -> dict[str, Any]:
    """The plan document of DESIGN.md, with before/after metrics computed by :mod:`solvers.metrics`."""
    from solvers import metrics

    a = plan.assignment
    moved = np.flatnonzero(a != problem.current)
    doc: dict[str, Any] = {
        "algorithm": plan.algorithm,
        "assignment": {kid: problem.node_ids[int(a[k])] for k, kid in enumerate(problem.kg_ids)},
        "moves": [
            {"key_group": problem.kg_ids[int(k)], "from": problem.node_ids[int(problem.current[k])],
             "to": problem.node_ids[int(a[k])], "state_bytes": _int_if_whole(problem.state_bytes[k])}
            for k in moved
        ],
        "metrics": metrics.plan_metrics(problem, a),
        "solver": {
            "status": plan.status,
            "lower_bound": None if plan.lower_bound is None else _round(plan.lower_bound),
            "seconds": round(float(plan.seconds), 4),
        },
    }
    if plan.details:
        doc["details"] = plan.details
    return doc


def plan_from_dict(problem: Problem, doc: Any) -> Plan:
    """Read a plan document and check that it belongs to ``problem``.

    The plan's ``assignment`` must name every key group of the problem and nothing else, each on a node of the
    problem; its ``moves``, when present, must list exactly the key groups whose node changed.

    Raises:
        InvalidInput: naming the first mismatch.
    """
    if not isinstance(doc, Mapping):
        raise InvalidInput("plan", "must be a JSON object")
    assignment = doc.get("assignment")
    if not isinstance(assignment, Mapping):
        raise InvalidInput("plan.assignment", "must be an object mapping key group id -> node id")
    node_index = {nid: i for i, nid in enumerate(problem.node_ids)}
    kg_index = {kid: k for k, kid in enumerate(problem.kg_ids)}
    for kid in assignment:
        if kid not in kg_index:
            raise InvalidInput(f"plan.assignment.{kid}", "key group is not in the problem")
    a = np.empty(problem.n_key_groups, dtype=np.int64)
    for k, kid in enumerate(problem.kg_ids):
        if kid not in assignment:
            raise InvalidInput(f"plan.assignment.{kid}", "key group of the problem is missing from the plan")
        node = assignment[kid]
        if not isinstance(node, str) or node not in node_index:
            raise InvalidInput(f"plan.assignment.{kid}", f"unknown node {node!r}")
        a[k] = node_index[node]
    moves = doc.get("moves")
    if moves is not None:
        if not isinstance(moves, list):
            raise InvalidInput("plan.moves", "must be a list")
        listed = set()
        for j, mv in enumerate(moves):
            if not isinstance(mv, Mapping) or mv.get("key_group") not in kg_index:
                raise InvalidInput(f"plan.moves[{j}].key_group", "must name a key group of the problem")
            k = kg_index[mv["key_group"]]
            if mv.get("from") != problem.node_ids[int(problem.current[k])]:
                raise InvalidInput(f"plan.moves[{j}].from",
                                   f"key group {mv['key_group']!r} is on {problem.node_ids[int(problem.current[k])]!r}, "
                                   f"not {mv.get('from')!r}: the plan was computed for another assignment")
            if mv.get("to") != problem.node_ids[int(a[k])]:
                raise InvalidInput(f"plan.moves[{j}].to", f"disagrees with the assignment of {mv['key_group']!r}")
            listed.add(k)
        changed = set(np.flatnonzero(a != problem.current).tolist())
        if listed != changed:
            missing = sorted(changed - listed)
            what = problem.kg_ids[missing[0]] if missing else problem.kg_ids[sorted(listed - changed)[0]]
            raise InvalidInput("plan.moves", f"moves do not match the assignment (key group {what!r})")
    solver = doc.get("solver") or {}
    status = solver.get("status", "heuristic") if isinstance(solver, Mapping) else "heuristic"
    if status not in STATUSES:
        status = "heuristic"
    lb = solver.get("lower_bound") if isinstance(solver, Mapping) else None
    return Plan(algorithm=str(doc.get("algorithm", "unknown")), assignment=a, status=status,
                lower_bound=lb if isinstance(lb, (int, float)) else None)


# ---------------------------------------------------------------------- helpers
def _check_object(obj: Any, where: str, allowed: set[str]) -> None:
    if not isinstance(obj, Mapping):
        raise InvalidInput(where, "must be a JSON object")
    for key in obj:
        if key not in allowed:
            raise InvalidInput(f"{where}.{key}", f"unknown field; expected one of {sorted(allowed)}")


def _check_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(where, "must be a non-empty string")
    return value


def _number(value: Any, field: str, who: str = "") -> float:
    """A finite number, else InvalidInput naming ``field`` and, in the reason, ``who`` (the offending id)."""
    of = f" ({who})" if who else ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(field, f"must be a number, got {value!r}{of}")
    v = float(value)
    if not math.isfinite(v):
        raise InvalidInput(field, f"must be finite, got {value!r}{of}")
    return v


def _nonnegative(value: Any, field: str, who: str = "") -> float:
    v = _number(value, field, who)
    if v < 0:
        raise InvalidInput(field, f"must be ≥ 0, got {v}" + (f" ({who})" if who else ""))
    return v


def _resource_map(obj: Any, field: str, who: str) -> dict[str, float]:
    """``{"resource": amount ≥ 0}`` of a node's limits or a key group's extra resource loads."""
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise InvalidInput(field, f"must be an object of resource name -> amount ({who})")
    return {str(r): _nonnegative(v, f"{field}.{r}", who) for r, v in obj.items()}


def _int_if_whole(x: float) -> int | float:
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def _round(x: float) -> float:
    return float(f"{float(x):.6g}")
