"""Loading records from files, with errors that say exactly where the problem is.

Every loader either returns *all* records unchanged or raises
:class:`~labsrc.errors.InvalidRecord` naming the file, the 1-based line and the
field. Blank lines in JSONL are skipped; nothing else is ever dropped, trimmed or
re-encoded.

Every file is opened through :func:`~labsrc.records.files.open_regular` (a FIFO
or a device is refused by name instead of blocking), and every JSON text is
parsed by :func:`parse_json`, which also refuses JSON nested deeper than
:data:`MAX_JSON_DEPTH` by file and line, instead of a ``RecursionError``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from labsrc.errors import InvalidRecord
from labsrc.records.files import open_regular
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "MAX_JSON_DEPTH",
    "Field",
    "iter_jsonl",
    "load_callers",
    "load_chunks",
    "load_json",
    "parse_date",
    "parse_json",
    "read_text",
    "too_deep",
]

#: How deeply lists and objects may nest in any JSON the lab reads (serde_json's default recursion
#: limit). The lab's own records nest three levels at most; 200,000 levels once crashed the parser
#: with a RecursionError, and a few hundred parse but crash whatever later walks the value.
MAX_JSON_DEPTH = 128

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


#: Byte-order marks of the encodings a text editor may save instead of UTF-8.
_FOREIGN_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
_UTF8_BOM = b"\xef\xbb\xbf"
_RESAVE = "re-save it as UTF-8 (in most editors: Save As, encoding UTF-8)"


def _check_encoding(path: Path, head: bytes) -> None:
    """Refuse UTF-16/UTF-32 files by name: Python's own message ("invalid start byte") does not say why."""
    for bom, name in _FOREIGN_BOMS:
        if head.startswith(bom):
            raise InvalidRecord(f"the file is {name} (it starts with a {name} byte-order mark); {_RESAVE}", path=path)
    if b"\x00" in head:
        raise InvalidRecord(f"the file holds NUL bytes, so it looks like UTF-16 or UTF-32 text; {_RESAVE}", path=path)


def _decode_error(path: Path, exc: UnicodeDecodeError, line: int | None) -> InvalidRecord:
    bad = exc.object[exc.start : exc.start + 4]
    return InvalidRecord(f"not valid UTF-8 ({exc.reason}, bytes {bad!r}); {_RESAVE}", path=path, line=line)


#: A JSON string (skipped whole, so brackets inside it do not count) or a bracket.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _exceeds_depth(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` deep in ``value`` (walked with a stack, not recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def too_deep(
    text: str, *, path: str | Path, line: int | None = None, field: str | None = None, lines: bool = True
) -> InvalidRecord:
    """The error for ``text`` (JSON or TOML) nested deeper than :data:`MAX_JSON_DEPTH`, naming the line where it goes too deep.

    ``line`` is the line ``text`` starts on (a JSONL line); the line reported
    counts on from it. Brackets inside double-quoted strings are not counted.
    ``lines=False``: ``text`` is not a file's (a database value), so no line is named.
    """
    where, depth = None, 0
    for token in _JSON_TOKENS.finditer(text) if lines else ():
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                where = (line or 1) + text.count("\n", 0, token.start())
                break
        elif bracket in "]}":
            depth -= 1
    return InvalidRecord(
        f"nested too deeply (more than {MAX_JSON_DEPTH} levels of lists and objects); the lab's records nest a few "
        "levels at most, so the file is damaged or hostile",
        path=path,
        line=where if where is not None else line,
        field=field,
    )


def _near(exc: json.JSONDecodeError) -> str:
    """Where the parser stopped, shown: up to 20 characters either side of it, the stop marked with ⟨here⟩."""
    start = exc.doc.rfind("\n", 0, exc.pos) + 1
    end = exc.doc.find("\n", exc.pos)
    end = len(exc.doc) if end == -1 else end
    before = exc.doc[max(start, exc.pos - 20) : exc.pos]
    after = exc.doc[exc.pos : min(end, exc.pos + 20)].rstrip("\r")
    return f"where the parser stopped: {before!r}⟨here⟩{after!r}"


def parse_json(
    text: str, *, path: str | Path, line: int | None = None, field: str | None = None, lines: bool = True
) -> Any:
    """``json.loads(text)``, every failure an :class:`InvalidRecord` naming ``path``, the line and ``field``.

    Malformed JSON names the line of the syntax error (or ``line``, for one JSONL
    line; none with ``lines=False``, for JSON that is not a file's). JSON nested
    more than :data:`MAX_JSON_DEPTH` deep is refused too (:func:`too_deep`),
    whether the parser overflowed Python's stack or not.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where = (exc.lineno if line is None else line) if lines else None
        raise InvalidRecord(f"malformed JSON: {exc.msg} (column {exc.colno}, {_near(exc)})", path=path, line=where,
                            field=field) from exc
    except RecursionError:
        raise too_deep(text, path=path, line=line, field=field, lines=lines) from None
    if _exceeds_depth(value, MAX_JSON_DEPTH):
        raise too_deep(text, path=path, line=line, field=field, lines=lines)
    return value


def _open(path: Path) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file; an InvalidRecord naming it otherwise."""
    try:
        return open_regular(path)
    except InvalidRecord:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a NUL or a lone surrogate in the name
        raise InvalidRecord(f"cannot open: {getattr(exc, 'strerror', None) or exc}", path=path) from exc


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    The file must be a regular UTF-8 file; a leading UTF-8 byte-order mark (as
    some Windows editors write) is skipped. A UTF-16 or UTF-32 file is refused
    by name, and so is a line nested more than :data:`MAX_JSON_DEPTH` deep.
    """
    path = Path(path)
    handle = _open(path)
    with handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1:
                _check_encoding(path, raw[:64])
                raw = raw.removeprefix(_UTF8_BOM)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _decode_error(path, exc, number) from exc
            if not line.strip():
                continue
            # Without its line break: a record cut short is then reported where it stops, not at
            # "column 1" of a next line the parser thinks it reached.
            record = parse_json(line.rstrip("\r\n"), path=path, line=number)
            if not isinstance(record, dict):
                raise InvalidRecord(
                    f"each line must be a JSON object, got {type(record).__name__}", path=path, line=number
                )
            yield number, record


def read_text(path: str | Path) -> str:
    """A whole UTF-8 file (a leading UTF-8 byte-order mark is dropped); a missing file or
    another encoding (UTF-16 is named) is an :class:`InvalidRecord` naming the file."""
    path = Path(path)
    with _open(path) as handle:
        try:
            data = handle.read()
        except OSError as exc:
            raise InvalidRecord(f"cannot read: {exc.strerror or exc}", path=path) from exc
    _check_encoding(path, data[:64])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise _decode_error(path, exc, line) from exc


def load_json(path: str | Path) -> Any:
    """Parse a whole JSON file (:func:`parse_json`), reporting the line of a syntax error or of too deep nesting."""
    path = Path(path)
    return parse_json(read_text(path), path=path)


def parse_date(value: str) -> dt.date:
    """Strict ISO calendar date ``YYYY-MM-DD``; raises ``ValueError`` otherwise."""
    if not isinstance(value, str) or not _ISO_DATE.fullmatch(value):
        raise ValueError(f"expected an ISO date YYYY-MM-DD, got {value!r}")
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:  # an impossible date such as 2026-02-30: say which value
        raise ValueError(f"{value!r} is not a calendar date ({exc}); write a real date as YYYY-MM-DD") from None


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
    """Read policy chunks from JSONL (one object per line, ISO dates), in file order.

    A file with no chunks is an error: a corpus of nothing hides every mistake downstream.
    """
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
    if not chunks:
        raise InvalidRecord(
            "holds no chunks (the file is empty or blank); write one chunk object per line (docs/records.md has the schema)",
            path=path,
        )
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

