"""A statistics document (:class:`rebalancer_client.contract.Stats`) as a window batch of the job it was posted to.

The document's shape and ranges were checked at the edge; what needs the job is checked here: arrays of the job's
length, key group ids that exist, no key group twice, sums a solver can add up.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from controller.errors import TooLarge
from controller.model import Job
from controller.settings import Settings
from controller.windows import Batch
from rebalancer_client.contract import Stats
from solvers.errors import InvalidInput
from solvers.model import MAX_MAGNITUDE


def batch_of(job: Job, stats: Stats, settings: Settings) -> Batch:
    """The batch in key group indices; 413 beyond the caps, 422 naming the first bad field."""
    if stats.load is not None:
        idx, load, state = _dense(job, stats)
    else:
        idx, load, state = _by_id(job, stats, settings)
    src = dst = rate = None
    if stats.communication:
        if len(stats.communication) > settings.max_edges:
            raise TooLarge(f"communication: more than {settings.max_edges} edges")
        src = _indices(job, [e.src for e in stats.communication], "communication", "src")
        dst = _indices(job, [e.dst for e in stats.communication], "communication", "dst")
        rate = np.array([e.rate for e in stats.communication], dtype=np.float64)
    for name, where, values in (("load", "load", load), ("state_bytes", "state_bytes", state),
                                ("rate", "communication", rate)):
        _check_sum(name, where, values, stats.load is not None)
    return Batch(stats.batch_id, stats.epoch, idx.astype(np.int32), load, state,
                 None if src is None else src.astype(np.int32), None if dst is None else dst.astype(np.int32), rate)


def _dense(job: Job, stats: Stats) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    m = len(job.kg_ids)
    if stats.key_groups is not None:
        raise InvalidInput("key_groups", "give the statistics either by key group id (key_groups) or as arrays "
                                         "(load, state_bytes), not both")
    assert stats.load is not None
    state = None
    for name, values in (("load", stats.load), ("state_bytes", stats.state_bytes)):
        if values is not None and len(values) != m:
            raise InvalidInput(name, f"has {len(values)} numbers; job {job.job_id!r} has {m} key groups (one "
                                     f"number per key group, in the job's order)")
    if stats.state_bytes is not None:
        state = np.array(stats.state_bytes, dtype=np.float64)  # (None is NaN)
        if np.isnan(state).all():
            state = None
    return np.arange(m, dtype=np.int64), np.array(stats.load, dtype=np.float64), state


def _by_id(job: Job, stats: Stats, settings: Settings) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    if stats.state_bytes is not None:
        raise InvalidInput("state_bytes", "as an array it goes with load (the arrays form); by id, give "
                                          "key_groups[].state_bytes")
    kgs = stats.key_groups or []
    if len(kgs) > settings.max_key_groups:
        raise TooLarge(f"key_groups: more than {settings.max_key_groups} key groups")
    ids = [k.id for k in kgs]
    idx = np.arange(len(ids), dtype=np.int64) if ids == job.kg_ids else _indices(job, ids, "key_groups", "id")
    if len(ids) > 1 and len(np.unique(idx)) != len(ids):
        seen: set[int] = set()
        for i, k in enumerate(idx.tolist()):
            if k in seen:
                raise InvalidInput(f"key_groups[{i}].id", f"duplicate key group {ids[i]!r}")
            seen.add(k)
    state = None
    if any(k.state_bytes is not None for k in kgs):
        state = np.array([np.nan if k.state_bytes is None else k.state_bytes for k in kgs], dtype=np.float64)
    return idx, np.array([k.load for k in kgs], dtype=np.float64), state


def _indices(job: Job, ids: list[str], where: str, name: str) -> np.ndarray:
    n = len(ids)
    idx = np.fromiter(map(job.kg_index.get, ids, repeat(-1, n)), dtype=np.int64, count=n)
    if n and idx.min() < 0:
        i = int(np.flatnonzero(idx < 0)[0])
        raise InvalidInput(f"{where}[{i}].{name}", f"unknown key group {ids[i]!r} of job {job.job_id!r}")
    return idx


def _check_sum(name: str, where: str, values: np.ndarray | None, dense: bool) -> None:
    """Every sum the controller forms from a batch must stay finite with room for the solvers."""
    if values is None or not values.size:
        return
    with np.errstate(over="ignore"):
        total = float(np.nansum(values))
    if total > MAX_MAGNITUDE:
        k = int(np.nanargmax(values))
        field = f"{where}[{k}]" if dense or where == "communication" else f"key_groups[{k}].{name}"
        if where == "communication":
            field += ".rate"
        raise InvalidInput(field, f"the {name} values of this batch sum to {total:.4g}, more than "
                                  f"{MAX_MAGNITUDE:g}: scale them down")
