"""Stream groupings from the papers, one interface, a registry by name.

=========  ===========================================  ==================================================
name       class                                        paper
=========  ===========================================  ==================================================
kg         :class:`KeyGrouping`                         d-choices-w-choices §II-B
sg         :class:`ShuffleGrouping`                     d-choices-w-choices §II-B
pkg        :class:`PartialKeyGrouping`                  d-choices-w-choices §II-B (PKG, Greedy-2)
dchoices   :class:`DChoices`                            d-choices-w-choices §III-B, §IV-A (Prop. 4.1)
wchoices   :class:`WChoices`                            d-choices-w-choices §III-B
rr         :class:`RoundRobinHead`                      d-choices-w-choices §III-B (baseline)
dkg        :class:`DynamicKeyGrouping`                  dynamic-key-grouping §4 (Algorithms 1–6)
potc       :class:`PowerOfTwoChoices`                   consistent-grouping §4.3
ch         :class:`ConsistentHashing`                   consistent-grouping §4.2
chbl       :class:`ConsistentHashingBoundedLoads`       consistent-grouping §4.2 (Mirrokni et al.)
porc       :class:`PowerOfRandomChoices`                consistent-grouping §5.1
cg         :class:`ConsistentGrouping`                  consistent-grouping §5.2
=========  ===========================================  ==================================================

``make_grouping(name, n_workers, seed=..., source_index=..., **params)`` builds one source's instance;
unknown names or parameters raise :class:`solvers.errors.InvalidInput`.
"""

from __future__ import annotations

import inspect
from typing import Any

from solvers.errors import InvalidInput
from solvers.groupings.base import Grouping, key_ids
from solvers.groupings.consistent_grouping import ConsistentGrouping, PowerOfRandomChoices
from solvers.groupings.consistent_hashing import ConsistentHashing, ConsistentHashingBoundedLoads
from solvers.groupings.d_w_choices import DChoices, RoundRobinHead, WChoices, find_optimal_choices
from solvers.groupings.dkg import DynamicKeyGrouping
from solvers.groupings.kg_sg_pkg import KeyGrouping, PartialKeyGrouping, PowerOfTwoChoices, ShuffleGrouping

GROUPINGS: dict[str, type[Grouping]] = {
    cls.name: cls
    for cls in (KeyGrouping, ShuffleGrouping, PartialKeyGrouping, DChoices, WChoices, RoundRobinHead,
                DynamicKeyGrouping, PowerOfTwoChoices, ConsistentHashing, ConsistentHashingBoundedLoads,
                PowerOfRandomChoices, ConsistentGrouping)
}
GROUPING_NAMES = list(GROUPINGS)

__all__ = [
    "GROUPINGS", "GROUPING_NAMES", "Grouping", "make_grouping", "grouping_params", "key_ids",
    "find_optimal_choices", "KeyGrouping", "ShuffleGrouping", "PartialKeyGrouping", "DChoices", "WChoices",
    "RoundRobinHead", "DynamicKeyGrouping", "PowerOfTwoChoices", "ConsistentHashing",
    "ConsistentHashingBoundedLoads", "PowerOfRandomChoices", "ConsistentGrouping",
]


def grouping_params(name: str) -> dict[str, Any]:
    """Tunable parameters of grouping ``name`` and their defaults."""
    cls = _lookup(name)
    sig = inspect.signature(cls.__init__)
    return {p.name: p.default for p in sig.parameters.values()
            if p.kind == p.KEYWORD_ONLY and p.name not in ("seed", "source_index")}


def _lookup(name: str) -> type[Grouping]:
    cls = GROUPINGS.get(str(name).lower())
    if cls is None:
        raise InvalidInput("grouping", f"unknown grouping {name!r}; choose one of {', '.join(GROUPING_NAMES)}")
    return cls


def make_grouping(name: str, n_workers: int, *, seed: int = 0, source_index: int = 0, **params: Any) -> Grouping:
    """One source's instance of grouping ``name`` over ``n_workers`` workers."""
    cls = _lookup(name)
    allowed = grouping_params(name)
    for key in params:
        if key not in allowed:
            raise InvalidInput(f"params.{key}", f"unknown parameter for {name}; known: {sorted(allowed) or 'none'}")
    return cls(n_workers, seed=seed, source_index=source_index, **params)
