"""The house rules of the source tree, checked on every run: no module over 400 lines, no function over 100 lines
(tests excepted), and source that speaks of the project, not of its development history."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("solvers", "controller", "api", "clients", "cli", "evaluation", "benchmarks")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 100
HISTORY = re.compile(r"\b(issue|stop)s? \d+|\b(this|previous|last) stop\b|\bround (one|two|three)\b", re.IGNORECASE)


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations/versions" not in str(p))


def test_no_module_is_over_400_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _sources()}
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_100_lines() -> None:
    long = {}
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize("folder", [*PACKAGES, "docs"])
def test_the_source_speaks_of_the_project_not_its_history(folder: str) -> None:
    files = [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")]
    hits = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:100]}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if HISTORY.search(line)]
    assert not hits, "development history in the source:\n" + "\n".join(hits[:40])
