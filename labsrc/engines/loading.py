"""Bulk loading: analyse the corpus in Python, then ``COPY`` chunks and postings into PostgreSQL.

The analysis runs here, with the lab's own analyzer, so the SQL lane counts
exactly the terms the in-memory lane counts. Rows go in with binary ``COPY``
(one stream per table, not one ``INSERT`` per row), postings sorted by term so
a term's postings sit together on disk. ``progress(phase, done, total)`` (the
lab's progress protocol, see :mod:`labsrc.evaluation.latency`) is called as
rows are written; the CLI turns it into a tqdm bar.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from labsrc.engines.errors import check_storable
from labsrc.errors import InvalidArgument
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import PolicyChunk

__all__ = ["LoadStats", "analysed_postings", "document_vectors", "load_corpus"]

#: How many rows pass between two progress calls.
PROGRESS_EVERY = 5000

_CHUNK_COLUMNS = (
    "chunk_id", "document_id", "version", "region", "acl_tag", "effective_from", "effective_to",
    "doc_len", "text", "embedding64",
)  # fmt: skip
_CHUNK_TYPES = ("text", "text", "text", "text", "text", "date", "date", "int4", "text", "float8[]")
_POSTING_COLUMNS = (
    "term", "chunk_id", "tf", "doc_len", "region", "acl_tag", "effective_from", "effective_to",
)  # fmt: skip
_POSTING_TYPES = ("text", "text", "int4", "int4", "text", "text", "date", "date")


@dataclass(frozen=True)
class LoadStats:
    """What a load wrote: rows per table and the vector dimension."""

    chunks: int
    postings: int
    dimension: int
    missing_vectors: int  # chunks stored without a vector (the dense lane can never return them)


def analysed_postings(
    chunks: Sequence[PolicyChunk], analyzer: Callable[[str], list[str]]
) -> tuple[list[int], list[tuple[str, str, int]]]:
    """Each chunk's analysed length and every ``(term, chunk_id, tf)``, sorted by term then chunk_id."""
    lengths: list[int] = []
    postings: list[tuple[str, str, int]] = []
    for chunk in chunks:
        terms = analyzer(chunk.text)
        lengths.append(len(terms))
        postings.extend((term, chunk.chunk_id, tf) for term, tf in Counter(terms).items())
    postings.sort()
    return lengths, postings


def document_vectors(chunks: Sequence[PolicyChunk], source: DenseSource) -> tuple[list[np.ndarray | None], int]:
    """Each chunk's vector (``None`` where the source has none) and the dimension.

    A source that refuses part of the corpus (a vector folder embeds only the
    chunks some caller can see) is asked chunk by chunk; the in-memory lane would
    fail only if such a chunk were ever permitted, the engine stores it without a
    vector, so the dense lane can never return it.
    """
    try:
        matrix = np.asarray(source.document_matrix(list(chunks)), dtype=np.float64)
        rows: list[np.ndarray | None] = list(matrix)
    except InvalidArgument:
        rows = []
        for chunk in chunks:
            try:
                rows.append(np.asarray(source.document_matrix([chunk]), dtype=np.float64)[0])
            except InvalidArgument:
                rows.append(None)
    dims = {row.shape[0] for row in rows if row is not None}
    if not dims:
        query = np.asarray(source.query_vector("dimension probe"), dtype=np.float64)
        dims = {query.shape[0]}
    if len(dims) != 1:
        raise InvalidArgument(f"the dense source returned vectors of several dimensions: {sorted(dims)}")
    return rows, dims.pop()


def _check_text(chunk: PolicyChunk) -> None:
    """Refuse what PostgreSQL text cannot store (NUL, invalid UTF-8) and a blank region or tag, naming the field."""
    for name in ("chunk_id", "document_id", "version", "region", "acl_tag", "text"):
        check_storable(getattr(chunk, name), f"chunk {chunk.chunk_id!r}: field {name!r}")
    for name in ("region", "acl_tag"):
        if not getattr(chunk, name).strip():
            raise InvalidArgument(f"chunk {chunk.chunk_id!r}: field {name!r} must be a non-blank string, not {getattr(chunk, name)!r}")


def _copy(conn: Any, table: str, columns: Sequence[str], types: Sequence[str], rows: Any, total: int, phase: str,
          progress: Callable[[str, int, int], None] | None) -> int:
    from psycopg import sql

    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        sql.Identifier(table), sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    )
    done = 0
    with conn.cursor() as cur, cur.copy(statement) as copy:
        copy.set_types(list(types))
        for row in rows:
            copy.write_row(row)
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(phase, done, total)
    if progress is not None:
        progress(phase, done, total)
    return done


def load_corpus(
    conn: Any,
    chunks: Sequence[PolicyChunk],
    vectors: Sequence[np.ndarray | None],
    analyzer: Callable[[str], list[str]],
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> LoadStats:
    """Analyse ``chunks`` and ``COPY`` them, with their ``vectors``, into ``lab_chunks`` and ``lab_postings``.

    ``chunks`` must be sorted by ``chunk_id`` with unique ids, and the
    connection's search_path must name the store's schema. Returns the row
    counts. The caller creates the tables first and switches on row security after.
    """
    if len(vectors) != len(chunks):
        raise InvalidArgument(f"{len(vectors)} vectors for {len(chunks)} chunks")
    for chunk in chunks:
        _check_text(chunk)
    dimension = next((len(v) for v in vectors if v is not None), 0)
    lengths, postings = analysed_postings(chunks, analyzer)
    for chunk_id, vector in zip((c.chunk_id for c in chunks), vectors):
        if vector is not None and not np.all(np.abs(vector) <= np.finfo(np.float32).max):
            raise InvalidArgument(f"chunk {chunk_id!r}: vector is outside float32's range, which pgvector stores")
    chunk_rows = (
        (c.chunk_id, c.document_id, c.version, c.region, c.acl_tag, c.effective_from, c.effective_to,
         n, c.text, None if v is None else v.tolist())
        for c, n, v in zip(chunks, lengths, vectors)
    )  # fmt: skip
    _copy(conn, "lab_chunks", _CHUNK_COLUMNS, _CHUNK_TYPES, chunk_rows, len(chunks), "load chunks", progress)
    by_id = {c.chunk_id: (c, n) for c, n in zip(chunks, lengths)}
    posting_rows = (
        (term, chunk_id, tf, by_id[chunk_id][1], by_id[chunk_id][0].region, by_id[chunk_id][0].acl_tag,
         by_id[chunk_id][0].effective_from, by_id[chunk_id][0].effective_to)
        for term, chunk_id, tf in postings
    )  # fmt: skip
    _copy(conn, "lab_postings", _POSTING_COLUMNS, _POSTING_TYPES, posting_rows, len(postings), "load postings", progress)
    return LoadStats(len(chunks), len(postings), dimension, sum(v is None for v in vectors))
