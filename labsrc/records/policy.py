"""Records: the policy chunk and the caller.

Both are frozen dataclasses, so a record can be shared between the boundary,
the lanes and the trace without anyone changing it underneath the others.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from labsrc.errors import InvalidArgument

__all__ = ["Caller", "PolicyChunk", "chunk_lookup"]


def _require_text(record: str, field: str, value: object, *, blank_ok: bool = False) -> None:
    """Refuse a non-string or a blank string, naming the record, the field and the value (as the file loaders do)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{record}: field {field!r} must be a string, got {type(value).__name__} {value!r}")
    if not blank_ok and not value.strip():
        raise InvalidArgument(f"{record}: field {field!r} must not be empty or blank, got {value!r}")


def _require_date(record: str, field: str, value: object, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    # A datetime is a date too, but compares with neither side of a day's range: refuse it by name.
    if not isinstance(value, dt.date) or isinstance(value, dt.datetime):
        shown = f"the string {value!r}" if isinstance(value, str) else f"{type(value).__name__} {value!r}"
        raise InvalidArgument(
            f"{record}: field {field!r} must be a datetime.date{' or None' if optional else ''}, got {shown}; "
            "write dt.date(2026, 4, 1), or read an ISO string with labsrc.records.loading.parse_date"
        )


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
        _require_text("PolicyChunk", "chunk_id", self.chunk_id)
        record = f"PolicyChunk {self.chunk_id!r}"
        # The boundary decides on region and acl_tag: a blank one would match a blank caller region or tag.
        for name in ("region", "acl_tag"):
            _require_text(record, name, getattr(self, name))
        for name in ("document_id", "parent_id", "version"):  # a plain drop-in record has no version
            _require_text(record, name, getattr(self, name), blank_ok=True)
        _require_date(record, "effective_from", self.effective_from)
        _require_date(record, "effective_to", self.effective_to, optional=True)
        if not isinstance(self.text, str):
            raise InvalidArgument(f"{record}: field 'text' must be a string, got {type(self.text).__name__}")
        for name in ("title", "path"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InvalidArgument(f"{record}: field {name!r} must be a string or None, got {type(value).__name__}")
        if self.metadata is not None and not isinstance(self.metadata, Mapping):
            raise InvalidArgument(f"{record}: field 'metadata' must be a mapping or None, got {type(self.metadata).__name__}")
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
        _require_text("Caller", "actor_id", self.actor_id)
        record = f"Caller {self.actor_id!r}"
        _require_text(record, "region", self.region)
        tags = self.acl_tags
        # A string is iterable too: frozenset("support:eu") would be a set of letters.
        if isinstance(tags, (str, bytes)) or not isinstance(tags, Iterable):
            raise InvalidArgument(
                f"{record}: field 'acl_tags' must be a collection of tag strings, got {type(tags).__name__} {tags!r}; "
                f"write acl_tags={{{tags!r}}} for one tag" if isinstance(tags, str) else
                f"{record}: field 'acl_tags' must be a collection of tag strings, got {type(tags).__name__} {tags!r}"
            )
        tags = tuple(tags)
        for tag in tags:
            _require_text(record, "acl_tags", tag)
        # Accept any iterable of tags but store an immutable set.
        object.__setattr__(self, "acl_tags", frozenset(tags))


def chunk_lookup(chunks: Sequence[PolicyChunk]) -> dict[str, PolicyChunk]:
    """id → chunk, refusing duplicate ids (two chunks with one id cannot be told apart)."""
    lookup: dict[str, PolicyChunk] = {}
    for chunk in chunks:
        if chunk.chunk_id in lookup:
            raise InvalidArgument(f"duplicate chunk_id {chunk.chunk_id!r} in the searchable universe")
        lookup[chunk.chunk_id] = chunk
    return lookup
