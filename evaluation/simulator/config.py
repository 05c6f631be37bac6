"""The parameters of one simulation run, checked before it starts (the model they set and their meaning:
:mod:`evaluation.simulator.engine`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from solvers.errors import InvalidInput

__all__ = ["SimulationConfig"]


@dataclass
class SimulationConfig:
    """Parameters of one simulation run (see the module docstring)."""

    grouping: str
    workers: int
    sources: int = 5
    capacities: Sequence[float] | None = None
    seed: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    service_rate: float = 1000.0
    load: float = 0.8
    arrival_rate: float | None = None
    tick: float = 1.0
    queue_capacity: float | None = None
    signal: str = "busy"
    capacity_changes: Sequence[tuple[float, Sequence[float]]] = ()
    series_points: int = 200
    progress: bool = False

    def validate(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, (int, np.integer)) or self.workers < 1:
            raise InvalidInput("workers", f"must be an integer >= 1, got {self.workers!r}")
        if isinstance(self.sources, bool) or not isinstance(self.sources, (int, np.integer)) or self.sources < 1:
            raise InvalidInput("sources", f"must be an integer >= 1, got {self.sources!r}")
        if self.capacities is not None:
            _check_capacities(self.capacities, self.workers, "capacities")
        for i, (frac, caps) in enumerate(self.capacity_changes):
            if not (0.0 <= float(frac) <= 1.0):
                raise InvalidInput(f"capacity_changes[{i}].at", f"must be a fraction in [0, 1], got {frac}")
            _check_capacities(caps, self.workers, f"capacity_changes[{i}].capacities")
        if self.signal not in ("busy", "queue"):
            raise InvalidInput("signal", f"must be 'busy' or 'queue', got {self.signal!r}")
        for name in ("service_rate", "load", "tick", "queue_capacity"):
            v = getattr(self, name)
            if v is None and name == "queue_capacity":
                continue
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InvalidInput(name, f"must be a finite number > 0, got {v!r}")
        if self.arrival_rate is not None and not (math.isfinite(self.arrival_rate) and self.arrival_rate > 0):
            raise InvalidInput("arrival_rate", f"must be a finite number > 0, got {self.arrival_rate!r}")


def _check_capacities(caps: Sequence[float] | np.ndarray, n: int, field_name: str) -> np.ndarray:
    arr = np.asarray(caps, dtype=float)
    if arr.shape != (n,):
        raise InvalidInput(field_name, f"expected {n} capacities, got {arr.size}")
    bad = np.flatnonzero(~np.isfinite(arr) | (arr <= 0))
    if bad.size:
        raise InvalidInput(f"{field_name}[{bad[0]}]", f"capacity must be a finite number > 0, got {arr[bad[0]]}")
    return arr
