"""Every runnable block of README.md and docs/**/*.md runs as printed (see tests/docs/runnable.py for the marker).

Each page runs in its own temporary folder holding a copy of docs/examples/ (the files the examples read), with
the project's virtualenv first on PATH and ``REBALANCER_URL``/``PORT`` pointing at a controller started for the
test on a free port; a command that fails names the page, the line and the command, with its output.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from runnable import blocks, run_page  # noqa: E402

from tests.helpers.server import ThreadServer  # noqa: E402

#: slow: each page runs its commands in fresh processes (a shell, the CLI, curl, Python) — ~45 s of CPU in all
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNABLE = [page for page in PAGES if blocks(page)]
TOOLS = ("bash", "jq", "curl")


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    db = tmp_path_factory.mktemp("docs-controller") / "rebalancer.db"
    with ThreadServer(f"sqlite:///{db}") as server:
        yield server


def environment(server: ThreadServer) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REBALANCER_")}
    env.update({"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                "REBALANCER_URL": server.url, "PORT": str(server.port), "PYTHONPATH": str(ROOT)})
    return env


def test_some_pages_have_runnable_blocks() -> None:
    names = {page.name for page in RUNNABLE}
    assert {"quickstart.md", "operations.md"} <= names, names


@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_runnable_blocks_run_as_printed(page: Path, controller: ThreadServer, tmp_path: Path) -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert not missing, f"the documentation's examples need {missing} (Debian: apt-get install {' '.join(missing)})"
    shutil.copytree(ROOT / "docs" / "examples", tmp_path, dirs_exist_ok=True)
    failure = run_page(blocks(page), tmp_path, environment(controller))
    assert failure is None, str(failure)


def test_a_failing_command_is_reported_with_its_page_line_and_output(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- runnable -->\n```console\n$ echo one > f.txt\n$ cat f.txt \\\n    missing.txt\n"
                    "one\n$ echo never\n```\n<!-- runnable: exit 3 -->\n```console\n$ sh -c 'exit 3'\n```\n")
    found = blocks(page)
    assert [[c.text for c in b.commands] for b in found] == [
        ["echo one > f.txt", "cat f.txt \\\n    missing.txt", "echo never"], ["sh -c 'exit 3'"]]
    assert found[1].commands[0].expected_exit == 3
    failure = run_page(found, tmp_path, dict(os.environ))
    assert failure is not None and failure.command.line == 5 and failure.exit_status == 1, failure
    assert "missing.txt" in str(failure) and f"{page}:5" in str(failure)


def test_quotes_span_lines_and_expected_exits_are_checked(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- runnable: exit 3 -->\n```console\n$ X=$(echo 'a\nb')\n$ test \"$X\" = 'a\nb'\n"
                    "$ sh -c 'exit 4'\n```\n")
    found = blocks(page)
    assert len(found[0].commands) == 3
    failure = run_page(found, tmp_path, dict(os.environ))
    assert failure is not None and failure.exit_status == 4 and failure.command.expected_exit == 3, failure
