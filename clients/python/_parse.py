"""Strict reading of the controller's JSON documents: a wrong shape is a :class:`MalformedResponse`, never an
``AttributeError``/``TypeError``/``ValueError`` deep inside a caller (issue 12, item 12)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clients.python.errors import MalformedResponse


def kind(value: Any) -> str:
    """A short name of a JSON value's type for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


class Doc:
    """A JSON object at path ``where``; each accessor checks one key's type (``optional``: absent or null → None)."""

    __slots__ = ("d", "where")

    def __init__(self, doc: Any, where: str):
        if not isinstance(doc, Mapping):
            raise MalformedResponse(f"{where}: expected an object, got {kind(doc)}")
        self.d: Mapping[str, Any] = doc
        self.where = where

    def _get(self, key: str, optional: bool) -> Any:
        value = self.d.get(key)
        if value is None and not optional:
            raise MalformedResponse(f"{self.where}.{key}: {'null' if key in self.d else 'missing'}")
        return value

    def bad(self, key: str, expected: str, value: Any) -> MalformedResponse:
        return MalformedResponse(f"{self.where}.{key}: expected {expected}, got {kind(value)}")

    def raw(self, key: str, optional: bool = False) -> Any:
        return self._get(key, optional)

    def text(self, key: str, optional: bool = False, nonempty: bool = False) -> Any:
        v = self._get(key, optional)
        if v is None:
            return None
        if not isinstance(v, str) or (nonempty and not v):
            raise self.bad(key, "a non-empty string" if nonempty else "a string", v)
        return v

    def integer(self, key: str, optional: bool = False) -> Any:
        v = self._get(key, optional)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.bad(key, "an integer", v)
        return v

    def number(self, key: str, optional: bool = False) -> Any:
        v = self._get(key, optional)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise self.bad(key, "a finite number", v)
        return float(v)

    def flag(self, key: str, optional: bool = False) -> Any:
        v = self._get(key, optional)
        if v is None:
            return None
        if not isinstance(v, bool):
            raise self.bad(key, "a boolean", v)
        return v

    def obj(self, key: str, optional: bool = False) -> Any:
        v = self._get(key, optional)
        return None if v is None else Doc(v, f"{self.where}.{key}")

    def mapping(self, key: str, optional: bool = False) -> Any:
        d = self.obj(key, optional)
        return None if d is None else dict(d.d)

    def items(self, key: str, optional: bool = False) -> Any:
        v = self._get(key, optional)
        if v is None:
            return None
        if not isinstance(v, list):
            raise self.bad(key, "a list", v)
        return v

    def docs(self, key: str, optional: bool = False) -> Any:
        items = self.items(key, optional)
        return None if items is None else [Doc(x, f"{self.where}.{key}[{i}]") for i, x in enumerate(items)]

    def texts(self, key: str) -> list[str]:
        items = self.items(key)
        for i, x in enumerate(items):
            if not isinstance(x, str):
                raise MalformedResponse(f"{self.where}.{key}[{i}]: expected a string, got {kind(x)}")
        return list(items)

    def text_map(self, key: str) -> dict[str, str]:
        d = self.obj(key)
        for k, v in d.d.items():
            if not isinstance(v, str):
                raise MalformedResponse(f"{d.where}[{k!r}]: expected a string, got {kind(v)}")
        return dict(d.d)

    def moves(self, key: str = "moves", optional: bool = False) -> Any:
        """A list of moves ``{"key_group", "from", "to", "state_bytes"}``, each checked, as plain dicts."""
        docs = self.docs(key, optional)
        if docs is None:
            return None
        for m in docs:
            m.text("key_group"), m.text("from"), m.text("to"), m.number("state_bytes")
        return [dict(m.d) for m in docs]
