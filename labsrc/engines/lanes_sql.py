"""Both lanes as SQL, run as the reader role inside a request's transaction (so behind RLS).

**BM25.** Two statements. The first reads the statistics of the rows the
session can see: N and the total length (avgdl = total / N) are sums over the
visible rows of ``lab_group_stats``, one per boundary group
(:mod:`labsrc.engines.groups`), and, per query term, df = the number of its
visible postings, which ``lab_visible_df`` (:mod:`labsrc.engines.term_dates`)
finds by binary search in the term's sorted effective dates, without reading them.
Row-level security filters every table, so these are the caller's universe's
statistics by construction; a hidden chunk cannot move an idf. Python then
applies the lab's own :func:`~labsrc.lanes.sparse.idf_lucene` (PostgreSQL has
``ln`` but no ``log1p``, and the two differ in the last bit), and the second
statement scores every chunk that shares a term with the query, term by term
in query order (one index scan of a term's visible postings each), adds each
chunk's contributions *in query-term order* (a hash aggregate, fed in that
order) and returns the top k by (score desc, chunk_id asc). Every operation in it is an
IEEE-754 ``+ − × ÷`` on ``float8`` in the same order as
:class:`~labsrc.lanes.sparse.BM25Index`, so the scores equal the in-memory
lane's bit for bit, and so do its ties.

**Dense.** pgvector stores ``vector(d)`` in float32 and computes cosine
distance (``<=>``) in float32, so its scores differ from the float64 lane
around the 7th digit. The engine uses pgvector to *choose* candidates and
rescores them from the stored float64 vector with the lab's
:func:`~labsrc.lanes.dense.cosine_similarity` (the usual "rescore with full
precision" step). Both modes read ``lab_vectors``, the narrow table of
float32 vectors in boundary order. ``exact`` scans every visible row (the
caller's region and tags, through the boundary index) and keeps every chunk
whose float32 distance is within a rounding bound of the k-th, so no true
top-k chunk can be lost; ``hnsw`` asks the index for k rows, which is where
the filtered-HNSW trap lives (RLS filters *after* the graph walk) unless
``hnsw.iterative_scan`` keeps the walk going, as the engine does by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.engines.binary_arrays import float8_array
from labsrc.engines.sessions import request_totals
from labsrc.lanes.candidates import float32_cosine_margin
from labsrc.lanes.dense import cosine_similarity
from labsrc.lanes.sparse import idf_lucene
from labsrc.ranking import top_k_positions

__all__ = [
    "DENSE_MODES",
    "HNSW_OVERFETCH",
    "ITERATIVE_SCANS",
    "SCORE_SETTINGS",
    "Bm25Statistics",
    "bm25_statistics",
    "dense_candidates",
    "float32_cosine_margin",
    "hnsw_settings",
    "rescore_dense",
    "sparse_lane",
    "vector_literal",
]

#: The dense lane's index modes.
DENSE_MODES = ("exact", "hnsw")
#: HNSW returns this many times k candidates, all rescored in float64, the best k kept: ``relaxed_order``
#: scans return rows slightly out of order, and copies of one vector tie, so the k-th is rarely the true k-th.
HNSW_OVERFETCH = 2
#: pgvector 0.8's ``hnsw.iterative_scan`` values.
ITERATIVE_SCANS = ("off", "strict_order", "relaxed_order")

# df from lab_visible_df (labsrc.engines.term_dates): two binary searches per term in each of the caller's
# region-and-tag keys, instead of counting every visible posting. At 100k chunks (300 requests) the statement
# took 11.5 / 33.8 ms p50 / p95 counting, and the function alone 1.8 / 3.9 ms; N and the total length (the
# visible rows of lab_group_stats) about 1.2 / 2.1 ms.
_STATS_SQL = """
SELECT c.n_docs, c.total_len, d.terms, d.dfs
FROM (SELECT coalesce(sum(n_docs), 0)::int8 AS n_docs, coalesce(sum(total_len), 0)::int8 AS total_len
        FROM lab_group_stats) AS c,
     (SELECT array_agg(term) AS terms, array_agg(df) AS dfs FROM lab_visible_df(%(terms)s::text[])) AS d
"""

# df alone, when N and the total length came with the request's corpus version (labsrc.engines.sessions).
_DF_SQL = "SELECT array_agg(term) AS terms, array_agg(df) AS dfs FROM lab_visible_df(%(terms)s::text[])"

# impact = idf · (tf·(k1+1)) / (tf + k1·((1−b) + b·|d|/avgdl)), in BM25Index's evaluation order.
#
# Term at a time, in query-term order: the outer side of the nested loop is the query's terms as unnested
# (in array order), and each term's visible postings are one index scan of its own (``OFFSET 0`` keeps the
# planner from flattening the lateral subquery into one scan of every visible posting, joined by a filter).
# A hash aggregate then adds each chunk's contributions in the order they arrive, which is query-term order:
# the sums are BM25Index.score_terms's, bit for bit, without sorting every posting by (chunk, ord).
# SCORE_SETTINGS makes the hash aggregate the plan (a sort-based one would regroup the rows in an order of
# its own) and keeps the statement serial (parallel partial sums would add in another order).
_SCORE_SQL = """
SELECT p.chunk_id,
       sum(q.idf * (p.tf * %(k1p1)s::float8)
           / (p.tf + %(k1)s::float8 * (%(omb)s::float8 + %(b)s::float8 * p.doc_len / %(avgdl)s::float8))) AS score
FROM unnest(%(terms)s::text[], %(idf)s::float8[]) AS q(term, idf)  -- in array order: query-term order
CROSS JOIN LATERAL (SELECT chunk_id, tf, doc_len FROM lab_postings WHERE term = q.term OFFSET 0) AS p
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT %(top_k)s
"""

#: The planner settings the scoring statement runs under (transaction-local, restored after it).
SCORE_SETTINGS = {"enable_sort": "off", "max_parallel_workers_per_gather": "0"}
# Reads each setting's value, then sets it (transaction-local): the first statement returns what the restore
# writes back, with the very same statement.
_SET_SQL = "SELECT " + ", ".join(
    [f"current_setting('{name}')" for name in SCORE_SETTINGS]
    + [f"set_config('{name}', %({name})s, true)" for name in SCORE_SETTINGS]
)


class Bm25Statistics:
    """N, total length and df per query term, as the session sees them."""

    __slots__ = ("df", "n_docs", "total_len")

    def __init__(self, n_docs: int, total_len: int, df: dict[str, int]) -> None:
        self.n_docs = n_docs
        self.total_len = total_len
        self.df = df

    @property
    def avgdl(self) -> float:
        """Mean analysed length; the same double as ``numpy.mean`` of the lengths (an exact integer sum / N)."""
        return self.total_len / self.n_docs if self.n_docs else 0.0


def bm25_statistics(conn: Any, terms: Sequence[str]) -> Bm25Statistics:
    """The BM25 statistics of the rows the session may see, for these query terms.

    In a store's request N and the total length were read with the corpus version, in the same transaction
    (:func:`~labsrc.engines.sessions.request_totals`); only df is read here then.
    """
    totals = request_totals(conn)
    if totals is not None:
        found, dfs = conn.execute(_DF_SQL, {"terms": list(terms)}).fetchone()
        return Bm25Statistics(totals[0], totals[1], dict(zip(found or [], (int(d) for d in dfs or []))))
    n_docs, total_len, found, dfs = conn.execute(_STATS_SQL, {"terms": list(terms)}).fetchone()
    return Bm25Statistics(int(n_docs), int(total_len), dict(zip(found or [], (int(d) for d in dfs or []))))


def sparse_lane(
    conn: Any,
    query_terms: Sequence[str],
    top_k: int,
    *,
    k1: float,
    b: float,
    statistics: Bm25Statistics | None = None,
) -> tuple[list[tuple[str, float]], Bm25Statistics]:
    """The BM25 lane: ``(chunk_id, score)`` by (score desc, chunk_id asc), and the statistics used.

    ``statistics`` replaces the session's own (:func:`bm25_statistics`); the
    retriever never passes it. It exists to *show* the side channel: statistics
    read from anywhere but the RLS-filtered tables let hidden rows move scores.
    """
    distinct = list(dict.fromkeys(query_terms))
    stats = bm25_statistics(conn, distinct) if statistics is None else statistics
    # One row per occurrence, in query order: the SQL reads and adds them in that order,
    # as BM25Index.score_terms does, so a repeated term counts where it occurs.
    terms = [t for t in query_terms if stats.df.get(t, 0) > 0]
    if not terms or stats.n_docs == 0 or stats.total_len == 0:
        return [], stats
    idf = idf_lucene(np.asarray([stats.df[t] for t in terms], dtype=np.int64), stats.n_docs)
    params = {
        "terms": terms,
        "idf": [float(x) for x in np.atleast_1d(idf)],
        "k1p1": float(k1) + 1.0,
        "k1": float(k1),
        "omb": 1.0 - float(b),
        "b": float(b),
        "avgdl": stats.avgdl,
        "top_k": int(top_k),
    }
    # On a connection in pipeline mode (as a request's is) the set and the score go in one round trip, and the
    # restore is sent with the request's next statement.
    settings = conn.execute(_SET_SQL, SCORE_SETTINGS)
    rows = conn.execute(_SCORE_SQL, params).fetchall()
    previous = settings.fetchone()[: len(SCORE_SETTINGS)]
    conn.execute(_SET_SQL, dict(zip(SCORE_SETTINGS, previous)))
    return [(str(chunk_id), float(score)) for chunk_id, score in rows], stats


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form, ``[x1,x2,...]``, with every float written exactly (``repr``)."""
    return "[" + ",".join(map(repr, np.asarray(vector, dtype=np.float64).tolist())) + "]"


_EXACT_SQL = """
WITH d AS MATERIALIZED (
    SELECT chunk_id, dist
    FROM (SELECT chunk_id, embedding <=> %(q)s::vector AS dist FROM lab_vectors OFFSET 0) AS s  -- one distance a row
    WHERE dist < 1.0 + %(margin)s::float8
), cut AS (
    SELECT dist FROM d ORDER BY dist LIMIT 1 OFFSET %(offset)s
)
SELECT c.chunk_id, array_send(c.embedding64)  -- binary: the float64 vector without a text round trip
FROM d JOIN lab_chunks AS c USING (chunk_id)
WHERE d.dist <= coalesce((SELECT dist FROM cut), 'Infinity'::float8) + %(margin)s::float8
"""

_HNSW_SQL = """
WITH v AS MATERIALIZED (
    SELECT chunk_id FROM lab_vectors ORDER BY embedding <=> %(q)s::vector LIMIT %(top_k)s
)
SELECT c.chunk_id, array_send(c.embedding64) FROM v JOIN lab_chunks AS c USING (chunk_id)
"""


def hnsw_settings(ef_search: int | None, iterative_scan: str | None) -> dict[str, str]:
    """The transaction-local settings the HNSW statement runs under.

    They make the planner walk the graph; the RLS filter then runs on what the walk
    found. Left to itself it scans the caller's rows through the boundary index and
    sorts them by distance, an exact scan (18 ms against 4 ms for the walk at 100k
    chunks): the policy's conditions hide their values from it, so it expects a
    handful of rows. ``enable_sort = off`` rules that plan out, ``enable_seqscan =
    off`` the sequential scan a small table would get.
    """
    settings = {"enable_seqscan": "off", "enable_sort": "off"}
    if ef_search is not None:
        settings["hnsw.ef_search"] = str(int(ef_search))
    if iterative_scan is not None:
        settings["hnsw.iterative_scan"] = iterative_scan
    return settings


def dense_candidates(
    conn: Any,
    query_vector: np.ndarray,
    top_k: int,
    *,
    mode: str = "exact",
    ef_search: int | None = None,
    iterative_scan: str | None = None,
) -> list[tuple[str, np.ndarray]]:
    """Candidate ``(chunk_id, float64 vector)`` rows for the dense lane, chosen by pgvector.

    The stored float64 vectors arrive in binary (``array_send``, decoded by :func:`float8_array`): parsing
    20 of them at 384-d from text cost about 3 ms a request.
    """
    if mode not in DENSE_MODES:
        raise InvalidArgument(f"dense_index must be one of {list(DENSE_MODES)}, not {mode!r}")
    literal = vector_literal(query_vector)
    if mode == "exact":
        margin = float32_cosine_margin(len(query_vector))
        rows = conn.execute(_EXACT_SQL, {"q": literal, "margin": margin, "offset": int(top_k) - 1}).fetchall()
    else:
        settings = hnsw_settings(ef_search, iterative_scan)
        # One statement for all of them: on a pipelined connection it travels with the walk itself.
        conn.execute(
            "SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(settings)),
            [item for pair in settings.items() for item in pair],
        )
        rows = conn.execute(_HNSW_SQL, {"q": literal, "top_k": HNSW_OVERFETCH * int(top_k)}).fetchall()
    return [(str(chunk_id), float8_array(vector)) for chunk_id, vector in rows if vector is not None]


def rescore_dense(
    candidates: Sequence[tuple[str, Sequence[float] | np.ndarray]], query_vector: np.ndarray, top_k: int
) -> list[tuple[str, float]]:
    """Exact float64 cosine of the candidates: ``(chunk_id, score)`` with score > 0, by (score desc, chunk_id asc)."""
    if not candidates:
        return []
    ordered = sorted(candidates, key=lambda row: row[0])
    matrix = np.asarray([vector for _, vector in ordered], dtype=np.float64)
    scores = cosine_similarity(matrix, query_vector)
    return [(ordered[p][0], float(scores[p])) for p in top_k_positions(scores, top_k).tolist()]
