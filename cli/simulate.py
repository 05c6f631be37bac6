"""``rebalancer simulate``: run one stream grouping on a synthetic or recorded stream in the offline simulator.

Example::

    rebalancer simulate --grouping pkg --workers 10 --sources 5 --stream zipf --zipf 1.2 --keys 10000 \\
        --messages 1000000 --seed 1 --json

prints one JSON object with ``imbalance``, ``imbalance_normalized``, ``replication``, ``worker_loads``,
``messages``, ``seconds`` and the queue-model metrics (latency percentiles, queue and utilisation spread,
throughput at saturation). ``--series`` adds the time series. A progress bar goes to stderr for runs of
≥ 1M messages (``--progress`` / ``--no-progress`` to force).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any

from cli.common import CLIError, nonnegative_float, parse_params, positive_float, positive_int, write_json
from solvers.errors import InvalidInput

if TYPE_CHECKING:
    from evaluation.simulator.streams import Stream

STREAMS = ("zipf", "skewed", "drift", "file")


def parse_capacities(items: list[str] | None, workers: int) -> list[float] | None:
    """``--capacities`` values: numbers separated by spaces or commas; ``V*K`` repeats V K times
    (``5*3 1*7`` = three workers of capacity 5 and seven of capacity 1)."""
    if not items:
        return None
    caps: list[float] = []
    for item in items:
        for tok in item.replace(",", " ").split():
            value, star, count = tok.partition("*")
            try:
                v = float(value)
                k = int(count) if star else 1
            except ValueError:
                raise CLIError(f"--capacities: cannot read {tok!r} (use numbers or VALUE*COUNT)") from None
            if not math.isfinite(v) or v <= 0 or k < 1:
                raise CLIError(f"--capacities: {tok!r} must be a positive capacity (and a count >= 1)")
            caps.extend([v] * k)
    if len(caps) != workers:
        raise CLIError(f"--capacities lists {len(caps)} capacities for {workers} workers")
    return caps


def coerce_params(grouping: str, raw: dict[str, str]) -> dict[str, Any]:
    """Turn ``--param KEY=VALUE`` strings into the types of the grouping's defaults."""
    from solvers.groupings import grouping_params

    defaults = grouping_params(grouping)
    out: dict[str, Any] = {}
    for key, text in raw.items():
        if key not in defaults:
            raise InvalidInput(f"params.{key}", f"unknown parameter for {grouping}; known: {sorted(defaults)}")
        default = defaults[key]
        try:
            if isinstance(default, bool):
                out[key] = text.lower() in ("1", "true", "yes", "on")
            elif isinstance(default, int):
                out[key] = int(text)
            elif isinstance(default, float):
                out[key] = float(text)
            elif text.lower() in ("none", "null", ""):
                out[key] = None
            else:
                try:
                    out[key] = int(text)
                except ValueError:
                    out[key] = float(text)
        except ValueError:
            raise InvalidInput(f"params.{key}", f"expected a value like {default!r}, got {text!r}") from None
    return out


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from solvers.groupings import GROUPING_NAMES

    p = subparsers.add_parser(
        "simulate",
        help="simulate a stream grouping (KG, PKG, D-Choices, DKG, CG, ...) on a stream",
        description="Route a stream with a grouping from the papers through s sources to n workers with a "
                    "queue model; print imbalance, replication, worker loads, latency and throughput.",
    )
    p.add_argument("--grouping", required=True, type=str.lower, choices=GROUPING_NAMES, metavar="NAME",
                   help=f"one of: {', '.join(GROUPING_NAMES)}")
    p.add_argument("--workers", required=True, type=positive_int, help="number of workers n")
    p.add_argument("--sources", type=positive_int, default=5, help="number of sources s (default 5)")
    p.add_argument("--stream", choices=STREAMS, default="zipf", help="stream kind (default zipf)")
    p.add_argument("--zipf", type=nonnegative_float, default=1.0, help="Zipf exponent z (zipf, drift; default 1.0)")
    p.add_argument("--keys", type=positive_int, default=10_000, help="number of distinct keys (default 10^4)")
    p.add_argument("--messages", type=positive_int, default=None,
                   help="messages (default 10^6; for --stream file: the whole file)")
    p.add_argument("--hot-share", type=nonnegative_float, default=0.5,
                   help="skewed stream: share of the hot key in [0, 1] (default 0.5)")
    p.add_argument("--phases", type=positive_int, default=4, help="drift stream: number of phases (default 4)")
    p.add_argument("--keys-file", help="file stream: one key per line")
    p.add_argument("--capacities", nargs="+", metavar="C",
                   help="worker capacities (numbers, or VALUE*COUNT), default all 1")
    p.add_argument("--service-rate", type=positive_float, default=1000.0,
                   help="messages per simulated second per unit of capacity (default 1000)")
    p.add_argument("--load", type=positive_float, default=0.8,
                   help="arrival rate as a fraction of the total service rate (default 0.8)")
    p.add_argument("--arrival-rate", type=positive_float, help="arrival rate in messages/s (overrides --load)")
    p.add_argument("--tick", type=positive_float, default=1.0, help="simulated seconds per tick (default 1)")
    p.add_argument("--param", action="append", metavar="KEY=VALUE",
                   help="grouping parameter (repeatable), e.g. --param eps=0.3")
    p.add_argument("--seed", type=int, default=0, help="seed of the stream and the hash functions (default 0)")
    p.add_argument("--json", action="store_true", help="print the full JSON result")
    p.add_argument("--series", action="store_true", help="include the time series in the JSON")
    p.add_argument("--output", "-o", help="write the JSON here instead of stdout")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="always show a progress bar on stderr")
    prog.add_argument("--no-progress", dest="progress", action="store_false", help="never show it")
    p.set_defaults(func=run)


def build_stream(args: argparse.Namespace) -> Stream:
    from evaluation.simulator import DriftingStream, FileStream, SkewedStream, ZipfStream

    messages = args.messages if args.messages is not None else 1_000_000
    if args.stream == "zipf":
        return ZipfStream(args.zipf, args.keys, messages, seed=args.seed)
    if args.stream == "skewed":
        if args.keys < 2:
            raise CLIError("--keys must be >= 2 for the skewed stream")
        if args.hot_share > 1:
            raise CLIError("--hot-share must be in [0, 1]")
        return SkewedStream(args.hot_share, args.keys, messages, seed=args.seed)
    if args.stream == "drift":
        return DriftingStream(args.zipf, args.keys, messages, phases=args.phases, seed=args.seed)
    if not args.keys_file:
        raise CLIError("--stream file needs --keys-file PATH")
    return FileStream(args.keys_file, messages=args.messages)


def run(args: argparse.Namespace) -> int:
    from evaluation.simulator import SimulationConfig, simulate

    stream = build_stream(args)
    caps = parse_capacities(args.capacities, args.workers)
    params = coerce_params(args.grouping, parse_params(args.param))
    progress = args.progress if args.progress is not None else stream.n_messages >= 1_000_000
    config = SimulationConfig(
        grouping=args.grouping, workers=args.workers, sources=args.sources, capacities=caps, seed=args.seed,
        params=params, service_rate=args.service_rate, load=args.load, arrival_rate=args.arrival_rate,
        tick=args.tick, progress=progress,
    )
    result = simulate(stream, config)
    if not args.series:
        result.pop("series", None)
    if args.json or args.output:
        write_json(result, args.output)
        return 0
    lat = result["latency"]
    lines = [
        f"grouping {result['grouping']}: {result['messages']} messages, {result['keys_seen']} keys, "
        f"{result['sources']} sources -> {result['workers']} workers",
        f"  imbalance            {result['imbalance']:.6g}   (normalised {result['imbalance_normalized']:.6g})",
        f"  replication          {result['replication']:.4f} workers per key",
        f"  worker loads         {result['worker_loads']}",
        f"  latency p50/p99/max  {lat['p50']:.4g} / {lat['p99']:.4g} / {lat['max']:.4g} s (simulated)",
        f"  saturation           {result['throughput_at_saturation']['relative']:.4f} of total capacity",
        f"  wall time            {result['seconds']:.3f} s ({result['routing_rate'] or 0:,.0f} msg/s routed)",
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
