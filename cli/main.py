"""Entry point of the ``rebalancer`` console script.

Every subcommand lives in its own module of this package and exposes ``register(subparsers)``, which adds its
parser and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an exit status).
Each command module imports its heavy dependencies (pyspark, OR-tools, the server) inside its ``func``, so listing
the commands stays cheap; an import error of a command module itself is a broken installation and surfaces.

Conventions: documents go to stdout and nothing else does; logs and progress go to stderr. Invalid input raises
:class:`cli.common.CLIError` or :class:`solvers.errors.InvalidInput` and ends with one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, NoReturn

from cli.common import CLIError
from solvers.errors import InvalidInput

#: subcommand modules, in the order ``--help`` lists them
COMMAND_MODULES = [
    "cli.plan",        # plan, evaluate, algorithms, generate
    "cli.partition",   # partition build | route | track  (Gedik)
    "cli.simulate",    # simulate (stream groupings)
    "cli.serve",       # serve (the controller)
    "cli.db",          # db current | upgrade | history (schema migrations)
    "cli.spark",       # spark-stats (PySpark statistics pipeline)
    "cli.whatif",      # what-if (scaling, offline)
]

#: commands whose start-up counts against a user's time limit: only their own module is imported for them
COMMAND_OWNER = {"plan": "cli.plan"}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help states its default once: appended as ``(default: X)`` unless the help already says it
    (or there is none: ``None``, a flag's ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS \
                or "default" in text.lower():
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """The parser of the command and of every subcommand (``add_subparsers`` reuses the parser's class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def version() -> str:
    """The installed distribution's version (``pip install -e .`` / ``make`` install it)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("rebalancer-server")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (the rebalancer-server distribution is not installed)"


class VersionAction(argparse.Action):
    """``--version``: the distribution's version, looked up (importlib.metadata) only when asked for."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"{parser.prog} {version()}")
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every command; for a command of ``COMMAND_OWNER`` named first in ``argv``, only its module's."""
    parser = Parser(
        prog="rebalancer",
        description="Rebalancing controller for stateful stream and micro-batch processing.",
    )
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    first = next((a for a in argv or [] if not a.startswith("-")), None)
    for name in [COMMAND_OWNER[first]] if first in COMMAND_OWNER else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # One BLAS thread unless the user chose: the planners use no dense linear algebra, and OpenBLAS creates and
    # sizes a buffer for one thread per core when numpy loads — 75 ms of a cold `rebalancer plan` on 2 cores
    # (start-up 0.34 → 0.27 s, median of 7), more with more cores. Set before any command imports numpy.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args_list = sys.argv[1:] if argv is None else argv
    if next((a for a in args_list if not a.startswith("-")), None) in COMMAND_OWNER:
        # pydantic looks for plugins (a scan of every installed distribution's entry points) when it builds its
        # first validator: ~10 ms of CPU of a cold `rebalancer plan` (median of 15 paired runs), counted against the
        # time limit, for plugins (observability) a planning command has no use for. Unless the user chose.
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    parser = build_parser(args_list)
    args = parser.parse_args(argv)
    code = _run(args)
    if argv is None and args.command in DEADLINE_COMMANDS:
        _exit_now(code)
    return code


#: the planning commands: a user waits for their time limit (``plan`` counts it from the process's start to its
#: exit, keeping ``EXIT_SECONDS`` of it for the exit)
DEADLINE_COMMANDS = frozenset({"plan", "what-if"})


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except (CLIError, InvalidInput) as exc:
        print(f"rebalancer {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `rebalancer partition route ... | head`
        return 0
    except KeyboardInterrupt:
        return 130


def _exit_now(code: int) -> NoReturn:
    """End the process without the interpreter's teardown (freeing every module's objects: ~25 ms on an idle 2-core
    machine, ~0.1 s under a load of 2 × cores, after the plan is written). The output is complete: it is flushed
    here, and an ``--output`` file is closed when written. Only for a command run as the process's own (``argv``
    taken from ``sys.argv``); in process (tests, embedding) ``main`` returns."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
