"""Movable units for the ALBIC MILP (§4.3.1, and §4.3.2 step 2: "each part is migrated as a unit").

A *unit* is a set of key groups that must end on one node together (a single key group when no grouping is
given). Everything the MILP and its heuristics need is expressed per unit:

- ``load[u]``: the unit's load in the linear model. With ``communication_cost == 0`` it is exactly the sum of its
  members' loads. With ``communication_cost > 0`` the node load of :func:`solvers.metrics.node_loads` is not
  linear in the placement (an edge costs only when cut); the linear model charges each unit the cost of every
  edge leaving the unit as if it were cut (``communication_cost × rate``, both directions), i.e. pessimistically.
  Edges inside a unit are never cut. Plans are always evaluated and returned with the exact
  :func:`solvers.metrics.node_loads`.
- ``cost_count(u, j)`` / ``cost_bytes(u, j)``: migrations and state bytes when ``u`` ends on node ``j`` = the
  members that are not on ``j`` now (eq. (2) of §4.3.1, Σ(1−q)·x·mc, per member).
- ``allowed``: nodes a unit may end on. Never a removing node (Lemma 1: nothing moves onto B), except a removing
  node that already holds every member of the unit (staying costs nothing and moves nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from solvers.errors import InvalidInput
from solvers.model import Problem


@dataclass
class Units:
    problem: Problem
    of: np.ndarray            # (m,) unit of each key group
    load: np.ndarray          # (U,) linear-model load
    size: np.ndarray          # (U,) members
    bytes: np.ndarray         # (U,) Σ members' state bytes
    home: np.ndarray          # (U,) node holding every member, or -1 (members spread over nodes)
    mixed: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    # mixed[u] = (nodes, member count on node, member bytes on node)
    allowed: dict[int, np.ndarray] = field(default_factory=dict)   # restricted units only (sorted node indices)
    res_load: np.ndarray | None = None    # (U, R)
    res_limit: np.ndarray | None = None   # (n, R), already relaxed to max(limit, current usage)
    broken: list[int] = field(default_factory=list)
    drain: bool = True        # prefer draining removing nodes below the drain floor (search.drain_floor)

    @property
    def n_units(self) -> int:
        return int(self.load.shape[0])

    # ------------------------------------------------------------------ costs
    def cost_count_to(self, us: np.ndarray, j: int | np.ndarray) -> np.ndarray:
        """Migrations when units ``us`` end on node(s) ``j`` (broadcast)."""
        us = np.asarray(us, dtype=np.int64)
        j = np.asarray(j)
        c = np.where(self.home[us] == j, 0, self.size[us]).astype(np.int64)
        if self.mixed:
            for idx in np.flatnonzero(self.home[us] < 0):
                u = int(us[idx])
                nodes, cnt, _ = self.mixed[u]
                jj = int(j if j.ndim == 0 else j[idx])
                hit = np.flatnonzero(nodes == jj)
                c[idx] = self.size[u] - (int(cnt[hit[0]]) if hit.size else 0)
        return c

    def cost_bytes_to(self, us: np.ndarray, j: int | np.ndarray) -> np.ndarray:
        us = np.asarray(us, dtype=np.int64)
        j = np.asarray(j)
        c = np.where(self.home[us] == j, 0.0, self.bytes[us])
        if self.mixed:
            for idx in np.flatnonzero(self.home[us] < 0):
                u = int(us[idx])
                nodes, _, byt = self.mixed[u]
                jj = int(j if j.ndim == 0 else j[idx])
                hit = np.flatnonzero(nodes == jj)
                c[idx] = self.bytes[u] - (float(byt[hit[0]]) if hit.size else 0.0)
        return c

    def cost_matrix(self, us: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(len(us), len(nodes)) migrations and bytes of placing each unit on each node."""
        us = np.asarray(us, dtype=np.int64)
        nodes = np.asarray(nodes, dtype=np.int64)
        at = self.home[us][:, None] == nodes[None, :]
        cc = np.where(at, 0, self.size[us][:, None]).astype(np.int64)
        cb = np.where(at, 0.0, self.bytes[us][:, None])
        if self.mixed:
            for idx in np.flatnonzero(self.home[us] < 0):
                u = int(us[idx])
                mn, cnt, byt = self.mixed[u]
                for q, node in enumerate(mn):
                    hit = np.flatnonzero(nodes == node)
                    if hit.size:
                        cc[idx, hit] = self.size[u] - cnt[q]
                        cb[idx, hit] = self.bytes[u] - byt[q]
        return cc, cb

    def allowed_mask(self, us: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """(len(us), len(nodes)) bool: may unit ``us[a]`` end on ``nodes[b]``."""
        p = self.problem
        us = np.asarray(us, dtype=np.int64)
        nodes = np.asarray(nodes, dtype=np.int64)
        mask = np.broadcast_to(p.active[nodes][None, :], (us.size, nodes.size)).copy()
        # a removing node is allowed only for a unit that sits entirely on it
        mask |= (self.home[us][:, None] == nodes[None, :])
        if self.allowed:
            for idx, u in enumerate(us.tolist()):
                al = self.allowed.get(u)
                if al is not None:
                    mask[idx] &= np.isin(nodes, al)
        return mask

    def placement_cost(self, place: np.ndarray) -> tuple[int, float]:
        return self.placement_cost_of(np.arange(self.n_units), place)

    def placement_cost_of(self, us: np.ndarray, place: np.ndarray) -> tuple[int, float]:
        """Migrations and bytes of units ``us`` placed as in ``place`` (the whole placement vector)."""
        us = np.asarray(us, dtype=np.int64)
        return int(self.cost_count_to(us, place[us]).sum()), float(self.cost_bytes_to(us, place[us]).sum())

    def assignment(self, place: np.ndarray) -> np.ndarray:
        """Key group assignment of a unit placement (every member on its unit's node)."""
        out: np.ndarray = np.asarray(place, dtype=np.int64)[self.of]
        return out

    def cheapest_node(self, u: int) -> int:
        """The allowed node of unit ``u`` that needs the fewest migrations (its home when it has one)."""
        p = self.problem
        if self.home[u] >= 0 and (self.allowed.get(u) is None or self.home[u] in self.allowed[u]):
            return int(self.home[u])
        cand = self.allowed.get(u)
        if cand is None:
            cand = np.flatnonzero(p.active)
        if cand.size == 0:
            return -1
        cc = self.cost_count_to(np.full(cand.size, u), cand)
        return int(cand[np.argmin(cc)])


def build_units(problem: Problem, unit_of: np.ndarray | None = None,
                allowed: dict[int, np.ndarray] | None = None) -> Units:
    """Build the units of ``problem`` (see module docstring). Validates ``unit_of`` and ``allowed``."""
    p = problem
    m, n = p.n_key_groups, p.n_nodes
    if unit_of is None:
        of = np.arange(m, dtype=np.int64)
    else:
        of = np.asarray(unit_of)
        if of.shape != (m,):
            raise InvalidInput("unit_of", f"must have one entry per key group ({m}), got shape {of.shape}")
        if m and (not np.issubdtype(of.dtype, np.integer) or of.min() < 0):
            raise InvalidInput("unit_of", "must be non-negative integers")
        # compact unit ids (caller's id uniq[c] is unit c here)
        uniq, of = np.unique(of, return_inverse=True)
        of = of.astype(np.int64)
    U = int(of.max()) + 1 if m else 0
    load = np.bincount(of, weights=p.load, minlength=U).astype(np.float64)
    if p.communicates:
        src, dst, rate = p.edges()
        ext = of[src] != of[dst]
        if ext.any():
            extra = p.communication_cost * rate[ext]
            load += np.bincount(of[src[ext]], weights=extra, minlength=U)
            load += np.bincount(of[dst[ext]], weights=extra, minlength=U)
    size = np.bincount(of, minlength=U).astype(np.int64)
    byts = np.bincount(of, weights=p.state_bytes, minlength=U).astype(np.float64)
    home = np.full(U, -1, dtype=np.int64)
    mixed: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if unit_of is None:
        home[:] = p.current
    else:
        nmin = np.full(U, n, dtype=np.int64)
        nmax = np.full(U, -1, dtype=np.int64)
        np.minimum.at(nmin, of, p.current)
        np.maximum.at(nmax, of, p.current)
        same = nmin == nmax
        home[same] = nmin[same]
        for u in np.flatnonzero(~same).tolist():
            members = np.flatnonzero(of == u)
            nodes, inv = np.unique(p.current[members], return_inverse=True)
            mixed[u] = (nodes, np.bincount(inv, minlength=nodes.size).astype(np.int64),
                        np.bincount(inv, weights=p.state_bytes[members], minlength=nodes.size))
    al: dict[int, np.ndarray] = {}
    if allowed:
        for u_caller, nodes in allowed.items():
            if unit_of is None:
                u = int(u_caller)
                ok = 0 <= u < U
            else:
                u = int(np.searchsorted(uniq, u_caller))
                ok = u < U and uniq[u] == u_caller
            if not ok:
                raise InvalidInput(f"allowed.{u_caller}", f"unknown unit {u_caller}")
            arr = np.unique(np.asarray(nodes, dtype=np.int64))
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                raise InvalidInput(f"allowed.{u}", "names a node index out of range")
            keep = p.active[arr] | (arr == home[u])
            al[u] = arr[keep]
    res_load = res_limit = None
    if p.resource_load is not None and p.resource_limit is not None and len(p.resource_names):
        res_load = np.zeros((U, len(p.resource_names)))
        np.add.at(res_load, of, p.resource_load)
        usage = np.zeros((n, len(p.resource_names)))
        np.add.at(usage, p.current, p.resource_load)
        res_limit = np.maximum(p.resource_limit, usage)
    return Units(problem=p, of=of, load=load, size=size, bytes=byts, home=home, mixed=mixed, allowed=al,
                 res_load=res_load, res_limit=res_limit)


def split_units(units: Units, which: list[int], unit_of: np.ndarray | None,
                allowed: dict[int, np.ndarray] | None) -> Units:
    """Rebuild ``units`` with the units in ``which`` broken into single key groups (kept where they are)."""
    p = units.problem
    of = units.of.copy()
    nxt = units.n_units
    for u in which:
        members = np.flatnonzero(units.of == u)
        of[members] = np.arange(nxt, nxt + members.size)
        nxt += members.size
    al = None
    if allowed:
        al = {u: v for u, v in units.allowed.items() if u not in set(which)}
    new = build_units(p, of, None)
    # map allowed (unit ids are compacted by build_units: map old -> new via a member)
    if al:
        remap = {}
        for u, v in al.items():
            members = np.flatnonzero(units.of == u)
            remap[int(new.of[members[0]])] = v
        new.allowed = remap
    new.broken = list(units.broken) + [int(u) for u in which]
    return new
