"""``rebalancer plan | evaluate | algorithms | generate``: the planner engine on problem documents."""

from __future__ import annotations

import argparse
import json

from cli.common import parse_params, positive_float, read_json, write_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="compute a migration plan for a problem document")
    p.add_argument("--algorithm", default="albic-milp", help="planner name (see `rebalancer algorithms`)")
    p.add_argument("--input", required=True, help="problem document (JSON; - for stdin)")
    p.add_argument("--time-limit", type=positive_float, default=1.0, help="seconds for the whole call (default 1)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE", help="planner parameter (repeatable)")
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
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--key-groups-per-node", type=int, default=20)
    s.add_argument("--varies", type=float, default=0.5)
    s.add_argument("--operators", type=int, default=1)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-migrations", type=int, default=None)
    s.add_argument("--output", help="write here instead of stdout")
    s.set_defaults(func=run_generate)
    z = gsub.add_parser("skewed", help="Zipf-skewed loads, mixed capacities, nodes marked for removal")
    z.add_argument("--nodes", type=int, required=True)
    z.add_argument("--key-groups", type=int, required=True)
    z.add_argument("--zipf", type=float, default=1.0)
    z.add_argument("--heterogeneous", action="store_true")
    z.add_argument("--removing", type=int, default=0)
    z.add_argument("--seed", type=int, default=0)
    z.add_argument("--max-migrations", type=int, default=None)
    z.add_argument("--output", help="write here instead of stdout")
    z.set_defaults(func=run_generate)
    c = gsub.add_parser("collocation", help="the ALBIC paper's §5.3 instance with communication between operators")
    c.add_argument("--nodes", type=int, default=40)
    c.add_argument("--key-groups-per-node", type=int, default=20)
    c.add_argument("--operators", type=int, default=20)
    c.add_argument("--one-to-one", type=float, default=0.5, help="share of key groups with 1-1 communication")
    c.add_argument("--topology", choices=("chain", "pairs"), default="chain")
    c.add_argument("--max-migrations", type=int, default=20)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--output", help="write here instead of stdout")
    c.set_defaults(func=run_generate)
    r = gsub.add_parser("real-job-2", help="the ALBIC paper's §5.4 Real Job 2-like job: two operators keyed alike")
    r.add_argument("--nodes", type=int, default=20)
    r.add_argument("--key-groups-per-operator-per-node", type=int, default=5)
    r.add_argument("--max-migrations", type=int, default=10)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--output", help="write here instead of stdout")
    r.set_defaults(func=run_generate)


def run_plan(args: argparse.Namespace) -> int:
    from solvers import registry
    from solvers.model import Problem, plan_to_dict

    params = parse_params(args.param)
    problem = Problem.from_dict(read_json(args.input, "problem"))
    algo = registry.get(args.algorithm)  # unknown algorithm -> clear error before any work
    algo.validate(params)
    plan = registry.solve(args.algorithm, problem, time_limit=args.time_limit, **params)
    write_json(plan_to_dict(problem, plan), args.output)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from solvers import metrics
    from solvers.model import Problem, plan_from_dict

    problem = Problem.from_dict(read_json(args.input, "problem"))
    plan = plan_from_dict(problem, read_json(args.plan, "plan"))
    doc = metrics.plan_metrics(problem, plan.assignment)
    doc["within_budget"] = metrics.within_budget(problem, plan.assignment)
    write_json(doc)
    return 0


def run_algorithms(args: argparse.Namespace) -> int:
    from solvers import registry

    algos = [registry.get(n).describe() for n in registry.available_names()]
    if args.json:
        write_json(algos)
        return 0
    for a in algos:
        print(f"{a['name']}: {a['summary']}")
        print("    time_limit (float, default 1.0): seconds for the whole call")
        for p in a["params"]:
            extra = f", one of {p['choices']}" if "choices" in p else ""
            print(f"    {p['name']} ({p['type']}, default {json.dumps(p['default'])}{extra}): {p['help']}")
    return 0


def run_generate(args: argparse.Namespace) -> int:
    from evaluation import collocation_scenarios, generators

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
    write_json(problem.to_dict(), args.output)
    return 0
