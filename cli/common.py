"""Helpers shared by the subcommands: reading JSON documents, writing output, parsing KEY=VALUE params."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class CLIError(Exception):
    """A user error on the command line: printed as one line on stderr, exit status 2."""


def seconds_since_start() -> float:
    """Seconds since this process started (the interpreter's start-up and imports included): Linux's
    ``/proc/self/stat`` start time against ``/proc/uptime``, in clock ticks; 0.0 where they cannot be read."""
    import os

    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def read_json(path: str, what: str = "input") -> Any:
    """Read a JSON document from ``path`` (``-`` is stdin); a clear CLIError when missing or malformed."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except FileNotFoundError:
        raise CLIError(f"{what} file not found: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read {what} file {path}: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} file {path} is not valid JSON: {exc.msg} at line {exc.lineno} "
                       f"column {exc.colno}") from None


def read_document(path: str, cls: type[T], what: str) -> T:
    """The JSON file at ``path`` (``-``: stdin) validated as the contract document ``cls`` exactly as the API
    validates a request (:func:`controller.edge.parse`); a CLIError naming the field otherwise."""
    from controller.edge import Invalid, parse

    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise CLIError(f"{what} file not found: {path}") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise CLIError(f"cannot read {what} file {path}: {exc}") from None
    try:
        return parse(cls, raw)
    except Invalid as exc:
        first = exc.items[0]
        if first.field == "body" and first.reason.startswith("invalid JSON"):
            raise CLIError(f"{what} file {path} is not valid JSON: {first.reason[len('invalid JSON: '):]}") from None
        more = f" (and {len(exc.items) - 1} more)" if len(exc.items) > 1 else ""
        raise CLIError(f"{what} file {path}: {first.field}: {first.reason}{more}") from None


def write_json(doc: Any, output: str | None = None) -> None:
    """Write ``doc`` as indented JSON to ``output`` or stdout."""
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if output and output != "-":
        try:
            Path(output).write_text(text)
        except OSError as exc:
            raise CLIError(f"cannot write output file {output}: {exc}") from None
    else:
        sys.stdout.write(text)


def parse_params(items: list[str] | None) -> dict[str, str]:
    """Parse ``--param KEY=VALUE`` items into a dict of strings (the registry coerces types)."""
    params: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--param expects KEY=VALUE, got {item!r}")
        params[key.strip()] = value.strip()
    return params


def _number_type(text: str, integer: bool, minimum: float, strict: bool) -> float:
    import argparse

    try:
        # integers may be written 1e6
        value = float(text) if not integer else (int(float(text)) if "e" in text.lower() else int(text))
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected {'an integer' if integer else 'a number'}, got {text!r}") from None
    if integer and float(text) != value:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    if not math.isfinite(value) or (value <= minimum if strict else value < minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise argparse.ArgumentTypeError(f"must be a finite number {bound}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _number_type(text, integer=False, minimum=0, strict=True)


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _number_type(text, integer=False, minimum=0, strict=False)


def nonnegative_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return int(_number_type(text, integer=True, minimum=0, strict=False))


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (``1e6`` accepted)."""
    return int(_number_type(text, integer=True, minimum=1, strict=False))
