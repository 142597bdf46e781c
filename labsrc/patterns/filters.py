"""Metadata filters in a small MongoDB-like language, in memory and as SQL.

A filter narrows the searchable universe **before** ranking, exactly like the
evidence boundary: a chunk that fails the filter is removed, so it never gets a
rank, never shifts a BM25 statistic and can never come back "with score 0"
(the mistake the lab's style guide calls out in minsearch and bm25s).

The language::

    {"region": "EU"}                               # a bare value means $eq
    {"days": {"$gte": 14, "$lt": 31}}              # several operators are ANDed
    {"$or": [{"tier": "vip"}, {"path": {"$prefix": "eu/"}}]}
    {"tags": "refunds"}                            # on a list field: any element equals

Operators: ``$eq $ne $gt $gte $lt $lte $in $nin $prefix $exists`` on a field and
``$and $or`` over sub-filters. Several fields in one object are ANDed. Dotted
names reach into nested objects (``"owner.team"``).

Types are compared strictly, as MongoDB does: ``True`` is not ``1`` and ``"5"``
is not ``5``; numbers (int or float) compare with numbers, strings with strings.
A missing field matches ``$ne``, ``$nin``, ``{"$exists": False}`` and ``None``
(null or missing), and nothing else.

:func:`compile_filter_sql` turns the same filter into a SQLite ``WHERE`` clause
over a JSON column. Every value *and every field path* is a bound parameter;
nothing from the filter is ever pasted into the SQL text. The tests check that
both forms select the same rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from labsrc.errors import InvalidArgument

__all__ = [
    "FIELD_OPERATORS",
    "FILTER_OPERATORS",
    "LOGICAL_OPERATORS",
    "check_filter",
    "compile_filter_sql",
    "matches_filter",
]

_MISSING = object()

#: A field name: dot-separated segments of letters, digits, ``_`` and ``-``.
_SEGMENT = re.compile(r"[A-Za-z0-9_\-]+")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?")


# --- typing rules shared by both back ends -------------------------------------------------


def _kind(value: Any) -> str:
    """The comparison class of a JSON value: bool, number, text, null, array, object."""
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is a subclass of int
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _check_scalar(op: str, value: Any, *, allow: tuple[str, ...] = ("bool", "number", "text", "null")) -> None:
    kind = _kind(value)
    if kind not in allow:
        raise InvalidArgument(f"{op} needs a value of type {'/'.join(allow)}, not {type(value).__name__} {value!r}")
    if kind == "number" and not math.isfinite(value):
        raise InvalidArgument(f"{op} needs a finite number, not {value!r}")


def _same(a: Any, b: Any) -> bool:
    """Strict equality: same comparison class and equal."""
    return _kind(a) == _kind(b) and a == b


# --- in memory --------------------------------------------------------------------------------


def _lookup(metadata: Mapping[str, Any], field: str) -> Any:
    value: Any = metadata
    for segment in field.split("."):
        if not isinstance(value, Mapping) or segment not in value:
            return _MISSING
        value = value[segment]
    return value


def _any_element(value: Any, test: Callable[[Any], bool]) -> bool:
    # A list field matches an equality test when any of its elements does (MongoDB's rule).
    if isinstance(value, (list, tuple)):
        return any(test(element) for element in value)
    return test(value)


def _py_eq(value: Any, operand: Any) -> bool:
    if value is _MISSING:
        return operand is None  # {"x": None} matches a missing x, as in MongoDB
    return _any_element(value, lambda v: _same(v, operand))


def _py_in(value: Any, operand: Sequence[Any]) -> bool:
    return any(_py_eq(value, item) for item in operand)


def _py_order(test: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    def compare(value: Any, operand: Any) -> bool:
        return value is not _MISSING and _kind(value) == _kind(operand) and test(value, operand)

    return compare


def _py_prefix(value: Any, operand: str) -> bool:
    return isinstance(value, str) and value.startswith(operand)


def _py_exists(value: Any, operand: bool) -> bool:
    return (value is not _MISSING) == operand


# --- as SQL (SQLite JSON1) ----------------------------------------------------------------------
#
# A field predicate is written against two SQL expressions: the value and its JSON
# type. For the field itself they are json_extract(col, ?) / json_type(col, ?); for
# the elements of a list field they are the `value` / `type` columns of json_each.
# Every predicate is wrapped in COALESCE(..., 0) so SQL's NULL never leaks into
# NOT: a missing field is simply "false", just as in Python.

_SQL_TYPES = {"bool": ("'true'", "'false'"), "number": ("'integer'", "'real'"), "text": ("'text'",), "null": ("'null'",)}

Sql = tuple[str, list[Any]]


def _typed_eq(value: Sql, type_: Sql, operand: Any) -> Sql:
    """Strict equality written against a value expression and its JSON-type expression."""
    kind = _kind(operand)
    if kind == "null":
        return f"{type_[0]} = 'null'", [*type_[1]]
    if kind == "bool":
        return f"{type_[0]} = {_SQL_TYPES['bool'][0 if operand else 1]}", [*type_[1]]
    types = ", ".join(_SQL_TYPES[kind])
    return f"({type_[0]} IN ({types}) AND {value[0]} = ?)", [*type_[1], *value[1], operand]


class _SqlField:
    """SQL fragments for one field path of the JSON column (the path is always a bound parameter)."""

    def __init__(self, column: str, field: str) -> None:
        self.column = column
        self.path = "$" + "".join(f'."{segment}"' for segment in field.split("."))
        self.value: Sql = (f"json_extract({column}, ?)", [self.path])
        self.type: Sql = (f"json_type({column}, ?)", [self.path])

    def eq(self, operand: Any) -> Sql:
        scalar_sql, scalar_params = _typed_eq(self.value, self.type, operand)
        element_sql, element_params = _typed_eq(("je.value", []), ("je.type", []), operand)
        sql = (
            f"{scalar_sql} OR ({self.type[0]} = 'array' AND EXISTS "
            f"(SELECT 1 FROM json_each({self.column}, ?) AS je WHERE {element_sql}))"
        )
        params = [*scalar_params, *self.type[1], self.path, *element_params]
        if operand is None:  # null also matches a missing field
            sql += f" OR {self.type[0]} IS NULL"
            params += self.type[1]
        return f"({sql})", params

    def order(self, symbol: str, operand: Any) -> Sql:
        types = ", ".join(_SQL_TYPES[_kind(operand)])
        sql = f"({self.type[0]} IN ({types}) AND {self.value[0]} {symbol} ?)"
        return sql, [*self.type[1], *self.value[1], operand]

    def prefix(self, operand: str) -> Sql:
        # substr/length instead of LIKE, so '%' and '_' in the prefix are ordinary characters.
        sql = f"({self.type[0]} = 'text' AND substr({self.value[0]}, 1, length(?)) = ?)"
        return sql, [*self.type[1], *self.value[1], operand, operand]

    def exists(self, operand: bool) -> Sql:
        return f"{self.type[0]} IS {'NOT ' if operand else ''}NULL", [*self.type[1]]


def _coalesce(sql: str) -> str:
    return f"COALESCE({sql}, 0)"


def _sql_or(parts: list[Sql]) -> Sql:
    params: list[Any] = []
    for _, p in parts:
        params.extend(p)
    return "(" + " OR ".join(_coalesce(s) for s, _ in parts) + ")", params


def _sql_and(parts: list[Sql]) -> Sql:
    if not parts:
        return "1", []
    params: list[Any] = []
    for _, p in parts:
        params.extend(p)
    return "(" + " AND ".join(_coalesce(s) for s, _ in parts) + ")", params


def _sql_not(part: Sql) -> Sql:
    return f"(NOT {_coalesce(part[0])})", part[1]


# --- the operator registry ------------------------------------------------------------------------


def _check_list(op: str, operand: Any) -> None:
    if not isinstance(operand, (list, tuple)) or isinstance(operand, str):
        raise InvalidArgument(f"{op} needs a list of values, not {type(operand).__name__} {operand!r}")
    for item in operand:
        _check_scalar(op, item)


def _check_order(op: str, operand: Any) -> None:
    _check_scalar(op, operand, allow=("number", "text"))


def _check_prefix(op: str, operand: Any) -> None:
    _check_scalar(op, operand, allow=("text",))


def _check_exists(op: str, operand: Any) -> None:
    if not isinstance(operand, bool):
        raise InvalidArgument(f"$exists needs true or false, not {operand!r}")


_ORDER_SYMBOLS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_ORDER_TESTS: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}

#: operator → (argument check, in-memory test, SQL builder)
_FIELD_OPS: dict[str, tuple[Callable[[str, Any], None], Callable[[Any, Any], bool], Callable[[_SqlField, Any], Sql]]] = {
    "$eq": (_check_scalar, _py_eq, lambda f, v: f.eq(v)),
    "$ne": (_check_scalar, lambda value, v: not _py_eq(value, v), lambda f, v: _sql_not(f.eq(v))),
    "$in": (_check_list, _py_in, lambda f, vs: _sql_or([f.eq(v) for v in vs]) if vs else ("0", [])),
    "$nin": (
        _check_list,
        lambda value, vs: not _py_in(value, vs),
        lambda f, vs: _sql_not(_sql_or([f.eq(v) for v in vs])) if vs else ("1", []),
    ),
    **{
        op: (_check_order, _py_order(_ORDER_TESTS[op]), (lambda symbol: lambda f, v: f.order(symbol, v))(symbol))
        for op, symbol in _ORDER_SYMBOLS.items()
    },
    "$prefix": (_check_prefix, _py_prefix, lambda f, v: f.prefix(v)),
    "$exists": (_check_exists, _py_exists, lambda f, v: f.exists(v)),
}

#: Operators that apply to one field.
FIELD_OPERATORS = tuple(sorted(_FIELD_OPS))
#: Operators that combine sub-filters.
LOGICAL_OPERATORS = ("$and", "$or")
#: Every operator the language knows, for error messages and docs.
FILTER_OPERATORS = tuple(sorted(FIELD_OPERATORS + LOGICAL_OPERATORS))


def _unknown(op: str) -> InvalidArgument:
    return InvalidArgument(f"unknown filter operator {op!r}; valid operators: {', '.join(FILTER_OPERATORS)}")


def _check_field_name(field: Any) -> str:
    if not isinstance(field, str) or not field:
        raise InvalidArgument(f"a filter field must be a non-empty string, not {field!r}")
    if field.startswith("$"):
        raise _unknown(field)
    for segment in field.split("."):
        if not _SEGMENT.fullmatch(segment):
            raise InvalidArgument(
                f"invalid filter field {field!r}: use dot-separated names of letters, digits, '_' and '-'"
            )
    return field


def _field_conditions(field: str, condition: Any) -> list[tuple[str, Any]]:
    """The ``(operator, operand)`` pairs of one field's condition; a bare value is ``$eq``."""
    if isinstance(condition, Mapping):
        if not condition:
            raise InvalidArgument(f"empty condition for field {field!r}; write an operator such as {{'$eq': ...}}")
        pairs = []
        for op, operand in condition.items():
            if not isinstance(op, str) or not op.startswith("$"):
                raise InvalidArgument(
                    f"field {field!r}: expected operators, got key {op!r} (comparing whole objects is not "
                    f"supported; use a dotted field name); valid operators: {', '.join(FIELD_OPERATORS)}"
                )
            if op not in _FIELD_OPS:
                raise _unknown(op)
            _FIELD_OPS[op][0](op, operand)
            pairs.append((op, operand))
        return pairs
    _check_scalar("$eq", condition)
    return [("$eq", condition)]


def check_filter(filter: Mapping[str, Any]) -> Mapping[str, Any]:
    """Validate ``filter`` (raising :class:`InvalidArgument` naming the problem) and return it."""
    if not isinstance(filter, Mapping):
        raise InvalidArgument(f"a filter must be a JSON object (dict), not {type(filter).__name__}")
    for key, condition in filter.items():
        if key in LOGICAL_OPERATORS:
            if not isinstance(condition, (list, tuple)) or not condition:
                raise InvalidArgument(f"{key} needs a non-empty list of filters, not {condition!r}")
            for sub in condition:
                check_filter(sub)
        else:
            _field_conditions(_check_field_name(key), condition)
    return filter


def matches_filter(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """True when ``metadata`` satisfies ``filter`` (``None`` or ``{}`` matches everything)."""
    if filter is None:
        return True
    check_filter(filter)
    return _matches(metadata, filter)


def _matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    for key, condition in filter.items():
        if key == "$and":
            if not all(_matches(metadata, sub) for sub in condition):
                return False
        elif key == "$or":
            if not any(_matches(metadata, sub) for sub in condition):
                return False
        else:
            value = _lookup(metadata, key)
            for op, operand in _field_conditions(key, condition):
                if not _FIELD_OPS[op][1](value, operand):
                    return False
    return True


def compile_filter_sql(filter: Mapping[str, Any] | None, *, column: str = "metadata") -> Sql:
    """``(sql, params)``: a SQLite boolean expression over the JSON text in ``column``.

    Use it as ``f"SELECT ... WHERE {sql}"`` with ``params`` passed to
    ``execute``. Values and field paths are bound as ``?`` parameters; only
    ``column``, which must be a plain identifier (optionally ``table.column``),
    appears in the SQL text.
    """
    if not isinstance(column, str) or not _COLUMN.fullmatch(column):
        raise InvalidArgument(f"column must be a plain SQL identifier such as 'metadata' or 'c.metadata', not {column!r}")
    if filter is None:
        return "1", []
    check_filter(filter)
    sql, params = _compile(filter, column)
    return _coalesce(sql), params


def _compile(filter: Mapping[str, Any], column: str) -> Sql:
    parts: list[Sql] = []
    for key, condition in filter.items():
        if key == "$and":
            parts.append(_sql_and([_compile(sub, column) for sub in condition]))
        elif key == "$or":
            parts.append(_sql_or([_compile(sub, column) for sub in condition]))
        else:
            field = _SqlField(column, key)
            for op, operand in _field_conditions(key, condition):
                parts.append(_FIELD_OPS[op][2](field, operand))
    return _sql_and(parts)
