"""A folder of a team's pages (markdown or plain text) becomes policy chunks, and a ``chunks.jsonl``.

:func:`chunk_documents` reads every ``.md``, ``.markdown`` and ``.txt`` file
under a folder (recursively, in sorted path order; names starting with ``.``
are skipped, and so is any other file), cuts each page at its headings as
:func:`~labsrc.patterns.chunking.chunk_markdown` does, and gives every chunk the
record fields of its page. :func:`write_chunks_jsonl` writes them where
:func:`~labsrc.records.loading.load_chunks` reads them back unchanged.

Each page's fields come from its front matter
(:mod:`labsrc.patterns.frontmatter`) or from a row of a metadata table (a
CSV whose ``path`` column names the page relative to the folder), or both:

==============  ========  =====================================================
field           required  default
==============  ========  =====================================================
region          yes
acl_tag         yes
effective_from  yes       (an ISO date, ``YYYY-MM-DD``)
effective_to    no        ``None``: still in force (inclusive when given)
document_id     no        the page's path without its suffix: ``it/vpn-2026``
parent_id       no        the document_id
version         no        ``"{document_id}/{effective_from}"``
title           no        the file's stem; used for text before any heading
==============  ========  =====================================================

Every chunk's id is ``"{page path without suffix}#chunk-{i}"`` (0-based, in the
page's order), so two pages that are two versions of one document (the same
``document_id``) never share an id. Its ``title`` is its heading path
(``"Remote access > Setup"``), or the page's title for text before any heading
and for a ``.txt`` page (read as plain text: a ``#`` line is not a heading);
its ``path`` is the page's path relative to the folder (``it/vpn-2026.md``).

A value given in both places must agree: a table that silently overrode a
page's ``acl_tag`` (or the other way round) would move evidence across the
boundary unseen, so a difference is an error naming both places. Every error
is an :class:`~labsrc.errors.InvalidRecord` naming the file, the 1-based line,
the field and the value: a field the lab does not know (a misspelt
``effective_to`` would leave an old version in force), a missing required
field, a bad date, an empty page (field ``text``), a table row naming no page,
a page named twice, two pages making one chunk id (``a.md`` and ``a.txt``), a
folder with no pages. Pages may share a ``document_id`` and even a ``version``
(one document split over two pages, or its variants for two regions).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.patterns.chunking import DEFAULT_MAX_CHARS, chunk_markdown
from labsrc.patterns.frontmatter import parse_front_matter
from labsrc.ranking import check_top_k
from labsrc.records.files import atomic_write_bytes
from labsrc.records.loading import Field, read_text
from labsrc.records.policy import PolicyChunk

__all__ = [
    "PAGE_FIELDS",
    "PAGE_SUFFIXES",
    "REQUIRED_PAGE_FIELDS",
    "chunk_documents",
    "chunk_record",
    "page_paths",
    "write_chunks_jsonl",
]

#: The suffixes read as pages (any case); ``.txt`` is plain text, the others markdown.
PAGE_SUFFIXES = (".md", ".markdown", ".txt")
#: The fields a page's front matter or its table row may give, in the order chunks.jsonl writes them.
PAGE_FIELDS = ("document_id", "parent_id", "version", "region", "acl_tag", "effective_from", "effective_to", "title")
REQUIRED_PAGE_FIELDS = ("region", "acl_tag", "effective_from")
#: The metadata table's column naming each page, relative to the folder (also each chunk's ``path``).
PATH_COLUMN = "path"
#: Fields that may be ``null`` (or empty): no end date means still in force; no title means the file's stem.
_NULLABLE = frozenset({"effective_to", "title"})


@dataclass(frozen=True)
class _Given:
    """One field's value as written, and where: the file and 1-based line to blame when it is wrong."""

    value: str | None
    path: str
    line: int


def page_paths(folder: str | Path) -> list[str]:
    """Every page under ``folder``, as a POSIX path relative to it, sorted; no page is an error naming the folder.

    Folders are walked without following symbolic links to folders; a name starting with ``.`` is skipped.
    """
    root = Path(folder)
    if not root.is_dir():
        what = "not a folder" if os.path.lexists(root) else "no such folder"
        raise InvalidArgument(f"{root}: {what}; give the folder that holds the pages ({', '.join(PAGE_SUFFIXES)})")
    pages = []
    for where, folders, files in os.walk(root):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in files:
            if not name.startswith(".") and name.lower().endswith(PAGE_SUFFIXES):
                page = (Path(where) / name).relative_to(root).as_posix()
                try:  # the page path becomes chunk ids and a JSON line, which must be UTF-8
                    page.encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidRecord(f"a page's path is not valid UTF-8, got {page!r}; rename it", path=root) from None
                pages.append(page)
    if not pages:
        raise InvalidRecord(f"holds no pages (files ending {', '.join(PAGE_SUFFIXES)}, searched recursively)", path=root)
    return sorted(pages)


def _stem(page: str) -> str:
    """``it/vpn.md`` → ``it/vpn``: the page's default document_id and the prefix of its chunk ids."""
    return page[: page.rindex(".")]


def _normal_page(value: str, given: _Given) -> str:
    """A table row's page path, written relative to the folder: ``./it/vpn.md`` → ``it/vpn.md``."""
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or "\\" in value:
        raise InvalidRecord(
            f"name the page by its path relative to the folder, with '/' (such as 'it/vpn.md'), got {value!r}",
            path=given.path, line=given.line, field=PATH_COLUMN,
        )
    return path.as_posix()


def _read_table(table: str | Path, folder: Path, pages: list[str]) -> dict[str, dict[str, _Given]]:
    """The metadata table: page path → its given fields. An empty cell gives nothing; ``null`` gives ``None``."""
    shown = str(table)
    rows = csv.reader(io.StringIO(read_text(table), newline=""))
    header = [name.strip() for name in next(rows, [])]
    allowed = {PATH_COLUMN, *PAGE_FIELDS}
    for name in header:
        if name not in allowed:
            message = f"unknown column {name!r}; valid columns are {sorted(allowed)}"
            raise InvalidRecord(message, path=shown, line=1, field=name)
        if header.count(name) > 1:
            message = f"column {name!r} appears {header.count(name)} times in the header"
            raise InvalidRecord(message, path=shown, line=1, field=name)
    if PATH_COLUMN not in header:
        raise InvalidRecord(
            f"no {PATH_COLUMN!r} column naming each page relative to {folder}; the header is {header}",
            path=shown, line=1, field=PATH_COLUMN,
        )
    known, found, first = set(pages), {}, {}
    for cells in rows:
        line = rows.line_num
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        if len(cells) != len(header):
            message = f"holds {len(cells)} cells but the header names {len(header)} columns, got {cells}"
            raise InvalidRecord(message, path=shown, line=line)
        written = dict(zip(header, (cell.strip() for cell in cells)))
        page = _normal_page(written.pop(PATH_COLUMN), _Given(None, shown, line))
        if page not in known:
            hint = "no such file"
            if (folder / page).is_file():
                hint = f"not a page: hidden, or not ending {', '.join(PAGE_SUFFIXES)}"
            message = f"names no page under {folder} ({hint}), got {page!r}"
            raise InvalidRecord(message, path=shown, line=line, field=PATH_COLUMN)
        if page in first:
            message = f"page {page!r} is named again (first on line {first[page]})"
            raise InvalidRecord(message, path=shown, line=line, field=PATH_COLUMN)
        first[page] = line
        found[page] = {
            name: _Given(None if value.lower() == "null" else value, shown, line)
            for name, value in written.items()
            if value  # an empty cell gives nothing
        }
    return found


def _merge(front: Mapping[str, _Given], row: Mapping[str, _Given]) -> dict[str, Any]:
    """The page's parsed fields, from its front matter and its table row, which must agree where both give one."""
    values: dict[str, Any] = {}
    for name in PAGE_FIELDS:
        parsed = [(given, _parse(name, given)) for given in (front.get(name), row.get(name)) if given is not None]
        if len(parsed) == 2 and parsed[0][1] != parsed[1][1]:
            (mine, value), (theirs, other) = parsed
            raise InvalidRecord(
                f"{other!r} differs from {value!r} in {mine.path}, line {mine.line} (the page's front matter); "
                "give the field in one place, or the same value in both",
                path=theirs.path, line=theirs.line, field=name,
            )
        if parsed:
            values[name] = parsed[0][1]
    return values


def _parse(name: str, given: _Given) -> str | dt.date | None:
    """One given value, typed: a date for the two dates, else non-blank text; ``None`` only where allowed."""
    f = Field({name: given.value}, path=given.path, line=given.line)
    if given.value is None:
        if name in _NULLABLE:
            return None
        raise f.error(name, "must not be null or empty" + (" (required)" if name in REQUIRED_PAGE_FIELDS else ""))
    if name.startswith("effective_"):
        return f.date(name)
    return f.text(name)


def _front_fields(page_file: Path, fields: Mapping[str, tuple[str | None, int]]) -> dict[str, _Given]:
    for name, (_, line) in fields.items():
        if name not in PAGE_FIELDS:
            raise InvalidRecord(
                f"unknown field; valid fields are {sorted(PAGE_FIELDS)} (a misspelt one would be lost silently)",
                path=page_file, line=line, field=name,
            )
    return {name: _Given(value, str(page_file), line) for name, (value, line) in fields.items()}


def _page_chunks(folder: Path, page: str, row: Mapping[str, _Given], max_chars: int) -> list[PolicyChunk]:
    """One page's chunks, every record field resolved (front matter, table row, defaults)."""
    page_file = folder / page
    matter = parse_front_matter(read_text(page_file), path=page_file)
    if not matter.body.strip():  # first: whatever its fields, an empty page cannot be evidence
        raise InvalidRecord(
            "the page holds no text" + (" after its front matter" if matter.body_line > 1 else "") + "; an empty page "
            "cannot be evidence, so write its text or remove it",
            path=page_file, line=matter.body_line, field="text",
        )
    values = _merge(_front_fields(page_file, matter.fields), row)
    for name in REQUIRED_PAGE_FIELDS:
        if name not in values:
            raise InvalidRecord(
                f"missing required field; give it in the page's front matter ({name}: ...) or in a metadata "
                f"table row whose {PATH_COLUMN!r} is {page!r}",
                path=page_file, field=name,
            )
    start, end = values["effective_from"], values.get("effective_to")
    if end is not None and end < start:
        given = row.get("effective_to") or _Given(None, str(page_file), matter.fields["effective_to"][1])
        raise InvalidRecord(f"{end} is before effective_from {start}", path=given.path, line=given.line, field="effective_to")
    stem = _stem(page)
    document_id = values.get("document_id", stem)
    title = values.get("title") or PurePosixPath(stem).name
    pieces = chunk_markdown(stem, matter.body, max_chars, headings=not page.lower().endswith(".txt"))
    return [
        PolicyChunk(
            chunk_id=piece["chunk_id"],
            document_id=document_id,
            parent_id=values.get("parent_id", document_id),
            version=values.get("version", f"{document_id}/{start.isoformat()}"),
            region=values["region"],
            acl_tag=values["acl_tag"],
            effective_from=start,
            effective_to=end,
            text=piece["text"],
            title=piece["heading"] or title,
            path=page,
        )
        for piece in pieces
    ]


def chunk_documents(
    folder: str | Path, *, metadata: str | Path | None = None, max_chars: int = DEFAULT_MAX_CHARS
) -> list[PolicyChunk]:
    """Every page under ``folder`` as policy chunks, pages in sorted path order, each page's chunks in its order.

    ``metadata`` names an optional CSV table (a ``path`` column, then any of
    :data:`PAGE_FIELDS`) that gives fields for pages, instead of or beside their
    front matter. ``max_chars`` caps each chunk's length, as in
    :func:`~labsrc.patterns.chunking.chunk_markdown`. Errors: see the module's docstring.
    """
    max_chars = check_top_k(max_chars, "max_chars")
    root = Path(folder)
    pages = page_paths(root)
    table = _read_table(metadata, root, pages) if metadata is not None else {}
    chunks: list[PolicyChunk] = []
    made_by: dict[str, str] = {}  # chunk id → page
    for page in pages:
        page_chunks = _page_chunks(root, page, table.get(page, {}), max_chars)
        for chunk in page_chunks:
            if chunk.chunk_id in made_by:
                raise InvalidRecord(
                    f"chunk id {chunk.chunk_id!r} is also made from {root / made_by[chunk.chunk_id]} (chunk ids are "
                    "the page's path without its suffix); rename one of the two pages",
                    path=root / page, field="chunk_id",
                )
            made_by[chunk.chunk_id] = page
        chunks.extend(page_chunks)
    return chunks


def chunk_record(chunk: PolicyChunk) -> dict[str, Any]:
    """One line of ``chunks.jsonl`` (docs/records.md): ISO dates, and no key for an absent title, path or metadata."""
    record: dict[str, Any] = {
        "chunk_id": chunk.chunk_id,
        "document_id": chunk.document_id,
        "parent_id": chunk.parent_id,
        "version": chunk.version,
        "region": chunk.region,
        "acl_tag": chunk.acl_tag,
        "effective_from": chunk.effective_from.isoformat(),
        "effective_to": None if chunk.effective_to is None else chunk.effective_to.isoformat(),
        "text": chunk.text,
    }
    for name in ("title", "path"):
        if getattr(chunk, name) is not None:
            record[name] = getattr(chunk, name)
    if chunk.metadata is not None:
        record["metadata"] = dict(chunk.metadata)
    return record


def write_chunks_jsonl(chunks: Iterable[PolicyChunk], path: str | Path) -> Path:
    """Write ``chunks`` to ``path``, one JSON object per line, atomically (the old file or the new, never half).

    UTF-8, not ASCII-escaped; :func:`~labsrc.records.loading.load_chunks` reads back equal chunks.
    No chunks is an error, as it is for the loader.
    """
    lines = [json.dumps(chunk_record(chunk), ensure_ascii=False) + "\n" for chunk in chunks]
    if not lines:
        raise InvalidArgument("no chunks to write; a chunks.jsonl of nothing hides every mistake downstream")
    return atomic_write_bytes(path, "".join(lines).encode("utf-8"))
