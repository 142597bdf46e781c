"""LanceDB's hybrid search: native full-text index plus vectors, fused by its default ``RRFReranker``.

The shape of LanceDB's hybrid-search guide: one table (in ``lancedb.connect``
on a temporary directory) holding the text, a vector column and the boundary
fields; the native full-text index on ``text`` (``create_index("text",
config=FTS())``, what the deprecated ``create_fts_index`` now calls); then
``table.search(query_type="hybrid").vector(v).text(query)`` with the boundary
as a SQL ``where`` clause, ``prefilter=True`` (the default), cosine distance,
``limit(top_k)`` on each leg and on the fused list, and the default reranker,
``RRFReranker(K=60)``. The score is its ``_relevance_score``.

Measured (``tests/test_audit_lancedb.py``, lancedb 0.40.0): the filter is
applied *before* the search, so only permitted rows come back, as many as the
permitted rows allow, even when every nearer row is hidden; with
``prefilter=False`` each leg takes its ``limit`` nearest rows of the whole
table and the filter then drops the hidden ones: 0 of 5 permitted rows came
back when ten hidden rows outranked them. The full-text index's BM25
statistics are the whole table's, hidden rows included: on the lesson, the
permitted chunk's ``_score`` for ``RPL-14`` is 1.4729 beside the hidden chunks
and 1.9966 without them (0.2526 against 0.6549 in the test's small corpus).
The fused score is rank-based, so it moves only when a rank does; on the
lesson one does (the gate's rebuild comparison fails; its bait comparison passes). A build takes about
0.05 s. A process that has run LanceDB cannot safely ``fork``: a build in a
forked child then crashed (SIGSEGV), so the gate must fork from a process that
has at most imported it. Needs the ``audit`` extra (``lancedb``).
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from typing import Any

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["LanceDBHybrid", "boundary_where"]

_TABLE = "chunks"
#: ``RRFReranker``'s default constant, the reranker a hybrid query uses unless told otherwise.
RRF_K = 60


def _lancedb() -> tuple[Any, Any, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import lancedb
            import pyarrow as pa
            from lancedb.index import FTS
    except ImportError as exc:
        raise MissingDependency(f"the LanceDB subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})") from exc
    return lancedb, pa, FTS


def _quote(value: str) -> str:
    """A SQL string literal (single quotes doubled)."""
    return "'" + value.replace("'", "''") + "'"


def boundary_where(caller: Caller, on_date: dt.date) -> str:
    """The boundary as the SQL ``where`` clause a LanceDB user writes (the caller must hold a tag)."""
    day = on_date.toordinal()
    tags = ", ".join(_quote(t) for t in sorted(caller.acl_tags))
    return (f"region = {_quote(caller.region)} AND acl_tag IN ({tags}) "
            f"AND effective_from <= {day} AND effective_to >= {day}")


class LanceDBHybrid:
    """``factory(chunks, vectors)``: one LanceDB table of every stored chunk, boundary pre-filtered per request.

    Safe to call from many threads: one lock serialises searches (a hybrid
    query runs its two legs on a thread pool of its own).
    """

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None, *, prefilter: bool = True) -> None:
        self._lancedb, pa, fts = _lancedb()
        self.source = dense_source(vectors)
        self.prefilter = prefilter
        self.size = len(chunks)
        self._lock = threading.Lock()
        self.directory: str | None = None
        self.db = self.table = None
        if not chunks:
            return
        matrix = document_vectors(self.source, chunks)
        self.directory = tempfile.mkdtemp()
        try:
            self.db = self._lancedb.connect(self.directory)
            rows = [dict(boundary_metadata(c), text=c.text) for c in chunks]
            columns = {name: [r[name] for r in rows] for name in ("chunk_id", "text", "region", "acl_tag")}
            data = pa.table({
                **columns,
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.astype("float32").ravel()), matrix.shape[1]),
                "effective_from": pa.array([r["effective_from"] for r in rows], pa.int64()),
                "effective_to": pa.array([r["effective_to"] for r in rows], pa.int64()),
            })
            self.table = self.db.create_table(_TABLE, data=data)
            self.table.create_index("text", config=fts())
        except BaseException:
            self.close()
            raise

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        if self.table is None or not query.strip() or not caller.acl_tags or top_k < 1:
            return []
        vector = self.source.query_vector(query)
        with self._lock:
            found = (self.table.search(query_type="hybrid").vector(vector.tolist()).text(query)
                     .distance_type("cosine").where(boundary_where(caller, on_date), prefilter=self.prefilter)
                     .limit(top_k).to_arrow())
        pairs = zip(found["chunk_id"].to_pylist(), found["_relevance_score"].to_pylist())
        return sorted(((i, float(s)) for i, s in pairs), key=lambda p: (-p[1], p[0]))[:top_k]

    def versions(self, on_date: dt.date) -> dict[str, str]:
        return {"retriever": f"lancedb {self._lancedb.__version__}",
                "config": f"hybrid, native FTS, cosine, RRFReranker(K={RRF_K}), prefilter={self.prefilter}"}

    def close(self) -> None:
        self.table = None
        db, self.db = self.db, None
        if db is not None and hasattr(db, "close"):
            db.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None
