"""The edge: raw JSON bytes in, contract documents out, and back — the one place a request is validated.

Requests are validated once, here, against :mod:`rebalancer_client.contract` (pydantic reads its ``Check`` markers;
strict: a boolean is not a number, a string of digits is not a number, unknown fields are refused), straight from
the bytes (no intermediate ``dict``). The API routes, the solver workers that handle big bodies and the CLI all
call :func:`parse`; what is inside trusts what it gets. Errors carry the field path and the reason, the body of
every 422: ``{"detail": [{"field": "key_groups[3].load", "reason": "..."}]}``. A JSON object that names a key twice
is refused (:func:`unique_keys`): a parser would silently keep one of the values.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from controller.errors import TooLarge
from rebalancer_client.contract import Edge, ErrorItem, KeyGroupStats, Stats
from rebalancer_client.wire import bound_reason, pattern_reason, shown
from solvers.errors import InvalidInput
from solvers.model import MAX_MAGNITUDE

T = TypeVar("T")

#: pydantic error types whose message is replaced by ours
_MESSAGES = {"missing": "is required", "missing_keyword_only_argument": "is required",
             "extra_forbidden": "unknown field", "unexpected_keyword_argument": "unknown field"}
#: ... and those that say the bound and the value
_BOUNDS = {"greater_than_equal": ("≥", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("≤", "le"),
           "less_than": ("<", "lt")}
_TYPES = {"float_type": "a number", "int_type": "an integer", "int_from_float": "an integer",
          "string_type": "a string", "bool_type": "true or false", "list_type": "a list",
          "dict_type": "an object", "dataclass_type": "an object", "finite_number": "a finite number"}


def _reason(e: Mapping[str, Any]) -> str:
    kind, ctx = str(e.get("type")), e.get("ctx") or {}
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return bound_reason(sign, ctx.get(key), e.get("input"))
    if kind in _TYPES:
        return f"must be {_TYPES[kind]}, got {shown(e.get('input'))}"
    if kind == "string_pattern_mismatch":
        return pattern_reason(ctx.get("pattern"), e.get("input"))
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind in ("string_too_short", "too_short"):
        return "must not be empty" if ctx.get("min_length") == 1 else str(e.get("msg", "too short"))
    return str(e.get("msg", "invalid"))


class Invalid(Exception):
    """A request that does not match its document: one :class:`ErrorItem` per offending field (422)."""

    def __init__(self, items: list[ErrorItem]):
        super().__init__("; ".join(f"{i.field}: {i.reason}" for i in items))
        self.items = items


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def adapter(cls: Any) -> TypeAdapter[Any]:
    """The (cached) pydantic adapter of a contract document."""
    ta = _ADAPTERS.get(cls)
    if ta is None:
        ta = _ADAPTERS[cls] = TypeAdapter(cls)
    return ta


def parse(cls: type[T], raw: bytes | str) -> T:
    """``raw`` JSON validated as the document ``cls``; :class:`Invalid` naming every offending field, or a key
    given twice in one object."""
    try:
        doc: T = adapter(cls).validate_json(raw)
    except ValidationError as exc:
        raise Invalid(error_items(exc.errors())) from None
    unique_keys(raw if isinstance(raw, bytes) else raw.encode(), doc)
    return doc


def unique_keys(raw: bytes, doc: Any) -> None:
    """:class:`Invalid` when an object of the JSON document ``raw`` names a key twice.

    ``doc``: the document validated from ``raw``; the keys it has without its defaults (:func:`given_keys`) are
    keys ``raw`` holds (required fields, and optional ones with a value). Without an escape in ``raw``, every key
    ends with ``"`` and ``:`` (no white space between: JSON's is space, tab, LF, CR); when ``raw`` has exactly as
    many keys as ``doc``, none can be there twice (the usual case: two counts). Otherwise ``raw`` is parsed again
    with a check of every object."""
    if b"\\" not in raw and _SPACED.search(raw) is None and raw.count(b'":') == given_keys(doc):
        return
    try:
        json.loads(raw, object_pairs_hook=_pairs)
    except _Duplicate as exc:
        raise Invalid([ErrorItem(field="body", reason=f"invalid JSON: the key {str(exc)[:100]!r} is given twice "
                                                      "in one object")]) from None
    except (ValueError, RecursionError):
        pass  # what the validation accepted but Python's parser does not read has no duplicate it could find


class _Duplicate(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return out


#: a quote followed by JSON white space: maybe a key followed by its colon later (``"a" : 1``). One pattern with a
#: literal first byte: 5 µs on a 16 KB statistics post, where four ``in`` tests of two-byte needles took 57 µs
_SPACED = re.compile(rb'"[ \t\n\r]')


def given_keys(doc: Any) -> int:
    """The number of keys of ``doc`` serialised without its defaults (what ``raw`` must hold once each).

    A document whose fields with a value are all of primitive types (numbers, strings, lists of them: a statistics
    post as arrays) is counted from its fields: serialising its 2,000 numbers only to count 4 keys was a tenth of
    the server's CPU per post. Any other is serialised and its keys counted."""
    flat = _FLAT.get(type(doc))
    if flat is None:
        flat = _FLAT[type(doc)] = _flat_fields(type(doc))
    if flat:
        n = 0
        for name, primitive, default in flat:
            value = getattr(doc, name)
            if value is default or value == default:
                continue
            if not primitive:
                break
            n += 1
        else:
            return n
    return encode(doc, exclude_defaults=True).count(b'":')


#: per document class: (field, primitive, default) of each field, or () when it is not a dataclass
_FLAT: dict[type, tuple[tuple[str, bool, Any], ...]] = {}
_NO_DEFAULT = object()


def _flat_fields(cls: type) -> tuple[tuple[str, bool, Any], ...]:
    if not dataclasses.is_dataclass(cls):
        return ()
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        default = (f.default if f.default is not dataclasses.MISSING else
                   f.default_factory() if f.default_factory is not dataclasses.MISSING else _NO_DEFAULT)
        out.append((f.name, _primitive(hints[f.name]), default))
    return tuple(out)


def _primitive(tp: Any) -> bool:
    """Whether every value of type ``tp`` is a JSON number, string, boolean, null or a list of those."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _primitive(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        return all(_primitive(a) for a in typing.get_args(tp) if a is not Ellipsis)
    if origin is typing.Literal:
        return True
    return tp in (int, float, str, bool, type(None))


def in_worker(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """``fn(*args)`` in a solver worker: ``("ok", value)``, or the request's refusal (:class:`Invalid`,
    :class:`InvalidInput`, :class:`TooLarge`) as plain data that :func:`unwrap` raises again in the server."""
    try:
        return "ok", fn(*args)
    except Invalid as exc:
        return "refused", "invalid", exc.items
    except InvalidInput as exc:
        return "refused", "input", (exc.field, exc.reason)
    except TooLarge as exc:
        return "refused", "large", str(exc)
    except Exception as exc:  # a bug: the request gets a 500, the worker stays
        return "error", f"{type(exc).__name__}: {exc}"


def unwrap(out: tuple[Any, ...]) -> Any:
    """The value of :func:`in_worker`'s answer, or its refusal raised."""
    if out[0] == "ok":
        return out[1]
    if out[0] == "refused":
        kind, what = out[1], out[2]
        raise Invalid(what) if kind == "invalid" else InvalidInput(*what) if kind == "input" else TooLarge(what)
    raise RuntimeError(out[1])


@dataclass
class StatsColumns:
    """A statistics document read in a solver worker, its key groups and edges as columns: sending 200,000 key
    group objects back would cost the event loop seconds to unpickle, columns a few milliseconds."""

    doc: Stats  # without its key groups and edges
    ids: list[str] | None
    load: list[float] | None
    state: list[float | None] | None
    edges: tuple[list[str], list[str], list[float]]

    @classmethod
    def read(cls, raw: bytes) -> StatsColumns:
        """``raw`` validated as :class:`Stats` (:func:`parse`) and cut into columns."""
        doc = parse(Stats, raw)
        kgs, edges = doc.key_groups, doc.communication
        columns = cls(replace(doc, key_groups=None, communication=[]), None if kgs is None else [k.id for k in kgs],
                      None if kgs is None else [k.load for k in kgs],
                      None if kgs is None else [k.state_bytes for k in kgs],
                      ([e.src for e in edges], [e.dst for e in edges], [e.rate for e in edges]))
        return columns

    def stats(self, job_order: list[str]) -> Stats:
        """The document again (pure Python: run it in a thread, the event loop keeps the GIL every few ms). Key
        groups given by id exactly in ``job_order`` (every key group of the job, in its order: what a driver
        usually posts) come back as the equivalent arrays, the other forms as they were."""
        src, dst, rate = self.edges
        edges = [Edge(src=a, dst=b, rate=r) for a, b, r in zip(src, dst, rate, strict=True)]
        doc = replace(self.doc, communication=edges)
        if self.ids is None or self.load is None or self.state is None:
            return doc
        given = [v for v in self.state if v is not None]
        if doc.load is None and doc.state_bytes is None and self.ids == job_order \
                and sum(self.load) <= MAX_MAGNITUDE and sum(given) <= MAX_MAGNITUDE:  # (else its 422 names the id)
            return replace(doc, load=self.load, state_bytes=self.state if given else None)
        return replace(doc, key_groups=[KeyGroupStats(id=i, load=x, state_bytes=b)
                                        for i, x, b in zip(self.ids, self.load, self.state, strict=True)])


def encode(doc: Any, cls: Any = None, exclude_defaults: bool = False) -> bytes:
    """A contract document (or a list of them: give ``cls``, e.g. ``list[JobSummary]``) as JSON bytes."""
    return adapter(type(doc) if cls is None else cls).dump_json(doc, by_alias=True, exclude_defaults=exclude_defaults)


def schema(cls: Any) -> dict[str, Any]:
    """The JSON schema of a document, with its sub-documents under ``$defs`` (OpenAPI components)."""
    return adapter(cls).json_schema(ref_template="#/components/schemas/{model}")


#: the longest part of a field path echoed back (an unknown key may be of any length)
PART = 80


def field_path(loc: Iterable[Any]) -> str:
    """``("key_groups", 3, "load")`` -> ``key_groups[3].load``, ``("path", "job_id")`` -> ``job_id`` (each name cut at
    :data:`PART` characters)."""
    out = ""
    for part in loc:
        if part in ("body", "path", "query") and not out:  # where it came from: the name alone is the field
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = str(part)
            out += ("." if out else "") + (name if len(name) <= PART else name[:PART] + "…")
    return out


_PRIMITIVE_TAGS = ("str", "int", "float", "bool")


def _is_union_tag(part: Any) -> bool:
    """pydantic names the member of a union it tried in the location: a document ("JobNode", "ScalingChange"), a
    type ("str", "int") or a constrained one ("constrained-str", "function-after[...]")."""
    return isinstance(part, str) and (part[:1].isupper() or part in _PRIMITIVE_TAGS
                                      or part.startswith(("constrained-", "function-")))


def _member_kind(tag: str) -> type:
    """The JSON type a union member takes: a document an object, a constrained or plain type its own."""
    base = tag.removeprefix("constrained-")
    return {"str": str, "int": int, "float": float, "bool": bool}.get(base, dict)


def _union_errors(errors: list[tuple[list[Any], Mapping[str, Any]]]) -> list[tuple[list[Any], Mapping[str, Any]]]:
    """Each error with its location, where a union was tried, as the error of the member the value was meant for:
    the member whose errors reach deepest into the value (it took the value's type), else the member of the value's
    JSON type; the member's tag is left out of the location (unions within unions likewise)."""
    out: list[tuple[list[Any], Mapping[str, Any]]] = []
    groups: dict[tuple[Any, ...], dict[str, list[tuple[list[Any], Mapping[str, Any]]]]] = {}
    for loc, e in errors:
        t = next((i for i, p in enumerate(loc) if _is_union_tag(p)), None)
        if t is None:
            out.append((loc, e))
        else:
            groups.setdefault(tuple(loc[:t]), {}).setdefault(str(loc[t]), []).append((loc[:t] + loc[t + 1:], e))
    for prefix, members in groups.items():
        def rank(tag: str, depth: int = len(prefix), members: dict[str, list[Any]] = members) -> tuple[int, bool]:
            items = members[tag]
            deepest = max(len(loc) for loc, _ in items) - depth
            whole = [e.get("input") for loc, e in items if len(loc) == depth]
            matches = any(isinstance(v, _member_kind(tag)) and not isinstance(v, bool) for v in whole)
            return deepest, matches
        out.extend(_union_errors(members[max(members, key=rank)]))
    return out


def error_items(errors: Iterable[Mapping[str, Any]]) -> list[ErrorItem]:
    """pydantic's errors as ``{"field", "reason"}`` items (the first per field and reason)."""
    out: list[ErrorItem] = []
    seen: set[tuple[str, str]] = set()
    for loc, e in _union_errors([(list(e.get("loc", ())), e) for e in errors]):
        if e.get("type") == "json_invalid":
            item = ErrorItem(field="body", reason=f"invalid JSON: {e.get('msg')}")
        else:
            item = ErrorItem(field=field_path(loc) or "body", reason=_reason(e))
        key = (item.field, item.reason)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
