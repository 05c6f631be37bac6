"""``rebalancer what-if``: what-if scaling offline, the engine of ``POST /v1/what-if/scaling`` without a server.

``rebalancer what-if --input problem.json --candidates 8 10 '{"add": ["w20"]}' [--target D]
[--max-utilisation U] [--algorithm A] [--time-limit T] [--param KEY=VALUE]`` rebalances the problem's cluster
resized to each candidate (a node count, or an explicit ``{"add": [...], "remove": [...]}``) with the planner and
prints the what-if document of :mod:`solvers.scaling`: per candidate the load distance and utilisation after a full
rebalance, the migrations and bytes, the rounds that takes under the problem's budget, whether it meets the goal,
and the recommended candidate. Candidates are solved one after the other, each within the time limit.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from cli.common import CLIError, nonnegative_float, positive_float, write_json


def candidate(text: str) -> Any:
    """argparse type: a node count (``8``) or a change as JSON (``{"add": ["w9"], "remove": ["w0"]}``)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"expected a node count or a JSON object, got {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | dict):
        raise argparse.ArgumentTypeError(f"expected a node count or a JSON object, got {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("what-if", help="what-if scaling: rebalance the cluster at other sizes (offline)",
                       description="Rebalance the problem's cluster resized to each candidate and recommend the "
                                   "smallest that meets the goal (the engine of POST /v1/what-if/scaling).")
    p.add_argument("--input", required=True, help="problem document (JSON; - for stdin)")
    p.add_argument("--candidates", required=True, nargs="+", type=candidate, metavar="CANDIDATE",
                   help='node counts and/or changes as JSON, e.g. 8 10 \'{"add": ["w20"], "remove": ["w0"]}\'')
    p.add_argument("--target", type=nonnegative_float, default=None,
                   help="the load distance a candidate must reach (default: the current one)")
    p.add_argument("--max-utilisation", type=positive_float, default=None,
                   help="no node's utilisation above this (default: the hottest node's today)")
    p.add_argument("--algorithm", default="albic-milp", help="planner name (see `rebalancer algorithms`)")
    p.add_argument("--time-limit", type=positive_float, default=None,
                   help="seconds per candidate (default: the planner's default)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="planner parameter (repeatable)")
    p.add_argument("--output", help="write the document here instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cli.plan import planner_input
    from solvers import documents, registry, scaling

    problem, params, time_limit = planner_input(args)
    variants = [scaling.variant(problem, j, c) for j, c in enumerate(args.candidates)]
    if not variants:
        raise CLIError("--candidates: give at least one")
    plans = [documents.plan_to_dict(v.problem, registry.solve(args.algorithm, v.problem, time_limit=time_limit,
                                                              **params))
             for v in variants]
    write_json(scaling.report(problem, args.candidates, variants, plans, args.algorithm, args.target,
                              args.max_utilisation), args.output)
    return 0
