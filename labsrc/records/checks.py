"""Argument checks for the records every stage takes: a caller, a corpus of chunks.

Public entry points (retrievers, lanes, the boundary) call these first, so a
wrong type is an :class:`~labsrc.errors.InvalidArgument` naming the argument and
the type it got, never an ``AttributeError`` from deep inside.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["check_caller", "check_chunks"]


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
