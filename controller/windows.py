"""Statistics windows: the last ``window_batches`` micro-batches of a job (the ALBIC paper's statistics period, SPL).

A window keeps the ``size`` batches received most recently, with running sums, so that adding a batch of m key
groups costs O(m) numpy work and nothing else:

- the load of a key group is its mean load per batch over the window (a key group absent from a batch counted 0
  for that batch: Spark sends nothing for a partition without records);
- its state size is the latest reported value (or the registered one);
- a communication edge's rate is likewise its mean per batch.

Ordering rule: the window holds the ``size`` most recently *received* distinct batch ids.
A batch id already in the window is not counted again (``duplicate``); once the window is full, an id at most
``size`` below the lowest id in it is a late re-post of a batch evicted recently and is not counted either. Any
other id counts, and evicts the batch received earliest: batch ids identify batches without ordering them, so
neither a batch id far in the future nor a driver whose query restarts from a new checkpoint (Spark numbers its
batches from 0 again) can freeze the window — the batches received after it still count and push it out after
``size`` more. Ids are signed 64-bit integers (the controller answers 422 beyond).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rebalancer_client.contract import WindowState


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
    whole: bool = field(init=False)      # idx is 0, 1, …, len − 1: the arrays are the key groups' in order

    def __post_init__(self) -> None:
        self.whole = bool(np.array_equal(self.idx, np.arange(self.idx.size)))

    @property
    def nbytes(self) -> int:
        """Memory held by the batch's arrays (the total over every window is capped)."""
        arrays = (self.idx, self.load, self.state, self.src, self.dst, self.rate)
        return sum(int(a.nbytes) for a in arrays if a is not None)


@dataclass
class Window:
    """The statistics window of one job over ``m`` key groups."""

    size: int
    m: int
    batches: dict[int, Batch] = field(default_factory=dict)
    comm_sum: dict[tuple[int, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.load_sum = np.zeros(self.m)
        self.load_sq_sum = np.zeros(self.m)  # for the per-key-group variance over the window (the noise guard)
        self.seen = np.zeros(self.m, dtype=np.int64)  # number of batches in the window reporting each kg
        self.nbytes = 0  # memory held by the batches' arrays

    # ---- decisions (no side effects)
    def classify(self, batch_id: int) -> tuple[bool, bool, int | None]:
        """``(counted, duplicate, evicted batch id)`` if ``batch_id`` were added now."""
        if batch_id in self.batches:
            return False, True, None
        if len(self.batches) < self.size:
            return True, False, None
        low = min(self.batches)
        if low - self.size <= batch_id < low:  # a late re-post of a batch evicted recently
            return False, False, None
        return True, False, next(iter(self.batches))  # the earliest received (dicts keep insertion order)

    # ---- mutation
    def add(self, batch: Batch, evict: int | None) -> None:
        if evict is not None:
            self._remove(self.batches.pop(evict))
        self.batches[batch.batch_id] = batch
        self.nbytes += batch.nbytes
        at = self._at(batch)
        self.load_sum[at] += batch.load  # ids are unique within a batch (checked by the controller)
        self.load_sq_sum[at] += np.square(batch.load)
        self.seen[at] += 1
        if batch.src is not None and batch.dst is not None and batch.rate is not None:
            for s, d, r in zip(batch.src.tolist(), batch.dst.tolist(), batch.rate.tolist(), strict=True):
                key = (s, d)
                self.comm_sum[key] = self.comm_sum.get(key, 0.0) + r

    def dropped_by(self, size: int) -> list[int]:
        """The batches a window of ``size`` would no longer hold (the earliest received)."""
        return list(self.batches)[: max(0, len(self.batches) - size)]

    def resize(self, size: int) -> list[int]:
        """Hold at most ``size`` batches from now on; returns the ids of the batches dropped (the earliest received)."""
        drop = self.dropped_by(size)
        for bid in drop:
            self._remove(self.batches.pop(bid))
        self.size = size
        return drop

    def _remove(self, batch: Batch) -> None:
        self.nbytes -= batch.nbytes
        at = self._at(batch)
        self.load_sum[at] -= batch.load
        self.load_sq_sum[at] -= np.square(batch.load)
        self.seen[at] -= 1
        # numerical hygiene: a key group no batch reports any more has exactly 0 load
        gone = self.seen == 0
        self.load_sum[gone] = 0.0
        self.load_sq_sum[gone] = 0.0
        np.maximum(self.load_sum, 0.0, out=self.load_sum)
        np.maximum(self.load_sq_sum, 0.0, out=self.load_sq_sum)
        if batch.src is not None and batch.dst is not None and batch.rate is not None:
            for s, d, r in zip(batch.src.tolist(), batch.dst.tolist(), batch.rate.tolist(), strict=True):
                key = (s, d)
                v = self.comm_sum.get(key, 0.0) - r
                if v <= 1e-12:
                    self.comm_sum.pop(key, None)
                else:
                    self.comm_sum[key] = v

    def _at(self, batch: Batch) -> np.ndarray | slice:
        """Where ``batch``'s arrays go in the window's: every key group in order (the arrays form, a post by id in
        the job's order) is a slice — a numpy update through an index array of 1,000 took 9 µs, through a slice
        0.5 µs, and a statistics post makes six."""
        return slice(None) if batch.whole and batch.idx.size == self.m else batch.idx

    # ---- views
    def mean_load(self) -> np.ndarray:
        n = len(self.batches)
        return self.load_sum / n if n else np.zeros(self.m)

    def load_variance(self) -> np.ndarray | None:
        """Each key group's sample variance of its load per batch over the window (a batch that did not report it
        counts 0, as in :meth:`mean_load`); ``None`` with fewer than two batches."""
        n = len(self.batches)
        if n < 2:
            return None
        with np.errstate(over="ignore", invalid="ignore"):
            var = (self.load_sq_sum - np.square(self.load_sum) / n) / (n - 1)
        return np.maximum(var, 0.0)

    def latest_state(self, registered: np.ndarray) -> np.ndarray:
        """Each key group's state bytes as last reported in the window (``registered`` where none was): the
        batches from the latest received back, until every key group has a report (usually the latest batch)."""
        out = registered.copy()
        missing = np.ones(out.size, dtype=bool)
        for b in reversed(self.batches.values()):
            if b.state is not None:
                at = self._at(b)
                take = missing[at] & ~np.isnan(b.state)
                where = take if isinstance(at, slice) else b.idx[take]
                out[where] = b.state[take]
                missing[where] = False
                if not missing.any():
                    break
        return out

    def mean_comm(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(self.batches)
        if not self.comm_sum or not n:
            z = np.zeros(0, dtype=np.int64)
            return z, z, np.zeros(0)
        keys = np.array(list(self.comm_sum.keys()), dtype=np.int64)
        rates = np.fromiter(self.comm_sum.values(), dtype=np.float64, count=len(self.comm_sum)) / n
        return keys[:, 0], keys[:, 1], rates

    @property
    def full(self) -> bool:
        return len(self.batches) >= self.size

    def state(self) -> WindowState:
        ids = list(self.batches)  # oldest received first
        covered = len(ids)
        return WindowState(size=self.size, batches=ids, covered_batches=covered,
                           coverage=round(covered / self.size, 6),
                           key_groups_covered=int(np.count_nonzero(self.seen)), key_groups=self.m,
                           ready=covered >= self.size)

