"""Argument checks for the records every stage takes: a caller, a corpus of chunks, text a store keeps.

Public entry points (retrievers, lanes, the boundary) call these first, so a
wrong type is an :class:`~labsrc.errors.InvalidArgument` naming the argument and
the type it got, never an ``AttributeError`` from deep inside.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["check_caller", "check_chunks", "check_utf8"]


def check_utf8(value: str, what: str, store: str) -> None:
    """Refuse a string UTF-8 cannot encode (a lone surrogate, as ``surrogateescape`` decoding leaves) before a
    store's driver raises a bare ``UnicodeEncodeError``. ``what`` names the value, ``store`` the store
    (``"PostgreSQL's"``, ``"SQLite's"``), both in the message."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(
            f"{what} is not valid Unicode (a lone surrogate at position {exc.start}), which {store} UTF-8 text "
            "cannot store"
        ) from None


def check_caller(caller: object, name: str = "caller") -> Caller:
    """``caller`` must be a :class:`~labsrc.records.policy.Caller` (an actor id string is not one)."""
    if not isinstance(caller, Caller):
        hint = "; look it up first, e.g. lesson().caller(actor_id)" if isinstance(caller, str) else ""
        raise InvalidArgument(f"{name} must be a labsrc.Caller, not {type(caller).__name__}{hint}")
    return caller


def check_chunks(chunks: Any, name: str = "chunks") -> tuple[PolicyChunk, ...]:
    """``chunks`` as a tuple: an iterable of :class:`~labsrc.records.policy.PolicyChunk` (checked, not changed)."""
    if not isinstance(chunks, Iterable) or isinstance(chunks, (str, bytes, Mapping)):
        raise InvalidArgument(f"{name} must be a sequence of labsrc.PolicyChunk, not {type(chunks).__name__}")
    items = tuple(chunks)
    for i, chunk in enumerate(items):
        if not isinstance(chunk, PolicyChunk):
            raise InvalidArgument(f"{name}[{i}] must be a labsrc.PolicyChunk, not {type(chunk).__name__}")
    return items
