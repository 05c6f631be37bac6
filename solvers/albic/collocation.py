"""ALBIC: Autonomic Load Balancing with Integrated Collocation (Madsen, Zhou, Cao; §4.3.2, Algorithm 2).

The MILP of §4.3.1 cannot see collocation (it would need a quadratic term), so ALBIC runs a heuristic on top of it
and hands the MILP *units* — sets of key groups that must end on one node:

1. **Scores** (Algorithm 2 lines 1–13): for every communication edge gi → gj, out(gi, gj) is a candidate when
   out(gi, gj) > sF · avg(gi), avg(gi) = out(gi) / Σ_{DO ∈ O.down} |DO.keygroups| (O = operator of gi,
   O.down = the operators gi's operator sends to). Candidates whose ends share a node are *collocated pairs*
   (colGrps), the others are *to-be-collocated pairs* (toBeColGrps).
   See :func:`solvers.albic.collocation_scores.pair_scores`.
2. **Maintain collocation** (lines 15–22): the collocated pairs are unioned into sets (connected components,
   networkx); every set is split by balanced graph partitioning (METIS via pymetis) into
   max(⌈Σ mc / maxMigrCost⌉, ⌈Σ load / maxPL⌉) parts, vertex weight = migration cost when
   Pmc/maxMigrCost > PL/maxPL else load, edge weight = traffic; parts that still break a cap are split again.
   Each part moves as one unit. See :func:`collocated_sets`, :func:`split_set`.
3. **Improve collocation** (lines 24–37), :mod:`solvers.albic.collocation_moves`: to-be-collocated pairs are
   constrained onto one node. ``pair_order="paper"``: the highest-traffic pair first — case 1 (neither end in a
   part): the less loaded of the two nodes; case 2 (one end in a part): that part's node; case 3 (both in parts):
   the two parts merged, on the less loaded node. ``pair_order="gain"`` (a multi-round view beyond the
   paper): the cheaper of a pair's two moves, pairs by collocated traffic per migration weighted towards
   moves that also balance, compensating swaps under the band, and a balanced warm start from the migrations the
   pairs leave. ``pair_order="target"`` (default; a deviation from Algorithm 2 after COLA's whole-graph
   partitioning, §5.2): the gain order plus a *goal* for every key group — a METIS k-way partition of
   the whole traffic graph balanced by load, relabelled (Hungarian) to the nodes already holding most of each
   part and kept while the graph is unchanged — towards which single key groups move, best collocation per
   migration first, so the moves of all rounds go the same way (:mod:`solvers.albic.collocation_target`).
   The paper adds ONE pair per round; here ``pairs_per_round`` (default: as many as fit) pairs are
   added while the moves they force fit in ``pair_budget_share`` of the migration budget and — unless
   ``pair_band`` is null — keep every node within ``pair_band`` percent of the target (or no further out); when
   that rejects every pair, the best pair that fits the budget is added anyway (the paper's one pair), so
   collocation cannot stall. As in the paper, a merged unit may exceed maxPL: it is pinned to a node this round
   and split again by step 2 next round. ``pair_order="paper", pairs_per_round=1`` reproduces the paper.
4. **Solve** (lines 38–43): :func:`solvers.albic.milp.solve_grouped` with the units, the step-3 node constraints
   and a feasible warm start; if the load distance exceeds maxLD, retry with maxPL − stepPL; maxPL = 0 is the pure
   MILP (every key group its own unit, no pair constraints). Going beyond the paper (which adds one pair, so it
   never needed this), the share of the budget the new pairs may use falls with maxPL too:
   ``pair_budget_share × maxPL_level / maxPL``, so a retry also frees migrations for balancing. Each level
   warm-starts from the previous level's plan when that is feasible and better than its own pins' start. A
   quarter of ``time_limit`` is kept for the pure MILP: when the other levels use up their time, the loop jumps
   to maxPL = 0. The plan with the smallest load distance is returned when no level meets maxLD.

Units (the paper's percentages, made explicit): ``max_ld`` is a percentage of the target utilisation t (docs/design.md
load distance, so on the synthetic instances with mean node load 100 it reads as load units); ``max_pl`` and
``step_pl`` are percentages of the average load of an active node (Σ node loads / |A|, communication cost
included), measured on the current assignment at the start of the round.

Multi-round use needs no memory: the collocated sets of the next round are recomputed from the problem (pairs
with a high score that sit on one node), so a stateless CLI call and the controller behave the same. The plan's
``details`` report the units and counts for inspection.

Complexity per round: O(E) scores, O(E α) unions, METIS O(|S| + E_S) per set, O(P log P) for P candidate pairs,
plus the MILP solves (bounded by ``time_limit`` for the whole round).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from solvers import metrics
from solvers.albic.collocation_hint import balance_hint
from solvers.albic.collocation_moves import ORDERS, PairState, add_pairs_gain
from solvers.albic.collocation_paper import add_pairs_paper
from solvers.albic.collocation_scores import Pairs, pair_scores
from solvers.albic.collocation_sets import collocated_sets, metis_fits, migration_cost_fraction, split_set
from solvers.albic.collocation_target import FREE_MOVE_CELLS
from solvers.albic.milp import OPTIMALITY_TOL
from solvers.albic.milp.bounds import proven_bound
from solvers.errors import InvalidInput
from solvers.graph_partitioning import balanced_target, symmetric_traffic
from solvers.model import Plan, Problem
from solvers.registry import Param, register

_EPS = 1e-9
#: share of a level's time (what is left but the pure MILP's reserve) that steps 2-3 may use before its MILP
UNITS_SHARE = 0.75


# ---------------------------------------------------------------------------------------------- step 3: pairs
@dataclass
class CollocationUnits:
    """The units handed to the MILP: ``unit_of[k]`` (contiguous ids), node constraints, and bookkeeping."""

    unit_of: np.ndarray
    allowed: dict[int, np.ndarray]
    hint: np.ndarray
    n_set_parts: int
    n_sets: int
    pairs_added: list[tuple[int, int, int, int]]  # (gi, gj, target node, case)
    moves_committed: int
    bytes_committed: float


def build_units(problem: Problem, pairs: Pairs, max_pl_abs: float, *, mc: np.ndarray | None,
                adj: sp.csr_matrix, pairs_per_round: int | None, pair_budget_share: float,
                node_load: np.ndarray, seed: int = 0, pin: str = "paper",
                max_ld_band: float | None = None, order: str = "paper",
                deadline: float | None = None) -> CollocationUnits:
    """Steps 2 and 3 of Algorithm 2 for one maxPL level: collocated sets → parts → units, then constrained pairs.

    Args:
        max_pl_abs: maxPL in load units (≤ 0: pure MILP, every key group its own unit, no pairs).
        mc: migration cost as a share of the budget (see :func:`migration_cost_fraction`), or None.
        pairs_per_round: at most this many new pairs (None = as many as fit).
        pair_budget_share: share of the migration budget the new pairs may force.
        node_load: (n,) current node loads, for "the node with the smallest load" (capacity-normalised).
        pin: ``"paper"`` pins a pair to the node the paper's case picks; ``"either"`` lets the MILP choose between
            the two candidate nodes (the chosen node is the warm start and the budget estimate).
        max_ld_band: when set, a pair is skipped if its forced moves would push an active node's estimated
            utilisation more than ``max_ld_band`` × t away from the target t, or further away if it already is.
            If that skips every pair, the first pair that fits the budget is added anyway (one pair per round, as
            the paper), so collocation never stalls.
        order: ``"paper"`` (highest traffic first, the paper's cases), ``"gain"`` (collocation gained per
            migration, balance-aware) or ``"target"`` (the gain order plus moves towards a whole-graph METIS goal);
            see :mod:`solvers.albic.collocation_moves`, :mod:`solvers.albic.collocation_target`.
        deadline: a :func:`time.perf_counter` time: no METIS partitioning is started that would end after it
            (:func:`metis_fits`), no move is searched for after it (fewer units and pairs, the same guarantees).
    """
    if order not in ORDERS:
        raise InvalidInput("params.pair_order", f"must be one of {list(ORDERS)}, got {order!r}")
    m = problem.n_key_groups
    rng = np.random.default_rng(seed)
    unit_of = np.arange(m, dtype=np.int64)
    members: dict[int, np.ndarray] = {}
    n_parts = 0
    sets: list[np.ndarray] = []
    if max_pl_abs > 0 and len(pairs):
        col = pairs.collocated
        sets = collocated_sets(m, pairs.src[col], pairs.dst[col])
        degree = adj.nnz / max(m, 1)
        for s in sets:
            if not metis_fits(s.size, int(s.size * degree), deadline):
                break  # the sets left keep their key groups as units of one
            for part in split_set(s, problem.load, mc, adj, max_pl_abs, seed=seed):
                n_parts += 1
                if part.size >= 2:
                    uid = int(part[0])
                    unit_of[part] = uid
                    members[uid] = part
    t_util = float(node_load.sum() / problem.capacity[problem.active].sum())
    share = pair_budget_share
    st = PairState(
        problem=problem, adj=adj, unit_of=unit_of, members=members, hint=problem.current.copy(),
        util=node_load / problem.capacity, t_util=t_util,
        band=None if max_ld_band is None else max_ld_band * t_util,
        max_moves=None if problem.max_migrations is None else math.floor(problem.max_migrations * share + _EPS),
        max_bytes=None if problem.max_migration_bytes is None else problem.max_migration_bytes * share, pin=pin,
        goal=balanced_target(problem, adj, seed=seed) if order == "target" and max_pl_abs > 0 and adj.nnz
        and m * problem.n_nodes <= FREE_MOVE_CELLS and metis_fits(m, adj.nnz, deadline) else None,
        deadline=deadline)  # very large instances (or no time for METIS): the gain order's moves
    if order != "paper" and st.band is not None and st.max_moves is not None:
        # balance first: every active node already out of the band needs about one MILP move to come back
        out = int(np.count_nonzero(problem.active & (np.abs(st.util - t_util) > st.band + _EPS)))
        st.max_moves = max(0, st.max_moves - min(out, st.max_moves // 2))
    limit = math.inf if pairs_per_round is None else pairs_per_round
    if max_pl_abs > 0 and (len(pairs) or order != "paper") and limit > 0 and (st.max_moves is None or st.max_moves > 0):
        todo = np.flatnonzero(~pairs.collocated)
        # highest traffic first; ties broken at random ("random from uncolGrps w. max value")
        todo = todo[rng.permutation(todo.size)]
        todo = todo[np.argsort(-pairs.rate[todo], kind="stable")]
        if order != "paper":
            add_pairs_gain(st, pairs.src[todo], pairs.dst[todo], limit)
        else:
            add_pairs_paper(st, todo, pairs.src, pairs.dst, limit)
    unit_of, hint, target, choice, added = st.unit_of, st.hint, st.target, st.choice, st.added
    moves, nbytes = st.moves, st.nbytes
    if order != "paper" and max_pl_abs > 0:  # a balanced warm start from the migrations the pairs left
        balance_hint(st, problem.max_migrations, problem.max_migration_bytes)
    # contiguous unit ids
    uniq, inv = np.unique(unit_of, return_inverse=True)
    allowed = {int(np.searchsorted(uniq, u)): np.array(sorted(choice[u]), dtype=np.int64) for u in target}
    return CollocationUnits(unit_of=inv.astype(np.int64), allowed=allowed, hint=hint, n_set_parts=n_parts,
                            n_sets=len(sets), pairs_added=added, moves_committed=moves, bytes_committed=nbytes)


# ---------------------------------------------------------------------------------------------- step 4: solve
def _feasible_hint(problem: Problem, a: np.ndarray, units: CollocationUnits) -> bool:
    """Whether assignment ``a`` keeps every unit on one node, every pinned unit on an allowed node, and the
    budget — i.e. whether it can warm-start the solve of ``units``."""
    u = units.unit_of
    if u.size:
        first = np.full(int(u.max()) + 1, -1, dtype=np.int64)
        first[u] = a  # any member's node
        if np.any(first[u] != a):
            return False
        for uid, nodes in units.allowed.items():
            if first[uid] not in nodes:
                return False
    return metrics.within_budget(problem, a)


def _solve_grouped() -> Callable[..., Plan]:
    from solvers.albic.milp import solve_grouped  # lazy: OR-tools is imported only when ALBIC runs

    return solve_grouped


def albic(problem: Problem, *, time_limit: float = 1.0, max_ld: float = 10.0, max_pl: float = 25.0,
          step_pl: float = 5.0, score_factor: float = 1.5, pairs_per_round: int | None = None,
          pair_budget_share: float = 1.0, pin: str = "paper", pair_band: float | None = 10.0,
          pair_order: str = "target", backend: str = "cpsat", seed: int = 0) -> Plan:
    """One ALBIC round (Algorithm 2). See the module docstring for the steps and the units of the parameters.

    Returns:
        a :class:`Plan` (status ``heuristic``: ALBIC proves nothing about the unconstrained problem; the MILP's own
        status is in ``details``), whose ``details`` hold the maxPL level used, every attempt's load distance, the
        numbers of sets, parts and new pairs, and the multi-key-group units.
    """
    if step_pl <= 0:
        raise InvalidInput("params.step_pl", f"must be > 0, got {step_pl}")
    solve_grouped = _solve_grouped()  # imported before the clock starts: a first import is not solving time
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    m = problem.n_key_groups
    loads = metrics.node_loads(problem, problem.current)
    n_active = int(problem.active.sum())
    avg_node = float(loads.sum()) / max(n_active, 1)
    pairs = pair_scores(problem, score_factor)
    mc = migration_cost_fraction(problem)
    adj = symmetric_traffic(problem)
    levels = []
    pl = float(max_pl)
    while pl > _EPS:
        levels.append(pl)
        pl -= step_pl
    levels.append(0.0)
    attempts: list[dict[str, Any]] = []
    prev: np.ndarray | None = None
    best: tuple[float, Plan, CollocationUnits, float] | None = None
    chosen = None
    # the paper's last resort, maxPL = 0 (the pure MILP), keeps a quarter of the time: when the levels with
    # collocation use up the rest without meeting maxLD, the loop jumps to it
    reserve = 0.25 * time_limit if len(levels) > 1 else 0.0
    idx = 0
    while idx < len(levels):
        level = levels[idx]
        # the new pairs' share of the budget shrinks with maxPL (full at the first level, none at maxPL = 0), so a
        # retry also frees migrations for balancing (see module docstring, step 4)
        share = pair_budget_share * (level / max_pl if max_pl > 0 else 0.0)
        # the units (and the MILP's warm start) may take UNITS_SHARE of this level's time, the MILP has the rest
        units_deadline = time.perf_counter() + UNITS_SHARE * max(0.0, deadline - time.perf_counter() - reserve)
        units = build_units(problem, pairs, level / 100.0 * avg_node, mc=mc, adj=adj,
                            pairs_per_round=pairs_per_round, pair_budget_share=share,
                            node_load=loads, seed=seed, pin=pin,
                            max_ld_band=None if pair_band is None else pair_band / 100.0, order=pair_order,
                            deadline=units_deadline)
        hint = units.hint
        if prev is not None and _feasible_hint(problem, prev, units) and \
                metrics.load_distance(problem, prev) < metrics.load_distance(problem, hint):
            hint = prev  # warm start from the previous level's plan when it is feasible here and better
        remaining = deadline - time.perf_counter()
        last = idx == len(levels) - 1
        tl = max(0.02, remaining if last else (remaining - reserve) * 0.5)
        plan = solve_grouped(problem, unit_of=units.unit_of, allowed=units.allowed or None, time_limit=tl,
                             backend=backend, hint=hint, seed=seed)
        a = np.asarray(plan.assignment, dtype=np.int64)
        prev = a
        ld = metrics.load_distance(problem, a)
        tgt = metrics.target(problem, metrics.node_loads(problem, a))
        ld_pct = 100.0 * ld / tgt if tgt > 0 else 0.0
        attempts.append({"max_pl": level, "load_distance_pct": round(ld_pct, 4), "status": plan.status,
                         "units": int(units.unit_of.max()) + 1 if m else 0, "new_pairs": len(units.pairs_added),
                         "warm_start": "previous level" if hint is prev and idx else "pins",
                         "seconds": round(float(plan.seconds), 4)})
        if best is None or ld_pct < best[0] - _EPS:
            best = (ld_pct, plan, units, level)
        if ld_pct <= max_ld + _EPS:
            chosen = (ld_pct, plan, units, level)
            break
        if last or time.perf_counter() >= deadline:
            break  # out of time: the best plan so far
        idx += 1
        if deadline - time.perf_counter() <= reserve + 0.02:
            idx = len(levels) - 1  # no time for more levels with collocation: straight to the pure MILP
    if chosen is None:
        chosen = best
    assert chosen is not None
    ld_pct, plan, units, level = chosen
    a = np.asarray(plan.assignment, dtype=np.int64)
    details = _details(problem, units, pairs, attempts, level, max_ld, ld_pct, plan.status)
    # a proven lower bound on the load distance under the same budget: the ungrouped problem's
    # (a grouped solve's bound is one of a restricted problem and may exceed the optimum), from the time left
    lb = proven_bound(problem, seconds=max(0.0, min(0.2 * time_limit, deadline - time.perf_counter())))
    d = metrics.load_distance(problem, a)
    lb = min(lb, d)  # every valid bound is <= the optimum <= d; only float noise can put it above d
    t = metrics.target(problem, metrics.node_loads(problem, a))
    status = "optimal" if d <= lb + OPTIMALITY_TOL * max(t, 1e-300) else "feasible"
    return Plan("albic", a, status=status, lower_bound=float(lb), seconds=time.perf_counter() - t0, details=details)


def _details(problem: Problem, units: CollocationUnits, pairs: Pairs, attempts: list[dict[str, Any]], level: float,
             max_ld: float, ld_pct: float, milp_status: str) -> dict[str, Any]:
    """The plan's ``details``: the level chosen, every attempt, the counts of step 1-3 and the multi-key-group units."""
    groups: dict[int, list[int]] = {}
    counts = np.bincount(units.unit_of, minlength=1) if problem.n_key_groups else np.zeros(0, dtype=np.int64)
    for k in np.flatnonzero(counts[units.unit_of] >= 2):
        groups.setdefault(int(units.unit_of[k]), []).append(int(k))
    return {"max_pl": level, "max_ld": max_ld, "load_distance_pct": round(ld_pct, 4), "milp_status": milp_status,
            "attempts": attempts, "candidate_pairs": len(pairs), "collocated_pairs": int(pairs.collocated.sum()),
            "sets": units.n_sets, "set_parts": units.n_set_parts,
            "new_pairs": [[problem.kg_ids[gi], problem.kg_ids[gj], problem.node_ids[t], case]
                          for gi, gj, t, case in units.pairs_added],
            "units": [[problem.kg_ids[k] for k in g] for g in groups.values()]}


@register(
    "albic",
    "ALBIC (§4.3.2, Algorithm 2): MILP load balancing with integrated collocation — scores pairs, keeps collocated "
    "sets together (METIS-split by maxPL and budget), constrains the top uncollocated pairs onto one node.",
    params=[
        Param("max_ld", float, 10.0, "maxLD: retry with a smaller maxPL above this load distance, percent of the "
              "target utilisation", minimum=0.0),
        Param("max_pl", float, 25.0, "maxPL: initial max load of a collocated part, percent of the average node load",
              minimum=0.0),
        Param("step_pl", float, 5.0, "stepPL: decrease of maxPL per retry (percent points)", minimum=1e-6),
        Param("score_factor", float, 1.5, "sF: a pair scores when out(gi,gj) > sF · avg(gi)", minimum=0.0),
        Param("pairs_per_round", int, None,
              "new pairs constrained per round (null = as many as fit; 1 with pair_order=paper = the paper)",
              minimum=0, nullable=True),
        Param("pair_budget_share", float, 1.0, "share of the migration budget new pairs may use", minimum=0.0,
              maximum=1.0),
        Param("pin", str, "paper", "where a new pair goes: 'paper' = the node of the paper's case (less loaded / "
              "the set's node), 'either' = the MILP picks one of the pair's two nodes", choices=("paper", "either")),
        Param("pair_band", float, 10.0, "skip a new pair whose moves would push a node more than this far from the "
              "target (or further, if it already is), percent of the target utilisation; if that skips every pair "
              "the best one that fits is added anyway (null = no check, as the paper)", minimum=0.0, nullable=True),
        Param("pair_order", str, "target", "which moves first: 'target' = towards a METIS partition of the whole "
              "traffic graph kept across rounds, plus the gain order's pair moves (multi-round view); 'gain' = "
              "collocated traffic per migration, moves that also balance preferred; 'paper' = highest traffic "
              "first, the paper's cases", choices=ORDERS),
        Param("backend", str, "cpsat", "MILP backend passed to solve_grouped", choices=("cpsat", "cbc")),
        Param("seed", int, 0, "seed for METIS and random tie breaks", minimum=0),
    ],
)
def solve(problem: Problem, *, time_limit: float = 1.0, **params: Any) -> Plan:
    return albic(problem, time_limit=time_limit, **params)
