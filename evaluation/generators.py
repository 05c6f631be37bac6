"""Scenario generators: the ALBIC paper's synthetic instance (§5.1) and a Zipf-skewed heterogeneous one."""

from __future__ import annotations

import math

import numpy as np

from solvers.errors import InvalidInput
from solvers.model import Problem

#: mean load of a node in the synthetic instances: load distances read as "percent of the average node load"
NODE_LOAD = 100.0
MiB = 1 << 20


def albic_synthetic(
    nodes: int,
    key_groups_per_node: int = 20,
    varies: float = 0.5,
    seed: int = 0,
    max_migrations: int | None = None,
    operators: int = 1,
) -> Problem:
    """The synthetic instance of the ALBIC paper, §5.1 "Solver Performance for MILP".

    "Key groups are evenly allocated, such that each node has the same number of key groups. The load of each key
    group is initially set to the mean, which is then adjusted by a percentage, randomly chosen from the range
    [−5%, 5%]. […] we further adjust the load on 20% of the nodes, which is controlled by a variable called
    varies. Half of the nodes whose load are changed gets a reduction of 0.5·varies in their load and the other
    half gets an increase in load of 0.5·varies. The load changes are done by modifying the load of a randomly
    selected set of key groups on a node."

    Each node's mean load is 100, so load distances read as percent of the average node load. The randomly
    selected set of a node is at least half its key groups, so a reduction never drives a load negative.
    State sizes are 0.5–1.5 MiB (the paper budgets by count; bytes are there for byte budgets).
    """
    _check_positive_int(nodes, "nodes")
    _check_positive_int(key_groups_per_node, "key_groups_per_node")
    if not (0 <= varies <= 1.5):
        raise InvalidInput("varies", f"must be in [0, 1.5], got {varies}")
    if max_migrations is not None and max_migrations < 0:
        raise InvalidInput("max_migrations", f"must be ≥ 0, got {max_migrations}")
    _check_positive_int(operators, "operators")
    rng = np.random.default_rng(seed)
    kpn = key_groups_per_node
    m = nodes * kpn
    mean = NODE_LOAD / kpn
    load = mean * (1.0 + rng.uniform(-0.05, 0.05, size=m))
    current = np.repeat(np.arange(nodes), kpn)
    changed = rng.choice(nodes, size=int(round(0.2 * nodes)), replace=False)
    half = len(changed) // 2
    for idx, node in enumerate(changed):
        sign = -1.0 if idx < half else 1.0
        kgs = np.arange(node * kpn, (node + 1) * kpn)
        node_load = load[kgs].sum()
        size = int(rng.integers(math.ceil(kpn / 2), kpn + 1))
        subset = rng.choice(kgs, size=size, replace=False)
        delta = 0.5 * varies * node_load
        load[subset] *= 1.0 + sign * delta / load[subset].sum()
    state = np.round(MiB * rng.uniform(0.5, 1.5, size=m))
    operator = [f"op{k % operators}" for k in range(m)]
    kg_ids = [f"{operator[k]}/{k}" for k in range(m)]
    return Problem.from_arrays(load, current, np.ones(nodes), state_bytes=state, max_migrations=max_migrations,
                               operator=operator, kg_ids=kg_ids)


def skewed(
    nodes: int,
    key_groups: int,
    zipf: float = 1.0,
    heterogeneous: bool = False,
    removing: int = 0,
    seed: int = 0,
    max_migrations: int | None = None,
) -> Problem:
    """A Zipf-skewed instance: key group loads ∝ 1/rank^z in random order, placed uniformly at random.

    With ``heterogeneous`` the capacities are drawn from {0.5, 1, 2}; the first ``removing`` nodes are marked for
    removal. Loads are scaled so that the average utilisation over the active nodes is 100.
    """
    _check_positive_int(nodes, "nodes")
    if key_groups < 0:
        raise InvalidInput("key_groups", f"must be ≥ 0, got {key_groups}")
    if not (0 <= zipf <= 5) or not math.isfinite(zipf):
        raise InvalidInput("zipf", f"must be in [0, 5], got {zipf}")
    if not (0 <= removing < nodes):
        raise InvalidInput("removing", f"must be in [0, nodes − 1] = [0, {nodes - 1}], got {removing}")
    rng = np.random.default_rng(seed)
    capacity = rng.choice([0.5, 1.0, 2.0], size=nodes) if heterogeneous else np.ones(nodes)
    rem = np.zeros(nodes, dtype=bool)
    rem[:removing] = True
    ranks = rng.permutation(key_groups) + 1
    load = 1.0 / ranks.astype(np.float64) ** zipf
    if key_groups:
        load *= NODE_LOAD * capacity[~rem].sum() / load.sum()
    current = rng.integers(0, nodes, size=key_groups)
    state = np.round(MiB * rng.uniform(0.5, 1.5, size=key_groups))
    return Problem.from_arrays(load, current, capacity, removing=rem, state_bytes=state, max_migrations=max_migrations)


def _check_positive_int(value: int, name: str) -> None:
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidInput(name, f"must be a whole number ≥ 1, got {value!r}")
