"""Bulk loading: analyse the corpus in Python, then ``COPY`` chunks, vectors and terms into PostgreSQL.

The analysis runs here, with the lab's own analyzer, so the SQL lane counts
exactly the terms the in-memory lane counts. Rows go in with binary ``COPY``
(one stream per table, not one ``INSERT`` per row), in one transaction:

* ``lab_chunks``: one row per chunk, its float64 vector already in
  PostgreSQL's binary ``float8[]`` form (:func:`float8_array_binary`);
* ``lab_vectors``: the float32 vectors (:func:`vector_binary`) in boundary
  order (:func:`boundary_order`), so a caller's rows share pages;
* a staging table of each chunk's terms and counts (analysed in worker
  processes and written as ``COPY`` text, :mod:`labsrc.engines.analysis_pool`),
  which one ``INSERT … SELECT … unnest`` turns into ``lab_postings`` inside
  the server.

``progress(phase, done, total)`` (the
lab's progress protocol, see :mod:`labsrc.evaluation.latency`) is called as
rows are written; the CLI turns it into a tqdm bar.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from labsrc.engines.analysis_pool import analyse_for_copy
from labsrc.engines.binary_arrays import float8_array_binary
from labsrc.engines.errors import check_storable
from labsrc.errors import InvalidArgument
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import PolicyChunk

__all__ = [
    "longest_key",
    "LoadStats",
    "boundary_order",
    "document_vectors",
    "load_corpus",
    "vector_binary",
]

#: How many rows pass between two progress calls.
PROGRESS_EVERY = 5000

_CHUNK_COLUMNS = (
    "chunk_id", "document_id", "version", "region", "acl_tag", "effective_from", "effective_to",
    "doc_len", "text", "embedding64",
)  # fmt: skip
# "bytea" tells psycopg to send our bytes as they are: the server decodes them with the column's own binary
# input function (float8[]'s array_recv), so no vector passes through a Python float.
_CHUNK_TYPES = ("text", "text", "text", "text", "text", "date", "date", "int4", "text", "bytea")
_VECTOR_COLUMNS = ("region", "acl_tag", "effective_from", "effective_to", "chunk_id", "embedding")
_VECTOR_TYPES = ("text", "text", "date", "date", "text", "bytea")  # pgvector's vector_recv decodes the last
_TERMS_COPY = "COPY lab_load_terms (chunk_id, terms, tfs) FROM STDIN (FORMAT TEXT, ENCODING 'UTF8')"

# Postings are written by the server: one staged row per chunk (its terms and their counts) is unnested
# next to the chunk's boundary columns, millions of rows without a Python loop.
_POSTINGS_FROM_STAGE = """
INSERT INTO lab_postings (term, chunk_id, tf, doc_len, region, acl_tag, effective_from, effective_to)
SELECT u.term, c.chunk_id, u.tf, c.doc_len, c.region, c.acl_tag, c.effective_from, c.effective_to
FROM lab_load_terms AS t JOIN lab_chunks AS c USING (chunk_id), unnest(t.terms, t.tfs) AS u(term, tf)
"""


def vector_binary(matrix: np.ndarray) -> list[bytes]:
    """Each row as pgvector's binary ``vector`` (int16 dimension, int16 zero, big-endian float4s).

    numpy's float64 → float32 rounds to nearest, as pgvector's ``float8[]::vector`` cast does.
    """
    rows, dimension = matrix.shape
    header = np.array([dimension, 0], dtype=">i2").tobytes()
    body = np.ascontiguousarray(matrix, dtype=">f4")
    return [header + body[i].tobytes() for i in range(rows)]


@dataclass(frozen=True)
class LoadStats:
    """What a load wrote: rows per table and the vector dimension."""

    chunks: int
    postings: int
    dimension: int
    missing_vectors: int  # chunks stored without a vector (the dense lane can never return them)


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


def boundary_order(chunks: Sequence[PolicyChunk]) -> list[int]:
    """Positions of ``chunks`` sorted by (region, acl_tag, effective_from, chunk_id): the dense table's row order."""
    return sorted(range(len(chunks)), key=lambda i: (chunks[i].region, chunks[i].acl_tag, chunks[i].effective_from, chunks[i].chunk_id))


def load_corpus(
    conn: Any,
    chunks: Sequence[PolicyChunk],
    vectors: Sequence[np.ndarray | None],
    analyzer: Callable[[str], list[str]],
    *,
    progress: Callable[[str, int, int], None] | None = None,
) -> LoadStats:
    """Analyse ``chunks`` and ``COPY`` them, with their ``vectors``, into ``lab_chunks``, ``lab_vectors`` and
    ``lab_postings``.

    ``chunks`` must be sorted by ``chunk_id`` with unique ids, and the
    connection's search_path must name the store's schema. Returns the row
    counts. The caller creates the tables first and switches on row security after.
    """
    if len(vectors) != len(chunks):
        raise InvalidArgument(f"{len(vectors)} vectors for {len(chunks)} chunks")
    for chunk in chunks:
        _check_text(chunk)
    dimension = next((len(v) for v in vectors if v is not None), 0)
    for chunk_id, vector in zip((c.chunk_id for c in chunks), vectors):
        if vector is not None and not np.all(np.abs(vector) <= np.finfo(np.float32).max):
            raise InvalidArgument(f"chunk {chunk_id!r}: vector is outside float32's range, which pgvector stores")
    present = [i for i, v in enumerate(vectors) if v is not None]
    matrix = np.asarray([vectors[i] for i in present], dtype=np.float64).reshape(len(present), dimension)
    lengths, staged = analyse_for_copy([(c.chunk_id, c.text) for c in chunks], analyzer)
    with conn.transaction():  # all of the load or none of it
        return _write(conn, chunks, lengths, staged, matrix, present, dimension, progress)


def _write(conn: Any, chunks: Sequence[PolicyChunk], lengths: list[int], staged: list[tuple[int, bytes]],
           matrix: np.ndarray, present: list[int], dimension: int,
           progress: Callable[[str, int, int], None] | None) -> LoadStats:
    exact = dict(zip(present, float8_array_binary(matrix)))
    chunk_rows = (
        (c.chunk_id, c.document_id, c.version, c.region, c.acl_tag, c.effective_from, c.effective_to,
         n, c.text, exact.get(i))
        for i, (c, n) in enumerate(zip(chunks, lengths))
    )  # fmt: skip
    _copy(conn, "lab_chunks", _CHUNK_COLUMNS, _CHUNK_TYPES, chunk_rows, len(chunks), "load chunks", progress)
    stored = dict(zip(present, vector_binary(matrix)))
    in_order = [i for i in boundary_order(chunks) if i in stored]
    vector_rows = (
        (chunks[i].region, chunks[i].acl_tag, chunks[i].effective_from, chunks[i].effective_to, chunks[i].chunk_id, stored[i])
        for i in in_order
    )  # fmt: skip
    _copy(conn, "lab_vectors", _VECTOR_COLUMNS, _VECTOR_TYPES, vector_rows, len(in_order), "load vectors", progress)
    conn.execute("CREATE TEMP TABLE lab_load_terms (chunk_id text COLLATE \"C\", terms text[], tfs int4[]) ON COMMIT DROP")
    done = 0
    with conn.cursor() as cur, cur.copy(_TERMS_COPY) as copy:
        for rows, text in staged:  # already COPY text, rendered by labsrc.engines.analysis_pool
            copy.write(text)
            done += rows
            if progress is not None:
                progress("load terms", done, len(chunks))
    postings = conn.execute(_POSTINGS_FROM_STAGE).rowcount
    if progress is not None:
        progress("load postings", postings, postings)
    return LoadStats(len(chunks), postings, dimension, len(chunks) - len(present))


def longest_key(chunks: Sequence[PolicyChunk], analyzer: Callable[[str], list[str]]) -> str:
    """``; the longest is chunk 'x' field 'y' (n bytes)``, to point at the value PostgreSQL refused."""
    best: tuple[int, str, str] = (0, "", "")
    for chunk in chunks:
        for name in ("chunk_id", "region", "acl_tag"):
            size = len(getattr(chunk, name).encode("utf-8"))
            best = max(best, (size, chunk.chunk_id, name))
        for term in set(analyzer(chunk.text)):
            best = max(best, (len(term.encode("utf-8")), chunk.chunk_id, "text (an analysed term)"))
    size, chunk_id, name = best
    return f"; the longest is chunk {chunk_id[:60]!r} field {name} ({size:,} bytes)" if size else ""
