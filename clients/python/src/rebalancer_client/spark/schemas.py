"""The declared schemas of a function's durable state, kept in the commit record and checked on a restart.

A function (:class:`rebalancer_client.spark.functions.KeyedFunction` or
:class:`rebalancer_client.spark.group_state.GroupStateFunction`) declares its state and output schemas as Spark DDL.
Each commit record keeps them (``commit_extra``: ``{"schemas": {"state": <StructType JSON>, "output": …},
"format": …}``), and a restart compares the declared schemas with the stored ones before any row is read
(:func:`check_evolution`). The rules, those of Spark's state schema evolution for a row of named columns:

* a **new nullable column** is accepted: the keys stored before read null for it;
* a column whose **type changed** (``n bigint`` → ``n string``), a column **removed**, or one **renamed** (seen as
  a removal and an addition) is refused with a ``ValueError`` naming the column and both types — the stored
  values would otherwise be read as another type (a long read back as the text ``'2'``);
* a new column declared ``NOT NULL`` is refused (the stored keys have no value for it);
* the order of the columns may change (they are matched by name).

The output schema follows the same rules: the output of a replayed batch is read back from the store in it.
A commit record without schemas (written before they were kept) is not checked. Comparing types needs no Spark
session: the schemas are compared as StructType JSON (``StructType.jsonValue()``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: what a commit record keeps of the schemas, under this key of ``commit_extra``
SCHEMAS_KEY = "schemas"
FORMAT_KEY = "format"


def _type_text(t: Any) -> str:
    """A field's type of a StructType JSON as Spark's simple string (``bigint``, ``array<string>``, …)."""
    if isinstance(t, str):
        return {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}.get(t, t)
    if isinstance(t, Mapping):
        kind = t.get("type")
        if kind == "array":
            return f"array<{_type_text(t.get('elementType'))}>"
        if kind == "map":
            return f"map<{_type_text(t.get('keyType'))},{_type_text(t.get('valueType'))}>"
        if kind == "struct":
            inner = ",".join(f"{f['name']}:{_type_text(f['type'])}" for f in t.get("fields", []))
            return f"struct<{inner}>"
    return str(t)


def _fields(schema: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """``{name: (type, nullable)}`` of a StructType JSON."""
    return {str(f["name"]): (_type_text(f["type"]), bool(f.get("nullable", True))) for f in schema.get("fields", [])}


def check_evolution(stored: Mapping[str, Any] | None, declared: Mapping[str, Any], what: str, where: str = "") -> None:
    """Raise ``ValueError`` when the ``declared`` schema (StructType JSON) cannot read state written under the
    ``stored`` one (see the module docstring); ``what`` names the schema (``"state"``/``"output"``) in the message,
    ``where`` the state directory. ``stored`` None: nothing to check."""
    if stored is None:
        return
    old, new = _fields(stored), _fields(declared)
    at = f" in {where}" if where else ""
    for name, (t_old, _) in old.items():
        if name not in new:
            added = [n for n in new if n not in old]
            hint = f" (renamed to {added[0]!r}?)" if len(added) == 1 else ""
            raise ValueError(f"the declared {what} schema has no column {name!r} ({t_old}), which the stored state"
                             f"{at} has{hint}: a {what} schema may gain nullable columns, not lose or rename any. "
                             f"Stored: {_ddl(old)}; declared: {_ddl(new)}")
        t_new = new[name][0]
        if t_new != t_old:
            raise ValueError(f"column {name!r} of the {what} schema changed type: stored as {t_old}{at}, declared "
                             f"as {t_new}; a {what} column keeps its type (add a new column instead). "
                             f"Stored: {_ddl(old)}; declared: {_ddl(new)}")
    for name, (t_new, nullable) in new.items():
        if name not in old and not nullable:
            raise ValueError(f"the new {what} column {name!r} ({t_new}) is declared NOT NULL: the keys stored"
                             f"{at} have no value for it (declare it nullable)")


def check_format(stored: Any, declared: str, where: str = "") -> None:
    """Raise ``ValueError`` when the state was written by another kind of function (``stored`` None: unknown)."""
    if stored is not None and stored != declared:
        raise ValueError(f"the state{f' in {where}' if where else ''} was written by a {stored!r} function; this "
                         f"driver runs a {declared!r} function, whose state is stored differently (start it on a "
                         f"new state directory)")


def _ddl(fields: Mapping[str, tuple[str, bool]]) -> str:
    return ", ".join(f"{n} {t}" + ("" if nullable else " not null") for n, (t, nullable) in fields.items())
