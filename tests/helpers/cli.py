"""Run the ``rebalancer`` command in process: ``cli.main.main(argv)`` with its own stdin, stdout, stderr, environment
and working directory, returning a :class:`subprocess.CompletedProcess` as ``subprocess.run(…, capture_output=True)``
does (so a test written against a subprocess switches by changing one call). No interpreter start, no imports
repeated: a CLI test costs milliseconds instead of a second or two.

    from tests.helpers.cli import run_cli
    r = run_cli("plan", "--algorithm", "flux", "--input", "p.json")            # text, like text=True
    r = run_cli("partition", "route", "f.json", stdin=b"a\\nb\\n", text=False)  # bytes, like text=False

Exit statuses are those of the real command: ``main``'s return value, or ``SystemExit``'s code (argparse errors: 2).
An exception the command does not handle propagates to the test (a subprocess would print a traceback and exit 1).
Use a real subprocess only where the process matters (signals, a server that listens, a crash).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: str | Path | None) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(saved_env)


def _text_stream(data: bytes = b"") -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="", write_through=True)


def run_cli(*args: str, stdin: str | bytes | None = None, text: bool = True, env: Mapping[str, str] | None = None,
            cwd: str | Path | None = None) -> subprocess.CompletedProcess[Any]:
    """``rebalancer *args`` in this process; ``env`` replaces the environment (as ``subprocess.run(env=…)``)."""
    from cli.main import main

    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    fin, fout, ferr = _text_stream(data), _text_stream(), _text_stream()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = fin, fout, ferr
    try:
        with _environment(env, cwd):
            try:
                code = main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if exc.code is not None and not isinstance(exc.code, int):
                    print(exc.code, file=sys.stderr)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    outs = []
    for f in (fout, ferr):
        f.flush()
        raw = f.buffer.getvalue()  # type: ignore[attr-defined]
        outs.append(raw.decode("utf-8", errors="replace") if text else raw)
    return subprocess.CompletedProcess(["rebalancer", *args], int(code or 0), outs[0], outs[1])
