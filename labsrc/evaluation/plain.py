"""An answer reduced to plain data where it was made: nothing user-defined reaches the judge.

The gate compares answers exactly, and a comparison runs the compared values'
own methods: a ``str`` subclass whose ``__eq__`` loops hangs the judge, a NumPy
array in a trace makes ``==`` ambiguous, a ``None`` timing breaks the
percentiles. So every answer is reduced inside the worker that asked it, on the
search's clock, to the builtin types alone:

==============  ====================================================================
what            reduced to
==============  ====================================================================
chunk ids       ``str`` (a subclass is copied with ``str.__str__``, no user method runs)
scores          ``float`` (any real number but a ``bool``; a ``nan`` is kept: the reader refuses it)
trace           ``versions``: ``str`` to ``str`` or number; ids: ``str``; ``query_kind``: ``str``
timings         ``str`` stage to finite ``float`` milliseconds
payload         every other field a result carries, flattened to ``(field, value)`` pairs whose
                values are ``str``, ``int``, ``float``, ``bool`` or ``None`` (:func:`payload_fields`)
==============  ====================================================================

A value that cannot be reduced raises :class:`PlainError`, naming the field
and the value's type: the answer's bug, so its case fails (exit 1), never a
traceback in the gate. The gate's side of the pipe unpickles builtins only
(:func:`loads_plain`), so what slipped past the reduction is refused too.

**Payload** is what a RAG application hands to the model: a dict's other keys,
a LangChain ``Document``'s ``page_content`` and ``metadata``, an object's public
attributes (a Qdrant point's ``payload``, a LlamaIndex node's ``text``), the
chunk objects of a ``(PolicyChunk, score)`` pair or of a ``RetrievalResult``.
It is flattened without knowing what it means: nested mappings and sequences
become dotted paths (``metadata.source``, ``node.text``), dates their ISO form,
an enum its value, a long run of numbers (a vector) one digest. The gate
judges it exactly, like ids and scores (:mod:`labsrc.gate.noninterference`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import io
import math
import numbers
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_FIELDS",
    "PlainError",
    "PlainValue",
    "loads_plain",
    "payload_fields",
    "plain_id",
    "plain_score",
    "plain_str",
    "plain_timings",
    "plain_trace",
    "plain_value",
]

#: A payload value as the judge sees it.
PlainValue = str | int | float | bool | None

#: How deep a result's fields are followed (``metadata.a.b.c``...); deeper is refused.
MAX_DEPTH = 8
#: Fields one result may carry once flattened; more is refused (a result is not a database).
MAX_FIELDS = 512
#: Runs of more numbers than this (a vector) become one digest: equal vectors, equal digests.
_DIGEST_NUMBERS = 16


class PlainError(TypeError):
    """A value in an answer that cannot be reduced to plain data: names the field and the value's type."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        super().__init__(f"{field} is a {type(value).__name__}; expected {expected}")


def plain_str(value: object, field: str) -> str:
    """``value`` as an exact ``str``: a ``str`` subclass is copied by ``str.__str__`` (none of its methods run)."""
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    raise PlainError(field, value, "a str")


def plain_id(value: object, field: str) -> str:
    """A chunk id: an exact ``str``, or a ``str`` subclass that compares as one (copied).

    A subclass that redefines ``__eq__`` or ``__hash__`` is refused: an id must compare as the
    text it holds wherever the caller's application compares it, and the gate will not call
    either method to find out.
    """
    if type(value) is not str and isinstance(value, str):
        cls = type(value)
        if cls.__eq__ is not str.__eq__ or cls.__hash__ is not str.__hash__:
            raise PlainError(field, value, "a str (a str subclass that redefines __eq__ or __hash__ does not compare "
                                           "as its text)")
    return plain_str(value, field)


def plain_score(value: object, field: str) -> float:
    """A score: any real number but a ``bool``, as an exact ``float`` (its finiteness is the reader's check)."""
    if type(value) is float:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PlainError(field, value, "a number")
    return float(value)


def plain_timings(timings: object, field: str = "timings_ms") -> dict[str, float]:
    """Stage to milliseconds: ``str`` keys, finite ``float`` values."""
    if not isinstance(timings, Mapping):
        raise PlainError(field, timings, "a mapping of stage to milliseconds")
    out: dict[str, float] = {}
    for stage, ms in timings.items():
        name = plain_str(stage, f"{field} key")
        value = plain_score(ms, f"{field}[{name!r}]")
        if not math.isfinite(value):
            raise TypeError(f"{field}[{name!r}] is {value!r}; expected finite milliseconds")
        out[name] = value
    return out


def _scalar(value: object, field: str) -> PlainValue:
    """A version or a leaf: ``str``, ``bool``, ``int``, ``float`` or ``None``, exactly."""
    if value is None or type(value) in (str, int, float, bool):
        return value  # type: ignore[return-value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise PlainError(field, value, "a str or a number")


def plain_trace(trace: Mapping[str, Any], field: str = "trace") -> dict[str, Any]:
    """A trace's replay-stable part (``RetrievalTrace.to_dict(include_timings=False)``), reduced."""
    out: dict[str, Any] = {}
    for key, value in trace.items():
        name = plain_str(key, f"{field} key")
        where = f"{field} {name}"
        if name == "versions":
            if not isinstance(value, Mapping):
                raise PlainError(where, value, "a mapping of name to version")
            out[name] = {plain_str(k, f"{where} key"): _scalar(v, f"{where}[{k!r}]") for k, v in value.items()}
        elif name.endswith("_ids"):
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise PlainError(where, value, "a list of str ids")
            out[name] = [plain_id(v, f"{where}[{i}]") for i, v in enumerate(value)]
        else:
            out[name] = plain_value(value, where)
    return out


def plain_value(value: object, field: str, depth: int = 0) -> Any:
    """Any JSON-like value (scalars, mappings with str keys, sequences), exactly; else :class:`PlainError`."""
    if depth > MAX_DEPTH:
        raise PlainError(field, value, f"a value nested at most {MAX_DEPTH} deep")
    if isinstance(value, Mapping):
        return {plain_str(k, f"{field} key"): plain_value(v, f"{field}[{k!r}]", depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v, f"{field}[{i}]", depth + 1) for i, v in enumerate(value)]
    return _scalar(value, field)


# --- payload --------------------------------------------------------------------------------------


def _digest(numbers_: Sequence[float]) -> str:
    text = ",".join(repr(float(x)) for x in numbers_)
    return f"<{len(numbers_)} numbers sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}>"


def _members(obj: object) -> list[tuple[str, Any]] | None:
    """An object's public fields, by the first description it has: pydantic, a dataclass, ``__dict__``, ``__slots__``."""
    fields = getattr(type(obj), "model_fields", None)  # pydantic v2 (LangChain Document, Qdrant ScoredPoint, ...)
    if isinstance(fields, Mapping):
        return [(str(name), getattr(obj, name, None)) for name in fields]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f.name, getattr(obj, f.name, None)) for f in dataclasses.fields(obj)]
    own = getattr(obj, "__dict__", None)
    if isinstance(own, Mapping):
        return [(str(k), v) for k, v in own.items() if not str(k).startswith("_")]
    slots = [s for cls in type(obj).__mro__ for s in getattr(cls, "__slots__", ()) if isinstance(s, str)]
    if slots:
        return [(s, getattr(obj, s, None)) for s in slots if not s.startswith("_") and hasattr(obj, s)]
    return None


class _Flattener:
    """Walks one result into ``(field, value)`` leaves, bounded in depth and count, cycles named."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.out: dict[str, PlainValue] = {}
        self.open: dict[int, str] = {}

    def leaf(self, path: str, value: PlainValue) -> None:
        if len(self.out) >= MAX_FIELDS:
            raise TypeError(f"{self.what} carries more than {MAX_FIELDS} fields")
        self.out[path] = value

    def walk(self, value: object, path: str, depth: int) -> None:
        field = f"{self.what} field {path!r}"
        if depth > MAX_DEPTH:
            raise PlainError(field, value, f"a value nested at most {MAX_DEPTH} deep")
        if value is None or isinstance(value, (str, bool, numbers.Number)) and not isinstance(value, complex):
            self.leaf(path, _scalar(value, field))
            return
        if isinstance(value, (bytes, bytearray)):
            self.leaf(path, f"<{len(value)} bytes sha256:{hashlib.sha256(bytes(value)).hexdigest()[:16]}>")
            return
        if isinstance(value, (dt.date, dt.datetime, dt.time)):
            self.leaf(path, value.isoformat())
            return
        if isinstance(value, enum.Enum):
            self.walk(value.value, path, depth + 1)
            return
        if id(value) in self.open:
            self.leaf(path, f"<the object at {self.open[id(value)]!r}>")
            return
        tolist = getattr(value, "tolist", None)  # a NumPy array or scalar: its plain form
        if callable(tolist) and type(value).__module__.startswith("numpy"):
            self.walk(tolist(), path, depth)
            return
        self.open[id(value)] = path
        try:
            self._container(value, path, field, depth)
        finally:
            del self.open[id(value)]

    def _container(self, value: object, path: str, field: str, depth: int) -> None:
        prefix = f"{path}." if path else ""
        if isinstance(value, Mapping):
            for key in sorted(value, key=lambda k: repr(k)):
                name = key if type(key) is str else (str.__str__(key) if isinstance(key, str) else repr(key))
                self.walk(value[key], f"{prefix}{name}", depth + 1)
            return
        if isinstance(value, (list, tuple)):
            if len(value) > _DIGEST_NUMBERS and all(
                isinstance(x, numbers.Real) and not isinstance(x, bool) for x in value
            ):
                self.leaf(path, _digest(value))  # a vector: one field, equal exactly when every number is
                return
            for i, item in enumerate(value):
                self.walk(item, f"{path}[{i}]", depth + 1)
            return
        if isinstance(value, (set, frozenset)):
            raise PlainError(field, value, "a value with an order (a set has none)")
        members = _members(value)
        if members is None:
            raise PlainError(field, value, "a str, a number, a mapping, a list or an object with public fields")
        for name, item in members:
            self.walk(item, f"{prefix}{name}", depth + 1)


def payload_fields(item: object, rank: int, *, skip: Sequence[str] = ()) -> tuple[tuple[str, PlainValue], ...]:
    """Every field ``item`` carries, flattened, sorted by field name; the fields in ``skip`` left out.

    ``skip`` names the field the score was read from: scores are compared as scores (and not at
    all when the repeat build finds them noisy), not as payload.
    """
    flat = _Flattener(f"result {rank}")
    flat.walk(item, "", 0)
    return tuple(sorted((k, v) for k, v in flat.out.items() if k not in skip))


# --- the gate's side of the pipe -----------------------------------------------------------------


class _BuiltinsOnly(pickle.Unpickler):
    """Unpickles builtin containers and scalars; any class at all is refused (no user code runs here)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a worker sent a {module}.{name}; answers are reduced to builtins")


def loads_plain(data: bytes) -> Any:
    """``pickle.loads`` of builtins only: a message holding any class raises ``pickle.UnpicklingError``."""
    return _BuiltinsOnly(io.BytesIO(data)).load()
