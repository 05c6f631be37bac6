"""The runnable blocks of the README and the documentation, found and run as a reader would run them.

A block is runnable when the line before its opening fence is ``<!-- runnable -->`` (every command must exit 0)
or ``<!-- runnable: exit N -->`` (the last command must exit N, the others 0), and the fence is ```` ```console ````.
In the block, a line starting with ``$ `` is a command; it goes on over the next lines while it ends with ``\\`` or
leaves a quotation open; the other lines are the printed output (shown to the reader, not compared).

:func:`run_page` runs every runnable block of one page, in order, in one bash (so a variable set or a file written
by one command is there for the next), in a given folder and environment, and returns the first command that did
not end as expected (or None).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^<!--\s*runnable(?::\s*exit\s+(\d+))?\s*-->\s*$")


@dataclass
class Command:
    text: str
    line: int            # line of the page where the command starts
    expected_exit: int = 0


@dataclass
class Block:
    page: Path
    line: int            # line of the opening fence
    commands: list[Command]


@dataclass
class Failure:
    page: Path
    block_line: int
    command: Command
    exit_status: int
    output: str

    def __str__(self) -> str:
        return (f"{self.page}:{self.command.line} (block at line {self.block_line}): `{self.command.text}` exited "
                f"{self.exit_status}, expected {self.command.expected_exit}\n{self.output[-3000:]}")


def _complete(command: str) -> bool:
    if command.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(command)
    except ValueError:  # an open quotation: the command goes on
        return False
    return True


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of a Markdown page, in order."""
    lines = page.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i].strip())
        if not marker:
            i += 1
            continue
        fence = i + 1
        if fence >= len(lines) or lines[fence].strip() != "```console":
            raise ValueError(f"{page}:{i + 1}: a runnable marker must stand right above a ```console block")
        commands: list[Command] = []
        j = fence + 1
        current: list[str] = []
        start = 0
        while j < len(lines) and lines[j].strip() != "```":
            text = lines[j]
            if current:
                current.append(text)
            elif text.startswith("$ "):
                current, start = [text[2:]], j + 1
            if current and _complete("\n".join(current)):
                commands.append(Command("\n".join(current), start))
                current = []
            j += 1
        if current:
            raise ValueError(f"{page}:{start}: the command does not end before the block does")
        if not commands:
            raise ValueError(f"{page}:{fence + 1}: a runnable block without a command")
        if marker.group(1) is not None:
            commands[-1].expected_exit = int(marker.group(1))
        out.append(Block(page, fence + 1, commands))
        i = j + 1
    return out


def script(page_blocks: list[Block], status_dir: Path) -> str:
    """One bash script for a page: each command's output in ``status_dir/<n>.out``, its status in ``<n>.rc``;
    the script stops at the first command that does not end as expected."""
    parts = ["set -o pipefail"]
    n = 0
    for block in page_blocks:
        for command in block.commands:
            out, rc = status_dir / f"{n}.out", status_dir / f"{n}.rc"
            parts.append(f"{{\n{command.text}\n}} > {shlex.quote(str(out))} 2>&1 < /dev/null")
            parts.append(f"__rc=$?; echo $__rc > {shlex.quote(str(rc))}; "
                         f"[ $__rc -eq {command.expected_exit} ] || exit 97")
            n += 1
    return "\n".join(parts) + "\n"


def run_page(page_blocks: list[Block], cwd: Path, env: dict[str, str], timeout: float = 600) -> Failure | None:
    """Run a page's runnable blocks in ``cwd``; the first command that did not end as expected, or None."""
    status_dir = cwd / ".runnable-status"
    status_dir.mkdir(exist_ok=True)
    proc = subprocess.run(["bash", "-c", script(page_blocks, status_dir)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    n = 0
    for block in page_blocks:
        for command in block.commands:
            rc_file = status_dir / f"{n}.rc"
            if not rc_file.exists():
                return Failure(block.page, block.line, command, proc.returncode,
                               f"(not run: the script ended with {proc.returncode})\n{proc.stderr}")
            status = int(rc_file.read_text())
            if status != command.expected_exit:
                return Failure(block.page, block.line, command, status, (status_dir / f"{n}.out").read_text())
            n += 1
    return None
