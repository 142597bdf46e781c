"""Loading records from files, with errors that say exactly where the problem is.

Every loader either returns *all* records unchanged or raises
:class:`~labsrc.errors.InvalidRecord` naming the file, the 1-based line and the
field. Blank lines in JSONL are skipped; nothing else is ever dropped, trimmed or
re-encoded.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from labsrc.errors import InvalidRecord
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "Field",
    "iter_jsonl",
    "load_callers",
    "load_chunks",
    "load_json",
    "parse_date",
    "read_text",
]

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file."""
    path = Path(path)
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InvalidRecord(f"cannot open: {exc.strerror}", path=path) from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidRecord(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=number) from exc
                if not isinstance(record, dict):
                    raise InvalidRecord(
                        f"each line must be a JSON object, got {type(record).__name__}", path=path, line=number
                    )
                yield number, record
        except UnicodeDecodeError as exc:
            raise InvalidRecord(f"not valid UTF-8: {exc.reason}", path=path) from exc


def read_text(path: str | Path) -> str:
    """A whole UTF-8 file; a missing file or bad encoding is an :class:`InvalidRecord` naming it."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRecord(f"cannot open: {exc.strerror}", path=path) from exc
    except UnicodeDecodeError as exc:
        raise InvalidRecord(f"not valid UTF-8: {exc.reason}", path=path) from exc


def load_json(path: str | Path) -> Any:
    """Parse a whole JSON file, reporting the line of a syntax error."""
    path = Path(path)
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRecord(f"malformed JSON: {exc.msg} (column {exc.colno})", path=path, line=exc.lineno) from exc


def parse_date(value: str) -> dt.date:
    """Strict ISO calendar date ``YYYY-MM-DD``; raises ``ValueError`` otherwise."""
    if not isinstance(value, str) or not _ISO_DATE.fullmatch(value):
        raise ValueError(f"expected an ISO date YYYY-MM-DD, got {value!r}")
    return dt.date.fromisoformat(value)  # rejects impossible dates such as 2026-02-30


class Field:
    """Reads typed fields from one record and blames the right file, line and field."""

    def __init__(self, record: Mapping[str, Any], *, path: str | Path, line: int | None) -> None:
        self.record = record
        self.path = path
        self.line = line

    def error(self, field: str, message: str) -> InvalidRecord:
        return InvalidRecord(message, path=self.path, line=self.line, field=field)

    def require_known(self, allowed: set[str]) -> None:
        unknown = sorted(set(self.record) - allowed)
        if unknown:
            raise self.error(unknown[0], f"unknown field; valid fields are {sorted(allowed)}")

    def text(self, field: str, *, optional: bool = False, blank_ok: bool = False) -> str | None:
        if field not in self.record or (optional and self.record[field] is None):
            if optional:
                return None
            raise self.error(field, "missing required field")
        value = self.record[field]
        if not isinstance(value, str):
            raise self.error(field, f"must be a string, got {type(value).__name__}")
        if not blank_ok and not value.strip():
            raise self.error(field, "must not be empty or blank")
        return value

    def date(self, field: str, *, optional: bool = False) -> dt.date | None:
        if field not in self.record or self.record[field] is None:
            if optional:
                return None
            raise self.error(field, "missing required field")
        try:
            return parse_date(self.record[field])
        except ValueError as exc:
            raise self.error(field, str(exc)) from exc

    def string_list(self, field: str, *, optional: bool = False) -> tuple[str, ...]:
        if field not in self.record:
            if optional:
                return ()
            raise self.error(field, "missing required field")
        value = self.record[field]
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise self.error(field, "must be a list of non-empty strings")
        return tuple(value)

    def mapping(self, field: str) -> Mapping[str, Any] | None:
        value = self.record.get(field)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(field, f"must be a JSON object, got {type(value).__name__}")
        return value


_CHUNK_REQUIRED = ("chunk_id", "document_id", "parent_id", "version", "region", "acl_tag")
_CHUNK_FIELDS = set(_CHUNK_REQUIRED) | {"effective_from", "effective_to", "text", "title", "path", "metadata"}


def load_chunks(path: str | Path) -> list[PolicyChunk]:
    """Read policy chunks from JSONL (one object per line, ISO dates), in file order."""
    chunks: list[PolicyChunk] = []
    first_line: dict[str, int] = {}
    for number, record in iter_jsonl(path):
        f = Field(record, path=path, line=number)
        f.require_known(_CHUNK_FIELDS)
        values = {name: f.text(name) for name in _CHUNK_REQUIRED}
        effective_from = f.date("effective_from")
        effective_to = f.date("effective_to", optional=True)
        if effective_to is not None and effective_to < effective_from:
            raise f.error("effective_to", f"{effective_to} is before effective_from {effective_from}")
        chunk = PolicyChunk(
            **values,
            effective_from=effective_from,
            effective_to=effective_to,
            text=f.text("text"),
            title=f.text("title", optional=True, blank_ok=True),
            path=f.text("path", optional=True),
            metadata=f.mapping("metadata"),
        )
        if chunk.chunk_id in first_line:
            raise f.error("chunk_id", f"duplicate chunk_id {chunk.chunk_id!r} (first seen on line {first_line[chunk.chunk_id]})")
        first_line[chunk.chunk_id] = number
        chunks.append(chunk)
    return chunks


def load_callers(path: str | Path) -> list[Caller]:
    """Read callers from a JSON list of ``{actor_id, region, acl_tags}``.

    Errors name the list index as the record position (``record 3``), since a JSON
    list has no line per record.
    """
    data = load_json(path)
    if not isinstance(data, list):
        raise InvalidRecord(f"expected a JSON list of callers, got {type(data).__name__}", path=path)
    callers: list[Caller] = []
    seen: set[str] = set()
    for index, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            raise InvalidRecord(f"record {index} must be a JSON object", path=path)
        f = Field(record, path=f"{path} (record {index})", line=None)
        f.require_known({"actor_id", "region", "acl_tags"})
        actor_id = f.text("actor_id")
        if actor_id in seen:
            raise f.error("actor_id", f"duplicate actor_id {actor_id!r}")
        seen.add(actor_id)
        callers.append(Caller(actor_id, f.text("region"), frozenset(f.string_list("acl_tags"))))
    return callers

