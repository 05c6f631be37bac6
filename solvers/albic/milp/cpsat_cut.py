"""The exact cut model's parts of the CP-SAT sub-MILP (:mod:`solvers.albic.milp.cpsat`), for the proven bounds with
communication costs of :mod:`solvers.albic.milp.comm_bounds` (communication cost is our extension of the ALBIC MILP,
§4.3.1; docs/design.md): exact cut costs with one indicator per unit edge and node (:func:`cut_terms`), value
precedence between interchangeable nodes (:func:`break_symmetry`) and the budget through their permutations
(:func:`perm_budget`, with the canonical labelling of :func:`canonical`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from ortools.sat.python import cp_model

from solvers.albic.milp.scaled import SubModel


def cut_terms(model: cp_model.CpModel, sm: SubModel, xs: list[list[Any]], single: np.ndarray,
               cur_pos: np.ndarray, hint_vals: list[tuple[Any, int]], hint_pos: np.ndarray | None = None
               ) -> tuple[list[list[tuple[int, Any]]], Any]:
    """Exact communication costs with one indicator per unit edge ``(a, c)`` and node ``b``: ``s = x[a,b] ∧ x[c,b]``
    (both ends on ``b``; ``s ≤ x[a,b]``, ``s ≤ x[c,b]``, ``s ≥ x[a,b] + x[c,b] − 1``). The edge is cut at ``b``
    on exactly ``x[a,b] + x[c,b] − 2s`` sides, and cut at all iff ``1 − Σ_b s``: the node gains
    ``cc·rate·(x[a,b] + x[c,b] − 2s)``, the target ``2·cc·rate·(1 − Σ_b s)`` — the same values as the two
    indicators per side (``y = x[a,b] ∧ ¬x[c,b]``) used before, with half the variables; the per-node terms and
    the target expression are returned (without ``sm.edges``: no terms and the constant T)."""
    nn = sm.mask.shape[1]
    comm_u: list[list[tuple[int, Any]]] = [[] for _ in range(nn)]
    if sm.edges is None or sm.comm_coef is None or sm.t_coef is None or len(sm.edges) == 0:
        return comm_u, sm.T
    xvar = {(a, b): v for b in range(nn) for v, a in xs[b]}
    hp = cur_pos if hint_pos is None else hint_pos

    def x_of(a: int, b: int) -> Any:
        if single[a]:
            return 1 if b == cur_pos[a] else 0
        return xvar.get((a, b), 0)

    T_const = int(sm.T)
    t_terms: list[tuple[int, Any]] = []
    for e, (a1, a2) in enumerate(sm.edges.tolist()):
        together: list[Any] = []
        for b in range(nn):
            xa, xc = x_of(a1, b), x_of(a2, b)
            if isinstance(xa, int) and xa == 0 or isinstance(xc, int) and xc == 0:
                sv: Any = 0
            elif isinstance(xa, int):
                sv = xc
            elif isinstance(xc, int):
                sv = xa
            else:
                sv = model.new_bool_var("")
                model.add(sv <= xa)
                model.add(sv <= xc)
                model.add(sv >= xa + xc - 1)
                hint_vals.append((sv, int(hp[a1] == b and hp[a2] == b)))
            if not (isinstance(sv, int) and sv == 0):
                together.append(sv)
            sides = xa + xc - 2 * sv
            if sm.comm_coef[e, b] and not (isinstance(sides, int) and sides == 0):
                comm_u[b].append((int(sm.comm_coef[e, b]), sides))
        if sm.t_coef[e]:
            T_const += int(sm.t_coef[e])
            for sv in together:
                t_terms.append((-int(sm.t_coef[e]), sv))
    T_expr: Any = T_const + sum(c * y for c, y in t_terms) if t_terms else T_const
    return comm_u, T_expr


def _sym_order(sm: SubModel, g: np.ndarray) -> list[int]:
    """The units (positions in cand) that may go to the nodes of group ``g``, heaviest first (the order of the
    value-precedence constraints)."""
    free = np.flatnonzero(sm.mask[:, g[0]] & (sm.mask.sum(axis=1) > 1))
    return [int(a) for a in free[np.argsort(-sm.coef[free, g[0]], kind="stable")]]


def canonical(pos: np.ndarray, sm: SubModel) -> tuple[np.ndarray, list[dict[int, int]]]:
    """``pos`` with the nodes of each symmetry group relabelled in the order of their first unit (the labelling
    that :func:`break_symmetry` keeps; the same loads and costs), and per group the map physical → canonical
    position."""
    out = pos.copy()
    maps = []
    for g in sm.sym or []:
        order = _sym_order(sm, g)
        gl = g.tolist()
        seen: list[int] = []
        for a in order:
            if int(pos[a]) in gl and int(pos[a]) not in seen:
                seen.append(int(pos[a]))
        seen += [b for b in gl if b not in seen]
        relabel = dict(zip(seen, gl, strict=True))
        maps.append(relabel)
        for a in order:
            if int(pos[a]) in relabel:
                out[a] = relabel[int(pos[a])]
    return out, maps


def perm_budget(model: cp_model.CpModel, sm: SubModel, xs: list[list[Any]], maps: list[dict[int, int]],
                 hint_pos: np.ndarray, hint_vals: list[tuple[Any, int]]
                 ) -> tuple[list[tuple[Any, int, int]], int, int, list[list[list[Any]]]]:
    """The budget with value precedence over groups that ignore costs (``sm.perm``): the model's labelling of a
    group is canonical, and a permutation ``z[j][h]`` (canonical position ``j`` is physical node ``h``) gives the
    real plan. A unit living on node ``h`` of a group stays iff it is on the position ``j`` with ``z[j][h]``:
    ``w ≤ x[u, g_j]``, ``w ≤ z[j][h]`` and its cost is ``cost_u·(1 − Σ_j w)`` (only upper bounds on ``w``: the
    budget rows are ≤, so any ``w`` below the truth only charges more). Every real plan is a canonical placement
    with one permutation at the same cost, and conversely: an exact reformulation. Returns the cost terms
    (var, migrations, bytes), their constants and ``z`` per group."""
    assert sm.home_pos is not None
    xvar = {(a, b): v for b in range(len(xs)) for v, a in xs[b]}
    terms: list[tuple[Any, int, int]] = []
    const_c = const_b = 0
    zs: list[list[list[Any]]] = []
    for gi, g in enumerate(sm.sym or []):
        k = g.size
        z = [[model.new_bool_var("") for _ in range(k)] for _ in range(k)]
        for j in range(k):
            model.add_exactly_one(z[j])
            model.add_exactly_one([z[i][j] for i in range(k)])
        inv = {c: ph for ph, c in maps[gi].items()}   # canonical node → physical node
        for j in range(k):
            for h in range(k):
                hint_vals.append((z[j][h], int(inv.get(int(g[j])) == int(g[h]))))
        zs.append(z)
        pos_in = {int(b): i for i, b in enumerate(g.tolist())}
        for a in np.flatnonzero(np.isin(sm.home_pos, g)).tolist():
            h = pos_in[int(sm.home_pos[a])]
            ca, ba = int(sm.cc[a].max()), int(sm.cb[a].max())
            if ca == 0 and ba == 0:
                continue
            const_c += ca
            const_b += ba
            for j in range(k):
                x = xvar.get((a, int(g[j])))
                if x is None:
                    continue
                w = model.new_bool_var("")
                model.add(w <= x)
                model.add(w <= z[j][h])
                hint_vals.append((w, int(hint_pos[a] == g[j] and inv.get(int(g[j])) == int(g[h]))))
                terms.append((w, -ca, -ba))
    return terms, const_c, const_b, zs


def break_symmetry(model: cp_model.CpModel, sm: SubModel, xs: list[list[Any]], single: np.ndarray) -> None:
    """Value precedence within each group of interchangeable nodes ``g_0 < g_1 < …`` (:func:`node_symmetry`),
    units ``u_0, u_1, …`` heaviest first: ``x[u_k, g_j] ≤ Σ_{l<k} x[u_l, g_{j−1}]`` — a node of the group is used
    only after the previous one, by an earlier unit. Every solution has a relabelling of the group's nodes (by
    their first unit) that keeps it, with the same loads, costs and objective, so the optimum is unchanged."""
    if not sm.sym:
        return
    xvar = {(a, b): v for b in range(len(xs)) for v, a in xs[b]}
    for g in sm.sym:
        order = [a for a in _sym_order(sm, g) if not single[a]]
        for j in range(1, len(g)):
            prev: list[Any] = []
            for a in order:
                v = xvar.get((a, int(g[j])))
                if v is not None:
                    if prev:
                        model.add(v <= sum(prev))
                    else:
                        model.add(v == 0)
                w = xvar.get((a, int(g[j - 1])))
                if w is not None:
                    prev.append(w)
