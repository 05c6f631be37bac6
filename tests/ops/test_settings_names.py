"""Every ``REBALANCER_*`` name the code or the README mentions is a setting (or a client variable): with unknown
settings refused at startup, a documented name that is not declared would stop the server."""

from __future__ import annotations

import re
from pathlib import Path

from controller.settings import CLIENT_VARIABLES, PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
#: the typo used as the example of a refused name in controller/settings.py
EXAMPLES = {"REBALANCER_MAX_TIME_LIMIT"}


def test_every_mentioned_setting_is_declared() -> None:
    declared = {PREFIX + name.upper() for name in Settings.model_fields} | CLIENT_VARIABLES | EXAMPLES
    files = [ROOT / "README.md", ROOT / "Dockerfile", ROOT / "Makefile"]
    for pkg in ("api", "controller", "cli", "clients", "benchmarks", "evaluation"):
        files += sorted((ROOT / pkg).rglob("*.py"))
    unknown: dict[str, str] = {}
    for f in files:
        if not f.is_file():
            continue
        for m in re.finditer(r"(?<![A-Za-z0-9_])REBALANCER_[A-Z0-9_]*[A-Z0-9]", f.read_text(errors="replace")):
            if m.group(0) not in declared:
                unknown.setdefault(m.group(0), str(f.relative_to(ROOT)))
    assert not unknown, unknown


def test_getattr_reads_of_settings_are_declared() -> None:
    """Code that reads a setting with a default (``getattr(settings, "name", default)``) reads a declared one."""
    names = set()
    for pkg in ("api", "controller", "cli"):
        for f in (ROOT / pkg).rglob("*.py"):
            text = f.read_text(errors="replace")
            names |= set(re.findall(r"getattr\([\w.]*settings\w*, \"(\w+)\"", text))
            names |= set(re.findall(r"getattr\(s, \"(\w+)\"", text))
    names |= {n for n in re.findall(r"\"(max_partition_\w+)\"", (ROOT / "api/routes/planning.py").read_text())}
    missing = sorted(n for n in names if n not in Settings.model_fields)
    assert not missing, missing
