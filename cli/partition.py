"""``rebalancer partition build | route | track``: Gedik's partitioning functions (solvers/gedik).

* ``build --input spec.json``     spec → function document on stdout (:func:`solvers.gedik.build_document`); the
                                  spec is validated as ``POST /v1/partitioning`` validates its body
* ``route --function f.json``     keys on stdin, one per line → channel (0-based) per line on stdout; stdin is read
                                  in large blocks and hashed/looked up with numpy (no Python object per key)
* ``track --input keys.txt --epsilon E [--window W]``  lossy counting (sliding window of W items with 3
                                  counters, §4.1.2) → ``{"frequencies": {...}, ...}`` to feed ``build``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np

from cli.common import CLIError, positive_float, read_document, write_json

CHUNK = 1 << 22  # bytes read per block by route / track (arrays stay below glibc's mmap threshold)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("partition", help="Gedik partitioning functions: build, route keys, track frequencies")
    psub = p.add_subparsers(dest="partition_command", metavar="SUBCOMMAND")
    psub.required = True

    b = psub.add_parser("build", help="build a partitioning function document from a spec")
    b.add_argument("--input", required=True, help="spec (JSON; - for stdin)")
    b.add_argument("--output", help="write the document here instead of stdout")
    b.set_defaults(func=run_build)

    r = psub.add_parser("route", help="route keys (stdin, one per line) to channels (stdout, one per line)")
    r.add_argument("--function", required=True, help="function document (JSON) printed by `partition build`")
    r.set_defaults(func=run_route)

    t = psub.add_parser("track", help="track key frequencies with (sliding) lossy counting")
    t.add_argument("--input", required=True, help="keys, one per line (- for stdin)")
    t.add_argument("--epsilon", type=positive_float, default=0.001, help="lossy counting error ε (default 0.001)")
    t.add_argument("--window", type=int, default=None,
                   help="sliding window of W items emulated with 3 lossy counters (default: whole stream)")
    t.add_argument("--support", type=positive_float, default=None,
                   help="report keys that may have frequency >= SUPPORT (c_a >= (SUPPORT-ε)·n; default 2ε)")
    t.add_argument("--seed", type=int, default=0, help="hash seed used to identify keys (default 0)")
    t.add_argument("--output", help="write here instead of stdout")
    t.set_defaults(func=run_track)


def run_build(args: argparse.Namespace) -> int:
    from rebalancer_client import contract as c
    from rebalancer_client.wire import dump
    from solvers.gedik import build_document

    spec = read_document(args.input, c.PartitioningSpec, "spec")  # as POST /v1/partitioning validates its body
    write_json(dump(build_document(spec)), args.output)
    return 0


def _read_blocks(stream: BinaryIO) -> Iterator[bytes]:
    """Yield blocks of whole lines (bytes) from a binary stream."""
    rest = b""
    while True:
        block = stream.read(CHUNK)
        if not block:
            if rest:
                yield rest
            return
        block = rest + block
        cut = block.rfind(b"\n")
        if cut < 0:
            rest = block
            continue
        rest = block[cut + 1:]
        yield block[: cut + 1]


def _format_channels(ch: np.ndarray, n: int) -> bytes:
    """Channels → b"c\\n" lines, vectorised through a fixed-width byte table."""
    width = len(str(max(n - 1, 0))) + 1
    table = np.zeros((n, width), dtype=np.uint8)
    for c in range(n):
        s = f"{c}\n".encode()
        table[c, : len(s)] = np.frombuffer(s, dtype=np.uint8)
    rows = table[ch]
    out: bytes = rows[rows != 0].tobytes()
    return out


def run_route(args: argparse.Namespace) -> int:
    from rebalancer_client import contract as c
    from solvers.gedik import load_function

    # validated like a request's ``previous`` (a channel count of 0 is a message, not a traceback); the parser costs
    # the start-up about 0.13 s
    fn = load_function(read_document(args.function, c.PartitionFunction, "function"), "function")
    out = sys.stdout.buffer
    for block in _read_blocks(sys.stdin.buffer):
        out.write(_format_channels(fn.route_buffer(block), fn.channels))
    out.flush()
    return 0


def run_track(args: argparse.Namespace) -> int:
    from solvers.gedik import LossyCounter, SlidingLossyCounter
    from solvers.gedik._hash import hash_spans, split_lines

    eps = args.epsilon
    if eps >= 1:
        raise CLIError("--epsilon must be < 1")
    if args.window is not None and args.window < 2:
        raise CLIError("--window must be >= 2")
    support = args.support if args.support is not None else 2 * eps
    counter = SlidingLossyCounter(eps, args.window) if args.window else LossyCounter(eps)
    names: dict[int, str] = {}
    total = 0
    try:
        stream = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")
    except OSError as exc:
        raise CLIError(f"cannot read input file {args.input}: {exc}") from None
    with stream:
        for block in _read_blocks(stream):
            starts, lengths = split_lines(block)
            h = hash_spans(block, starts, lengths, args.seed)
            counter.update(h)
            total += len(h)
            # remember a name for every key currently held (new entries only)
            held = counter.active.keys if isinstance(counter, SlidingLossyCounter) else counter.keys
            if isinstance(counter, SlidingLossyCounter):
                held = np.unique(np.concatenate([c.keys for c in counter.counters]))
            unknown = held[~np.isin(held, np.fromiter(names.keys(), dtype=np.uint64, count=len(names)))]
            if len(unknown):
                u, first = np.unique(h, return_index=True)
                pos = np.searchsorted(u, unknown)
                ok = (pos < len(u))
                ok[ok] = u[pos[ok]] == unknown[ok]
                for hv, i in zip(unknown[ok].tolist(), first[pos[ok]].tolist(), strict=True):
                    names[hv] = block[starts[i]: starts[i] + lengths[i]].decode("utf-8", "replace")
            if len(names) > 4 * max(len(held), 1) + 1024:  # forget names of evicted keys
                keep = set(held.tolist())
                names = {k: v for k, v in names.items() if k in keep}
    keys, est = counter.frequent(support)
    order = np.argsort(-est, kind="stable")
    freqs = {names[int(keys[i])]: float(est[i]) for i in order if int(keys[i]) in names}
    doc = {
        "frequencies": freqs,
        "epsilon": eps,
        "support": support,
        "window": getattr(counter, "window", None) if args.window else None,
        "stream_length": total,
        "counted_items": int(counter.n),
        "counter_entries": len(counter),
    }
    write_json(doc, args.output)
    return 0
