"""Collocation scenarios of the ALBIC paper: §5.3 synthetic topologies and a §5.4 "Real Job 2"-like job.

- :func:`collocation_synthetic` — §5.3: "the same as that in Section 5.1, except that we control the maximum
  obtainable collocation by ensuring x% of the key groups to have 1-1 communication". The §5.1 instance
  (:func:`evaluation.generators.albic_synthetic`) gets a topology of ``operators`` operators and a communication
  matrix in which a share ``one_to_one`` of the sending key groups send all their output to one partner key group
  of the downstream operator and the others spread it evenly over all its key groups (full partitioning).
- :func:`drift_loads` — §5.3: "for each iteration of solving, the load of 20% of the nodes is adjusted by a
  percentage, randomly chosen from the range [−2%, 2%]" (every key group on a drawn node is scaled by the same
  factor).
- :func:`real_job_2` — §5.4 Real Job 2: two operators keyed on the same attribute (key group i of the first sends
  everything to key group i of the second), five key groups per operator per node, starting from the worst
  allocation (no pair shares a node), with a communication cost such that perfect collocation halves the total
  load.

Design choices the paper leaves open (stated here, used by the benchmark):
- Topology ``"chain"`` (default): one pipeline op0 → op1 → … → op{O−1}; ``"pairs"``: O/2 independent two-stage
  pipelines op0 → op1, op2 → op3, … . A key group's output rate equals its load (rate units are arbitrary), the
  last stage sends nothing.
- Partners of the one-to-one key groups are a random permutation of the downstream operator's key groups, so a
  pair shares a node only by chance at the start.
- ``comm_share``: communication_cost is set so that if every edge were cut, the communication would add
  ``comm_share`` × Σ key group load (each cut edge's cost is charged to both endpoints' nodes).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from evaluation.generators import MiB, albic_synthetic
from solvers.errors import InvalidInput
from solvers.model import Problem

TOPOLOGIES = ("chain", "pairs")


def _topology_edges(operators: int, topology: str) -> list[tuple[int, int]]:
    if topology == "chain":
        return [(j, j + 1) for j in range(operators - 1)]
    if topology == "pairs":
        return [(j, j + 1) for j in range(0, operators - 1, 2)]
    raise InvalidInput("topology", f"must be one of {list(TOPOLOGIES)}, got {topology!r}")


def communication_cost_for(load_total: float, rate_total: float, comm_share: float) -> float:
    """communication_cost c with 2·c·Σrate = comm_share·Σload (all edges cut → communication adds comm_share)."""
    return 0.0 if rate_total <= 0 else comm_share * load_total / (2.0 * rate_total)


def collocation_synthetic(
    nodes: int = 40,
    key_groups_per_node: int = 20,
    operators: int = 20,
    one_to_one: float = 0.5,
    *,
    topology: str = "chain",
    comm_share: float = 0.25,
    varies: float = 0.5,
    max_migrations: int | None = 20,
    seed: int = 0,
) -> Problem:
    """The §5.3 instance: §5.1 loads and placement plus an operator topology with x% one-to-one communication.

    Args:
        nodes, key_groups_per_node, varies, max_migrations, seed: as :func:`evaluation.generators.albic_synthetic`.
        operators: number of operators; key group k belongs to operator k mod ``operators``.
        one_to_one: x/100, share of the sending key groups of each operator with one-to-one communication.
        topology: ``"chain"`` or ``"pairs"`` (module docstring).
        comm_share: communication load if everything were cut, as a share of the total key group load.

    Returns:
        a :class:`Problem` with ``comm`` and ``communication_cost`` set; the maximum collocation factor is about
        ``one_to_one`` (plus what full-partitioning edges get by chance).
    """
    if not (0.0 <= one_to_one <= 1.0):
        raise InvalidInput("one_to_one", f"must be in [0, 1], got {one_to_one}")
    if comm_share < 0:
        raise InvalidInput("comm_share", f"must be ≥ 0, got {comm_share}")
    if operators < 2:
        raise InvalidInput("operators", f"must be ≥ 2 to communicate, got {operators}")
    base = albic_synthetic(nodes, key_groups_per_node, varies=varies, seed=seed, max_migrations=max_migrations,
                           operators=operators)
    rng = np.random.default_rng(seed + 7919)
    m = base.n_key_groups
    op = np.arange(m) % operators
    by_op = [np.flatnonzero(op == j) for j in range(operators)]
    rows, cols, vals = [], [], []
    for up, down in _topology_edges(operators, topology):
        senders, receivers = by_op[up], by_op[down]
        if senders.size == 0 or receivers.size == 0:
            continue
        n_one = int(round(one_to_one * senders.size))
        one = rng.choice(senders, size=n_one, replace=False) if n_one else np.zeros(0, dtype=np.int64)
        partners = rng.permutation(receivers)
        # one-to-one senders get distinct partners
        rows.append(one)
        cols.append(partners[: one.size] if one.size <= partners.size else rng.choice(receivers, size=one.size))
        vals.append(base.load[one])
        rest = np.setdiff1d(senders, one)
        if rest.size:
            rr = np.repeat(rest, receivers.size)
            cc = np.tile(receivers, rest.size)
            rows.append(rr)
            cols.append(cc)
            vals.append(np.repeat(base.load[rest] / receivers.size, receivers.size))
    r = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    v = np.concatenate(vals) if vals else np.zeros(0)
    comm = sp.csr_matrix((v, (r, c)), shape=(m, m))
    comm.sum_duplicates()
    cost = communication_cost_for(float(base.load.sum()), float(comm.sum()), comm_share)
    return dataclasses.replace(base, comm=comm, communication_cost=cost)


def real_job_2(
    nodes: int = 20,
    key_groups_per_operator_per_node: int = 5,
    *,
    max_migrations: int | None = 10,
    load_spread: float = 0.2,
    seed: int = 0,
) -> Problem:
    """A §5.4 "Real Job 2"-like job: two operators parallelised on the same attribute, worst initial allocation.

    Operator ``extract`` key group i sends all its output to ``sum`` key group i (same key, one-to-one). Loads
    are uniform in mean·[1 − spread, 1 + spread]; a key group pair's rate equals the pair's mean load. Start: every
    node holds ``key_groups_per_operator_per_node`` key groups of each operator and no pair shares a node (the
    second operator's key groups are shifted by a random non-zero number of nodes). ``communication_cost`` is
    chosen so that the initial (all cut) total load is twice the fully collocated total load.
    """
    if nodes < 2:
        raise InvalidInput("nodes", f"must be ≥ 2 for a worst allocation, got {nodes}")
    if not (0 <= load_spread < 1):
        raise InvalidInput("load_spread", f"must be in [0, 1), got {load_spread}")
    rng = np.random.default_rng(seed)
    per = key_groups_per_operator_per_node
    half = nodes * per
    m = 2 * half
    load = 5.0 * (1.0 + rng.uniform(-load_spread, load_spread, size=m))
    a_node = np.repeat(np.arange(nodes), per)
    # the second operator's key groups fill `per` slots per node at random, none on its partner's node
    b_node = rng.permutation(a_node)
    for i in np.flatnonzero(b_node == a_node):
        if b_node[i] != a_node[i]:
            continue
        ok = np.flatnonzero((b_node != a_node[i]) & (a_node != b_node[i]))
        j = int(rng.choice(ok))
        b_node[i], b_node[j] = b_node[j], b_node[i]
    current = np.concatenate([a_node, b_node])
    rate = 0.5 * (load[:half] + load[half:])
    comm = sp.csr_matrix((rate, (np.arange(half), half + np.arange(half))), shape=(m, m))
    cost = communication_cost_for(float(load.sum()), float(rate.sum()), 1.0)
    operator = ["extract"] * half + ["sum"] * half
    kg_ids = [f"extract/{i}" for i in range(half)] + [f"sum/{i}" for i in range(half)]
    state = np.round(MiB * rng.uniform(0.5, 1.5, size=m))
    return Problem.from_arrays(load, current, np.ones(nodes), state_bytes=state, comm=comm, communication_cost=cost,
                               max_migrations=max_migrations, operator=operator, kg_ids=kg_ids)


def drift_loads(problem: Problem, rng: np.random.Generator, assignment: np.ndarray | None = None,
                share: float = 0.2, spread: float = 0.02) -> Problem:
    """§5.3 load drift: the key groups of ``share`` of the nodes (drawn at random) get their load multiplied by
    1 + U(−spread, spread), one factor per node. Returns a copy of ``problem`` (current = ``assignment``)."""
    a = problem.current if assignment is None else np.asarray(assignment, dtype=np.int64)
    n = problem.n_nodes
    k = int(round(share * n))
    load = problem.load.copy()
    if k:
        drawn = rng.choice(n, size=k, replace=False)
        factor = np.ones(n)
        factor[drawn] = 1.0 + rng.uniform(-spread, spread, size=k)
        load *= factor[a]
    return dataclasses.replace(problem, load=load, current=a.copy())
