"""A SQLite store for documents, chunks, enriched text and embeddings (stdlib ``sqlite3``).

A process that restarts should not re-embed its corpus. The store keeps, per
chunk, the text shown to users, the enriched text the lexical lane indexes
(:func:`~labsrc.patterns.enrich.enrich_content`), the embedding and free-form metadata;
:meth:`~labsrc.patterns.dropin.HybridRetriever.from_store` rebuilds a retriever from it.

Schema::

    documents(doc_id TEXT PRIMARY KEY, title TEXT, path TEXT, metadata TEXT)
    chunks(chunk_id TEXT PRIMARY KEY, doc_id TEXT REFERENCES documents,
           text TEXT, enriched_text TEXT, embedding BLOB, dimension INTEGER,
           metadata TEXT)

An embedding is stored as little-endian float32 bytes (``ndarray.tobytes()``) and
read back with ``np.frombuffer``: 4 bytes per dimension, exact for float32
input, rounded to float32 for float64 input. Metadata is JSON text, so
:func:`~labsrc.patterns.filters.compile_filter_sql` can filter it inside SQLite with
bound parameters.

Text is stored as UTF-8, which cannot hold a lone surrogate (``"a\\ud800b"``, what
``surrogateescape`` decoding or a broken JSON escape leaves in a Python string).
Such a value is an :class:`~labsrc.errors.InvalidArgument` naming the record and
the field, checked before anything is written, never a raw ``UnicodeEncodeError``
from the driver.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.lanes.dense import check_vector
from labsrc.patterns.filters import compile_filter_sql
from labsrc.records.checks import check_utf8
from labsrc.records.files import as_path
from labsrc.records.loading import parse_json

__all__ = ["EMBEDDING_DTYPE", "SQLiteStore"]

#: How embeddings are stored: little-endian float32.
EMBEDDING_DTYPE = np.dtype("<f4")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    doc_id   TEXT PRIMARY KEY,
    title    TEXT,
    path     TEXT,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id      TEXT PRIMARY KEY,
    doc_id        TEXT NOT NULL REFERENCES documents(doc_id),
    text          TEXT NOT NULL,
    enriched_text TEXT,
    embedding     BLOB,
    dimension     INTEGER,
    metadata      TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks(doc_id);
"""


def _storable(value: str, field: str, owner: str | None) -> str:
    """Refuse what SQLite's UTF-8 text cannot hold (a lone surrogate) before the driver raises a bare
    UnicodeEncodeError, in the words the PostgreSQL engine uses (:func:`~labsrc.records.checks.check_utf8`)."""
    check_utf8(value, f"{owner}: field {field!r}" if owner else f"field {field!r}", "SQLite's")
    return value


def _text(value: Any, field: str, *, optional: bool = False, owner: str | None = None) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{field} must be a non-empty string, not {value!r}")
    return _storable(value, field, owner)


def _metadata_json(metadata: Mapping[str, Any] | None, owner: str) -> str:
    if metadata is None:
        return "{}"
    if not isinstance(metadata, Mapping):
        raise InvalidArgument(f"metadata must be a dict, not {type(metadata).__name__}")
    try:
        # allow_nan=False: NaN is not JSON, and SQLite's JSON functions would reject the row.
        text = json.dumps(dict(metadata), ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"metadata must be JSON-serialisable: {exc}") from exc
    return _storable(text, "metadata", owner)


def _embedding_blob(embedding: Any) -> tuple[bytes, int]:
    vector = check_vector(embedding, name="embedding")
    as_float32 = vector.astype(EMBEDDING_DTYPE)
    if not np.all(np.isfinite(as_float32)):
        raise InvalidArgument("embedding overflows float32")
    return as_float32.tobytes(), int(vector.size)


class SQLiteStore:
    """Documents and chunks in one SQLite file (or ``":memory:"``).

    Use it as a context manager, or call :meth:`close`. Every write commits at
    once, so another process (or a restarted one) sees it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = path if path == ":memory:" else str(as_path(path))
        try:
            self._db = sqlite3.connect(self.path)
        except (sqlite3.Error, OSError) as exc:
            raise InvalidRecord(f"cannot open SQLite store: {exc}", path=self.path) from exc
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA foreign_keys = ON")
        self.create_tables()

    def create_tables(self) -> None:
        """Create the tables and index if they are missing; safe to call any number of times."""
        try:
            self._db.executescript(_SCHEMA)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise InvalidRecord(f"not a usable SQLite store: {exc}", path=self.path, field="database") from None

    # --- writing ------------------------------------------------------------------------

    def add_document(
        self,
        doc_id: str,
        path: str | None = None,
        *,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Add a document (a chunk's parent): ``add_document("doc1", "test.md")``.

        The second positional argument is the document's path, as in the POC
        port's own calls. Adding an existing ``doc_id`` is an error.
        """
        owner = f"document {doc_id!r}"
        _text(doc_id, "doc_id", owner=owner)
        _text(path, "path", optional=True, owner=owner)
        _text(title, "title", optional=True, owner=owner)
        metadata_json = _metadata_json(metadata, owner)
        try:
            with self._db:
                self._db.execute(
                    "INSERT INTO documents (doc_id, title, path, metadata) VALUES (?, ?, ?, ?)",
                    (doc_id, title, path, metadata_json),
                )
        except sqlite3.IntegrityError as exc:
            raise InvalidArgument(f"document {doc_id!r} is already in the store") from exc
        except sqlite3.DatabaseError as exc:
            raise InvalidRecord(f"cannot write: {exc}", path=self.path, field="documents") from None

    def add_chunk(
        self,
        chunk_id: str,
        doc_id: str,
        text: str,
        *,
        embedding: Any = None,
        enriched_text: str | None = None,
        enriched_content: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Add a chunk of a document added earlier. ``embedding`` is any 1-D numeric vector.

        ``enriched_content`` is the POC port's name for ``enriched_text``; pass one or the other.
        """
        if enriched_content is not None:
            if enriched_text is not None:
                raise InvalidArgument("pass enriched_text or enriched_content (the same field), not both")
            enriched_text = enriched_content
        owner = f"chunk {chunk_id!r}"
        _text(chunk_id, "chunk_id", owner=owner)
        _text(doc_id, "doc_id", owner=owner)
        _text(text, "text", owner=owner)
        _text(enriched_text, "enriched_text", optional=True, owner=owner)
        metadata_json = _metadata_json(metadata, owner)
        blob, dimension = (None, None) if embedding is None else _embedding_blob(embedding)
        if next(self._query("SELECT 1 FROM documents WHERE doc_id = ?", (doc_id,)), None) is None:
            raise InvalidArgument(f"no document {doc_id!r} in the store; call add_document({doc_id!r}) first")
        try:
            with self._db:
                self._db.execute(
                    "INSERT INTO chunks (chunk_id, doc_id, text, enriched_text, embedding, dimension, metadata) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (chunk_id, doc_id, text, enriched_text, blob, dimension, metadata_json),
                )
        except sqlite3.IntegrityError as exc:
            raise InvalidArgument(f"chunk {chunk_id!r} is already in the store") from exc
        except sqlite3.DatabaseError as exc:
            raise InvalidRecord(f"cannot write: {exc}", path=self.path, field="chunks") from None

    # --- reading ------------------------------------------------------------------------

    _SELECT = (
        "SELECT c.chunk_id, c.doc_id, c.text, c.enriched_text, c.embedding, c.dimension, c.metadata, "
        "d.title, d.path FROM chunks AS c JOIN documents AS d ON d.doc_id = c.doc_id"
    )

    def _metadata(self, text: Any, where: str) -> dict[str, Any]:
        if not isinstance(text, str):
            raise InvalidRecord(f"metadata is not JSON text but {type(text).__name__}", path=self.path,
                                field=f"{where}.metadata")  # fmt: skip
        value = parse_json(text, path=self.path, field=f"{where}.metadata", lines=False)  # malformed or nested too deeply
        if not isinstance(value, dict):
            raise InvalidRecord(f"metadata must be a JSON object, not {type(value).__name__}", path=self.path,
                                field=f"{where}.metadata")  # fmt: skip
        return value

    def _row(self, row: sqlite3.Row) -> dict[str, Any]:
        where = f"chunks[{row['chunk_id']!r}]"
        embedding = None
        if row["embedding"] is not None:
            blob, dimension = row["embedding"], row["dimension"]
            if not isinstance(blob, bytes) or len(blob) % EMBEDDING_DTYPE.itemsize or len(blob) // 4 != dimension:
                size = f"{len(blob)} bytes" if isinstance(blob, bytes) else f"a {type(blob).__name__}"
                raise InvalidRecord(
                    f"embedding holds {size} but dimension {dimension!r} needs {EMBEDDING_DTYPE.itemsize} bytes "
                    "per value (a truncated or foreign blob)",
                    path=self.path,
                    field=f"{where}.embedding",
                )
            embedding = np.frombuffer(blob, dtype=EMBEDDING_DTYPE).astype(np.float32, copy=False)
        return {
            "chunk_id": row["chunk_id"],
            "doc_id": row["doc_id"],
            "title": row["title"],
            "path": row["path"],
            "text": row["text"],
            "enriched_text": row["enriched_text"],
            "enriched_content": row["enriched_text"],
            "embedding": embedding,
            "metadata": self._metadata(row["metadata"], where),
        }

    def _query(self, sql: str, params: Sequence[Any] = ()) -> Iterator[sqlite3.Row]:
        """Rows of a read, a damaged file (a corrupt page, not a database) an InvalidRecord naming it."""
        try:
            cursor = self._db.execute(sql, params)
            while rows := cursor.fetchmany(256):
                yield from rows
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # a damaged page may hold invalid text
            raise InvalidRecord(f"the SQLite file is damaged: {exc}", path=self.path, field="database") from None
        except UnicodeEncodeError as exc:  # a filter value with a lone surrogate
            raise InvalidArgument(
                f"a value to look up is not valid Unicode (a lone surrogate at position {exc.start} of "
                f"{exc.object[:60]!r}), which SQLite's UTF-8 text cannot hold"
            ) from None

    def get_chunk(self, chunk_id: str) -> dict[str, Any] | None:
        """The chunk as a dict (``embedding`` a read-only float32 array or None), or None."""
        _text(chunk_id, "chunk_id")
        row = next(self._query(f"{self._SELECT} WHERE c.chunk_id = ?", (chunk_id,)), None)
        return None if row is None else self._row(row)

    def get_chunk_by_id(self, chunk_id: str) -> dict[str, Any] | None:
        """The POC port's name for :meth:`get_chunk`."""
        return self.get_chunk(chunk_id)

    def get_all_chunks(self, where: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every chunk as a list, in chunk_id order (the POC port's name for ``list(iter_chunks())``)."""
        return list(self.iter_chunks(where))

    def get_document(self, doc_id: str) -> dict[str, Any] | None:
        _text(doc_id, "doc_id")
        row = next(self._query("SELECT doc_id, title, path, metadata FROM documents WHERE doc_id = ?", (doc_id,)), None)
        if row is None:
            return None
        metadata = self._metadata(row["metadata"], f"documents[{row['doc_id']!r}]")
        return {"doc_id": row["doc_id"], "title": row["title"], "path": row["path"], "metadata": metadata}

    def iter_chunks(self, where: Mapping[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every chunk, in chunk_id order; ``where`` filters on chunk metadata inside SQLite."""
        sql, params = compile_filter_sql(where, column="c.metadata")
        for row in self._query(f"{self._SELECT} WHERE {sql} ORDER BY c.chunk_id", params):
            yield self._row(row)

    def count_chunks(self) -> int:
        return int(next(self._query("SELECT COUNT(*) FROM chunks"))[0])

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

