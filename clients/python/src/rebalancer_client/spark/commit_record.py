"""The commit record of a state version (``<root>/_commits/<version>.json``; see
:mod:`rebalancer_client.spark.store`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Commit:
    """One committed state version (the JSON commit record)."""

    version: int
    kind: str                                  # "delta" or "snapshot" (a snapshot version also has a delta)
    snapshot: int | None                       # the snapshot version this one builds on (itself for a snapshot)
    epoch: int
    partition_of: list[int]
    keys: list[str]
    columns: list[str]                         # the stored columns, in order
    delta_rows: int = 0
    written_bytes: int = 0
    seconds: float = 0.0
    committed_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    partitions: int | None = None              # the query's partitions (None in records of earlier releases)
    nodes: list[str] | None = None             # the job's nodes, partition j being node j
    schema: str | None = None                  # the stored columns' Spark schema (JSON; None in earlier records)
    observed: dict[str, Any] = field(default_factory=dict, compare=False)  # commit(observe=...); not stored

    def to_json(self) -> str:
        doc = asdict(self)
        doc.pop("observed")
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Commit:
        doc = json.loads(text)
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})
