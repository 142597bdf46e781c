"""Records: the policy chunk and the caller.

Both are frozen dataclasses, so a record can be shared between the boundary,
the lanes and the trace without anyone changing it underneath the others.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from labsrc.errors import InvalidArgument

__all__ = ["Caller", "PolicyChunk", "chunk_lookup"]


def _freeze_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    # A read-only copy: the caller's dict can change later without changing the record.
    return None if value is None else MappingProxyType(dict(value))


@dataclass(frozen=True)
class PolicyChunk:
    """One retrievable unit of a policy document (lesson spec, "Records").

    ``effective_to`` is inclusive; ``None`` means "still in force".
    ``title``, ``path`` and ``metadata`` are optional extras for richer corpora.
    """

    chunk_id: str
    document_id: str
    parent_id: str
    version: str
    region: str
    acl_tag: str
    effective_from: dt.date
    effective_to: dt.date | None
    text: str
    title: str | None = None
    path: str | None = None
    # Excluded from the hash (a mapping is not hashable) but still part of equality.
    metadata: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", _freeze_mapping(self.metadata))
        # Lanes cache their indexes keyed by the tuple of permitted chunks, so a
        # chunk is hashed once per request; computing the field hash once keeps
        # that O(1) per chunk instead of rehashing every field each time.
        object.__setattr__(
            self,
            "_hash",
            hash(
                (self.chunk_id, self.document_id, self.parent_id, self.version, self.region,
                 self.acl_tag, self.effective_from, self.effective_to, self.text, self.title, self.path)
            ),
        )

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Caller:
    """Who is asking: an actor in one region holding a set of ACL tags."""

    actor_id: str
    region: str
    acl_tags: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Accept any iterable of tags but store an immutable set.
        object.__setattr__(self, "acl_tags", frozenset(self.acl_tags))


def chunk_lookup(chunks: Sequence[PolicyChunk]) -> dict[str, PolicyChunk]:
    """id → chunk, refusing duplicate ids (two chunks with one id cannot be told apart)."""
    lookup: dict[str, PolicyChunk] = {}
    for chunk in chunks:
        if chunk.chunk_id in lookup:
            raise InvalidArgument(f"duplicate chunk_id {chunk.chunk_id!r} in the searchable universe")
        lookup[chunk.chunk_id] = chunk
    return lookup
