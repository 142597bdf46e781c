"""Precomputed embeddings from a ``vectors/<model>/`` directory: the dense lane for real corpora.

The lesson's dense lane reads a handful of 3-d fixture vectors from JSON. A real
collection ships its embeddings as matrices instead, one directory per model::

    vectors/all-MiniLM-L6-v2/
        MODEL.json       how the vectors were made (model, versions, dim, text recipe)
        corpus.npy       float32 [documents × dim], row i is corpus_ids.txt line i
        corpus_ids.txt   one document id per line
        queries.npy      float32 [queries × dim], row i is query_ids.txt line i
        query_ids.txt    one query id per line
        checksums.json   {"sha256": {file name: hex digest}} of every other file (written by the lab)

:func:`write_vector_dir` records the SHA-256 of every file it writes in
``checksums.json``, and :func:`load_vector_dir` checks each file against it
before parsing it: a bit flip, two ids swapped in ``corpus_ids.txt`` or any edit
after the write is refused by file name, instead of loading silently and ranking
with the wrong vectors (each check below can pass on such a folder). A folder
without ``checksums.json`` (written before the lab recorded them, or by hand)
loads unchecked, with an :class:`~labsrc.records.pinned.UncheckedFolderWarning`
saying how to write it again (:mod:`labsrc.records.checksums`). A load reads
every file once, from the one folder that stood at the path when it began
(:func:`~labsrc.records.pinned.read_pinned`), so a write racing it yields the old
vectors, the new ones, or a refusal naming the race, never a mix.

:func:`load_vector_dir` checks all of it before anything is ranked: the ids are
unique and match the corpus (and the queries), the row counts and dimensions
agree with each other and with ``MODEL.json``, every value is finite, and every
vector has unit length (so a dot product *is* the cosine). The result,
:class:`VectorDirectory`, is a :class:`~labsrc.lanes.dense.DenseSource` backed by the
matrix, so the lesson's dense lane and :class:`~labsrc.retriever.policy.PolicyRetriever`
can use it unchanged; its ``version`` and ``model`` record travel into traces
and reports.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.records.checksums import (
    CHECKSUMS_FILE,
    checksums_json,
    is_file_name,
)
from labsrc.records.files import (
    as_path,
    commit_dir,
    reading,
    refuse_foreign_files,
    remove_stale_staging,
    stage_dir,
    write_durable,
    writing,
)
from labsrc.records.loading import read_text
from labsrc.records.pinned import PinnedFolder, read_pinned
from labsrc.records.policy import PolicyChunk

__all__ = ["NORM_TOLERANCE", "VectorDirectory", "load_vector_dir", "read_id_list", "write_vector_dir"]

#: How far from 1 a stored vector's L2 norm may be. float32 rounding leaves ~1e-7.
NORM_TOLERANCE = 1e-3

_MODEL_FILE = "MODEL.json"
#: The end of the message refusing a file whose SHA-256 changed, and of the warning for a folder without checksums.
_REMEDY = "restore the folder or write it again (labsrc embed)"
_UNCHECKED = "write it again to record them: `labsrc embed`, or write_vector_dir(...)"


class VectorDirectory:
    """Document and query embeddings held as two matrices, looked up by id.

    It satisfies :class:`~labsrc.lanes.dense.DenseSource`: ``version``,
    ``document_matrix(chunks)`` (rows picked by ``chunk_id``) and
    ``query_vector(text)``. Query *text* is mapped to its query id through the
    ``queries`` given at load time; text that is not a known query maps to the
    zero vector, which scores 0 against everything, exactly like
    :class:`~labsrc.lanes.dense.FixtureVectors`. Benchmarks look vectors up by id
    instead (:meth:`query_vector_by_id`, :meth:`query_matrix`).

    The matrices are read-only; the object never changes after construction.
    """

    def __init__(
        self,
        doc_ids: Sequence[str],
        doc_matrix: np.ndarray,
        query_ids: Sequence[str],
        query_matrix: np.ndarray,
        *,
        version: str,
        model: Mapping[str, Any] | None = None,
        queries: Mapping[str, str] | None = None,
    ) -> None:
        self.version = version
        self.model: Mapping[str, Any] = MappingProxyType(dict(model or {}))
        self.doc_ids: tuple[str, ...] = tuple(doc_ids)
        self.query_ids: tuple[str, ...] = tuple(query_ids)
        docs = np.array(doc_matrix, dtype=np.float64)
        query_rows = np.array(query_matrix, dtype=np.float64)
        if docs.ndim != 2 or query_rows.ndim != 2 or docs.shape[1] != query_rows.shape[1]:
            raise InvalidArgument(
                f"document and query matrices must be 2-D with one dimension; got {docs.shape} and {query_rows.shape}"
            )
        if docs.shape[0] != len(self.doc_ids) or query_rows.shape[0] != len(self.query_ids):
            raise InvalidArgument(
                f"{docs.shape[0]} document rows for {len(self.doc_ids)} ids, "
                f"{query_rows.shape[0]} query rows for {len(self.query_ids)} ids"
            )
        self.dimension = int(docs.shape[1])
        # float64 copies: the dense lane scores in float64 like the rest of the lab.
        self._docs = docs
        self._queries = query_rows
        self._doc_norms = np.linalg.norm(docs, axis=1)
        for array in (self._docs, self._queries, self._doc_norms):
            array.setflags(write=False)
        self._doc_row = {doc_id: i for i, doc_id in enumerate(self.doc_ids)}
        self._query_row = {qid: i for i, qid in enumerate(self.query_ids)}
        # Text → query id; when two queries share a text, the first in query_ids.txt wins.
        by_text: dict[str, str] = {}
        for qid in self.query_ids:
            text = (queries or {}).get(qid)
            if text is not None:
                by_text.setdefault(text, qid)
        self._query_by_text = MappingProxyType(by_text)
        self._zero = np.zeros(self.dimension)
        self._zero.setflags(write=False)

    # --- the DenseSource protocol -------------------------------------------------

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray:
        """The rows of ``chunks`` (by ``chunk_id``), in the order given."""
        missing = sorted(c.chunk_id for c in chunks if c.chunk_id not in self._doc_row)
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5])
            raise InvalidArgument(f"no vector for {len(missing)} chunk(s), e.g. {shown}")
        if not chunks:
            return np.zeros((0, self.dimension))
        return self._docs[[self._doc_row[c.chunk_id] for c in chunks]]

    def query_vector(self, query: str) -> np.ndarray:
        """The stored vector of the query whose text is ``query``; the zero vector if none."""
        qid = self._query_by_text.get(query)
        return self._zero if qid is None else self._queries[self._query_row[qid]]

    # --- lookups by id ---------------------------------------------------------------

    @property
    def documents(self) -> np.ndarray:
        """All document vectors, row i belonging to ``doc_ids[i]`` (read-only)."""
        return self._docs

    def query_id_for(self, text: str) -> str | None:
        """The query id whose text is ``text``, or None."""
        return self._query_by_text.get(text)

    def query_vector_by_id(self, query_id: str) -> np.ndarray:
        row = self._query_row.get(query_id)
        if row is None:
            raise InvalidArgument(f"no query vector for query id {query_id!r}")
        return self._queries[row]

    def query_matrix(self, query_ids: Iterable[str]) -> np.ndarray:
        """The vectors of ``query_ids`` stacked in the order given."""
        rows = []
        for qid in query_ids:
            row = self._query_row.get(qid)
            if row is None:
                raise InvalidArgument(f"no query vector for query id {qid!r}")
            rows.append(row)
        return self._queries[rows]

    def cosine_scores(self, query_vectors: np.ndarray) -> np.ndarray:
        """cos(d, q) for every document (columns, ``doc_ids`` order) and query row; 0 for zero vectors.

        Accepts one vector ``[dim]`` (returns ``[documents]``) or a matrix
        ``[queries × dim]`` (returns ``[queries × documents]``).
        """
        q = np.asarray(query_vectors, dtype=np.float64)
        if q.shape[-1] != self.dimension:
            raise InvalidArgument(f"dimension mismatch: documents have {self.dimension}, query has {q.shape[-1]}")
        dots = q @ self._docs.T
        denominator = np.multiply.outer(np.linalg.norm(q, axis=-1), self._doc_norms)
        out = np.zeros_like(dots)
        np.divide(dots, denominator, out=out, where=denominator > 0)
        return out

    def __repr__(self) -> str:
        return (
            f"VectorDirectory(version={self.version!r}, dimension={self.dimension}, "
            f"documents={len(self.doc_ids)}, queries={len(self.query_ids)})"
        )


# --- loading -----------------------------------------------------------------------


def read_id_list(path: str | Path) -> list[str]:
    """One id per line; blank lines, surrounding whitespace and repeats are errors naming the line."""
    path = Path(path)
    return _id_list(read_text(path), path)


def _id_list(text: str, path: Path) -> list[str]:
    ids: list[str] = []
    first_line: dict[str, int] = {}
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise InvalidRecord("blank id", path=path, line=number, field="id")
        if line != line.strip():
            raise InvalidRecord(f"id {line!r} has surrounding whitespace", path=path, line=number, field="id")
        if line in first_line:
            raise InvalidRecord(
                f"duplicate id {line!r} (first seen on line {first_line[line]})", path=path, line=number, field="id"
            )
        first_line[line] = number
        ids.append(line)
    return ids


def _load_matrix(folder: PinnedFolder, name: str, n_rows: int, ids_file: str) -> np.ndarray:
    # load_npy checks the header first: a 0-byte or truncated file is an InvalidRecord naming it.
    path, matrix = folder.path / name, folder.load_npy(name)
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise InvalidRecord(f"expected a 2-D [rows × dim] matrix, got shape {matrix.shape}", path=path, field="shape")
    if not np.issubdtype(matrix.dtype, np.floating):
        raise InvalidRecord(f"expected floating-point vectors, got dtype {matrix.dtype}", path=path, field="dtype")
    if matrix.shape[0] != n_rows:
        raise InvalidRecord(f"has {matrix.shape[0]} rows but {ids_file} lists {n_rows} ids", path=path, field="rows")
    bad_rows = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if bad_rows.size:
        raise InvalidRecord(
            f"row {int(bad_rows[0]) + 1} ({ids_file} line {int(bad_rows[0]) + 1}) contains NaN or infinite values",
            path=path,
            field="values",
        )
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
    off = np.flatnonzero(np.abs(norms - 1.0) > NORM_TOLERANCE)
    if off.size:
        row = int(off[0])
        raise InvalidRecord(
            f"row {row + 1} ({ids_file} line {row + 1}) has L2 norm {norms[row]:.6f}; "
            f"vectors must be L2-normalised (|norm - 1| <= {NORM_TOLERANCE})",
            path=path,
            field="norm",
        )
    return matrix


def _check_same_ids(found: Sequence[str], expected: Iterable[str], *, path: Path, what: str) -> None:
    expected_set = set(expected)
    found_set = set(found)
    if found_set == expected_set:
        return
    for number, item in enumerate(found, start=1):
        if item not in expected_set:
            raise InvalidRecord(f"id {item!r} is not in the {what}", path=path, line=number, field="id")
    missing = sorted(expected_set - found_set)
    raise InvalidRecord(
        f"{len(missing)} {what} id(s) have no vector, e.g. {', '.join(repr(m) for m in missing[:5])}",
        path=path,
        field="id",
    )


def load_vector_dir(
    path: str | Path,
    *,
    corpus_ids: Iterable[str] | None = None,
    queries: Mapping[str, str] | None = None,
) -> VectorDirectory:
    """Load and validate a ``vectors/<model>/`` directory (see the module docstring).

    ``corpus_ids``: when given, ``corpus_ids.txt`` must hold exactly these ids.
    ``queries``: query id → text; when given, ``query_ids.txt`` must hold
    exactly these ids, and :meth:`VectorDirectory.query_vector` can map text to
    vectors. Every problem raises :class:`~labsrc.errors.InvalidRecord` naming
    the file (and the line or row).

    The version recorded in traces is ``MODEL.json``'s ``model`` field; the
    whole ``MODEL.json`` record is kept as ``.model``.
    """
    path = as_path(path)
    remove_stale_staging(path)  # what saves of this folder killed part-way left beside it
    with reading(path):
        return _load_vector_dir(path, corpus_ids, queries)


def _load_vector_dir(path: Path, corpus_ids: Iterable[str] | None, queries: Mapping[str, str] | None) -> VectorDirectory:
    if not path.is_dir():
        raise InvalidRecord("vector directory not found", path=path)
    return read_pinned(path, lambda folder: _read_vectors(folder, corpus_ids, queries), required=_WRITTEN,
                       remedy=_REMEDY, unchecked=_UNCHECKED)  # fmt: skip


def _read_vectors(folder: PinnedFolder, corpus_ids: Iterable[str] | None, queries: Mapping[str, str] | None
                  ) -> VectorDirectory:  # fmt: skip
    """The checked vectors, each file read once from the one ``folder``."""
    path = folder.path
    model_path = path / _MODEL_FILE
    model = folder.load_json(_MODEL_FILE)
    if not isinstance(model, dict):
        raise InvalidRecord(f"expected a JSON object, got {type(model).__name__}", path=model_path)
    name = model.get("model")
    if not isinstance(name, str) or not name.strip():
        raise InvalidRecord("missing or blank model name", path=model_path, field="model")
    if model.get("normalized") is False:
        raise InvalidRecord("the lab needs L2-normalised vectors", path=model_path, field="normalized")

    doc_ids = _id_list(folder.read_text("corpus_ids.txt"), path / "corpus_ids.txt")
    query_ids = _id_list(folder.read_text("query_ids.txt"), path / "query_ids.txt")
    if corpus_ids is not None:
        _check_same_ids(doc_ids, corpus_ids, path=path / "corpus_ids.txt", what="corpus")
    if queries is not None:
        _check_same_ids(query_ids, queries, path=path / "query_ids.txt", what="queries file")
    docs = _load_matrix(folder, "corpus.npy", len(doc_ids), "corpus_ids.txt")
    query_rows = _load_matrix(folder, "queries.npy", len(query_ids), "query_ids.txt")
    if docs.shape[1] != query_rows.shape[1]:
        raise InvalidRecord(
            f"documents have dimension {docs.shape[1]} but queries.npy has {query_rows.shape[1]}",
            path=path / "queries.npy",
            field="shape",
        )
    dim = model.get("dim")
    if dim is not None and dim != docs.shape[1]:
        raise InvalidRecord(f"says {dim} but the vectors have dimension {docs.shape[1]}", path=model_path, field="dim")
    rows = model.get("rows")
    if isinstance(rows, dict):
        for key, count in (("corpus", len(doc_ids)), ("queries", len(query_ids))):
            if key in rows and rows[key] != count:
                raise InvalidRecord(f"says {rows[key]} {key} rows but there are {count}", path=model_path, field="rows")
    return VectorDirectory(doc_ids, docs, query_ids, query_rows, version=name.strip(), model=model, queries=queries)


# --- writing -----------------------------------------------------------------------

_WRITTEN = ("corpus.npy", "corpus_ids.txt", "queries.npy", "query_ids.txt", _MODEL_FILE)


def write_vector_dir(
    path: str | Path,
    doc_ids: Sequence[str],
    doc_matrix: np.ndarray,
    query_ids: Sequence[str],
    query_matrix: np.ndarray,
    model: Mapping[str, Any],
    *,
    extra: Mapping[str, bytes] | None = None,
) -> Path:
    """Write a ``vectors/<model>/`` directory whole: beside ``path``, fsynced, then swapped in.

    A run killed at any point leaves the old directory or the new one at
    ``path`` (:func:`~labsrc.records.files.commit_dir`). ``extra`` adds files by
    name. ``checksums.json`` records the SHA-256 of every file written, extras
    included, and is written last, inside the same atomic swap. An existing
    ``path`` holding anything else is refused, since the folder is replaced as a
    whole.
    """
    path = as_path(path)
    for name in extra or {}:
        if not is_file_name(name) or name in (*_WRITTEN, CHECKSUMS_FILE):
            raise InvalidArgument(f"extra file name {name!r} must be a plain file name other than the folder's own files")
    names = {*_WRITTEN, CHECKSUMS_FILE, *(extra or {})}
    refuse_foreign_files(path, names, "a vector directory")
    files = {
        "corpus.npy": lambda h: np.save(h, doc_matrix, allow_pickle=False),
        "queries.npy": lambda h: np.save(h, query_matrix, allow_pickle=False),
        "corpus_ids.txt": lambda h: h.write("".join(f"{i}\n" for i in doc_ids).encode("utf-8")),
        "query_ids.txt": lambda h: h.write("".join(f"{i}\n" for i in query_ids).encode("utf-8")),
        **{name: (lambda h, data=data: h.write(data)) for name, data in (extra or {}).items()},
        _MODEL_FILE: lambda h: h.write((json.dumps(dict(model), indent=2, ensure_ascii=False) + "\n").encode("utf-8")),
    }
    with writing(path):
        staged = stage_dir(path)
        try:
            for name, write in files.items():
                write_durable(staged / name, write)
            checksums = checksums_json(staged, files)  # last, inside the same atomic swap
            write_durable(staged / CHECKSUMS_FILE, lambda h: h.write(checksums))
            return commit_dir(staged, path)
        finally:
            shutil.rmtree(staged, ignore_errors=True)  # already gone unless something failed
