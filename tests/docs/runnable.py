"""The runnable blocks of the README and the documentation, found and run as a reader would run them.

A block is runnable when the line before its opening fence is ``<!-- runnable -->`` (every command must exit 0)
or ``<!-- runnable: exit N -->`` (the last command must exit N, the others 0), and the fence is ```` ```console ````.
In the block, a line starting with ``$ `` is a command; it goes on over the next lines while it ends with ``\\``,
leaves a quotation open or a here-document (``<<'EOF'``) is not closed; the other lines are its printed output, compared with what it prints: line by line, ``…``
standing for any text (a line of ``…`` alone: any number of lines). Print what stays the same from run to run (a
``jq`` filter that leaves out ids and seconds) or elide it with ``…``.

``<!-- runnable: output varies -->`` marks a block whose output depends on the machine's speed (a planner's result
within its time limit): it must run, its output is not compared.

``python tests/docs/runnable.py --write PAGE`` runs a page against ``$REBALANCER_URL`` and writes each command's
actual output into the page, so printed numbers are generated, not typed (elide what varies afterwards).

:func:`run_page` runs every runnable block of one page, in order, in one bash (so a variable set or a file written
by one command is there for the next), in a given folder and environment, and returns the first command that did
not end as expected (or None).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^<!--\s*runnable(?::\s*exit\s+(\d+))?(:\s*output varies)?\s*-->\s*$")


@dataclass
class Command:
    text: str
    line: int            # line of the page where the command starts
    expected_exit: int = 0
    printed: list[str] = field(default_factory=list)   # the output shown under it
    printed_at: tuple[int, int] = (0, 0)                # its lines in the page (0-based, end exclusive)


@dataclass
class Block:
    page: Path
    line: int            # line of the opening fence
    commands: list[Command]
    compared: bool = True  # its commands' printed output is compared with what they print


@dataclass
class Failure:
    page: Path
    block_line: int
    command: Command
    exit_status: int
    output: str

    mismatch: str = ""

    def __str__(self) -> str:
        where = f"{self.page}:{self.command.line} (block at line {self.block_line}): `{self.command.text}`"
        if self.mismatch:
            return f"{where} printed something else: {self.mismatch}\n--- it printed:\n{self.output[-3000:]}"
        return (f"{where} exited {self.exit_status}, expected {self.command.expected_exit}\n"
                f"{self.output[-3000:]}")


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.rstrip().split("…")))


def compare(printed: list[str], actual: list[str]) -> str:
    """Empty when ``actual`` matches the ``printed`` lines (``…`` any text; a ``…`` line any lines), else why."""
    i = j = 0
    while i < len(printed):
        if printed[i].strip() == "…":
            if i + 1 == len(printed):
                return ""
            nxt = _pattern(printed[i + 1])
            while j < len(actual) and not nxt.fullmatch(actual[j].rstrip()):
                j += 1
            i += 1
            continue
        if j >= len(actual):
            return f"line {i + 1} of the printed output ({printed[i]!r}) is missing"
        if not _pattern(printed[i]).fullmatch(actual[j].rstrip()):
            return f"line {i + 1}: printed {printed[i]!r}, got {actual[j]!r}"
        i, j = i + 1, j + 1
    extra = [a for a in actual[j:] if a.strip()]
    return f"{len(extra)} more lines than printed, from {extra[0]!r}" if printed and extra else ""


HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


def _complete(command: str) -> bool:
    heredoc = HEREDOC.search(command.splitlines()[0])
    if heredoc:  # a here-document: the command ends at its delimiter line
        lines = command.splitlines()
        return len(lines) > 1 and lines[-1].strip() == heredoc.group(1)
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
            elif commands:
                last = commands[-1]
                last.printed.append(text)
                last.printed_at = (last.printed_at[0] or j, j + 1)
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
        out.append(Block(page, fence + 1, commands, compared=marker.group(2) is None))
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
            output = (status_dir / f"{n}.out").read_text()
            if status != command.expected_exit:
                return Failure(block.page, block.line, command, status, output)
            mismatch = compare(command.printed, output.splitlines()) if block.compared else ""
            if mismatch:
                return Failure(block.page, block.line, command, status, output, mismatch)
            n += 1
    return None


def write(page: Path, cwd: Path, env: dict[str, str]) -> None:
    """Run ``page``'s runnable blocks and write each command's actual output under it in the page."""
    page_blocks = blocks(page)
    status_dir = cwd / ".runnable-status"
    status_dir.mkdir(exist_ok=True)
    subprocess.run(["bash", "-c", script(page_blocks, status_dir)], cwd=cwd, env=env, timeout=600)
    lines = page.read_text().splitlines()
    edits: list[tuple[int, int, list[str]]] = []
    n = 0
    for block in page_blocks:
        for command in block.commands:
            out = status_dir / f"{n}.out"
            actual = out.read_text().splitlines() if out.exists() else []
            end = command.line + command.text.count("\n")  # the line after the command (0-based)
            first, last = command.printed_at if command.printed else (end, end)
            edits.append((first, last, actual))
            n += 1
    for first, last, actual in reversed(edits):
        lines[first:last] = actual
    page.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import os
    import sys
    import tempfile

    if len(sys.argv) != 3 or sys.argv[1] != "--write":
        sys.exit("usage: python tests/docs/runnable.py --write PAGE  (with REBALANCER_URL set)")
    root = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory() as tmp:
        import shutil

        shutil.copytree(root / "docs" / "examples", tmp, dirs_exist_ok=True)
        write(Path(sys.argv[2]).resolve(), Path(tmp), dict(os.environ))
