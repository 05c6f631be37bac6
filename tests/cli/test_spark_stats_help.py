"""``rebalancer spark-stats --help`` reads as terminal text: no reStructuredText quoting, every option explained."""

from __future__ import annotations

import re

from tests.helpers.cli import run_cli


def test_help_has_no_rst_backticks_and_explains_every_option() -> None:
    r = run_cli("spark-stats", "--help")
    assert r.returncode == 0, r.stderr
    assert "`" not in r.stdout, r.stdout
    options = r.stdout.split("options:", 1)[1]
    entries = re.split(r"\n  (?=-)", options.strip("\n"))
    bare = [e.split()[0] for e in entries if len(e.split()) <= 2 and "{" not in e]
    assert not bare, f"options without help: {bare}"
    for flag in ("--format", "--load", "--dst-operator", "--dst-key-groups"):
        entry = next(e for e in entries if e.startswith(flag))
        assert len(entry.split()) > 3, entry
