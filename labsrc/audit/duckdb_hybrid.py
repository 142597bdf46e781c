"""DuckDB with its ``fts`` and ``vss`` extensions: BM25 plus an HNSW index, fused with RRF.

Its documentation's way to filter: plain SQL. The full-text lane is
``PRAGMA create_fts_index('chunks', 'chunk_id', 'text')`` and a query scoring
``fts_main_chunks.match_bm25(chunk_id, $query)`` with the boundary in ``WHERE``
(``region = $region``, ``acl_tag IN (...)``, the effective window as day ordinals),
``score IS NOT NULL``, ``ORDER BY score DESC, chunk_id LIMIT k`` (DuckDB docs,
"Full-Text Search Extension"). The dense lane is a ``FLOAT[d]`` column with
``CREATE INDEX ... USING HNSW (vec) WITH (metric = 'cosine')`` and the same
``WHERE`` on ``ORDER BY array_cosine_distance(vec, $vector::FLOAT[d]) LIMIT k``
(DuckDB docs, "Vector Similarity Search Extension"; in memory no
``hnsw_enable_experimental_persistence`` is needed); score = 1 - distance.
DuckDB fuses nothing itself, so the two lists, each fetched at depth ``top_k``,
are fused with the lab's RRF (:func:`labsrc.fusion.rrf.fuse_ranked_ids`, k = 60);
``search`` returns both lanes and the fused list, so the gate judges each lane.

Measured with duckdb 1.5.5 (``tests/test_audit_duckdb.py``):

* ``match_bm25`` takes its statistics (document count, document frequency,
  average length) from the whole indexed table, not from the rows the ``WHERE``
  keeps. On the lesson, Luna's ``eu-refurb-v2-rule`` scores 0.1943 for
  "RPL-14" over every stored chunk and 0.3610 over her permitted chunks only
  (the 0.6987 / 0.4397 reported earlier did not reproduce here). The returned
  score is the RRF sum, which reads ranks only, so on the lesson the fused
  answers are identical and the rebuild gate passes; a corpus where hidden
  text reorders the permitted chunks' BM25 ranks changes the answers.
* With an HNSW index the documented query is an ``HNSW_INDEX_SCAN`` of the k
  nearest vectors followed by the ``WHERE`` as a filter: with the five nearest
  hidden it returns 0 of 5 rows (the same SQL without the index returns 5). On
  the lesson the bait gate fails on it: the dense-only "paraphrase" case comes
  back empty when hidden bait sits nearer the query. This module does what the
  documentation shows and does not work around it. (A trap the other way: with
  the distance also in the select list, two separate ``?`` parameters for the
  vector made DuckDB sort exactly, without the index; one ``$vector``, as
  here, keeps the documented plan.)

Chunks without a vector (all zeros in the run's source) get ``NULL`` in ``vec``
and never reach the dense lane; nor does a query whose vector is all zeros.
The extensions load offline from the ``duckdb-extension-fts`` and
``duckdb-extension-vss`` wheels (``LOAD '<path>'``; never ``INSTALL``, which
downloads). Each search runs on its own ``con.cursor()`` (DuckDB's thread-safe
child connection). Needs the ``audit`` extra (``duckdb``,
``duckdb-extension-fts``, ``duckdb-extension-vss``).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors
from labsrc.errors import MissingDependency
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k, fuse_ranked_ids
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk
from labsrc.retriever.policy import RetrievalResult

__all__ = ["DuckDBHybrid", "load_extensions"]

_HINT = "pip install 'hybrid-retrieval-lab[audit]'"


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError as exc:
        raise MissingDependency(f"the DuckDB subject needs the audit extra: {_HINT} ({exc})") from exc
    return duckdb


def load_extensions(con: Any, duckdb: Any) -> None:
    """``LOAD`` fts and vss from their Python wheels' files: no download, nothing written to ``~/.duckdb``."""
    con.execute("SET autoinstall_known_extensions = false")
    for name in ("fts", "vss"):
        try:
            path = resources.files(f"duckdb_extension_{name}") / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
        except ModuleNotFoundError as exc:
            raise MissingDependency(f"the DuckDB subject needs the audit extra: {_HINT} ({exc})") from exc
        if not path.is_file():
            raise MissingDependency(f"the DuckDB subject needs duckdb-extension-{name}=={duckdb.__version__}: {_HINT} "
                                    f"(no {path})")
        con.execute(f"LOAD '{path}'")


class DuckDBHybrid:
    """``factory(chunks, vectors)``: one in-memory DuckDB table of every stored chunk, BM25 + HNSW, RRF-fused."""

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None, *, rrf_k: float = DEFAULT_RRF_K) -> None:
        duckdb = self._duckdb = _duckdb()
        self.rrf_k = check_rrf_k(rrf_k)
        self.source = dense_source(vectors)
        self.size = len(chunks)
        self._by_id = {c.chunk_id: c for c in chunks}
        self.dimension = 0
        self._lock = threading.Lock()
        self.con: Any = duckdb.connect(":memory:")
        load_extensions(self.con, duckdb)
        if not chunks:
            return
        matrix = document_vectors(self.source, chunks)
        self.dimension = int(matrix.shape[1])
        self.con.execute(
            f"CREATE TABLE chunks (chunk_id VARCHAR PRIMARY KEY, text VARCHAR, region VARCHAR, acl_tag VARCHAR, "
            f"effective_from BIGINT, effective_to BIGINT, vec FLOAT[{self.dimension}])"
        )
        rows = []
        for chunk, row in zip(chunks, matrix):
            meta = boundary_metadata(chunk)
            rows.append((meta["chunk_id"], chunk.text, meta["region"], meta["acl_tag"], meta["effective_from"],
                         meta["effective_to"], row.tolist() if np.any(row) else None))
        self.con.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        self.con.execute("PRAGMA create_fts_index('chunks', 'chunk_id', 'text')")
        self.con.execute("CREATE INDEX chunks_vec ON chunks USING HNSW (vec) WITH (metric = 'cosine')")

    @staticmethod
    def _where(caller: Caller, on_date: dt.date) -> tuple[str, dict[str, Any]]:
        """The boundary as SQL over named parameters: region, any of the caller's tags, the effective window."""
        tags = {f"tag{i}": tag for i, tag in enumerate(sorted(caller.acl_tags))}
        sql = (f"region = $region AND acl_tag IN ({', '.join('$' + name for name in tags)}) "
               "AND effective_from <= $day AND $day <= effective_to")
        return sql, {"region": caller.region, **tags, "day": on_date.toordinal()}

    def bm25(self, cursor: Any, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        """The documented full-text query, the boundary in its ``WHERE``."""
        where, params = self._where(caller, on_date)
        rows = cursor.execute(
            "SELECT chunk_id, score FROM (SELECT *, fts_main_chunks.match_bm25(chunk_id, $query) AS score FROM chunks) sq "
            f"WHERE score IS NOT NULL AND {where} ORDER BY score DESC, chunk_id LIMIT $k",
            {**params, "query": query, "k": top_k},
        ).fetchall()
        return [(str(i), float(s)) for i, s in rows]

    def dense_sql(self, caller: Caller, on_date: dt.date) -> tuple[str, dict[str, Any]]:
        """The documented HNSW query (one ``$vector`` for the score and the ``ORDER BY``), the boundary in its ``WHERE``."""
        where, params = self._where(caller, on_date)
        distance = f"array_cosine_distance(vec, $vector::FLOAT[{self.dimension}])"
        return (f"SELECT chunk_id, {distance} AS distance FROM chunks WHERE {where} ORDER BY {distance} LIMIT $k",
                params)

    def dense(self, cursor: Any, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        """The dense lane's ``(chunk_id, 1 - cosine distance)``, as many rows as the query returns."""
        vector = self.source.query_vector(query)
        if not self.dimension or not np.any(vector):
            return []
        sql, params = self.dense_sql(caller, on_date)
        rows = cursor.execute(sql, {**params, "vector": vector.tolist(), "k": top_k}).fetchall()
        pairs = [(str(i), 1.0 - float(d)) for i, d in rows if d is not None]
        return sorted(pairs, key=lambda p: (-p[1], p[0]))

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> RetrievalResult:
        """Both lanes and their fusion, as a :class:`~labsrc.retriever.policy.RetrievalResult`, so the gate
        compares each lane (which one a hidden chunk moved) as well as the fused list."""
        lanes: dict[str, list[tuple[str, float]]] = {"bm25": [], "dense": []}
        if self.size and query.strip() and caller.acl_tags:
            with self._lock:  # a cursor is created on the shared connection; each one then runs on its own
                cursor = self.con.cursor()
            try:
                lanes = {"bm25": self.bm25(cursor, query, caller, on_date, top_k),
                         "dense": self.dense(cursor, query, caller, on_date, top_k)}
            finally:
                cursor.close()
        fused = fuse_ranked_ids(lanes, self.rrf_k)[:top_k]

        def chunks(pairs: Sequence[tuple[str, float]]) -> list[tuple[PolicyChunk, float]]:
            return [(self._by_id[i], s) for i, s in pairs]

        return RetrievalResult.from_lanes(chunks(lanes["bm25"]), chunks(lanes["dense"]), chunks(fused),
                                          versions=self.versions(on_date), query_kind="adhoc", timings_ms={})

    def versions(self, on_date: dt.date | None = None) -> dict[str, str]:
        return {"retriever": f"duckdb {self._duckdb.__version__} fts match_bm25 + vss hnsw cosine, "
                             f"RRF k={self.rrf_k:g}, each lane at depth top_k",
                "dense": str(getattr(self.source, "version", "unknown"))}

    def close(self) -> None:
        self.con.close()
