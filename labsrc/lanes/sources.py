"""Dense vectors for a run, from a path: a fixture JSON file, a ``vectors/<model>/`` folder, or nothing.

The command line (``labsrc gate``) and the audit read vectors the same way, through
:func:`load_dense_source`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

from labsrc.boundary import permitted_chunks
from labsrc.errors import InvalidRecord
from labsrc.lanes.dense import DenseSource, EncoderVectors, HashingEncoder, load_vectors
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["load_dense_source", "visible_chunks"]


def load_dense_source(
    path: str | Path | None, chunks: Sequence[PolicyChunk], cases: Sequence[Case] = ()
) -> DenseSource:
    """The dense lane's vectors for a command-line run.

    * a ``.json`` file: fixture vectors (:func:`~labsrc.records.loading.load_vectors`), queries looked up by text;
    * a directory: a ``vectors/<model>/`` folder (:func:`~labsrc.lanes.vectordir.load_vector_dir`);
      a case whose ``name`` is a query id in ``query_ids.txt`` gets that query's vector;
    * nothing: a deterministic :class:`~labsrc.lanes.dense.HashingEncoder` (word overlap, not meaning).

    Every chunk in ``chunks`` (pass the chunks some caller can see: hidden ones
    need no vector) must have a document vector; a missing one is an error naming the file.
    """
    if path is None:
        return EncoderVectors(HashingEncoder())
    path = Path(path)
    if path.is_dir():
        from labsrc.lanes.vectordir import VectorDirectory, load_vector_dir

        loaded = load_vector_dir(path)
        known = set(loaded.query_ids)
        source = VectorDirectory(
            loaded.doc_ids,
            loaded.documents,
            loaded.query_ids,
            loaded.query_matrix(loaded.query_ids),
            version=loaded.version,
            model=loaded.model,
            queries={case.name: case.query for case in cases if case.name in known},
        )
        have, where = set(loaded.doc_ids), path / "corpus_ids.txt"
    else:
        source = load_vectors(path)
        have, where = set(source.documents), path
    missing = sorted(c.chunk_id for c in chunks if c.chunk_id not in have)
    if missing:
        raise InvalidRecord(
            f"no document vector for {len(missing)} chunk(s), e.g. {missing[:5]}", path=where, field="documents"
        )
    return source


def visible_chunks(
    chunks: Sequence[PolicyChunk], callers: Sequence[Caller], cases: Sequence[Case], on_date: dt.date
) -> list[PolicyChunk]:
    """Chunks that at least one case's caller may see on the case's date: the ones the dense lane will embed."""
    by_id = {c.actor_id: c for c in callers}
    seen: dict[str, PolicyChunk] = {}
    for case in cases:
        for chunk in permitted_chunks(by_id[case.caller], chunks, case.on_date or on_date):
            seen.setdefault(chunk.chunk_id, chunk)
    return list(seen.values())
