"""The controller's statistics type: one micro-batch of a job as parsed by the API (``api.stats_parser``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: batch ids and epochs are stored in signed 64-bit database columns (SQLite INTEGER, PostgreSQL BIGINT).
MAX_INT64 = 2**63 - 1


@dataclass
class ParsedStats:
    """Statistics of one micro-batch (``POST /v1/jobs/{id}/stats``), validated field by field.

    ``load`` is aligned with ``ids``; ``state`` too, with NaN where a key group did not report its state size (or
    ``None`` when none did); ``src``/``dst``/``rate`` are the communication edges.
    """

    batch_id: int
    epoch: int
    ids: list[str]
    load: np.ndarray
    state: np.ndarray | None  # NaN where not reported
    src: list[str]
    dst: list[str]
    rate: np.ndarray
    bytes: np.ndarray | None = None  # record bytes per key group (issue 15), NaN where not reported
