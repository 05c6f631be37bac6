"""mkdocs hook: the configuration page's table of settings, generated from ``controller/settings.py`` at every build.

Names, types, defaults and bounds come from the pydantic model; each meaning from the ``#:`` comment above the
field in the source (a comment above several fields is their group's), refined by :data:`DETAIL` for the members
of a group. A setting with no meaning at all fails the build, so the page cannot fall behind the code (an entry of
:data:`DETAIL` for a setting that does not exist is ignored). The table replaces ``<!-- settings-table -->``.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

MARKER = "<!-- settings-table -->"

#: what distinguishes the members of a commented group of fields
DETAIL = {
    "default_time_limit_s": "the time limit of a solve whose request or job names none",
    "solve_kill_grace_s": "the grace of that rule, in seconds",
    "solve_kill_factor": "the factor of that rule",
    "max_body_bytes": "request body, bytes",
    "max_key_groups": "key groups in one request",
    "max_edges": "communication edges in one request",
    "max_nodes": "nodes in one request",
    "max_window_batches": "a job's `window_batches`",
    "max_candidates": "candidates of one what-if",
    "max_jobs": "registered jobs",
    "max_window_cells": "(key group, batch) cells of one job's window",
    "max_total_window_bytes": "bytes of statistics held by all windows together",
    "max_partition_channels": "channels",
    "max_partition_ring": "channels × replicas (consistent-hash points)",
    "max_partition_keys": "keys with a frequency",
    "max_partition_work": "channels × keys",
    "history_snapshot_every": "a full assignment snapshot every this many epochs (deltas in between)",
    "history_retention_epochs": "epochs kept (older ones are compacted into a snapshot)",
    "offload_min_bytes": "the body size from which this applies",
    "offload_seconds_per_mb": "the extra seconds per MB of body",
    "solver_start_backoff_s": "the first back-off, in seconds",
    "solver_start_failures": "failed starts in a row before the pool counts as broken",
    "advertised_url": "this replica's URL as clients reach it",
    "lease_ttl_s": "the lease's length, in seconds",
    "lease_renew_s": "how often the lease is renewed (and looked at by standbys), in seconds",
    "body_timeout_s": "seconds for a whole body",
    "body_idle_timeout_s": "the longest pause within a body, in seconds",
    "max_total_window_cells": "window cells of all jobs together",
}


class SettingsDocError(Exception):
    pass


def comments_by_field(source: str, class_name: str = "Settings") -> dict[str, tuple[str, bool]]:
    """``{field: (the #: comment above it or above its group, whether it is the field's own)}`` from the class's
    source."""
    lines = source.splitlines()
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == class_name)
    out: dict[str, tuple[str, bool]] = {}
    group = ""
    previous_end = cls.body[0].lineno - 1
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            previous_end = node.end_lineno or node.lineno
            continue
        between = lines[previous_end:node.lineno - 1]
        comment = [ln.strip()[2:].strip() for ln in between if ln.strip().startswith("#:")]
        if comment:
            group = " ".join(comment)
        elif any(not ln.strip() for ln in between):
            group = ""  # a blank line ends a group
        out[node.target.id] = (group, bool(comment))
        previous_end = node.end_lineno or node.lineno
    return out


def _default(field: Any) -> str:
    if field.default_factory is not None:
        return f"`{field.default_factory()!r}`"
    value = field.default
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""` (empty)'
    if isinstance(value, int) and value >= 10_000:
        return f"`{value}` ({value:,})"
    return f"`{value}`"


def _bounds(field: Any) -> str:
    words = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            value = getattr(item, attr, None)
            if value is not None:
                words.append(f"{sign} {value}")
    return ", ".join(words)


def _rst_to_md(text: str) -> str:
    return text.replace("``", "`")


def settings_table() -> str:
    from controller import settings as module

    comments = comments_by_field(inspect.getsource(module))
    fields = module.Settings.model_fields
    rows = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for name, field in fields.items():
        comment, own = comments.get(name, ("", False))
        if own:
            meaning = " — ".join(part for part in (comment, DETAIL.get(name, "")) if part)
        else:  # a member of the group above: its own detail
            meaning = DETAIL.get(name, "")
        if not meaning:
            raise SettingsDocError(f"setting {name} has no #: comment in controller/settings.py and no DETAIL entry")
        cells = [f"`{module.PREFIX}{name.upper()}`", _default(field), _bounds(field), _rst_to_md(meaning)]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, settings_table())
