"""``rebalancer plan | evaluate | algorithms | generate``: the planner engine on problem documents."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from cli.common import CLIError, parse_params, positive_float, read_document, seconds_since_start, write_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("plan", help="compute a migration plan for a problem document")
    p.add_argument("--algorithm", default="albic-milp", help="planner name (see `rebalancer algorithms`)")
    p.add_argument("--input", required=True, help="problem document (JSON; - for stdin)")
    p.add_argument("--time-limit", type=positive_float, default=None,
                   help="seconds for the whole command, counted from the process start (default: 1; also --param "
                        "time_limit=SECONDS)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="planner parameter (repeatable; `rebalancer algorithms` lists them)")
    p.add_argument("--output", help="write the plan here instead of stdout")
    p.set_defaults(func=run_plan)

    e = sub.add_parser("evaluate", help="before/after metrics of a plan for a problem")
    e.add_argument("--input", required=True, help="problem document (JSON)")
    e.add_argument("--plan", required=True, help="plan document (JSON)")
    e.set_defaults(func=run_evaluate)

    a = sub.add_parser("algorithms", help="list the planners and their parameters")
    a.add_argument("--json", action="store_true", help="print JSON instead of a table")
    a.set_defaults(func=run_algorithms)

    g = sub.add_parser("generate", help="write a generated problem document")
    gsub = g.add_subparsers(dest="generator", metavar="GENERATOR")
    gsub.required = True
    s = gsub.add_parser("albic-synthetic", help="the ALBIC paper's §5.1 instance")
    s.add_argument("--nodes", type=int, required=True, help="number of nodes")
    s.add_argument("--key-groups-per-node", type=int, default=20, help="key groups placed on each node")
    s.add_argument("--varies", type=float, default=0.5,
                   help="load shift of 20%% of the nodes: half get −varies/2, half +varies/2 (§5.1)")
    s.add_argument("--operators", type=int, default=1, help="operators the key groups are spread over")
    _generator_options(s, max_migrations=None)
    z = gsub.add_parser("skewed", help="Zipf-skewed loads, mixed capacities, nodes marked for removal")
    z.add_argument("--nodes", type=int, required=True, help="number of nodes")
    z.add_argument("--key-groups", type=int, required=True, help="number of key groups")
    z.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent z of the loads (∝ 1/rank^z)")
    z.add_argument("--heterogeneous", action="store_true", help="capacities drawn from {0.5, 1, 2} (default: all 1)")
    z.add_argument("--removing", type=int, default=0, help="the first N nodes are marked for removal")
    _generator_options(z, max_migrations=None)
    c = gsub.add_parser("collocation", help="the ALBIC paper's §5.3 instance with communication between operators")
    c.add_argument("--nodes", type=int, default=40, help="number of nodes")
    c.add_argument("--key-groups-per-node", type=int, default=20, help="key groups placed on each node")
    c.add_argument("--operators", type=int, default=20, help="operators of the topology")
    c.add_argument("--one-to-one", type=float, default=0.5, help="share of key groups with 1-1 communication")
    c.add_argument("--topology", choices=("chain", "pairs"), default="chain",
                   help="operators in one chain, or in independent pairs")
    _generator_options(c, max_migrations=20)
    r = gsub.add_parser("real-job-2", help="the ALBIC paper's §5.4 Real Job 2-like job: two operators keyed alike")
    r.add_argument("--nodes", type=int, default=20, help="number of nodes")
    r.add_argument("--key-groups-per-operator-per-node", type=int, default=5,
                   help="key groups of each of the two operators on each node")
    _generator_options(r, max_migrations=10)


def _generator_options(p: argparse.ArgumentParser, max_migrations: int | None) -> None:
    """The options every generator has: seed, migration budget, output."""
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--max-migrations", type=int, default=max_migrations,
                   help="migration budget" + (" (default: unlimited)" if max_migrations is None else ""))
    p.add_argument("--output", help="write here instead of stdout")
    p.set_defaults(func=run_generate)


#: kept for writing the plan and the interpreter's exit; the least a solve gets when start-up took the whole limit
EXIT_SECONDS, MIN_SOLVE_SECONDS = 0.05, 0.05


def planner_input(args: argparse.Namespace) -> tuple[Any, dict[str, str], float]:
    """The problem of ``--input``, the planner's ``--param``s (checked) and the time limit (``plan``, ``what-if``)."""
    from rebalancer_client import contract as c
    from solvers import documents, registry

    params = parse_params(args.param)
    time_limit = _time_limit(args.time_limit, params.pop("time_limit", None))
    problem = documents.problem_of(read_document(args.input, c.Problem, "problem"))
    registry.get(args.algorithm).validate(params)  # unknown algorithm or parameter -> clear error before any work
    return problem, params, time_limit


def run_plan(args: argparse.Namespace) -> int:
    from solvers import documents, registry

    problem, params, time_limit = planner_input(args)
    # the limit is the whole command's, from the process start: a cold start's imports and reading the input count
    startup, startup_cpu = seconds_since_start(), time.process_time()
    left = max(time_limit - startup - EXIT_SECONDS, MIN_SOLVE_SECONDS)
    plan = registry.solve(args.algorithm, problem, time_limit=min(time_limit, left), **params)
    # where the time went before the solve: the interpreter's start, the imports, reading and checking the input
    plan.details = {**plan.details, "startup_seconds": round(startup, 4), "startup_cpu_seconds": round(startup_cpu, 4)}
    write_json(documents.plan_to_dict(problem, plan), args.output)
    return 0


def _time_limit(option: float | None, param: str | None) -> float:
    """The time limit from ``--time-limit`` or ``--param time_limit=…`` (both listed by ``rebalancer algorithms``)."""
    from solvers import registry

    if param is None:
        return registry.DEFAULT_TIME_LIMIT if option is None else option
    try:
        value = positive_float(param)
    except argparse.ArgumentTypeError as exc:
        raise CLIError(f"--param time_limit: {exc}") from None
    if option is not None and option != value:
        raise CLIError(f"--time-limit {option:g} and --param time_limit={param} disagree: give one")
    return value


def run_evaluate(args: argparse.Namespace) -> int:
    from rebalancer_client import contract as c
    from rebalancer_client.wire import dump
    from solvers import documents

    problem = documents.problem_of(read_document(args.input, c.Problem, "problem"))
    plan = documents.plan_of(problem, read_document(args.plan, c.PlanInput, "plan"))
    write_json(dump(documents.evaluation(problem, plan)))
    return 0


def run_algorithms(args: argparse.Namespace) -> int:
    from solvers import registry

    algos = [registry.get(n).describe() for n in registry.names()]
    if args.json:
        write_json(algos)
        return 0
    for a in algos:
        print(f"{a['name']}: {a['summary']}")
        print(f"    time_limit (float > 0, default {registry.DEFAULT_TIME_LIMIT}): seconds for the whole call "
              "(--time-limit SECONDS or --param time_limit=SECONDS; API: time_limit_s)")
        for p in a["params"]:
            extra = f", one of {p['choices']}" if "choices" in p else ""
            print(f"    {p['name']} ({p['type']}, default {json.dumps(p['default'])}{extra}): {p['help']}")
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from evaluation import collocation_scenarios, generators
    from solvers import documents

    if args.generator == "albic-synthetic":
        problem = generators.albic_synthetic(args.nodes, args.key_groups_per_node, args.varies, args.seed,
                                             args.max_migrations, args.operators)
    elif args.generator == "collocation":
        problem = collocation_scenarios.collocation_synthetic(
            nodes=args.nodes, key_groups_per_node=args.key_groups_per_node, operators=args.operators,
            one_to_one=args.one_to_one, topology=args.topology, max_migrations=args.max_migrations, seed=args.seed)
    elif args.generator == "real-job-2":
        problem = collocation_scenarios.real_job_2(args.nodes, args.key_groups_per_operator_per_node,
                                                   max_migrations=args.max_migrations, seed=args.seed)
    else:
        problem = generators.skewed(args.nodes, args.key_groups, args.zipf, args.heterogeneous, args.removing,
                                    args.seed, args.max_migrations)
    write_json(documents.problem_to_dict(problem), args.output)
    return 0
