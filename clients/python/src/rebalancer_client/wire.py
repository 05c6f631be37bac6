"""How the documents of :mod:`rebalancer_client.contract` meet JSON, with the standard library alone.

- :class:`Check`: the constraints of a field (``Annotated[float, Check(ge=0)]``). The server's pydantic reads them
  (``__get_pydantic_core_schema__``, called only by pydantic) to validate requests and to write the OpenAPI schema;
  this module never imports pydantic, so the client-only install needs nothing but httpx.
- :func:`read`: one generic reader that turns decoded JSON into a contract document, checking every field's type
  against the dataclass annotations (the client's answer to a malformed response is :class:`MalformedResponse`,
  never an ``AttributeError`` deep inside a caller). Unknown keys are ignored, so a newer controller's extra
  fields never break an older client. With ``checked=True`` it also applies the fields' :class:`Check` bounds
  (ranges, lengths, patterns), in the words of the server's 422s: for library callers that hand the server's code
  a document as a ``dict`` instead of JSON bytes.
- :func:`dump`: a document back to JSON-ready data, as the server writes it (or without the optional fields that
  are ``None``).

A field whose Python name ends with ``_`` (``from_``, a keyword) is spelt without it on the wire (``from``).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import re
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from rebalancer_client.errors import MalformedResponse

T = TypeVar("T")


def wire_name(name: str) -> str:
    """The JSON key of a dataclass field (``from_`` -> ``from``)."""
    return name[:-1] if name.endswith("_") else name


#: pydantic configuration of request documents (a plain dict: no pydantic import here)
REQUEST: dict[str, Any] = {"strict": True, "extra": "forbid", "alias_generator": wire_name, "populate_by_name": True}
#: pydantic configuration of response documents (extra keys ignored when a client's model is older)
RESPONSE: dict[str, Any] = {"extra": "ignore", "alias_generator": wire_name, "populate_by_name": True}


class Check:
    """Constraints of a field, read by pydantic on the server (validation and OpenAPI) and shown in docs.

    Keyword arguments are pydantic-core schema constraints (``ge``, ``gt``, ``le``, ``min_length``,
    ``max_length``, ``pattern``); ``finite=True`` refuses NaN and infinities; ``doc`` is the field's description.
    """

    __slots__ = ("constraints", "doc", "finite")

    def __init__(self, doc: str | None = None, *, finite: bool = False, **constraints: Any):
        self.doc = doc
        self.finite = finite
        self.constraints = constraints

    def __repr__(self) -> str:
        return f"Check({self.doc!r}, finite={self.finite}, **{self.constraints})"

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        schema = handler(source)
        target = schema["schema"] if schema.get("type") == "nullable" else schema
        if self.finite:
            target["allow_inf_nan"] = False
        target.update(self.constraints)
        return schema

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> Any:
        js = handler(core_schema)
        if self.doc:
            handler.resolve_ref_schema(js)["description"] = self.doc
        return js


# ---------------------------------------------------------------------------------------------- reading
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


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return hints


def read(cls: type[T], doc: Any, where: str = "", checked: bool = False) -> T:
    """``doc`` (decoded JSON) as an instance of the contract document ``cls``; ``checked``: its fields' bounds too.

    Raises:
        MalformedResponse: with ``field`` the path of the first value whose type (or, checked, bound) does not
            match (``nodes[2].id``, under ``where``) and ``detail`` what is wrong with it.
    """
    return typing.cast(T, _read(cls, doc, where, checked))


def shown(value: Any) -> str:
    """A value as an error message quotes it (its repr, at most 40 characters)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "…"


def bound_reason(sign: str, bound: Any, value: Any) -> str:
    """The reason a value breaking a bound is refused, as every 422 and this reader word it (an integer bound
    exactly: 2^63 − 1, not 9.22e+18)."""
    text = f"{bound:g}" if isinstance(bound, float) else str(bound)
    return f"must be {sign} {text}, got {shown(value)}"


def pattern_reason(pattern: Any, value: Any) -> str:
    """The reason a string not matching its pattern is refused (every 422 and this reader)."""
    return f"must match {pattern}, got {shown(value)}"


_BOUNDS = (("ge", "≥", operator.ge), ("gt", ">", operator.gt), ("le", "≤", operator.le), ("lt", "<", operator.lt))


def _check(check: Check, value: Any, raw: Any, where: str) -> None:
    """:class:`MalformedResponse` when ``value`` (read from ``raw``) breaks a bound of ``check`` (worded as the
    server's 422s)."""
    c = check.constraints
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        for key, sign, holds in _BOUNDS:
            if key in c and not holds(value, c[key]):
                raise _bad(where, bound_reason(sign, c[key], raw))
    if isinstance(value, (str, list, dict)):
        if len(value) < c.get("min_length", 0):
            raise _bad(where, "must not be empty" if c["min_length"] == 1 else
                       f"must have at least {c['min_length']} items")
        if "max_length" in c and len(value) > c["max_length"]:
            raise _bad(where, f"must be at most {c['max_length']} characters" if isinstance(value, str) else
                       f"must have at most {c['max_length']} items")
    if isinstance(value, str) and "pattern" in c and not re.search(c["pattern"], value):
        raise _bad(where, pattern_reason(c["pattern"], value))


def _bad(where: str, detail: str) -> MalformedResponse:
    exc = MalformedResponse(f"{where or 'document'}: {detail}")
    exc.field, exc.detail = where, detail
    return exc


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _read(tp: Any, value: Any, where: str, checked: bool) -> Any:
    origin = get_origin(tp)
    if origin is Annotated:
        inner, *marks = get_args(tp)
        out = _read(inner, value, where, checked)
        if checked and out is not None:
            for mark in marks:
                if isinstance(mark, Check):
                    _check(mark, out, value, where)
        return out
    if origin in (Union, types.UnionType):
        return _read_union(get_args(tp), value, where, checked)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _read_document(tp, value, where, checked)
    if origin is list:
        if not isinstance(value, list):
            raise _bad(where, f"expected a list, got {kind(value)}")
        (item,) = get_args(tp) or (Any,)
        return [_read(item, v, f"{where}[{i}]", checked) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _bad(where, f"expected an object, got {kind(value)}")
        _key, val = get_args(tp) or (str, Any)
        return {str(k): _read(val, v, _at(where, str(k)), checked) for k, v in value.items()}
    if origin is Literal:
        if value not in get_args(tp):
            raise _bad(where, f"expected one of {list(get_args(tp))}, got {str(value)[:60]!r}")
        return value
    return _read_scalar(tp, value, where)


def _read_union(members: tuple[Any, ...], value: Any, where: str, checked: bool) -> Any:
    if value is None:
        if type(None) in members:
            return None
        raise _bad(where, "null")
    errors = []
    for member in members:
        if member is type(None):
            continue
        try:
            return _read(member, value, where, checked)
        except MalformedResponse as exc:
            errors.append(exc)
    # the member that got furthest into the value says what is wrong (an object given for a number: its field's)
    raise max(errors, key=lambda exc: len(exc.field or ""))


def _read_document(cls: type, value: Any, where: str, checked: bool) -> Any:
    if not isinstance(value, Mapping):
        raise _bad(where, f"expected an object, got {kind(value)}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = wire_name(f.name)
        if key in value:
            kwargs[f.name] = _read(hints[f.name], value[key], _at(where, key), checked)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise _bad(_at(where, key), "missing")
    return cls(**kwargs)


def _read_scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:  # an integer beyond a float's range
                raise _bad(where, f"expected a finite number, got a {len(str(value))}-digit integer") from None
            if not math.isfinite(value):
                raise _bad(where, f"expected a finite number, got {value}")
    elif tp is str:
        ok = isinstance(value, str)
    else:  # pragma: no cover - a contract type this reader does not know is a programming error
        raise TypeError(f"{where}: cannot read {tp!r}")
    if not ok:
        expected = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}[tp]
        raise _bad(where, f"expected {expected}, got {kind(value)}")
    return value


# ---------------------------------------------------------------------------------------------- writing
def dump(doc: Any, omit_none: bool = False) -> Any:
    """A contract document (or a list/dict of them) as JSON-ready data, as the server writes it; ``omit_none``
    leaves out the optional fields that are ``None`` where ``None`` is their default (a shorter document that
    reads back the same)."""
    if dataclasses.is_dataclass(doc) and not isinstance(doc, type):
        out = {}
        for f in dataclasses.fields(doc):
            value = getattr(doc, f.name)
            if omit_none and value is None and f.default is None:
                continue
            out[wire_name(f.name)] = dump(value, omit_none)
        return out
    if isinstance(doc, (list, tuple)):
        return [dump(v, omit_none) for v in doc]
    if isinstance(doc, Mapping):
        return {k: dump(v, omit_none) for k, v in doc.items()}
    return doc
