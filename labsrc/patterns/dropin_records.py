"""The drop-in retriever's records: a plain dict becomes a :class:`~labsrc.records.PolicyChunk`.

Two kinds of input are accepted, and one corpus is all of one kind:

* **policy records** carry ``region``, ``acl_tag`` and ``effective_from`` (ISO
  dates; ``effective_to`` optional and inclusive), exactly as in the lesson's
  ``chunks.jsonl``. The retriever then applies the evidence boundary on every
  request, and a search needs a caller and a date.
* **plain records** carry none of the three: the whole corpus is every
  caller's universe.

A record that has one or two of the three policy fields is refused, naming
the one that is missing: half a policy is a typo, not a choice. Every other
input field is kept as metadata, untouched.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.records.loading import Field, parse_date
from labsrc.records.policy import PolicyChunk

__all__ = ["POLICY_FIELDS", "DropinRecord", "record_from_dict", "request_date"]

#: The fields that make a record a policy record; a record has all three or none.
POLICY_FIELDS = ("region", "acl_tag", "effective_from")

#: Stand-ins for a plain record's policy fields; the boundary is never applied to them.
# A plain record never meets the boundary (the retriever refuses a caller for it), but a PolicyChunk
# refuses a blank region or tag, so it carries these placeholders instead.
_PLAIN_REGION, _PLAIN_TAG, _PLAIN_FROM = "(no region)", "(no acl_tag)", dt.date.min


@dataclass(frozen=True)
class DropinRecord:
    """One chunk as the drop-in retriever holds it.

    ``chunk`` is what the lanes, the boundary and the results read (``text`` is
    what snippets show); ``index_text`` is what both lanes index (the title and
    the text, or the stored enriched text); ``has_policy`` says which kind of
    record it came from; ``origin`` names where it came from, for errors.
    """

    chunk: PolicyChunk
    index_text: str
    has_policy: bool
    origin: str

    def filter_view(self) -> dict[str, Any]:
        """What a ``where=`` filter sees: the metadata plus the record's own fields."""
        c = self.chunk
        return {**(c.metadata or {}), "chunk_id": c.chunk_id, "doc_id": c.document_id, "path": c.path, "title": c.title or ""}


def _date(f: Field, name: str, *, optional: bool) -> dt.date | None:
    value = f.record.get(name)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value
    return f.date(name, optional=optional)


def _doc_id(f: Field, chunk_id: str) -> str:
    doc_id = f.text("doc_id", optional=True)
    document_id = f.text("document_id", optional=True)
    if doc_id is not None and document_id is not None and doc_id != document_id:
        raise f.error("doc_id", f"{doc_id!r} differs from document_id {document_id!r}; give one of them")
    return doc_id or document_id or chunk_id


def record_from_dict(
    record: Mapping[str, Any],
    *,
    text_key: str = "text",
    title_key: str = "title",
    where: str = "chunks",
    line: int | None = None,
    index_text: str | None = None,
) -> DropinRecord:
    """Read one input dict; errors name ``where`` (a file or ``chunks[i]``), the line and the field.

    ``doc_id`` comes from ``doc_id`` or ``document_id`` (default: the chunk id).
    ``index_text`` overrides what the lanes index (the SQLite store's enriched text).
    """
    if not isinstance(record, Mapping):
        raise InvalidRecord(f"each chunk must be a dict, got {type(record).__name__}", path=where, line=line)
    f = Field(record, path=where, line=line)
    chunk_id: str = f.text("chunk_id")  # type: ignore[assignment]  # required, so never None
    text = f.text(text_key)
    title = f.text(title_key, optional=True, blank_ok=True) or ""
    present = [name for name in POLICY_FIELDS if record.get(name) is not None]
    has_policy = bool(present)
    if has_policy:
        missing = [name for name in POLICY_FIELDS if name not in present]
        if missing:
            raise f.error(
                missing[0],
                f"missing required field: a policy record has all of {list(POLICY_FIELDS)} "
                f"(this one has {present}); give {missing[0]} or drop the others",
            )
        region, acl_tag = f.text("region"), f.text("acl_tag")
        effective_from = _date(f, "effective_from", optional=False)
        effective_to = _date(f, "effective_to", optional=True)
        if effective_to is not None and effective_from is not None and effective_to < effective_from:
            raise f.error("effective_to", f"{effective_to} is before effective_from {effective_from}")
    else:
        region, acl_tag, effective_from, effective_to = _PLAIN_REGION, _PLAIN_TAG, _PLAIN_FROM, None
    doc_id = _doc_id(f, chunk_id)
    own = {"chunk_id", "doc_id", "document_id", "path", title_key, text_key}
    metadata = {key: copy.deepcopy(value) for key, value in record.items() if key not in own}
    chunk = PolicyChunk(
        chunk_id=chunk_id,
        document_id=doc_id,
        parent_id=str(record.get("parent_id") or doc_id),
        version=str(record.get("version") or ""),
        region=region,  # type: ignore[arg-type]
        acl_tag=acl_tag,  # type: ignore[arg-type]
        effective_from=effective_from,  # type: ignore[arg-type]
        effective_to=effective_to,
        text=text,  # type: ignore[arg-type]
        title=title,
        path=f.text("path", optional=True),
        metadata=metadata,
    )
    if index_text is None:
        index_text = f"{title}\n{text}" if title else text
    origin = where if line is None else f"{where} line {line}"
    return DropinRecord(chunk, index_text, has_policy, origin)  # type: ignore[arg-type]


def request_date(on_date: object) -> dt.date:
    """A request's ``on_date``: a ``datetime.date`` or an ISO date string (a datetime is refused)."""
    if isinstance(on_date, str):
        try:
            return parse_date(on_date)
        except ValueError as exc:
            raise InvalidArgument(f"on_date: {exc}") from exc
    if isinstance(on_date, dt.datetime) or not isinstance(on_date, dt.date):
        raise InvalidArgument(f"on_date must be a datetime.date or an ISO date string, not {on_date!r}")
    return on_date
