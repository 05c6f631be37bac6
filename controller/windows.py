"""Statistics windows: the last ``window_batches`` micro-batches of a job (the ALBIC paper's statistics period, SPL).

A window keeps the ``size`` highest batch ids it has seen, with running sums, so that adding a batch of m key
groups costs O(m) numpy work and nothing else:

- the load of a key group is its mean load per batch over the window (a key group absent from a batch counted 0
  for that batch: Spark sends nothing for a partition without records);
- its state size is the latest reported value (or the registered one);
- a communication edge's rate is likewise its mean per batch.

A batch id seen before is counted once (``duplicate``); once the window is full, a batch older than every batch in
it is not counted (it would be evicted at once) — this also covers re-posts of batches evicted long ago.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Batch:
    batch_id: int
    epoch: int
    idx: np.ndarray                      # int32 key group indices
    load: np.ndarray                     # float64
    state: np.ndarray | None = None      # float64, NaN = not reported
    src: np.ndarray | None = None        # int32
    dst: np.ndarray | None = None        # int32
    rate: np.ndarray | None = None       # float64

    # ---- (de)serialisation for the repository
    def to_row(self, job_id: str, now: float) -> dict:
        comm = None
        if self.src is not None and self.src.size:
            comm = (self.src.astype(np.int32).tobytes() + self.dst.astype(np.int32).tobytes()
                    + self.rate.astype(np.float64).tobytes())
        full = self.idx.size and self.idx[0] == 0 and self.idx[-1] == self.idx.size - 1 and \
            bool((np.diff(self.idx) == 1).all())
        return {"job_id": job_id, "batch_id": self.batch_id, "epoch": self.epoch,
                # b"" = key groups 0..n-1 in order (what a driver sending every key group posts)
                "kg_index": b"" if full else self.idx.astype(np.int32).tobytes(), "load": self.load.astype(np.float64).tobytes(),
                "state_bytes": None if self.state is None else self.state.astype(np.float64).tobytes(),
                "comm": comm, "received_at": now}

    @classmethod
    def from_row(cls, row: dict) -> Batch:
        load = np.frombuffer(row["load"], dtype=np.float64).copy()
        idx = (np.frombuffer(row["kg_index"], dtype=np.int32).copy() if row["kg_index"]
               else np.arange(load.size, dtype=np.int32))
        state = None if row["state_bytes"] is None else np.frombuffer(row["state_bytes"], dtype=np.float64).copy()
        src = dst = rate = None
        if row["comm"]:
            raw = row["comm"]
            e = len(raw) // 16
            src = np.frombuffer(raw[: 4 * e], dtype=np.int32).copy()
            dst = np.frombuffer(raw[4 * e: 8 * e], dtype=np.int32).copy()
            rate = np.frombuffer(raw[8 * e:], dtype=np.float64).copy()
        return cls(int(row["batch_id"]), int(row["epoch"]), idx, load, state, src, dst, rate)


@dataclass
class Window:
    """The statistics window of one job over ``m`` key groups."""

    size: int
    m: int
    batches: dict[int, Batch] = field(default_factory=dict)
    load_sum: np.ndarray = None  # type: ignore[assignment]
    seen: np.ndarray = None  # type: ignore[assignment]  # number of batches in the window reporting each kg
    comm_sum: dict[tuple[int, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.load_sum is None:
            self.load_sum = np.zeros(self.m)
        if self.seen is None:
            self.seen = np.zeros(self.m, dtype=np.int64)

    # ---- decisions (no side effects)
    def classify(self, batch_id: int) -> tuple[bool, bool, int | None]:
        """``(counted, duplicate, evicted batch id)`` if ``batch_id`` were added now."""
        if batch_id in self.batches:
            return False, True, None
        if len(self.batches) < self.size:
            return True, False, None
        oldest = min(self.batches)
        if batch_id < oldest:
            return False, False, None
        return True, False, oldest

    # ---- mutation
    def add(self, batch: Batch, evict: int | None) -> None:
        if evict is not None:
            self._remove(self.batches.pop(evict))
        self.batches[batch.batch_id] = batch
        self.load_sum[batch.idx] += batch.load  # ids are unique within a batch (checked by the controller)
        self.seen[batch.idx] += 1
        if batch.src is not None:
            for s, d, r in zip(batch.src.tolist(), batch.dst.tolist(), batch.rate.tolist()):
                key = (s, d)
                self.comm_sum[key] = self.comm_sum.get(key, 0.0) + r

    def _remove(self, batch: Batch) -> None:
        self.load_sum[batch.idx] -= batch.load
        self.seen[batch.idx] -= 1
        # numerical hygiene: a key group no batch reports any more has exactly 0 load
        self.load_sum[self.seen == 0] = 0.0
        np.maximum(self.load_sum, 0.0, out=self.load_sum)
        if batch.src is not None:
            for s, d, r in zip(batch.src.tolist(), batch.dst.tolist(), batch.rate.tolist()):
                key = (s, d)
                v = self.comm_sum.get(key, 0.0) - r
                if v <= 1e-12:
                    self.comm_sum.pop(key, None)
                else:
                    self.comm_sum[key] = v

    # ---- views
    def mean_load(self) -> np.ndarray:
        n = len(self.batches)
        return self.load_sum / n if n else np.zeros(self.m)

    def latest_state(self, registered: np.ndarray) -> np.ndarray:
        out = registered.copy()
        for bid in sorted(self.batches):
            b = self.batches[bid]
            if b.state is not None:
                ok = ~np.isnan(b.state)
                out[b.idx[ok]] = b.state[ok]
        return out

    def mean_comm(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(self.batches)
        if not self.comm_sum or not n:
            z = np.zeros(0, dtype=np.int64)
            return z, z, np.zeros(0)
        keys = np.array(list(self.comm_sum.keys()), dtype=np.int64)
        rates = np.fromiter(self.comm_sum.values(), dtype=np.float64, count=len(self.comm_sum)) / n
        return keys[:, 0], keys[:, 1], rates

    def state(self) -> dict:
        ids = sorted(self.batches)
        covered = len(ids)
        return {
            "size": self.size,
            "batches": ids,
            "covered_batches": covered,
            "coverage": round(covered / self.size, 6),
            "key_groups_covered": int(np.count_nonzero(self.seen)),
            "key_groups": self.m,
            "ready": covered >= self.size,
        }

