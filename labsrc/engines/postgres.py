"""``PostgresRetriever``: the lab's retriever, with the boundary and both lanes inside PostgreSQL.

Same signature, same result type as :class:`~labsrc.retriever.PolicyRetriever`,
so the gates, cases, reports and attacks take it unchanged::

    with PostgresRetriever(data.chunks, data.vectors) as engine:   # embedded server
        result = engine.search("damaged laptop refund", luna, day, top_k=3)

One request is one read-only, repeatable-read transaction as the reader role, on
a connection of its own borrowed from a pool (so any number of threads may call
:meth:`PostgresRetriever.search` at once; nothing transactional is shared):

1. ``authorize``: sign the caller's region, tags and the date for this session
   and transaction, and write the token (``SET LOCAL``); from here on row-level
   security filters every row both lanes touch, and nothing the reader role runs
   can change whom it filters for (:mod:`labsrc.engines.authorize`);
2. ``bm25``: statistics and scores in SQL over the visible rows
   (:func:`~labsrc.engines.lanes_sql.sparse_lane`);
3. ``dense``: pgvector picks candidates, float64 rescoring orders them
   (:func:`~labsrc.engines.lanes_sql.dense_candidates`);
4. ``fusion``: the lab's :func:`~labsrc.fusion.rrf.reciprocal_rank_fusion`, in Python.

The connection is in psycopg's pipeline mode for the whole request, so the client
waits for the server only where it needs a result: the authorization's backend
pid, the statistics, the scores (sent with their planner settings) and the dense
candidates (sent with the settings' restore and, for HNSW, its own settings).

Scores, ids and ties equal the in-memory retriever's with ``dense_index="exact"``
(the tests check ``==``). The trace also records the engine, the PostgreSQL and
pgvector versions and the dense index settings.

Every request has a connect, statement and lock timeout
(:class:`~labsrc.engines.pool.Timeouts`), and every driver error comes out as a
:class:`~labsrc.errors.LabError` or :class:`~labsrc.errors.InvalidArgument`
whose one line names the server and the cause (:mod:`labsrc.engines.errors`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import numpy as np

from labsrc.engines.lanes_sql import (
    DENSE_MODES,
    ITERATIVE_SCANS,
    dense_candidates,
    rescore_dense,
    sparse_lane,
)
from labsrc.engines.authorize import check_caller_text
from labsrc.engines.pool import DEFAULT_TIMEOUTS, Timeouts
from labsrc.engines.read_replicas import REPLAY_TIMEOUT_S, ReadReplicas
from labsrc.engines.store import PostgresStore
from labsrc.boundary import is_permitted
from labsrc.errors import InvalidArgument, LabError
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k, reciprocal_rank_fusion
from labsrc.lanes.analysis import Analyzer, lesson_analyzer
from labsrc.lanes.dense import DenseSource, Encoder, as_dense_source
from labsrc.lanes.sparse import DEFAULT_B, DEFAULT_K1
from labsrc.ranking import DEFAULT_MAX_QUERY_CHARS, check_max_query_chars, check_query, check_top_k
from labsrc.records.policy import Caller, PolicyChunk, chunk_lookup
from labsrc.retriever.policy import RetrievalResult, lane_versions
from labsrc.trace import StageTimer

__all__ = ["DEFAULT_EF_SEARCH", "DEFAULT_ITERATIVE_SCAN", "ENGINE_VERSION", "PostgresRetriever"]

ENGINE_VERSION = "postgres-retriever-v1"

#: The HNSW walk keeps going until k rows pass row-level security (pgvector 0.8): no short lists by default.
DEFAULT_ITERATIVE_SCAN = "relaxed_order"
#: Candidates per HNSW walk by default. On 100k SciFact chunks at 384-d, 40 permission sets, 400 queries,
#: 2k candidates rescored: Recall@10 against exact 0.983 at 100 and 0.991 at 200 (bench_postgres.py; docs/postgres.md, "Scaling past one machine").
DEFAULT_EF_SEARCH = 200


def _check_dense(dense_index: str, ef_search: int | None, iterative_scan: str | None) -> None:
    if dense_index not in DENSE_MODES:
        raise InvalidArgument(f"dense_index must be one of {list(DENSE_MODES)}, not {dense_index!r}")
    if ef_search is not None and (isinstance(ef_search, bool) or not isinstance(ef_search, int) or not 1 <= ef_search <= 1000):
        raise InvalidArgument(f"ef_search must be an int in [1, 1000] (pgvector's range), not {ef_search!r}")
    if iterative_scan is not None and iterative_scan not in ITERATIVE_SCANS:
        raise InvalidArgument(f"iterative_scan must be one of {list(ITERATIVE_SCANS)}, not {iterative_scan!r}")
    if dense_index == "exact" and (ef_search is not None or iterative_scan is not None):
        raise InvalidArgument("ef_search and iterative_scan apply to dense_index='hnsw' only")


def _check_request(caller: Caller, on_date: dt.date) -> None:
    if not isinstance(caller, Caller):
        raise InvalidArgument(f"caller must be a Caller, not {type(caller).__name__}")
    if not isinstance(on_date, dt.date) or isinstance(on_date, dt.datetime):
        raise InvalidArgument(f"on_date must be a datetime.date, not {type(on_date).__name__}")
    check_caller_text(caller)


class PostgresRetriever:
    """A permission-safe hybrid retriever whose boundary is PostgreSQL row-level security.

    Thread-safe: :meth:`search` may be called from many threads at once. Each
    call borrows its own connection from the store's pool and runs one
    transaction on it; no connection, transaction or setting is shared between
    two requests.

    Parameters
    ----------
    chunks:
        Every stored chunk, permitted or not; loaded once with ``COPY``.
    vectors:
        The dense lane's source (document vectors are loaded; query vectors
        come from it per request, exactly as in memory), or a bare encoder.
    dsn:
        An existing server (managed Postgres, a replica's primary, Citus), or
        ``None`` for a throwaway embedded server that :meth:`close` stops.
    analyzer, k1, b:
        The sparse lane's analyzer and BM25 parameters.
    rrf_k:
        RRF's smoothing constant (not the number of results; that is ``top_k``).
    dense_index:
        ``"exact"`` (scan every visible row: equals the in-memory lane) or
        ``"hnsw"`` (pgvector's graph index, built at load: approximate, and
        filtered by RLS *after* the walk).
    ef_search, iterative_scan:
        pgvector's ``hnsw.ef_search`` (candidates per walk; ``None`` means
        :data:`DEFAULT_EF_SEARCH`, 200) and ``hnsw.iterative_scan`` (``off``,
        ``strict_order``, ``relaxed_order``: keep walking until k rows survive
        the filter). ``None`` means :data:`DEFAULT_ITERATIVE_SCAN`
        (``relaxed_order``), so a filtered walk returns full lists; pass
        ``"off"`` to see the filtered-HNSW trap.
    progress:
        ``progress(phase, done, total)`` while loading (the CLI draws a tqdm bar).
    timeouts:
        Connect, statement and lock timeouts in seconds (default 10, 30 and 5):
        a silent server or a blocked search ends in a :class:`~labsrc.errors.LabError`
        naming the server and the timeout.
    max_query_chars:
        The longest query accepted (default 100,000 characters, as in memory;
        ``None``: any length). A longer one is refused before it is analysed
        or sent: a 4 MB query of 400k terms once took the server 4 s.
    """

    def __init__(
        self,
        chunks: Sequence[PolicyChunk],
        vectors: DenseSource | Encoder,
        *,
        dsn: str | None = None,
        analyzer: Analyzer | Callable[[str], list[str]] = lesson_analyzer,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        rrf_k: float = DEFAULT_RRF_K,
        dense_index: str = "exact",
        ef_search: int | None = None,
        iterative_scan: str | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
        _store: PostgresStore | None = None,
    ) -> None:
        _check_dense(dense_index, ef_search, iterative_scan)
        self.max_query_chars = check_max_query_chars(max_query_chars)
        self.rrf_k = check_rrf_k(rrf_k)
        self.chunks = tuple(chunk_lookup(chunks).values())
        self.vectors = as_dense_source(vectors)
        self.analyzer = analyzer
        self.k1 = float(k1)
        self.b = float(b)
        if not (np.isfinite(self.k1) and self.k1 >= 0):
            raise InvalidArgument(f"k1 must be a finite number >= 0, not {k1!r}")
        if not 0 <= self.b <= 1:
            raise InvalidArgument(f"b must be a number in [0, 1], not {b!r}")
        self.dense_index = dense_index
        self.ef_search = DEFAULT_EF_SEARCH if dense_index == "hnsw" and ef_search is None else ef_search
        self.iterative_scan = DEFAULT_ITERATIVE_SCAN if dense_index == "hnsw" and iterative_scan is None else iterative_scan
        self._by_id = {c.chunk_id: c for c in self.chunks}
        self._owns_store = _store is None
        ordered = sorted(self.chunks, key=lambda c: c.chunk_id)
        self.store = _store if _store is not None else PostgresStore(
            ordered, self.vectors, analyzer, dsn=dsn, progress=progress, timeouts=timeouts
        )
        if dense_index == "hnsw":
            self.store.ensure_hnsw()

    # --- views and lifecycle ---------------------------------------------------------

    def with_dense(
        self, dense_index: str = "exact", *, ef_search: int | None = None, iterative_scan: str | None = None
    ) -> PostgresRetriever:
        """The same loaded corpus with other dense settings (no reload; closing the view closes nothing)."""
        return PostgresRetriever(
            self.chunks, self.vectors, analyzer=self.analyzer, k1=self.k1, b=self.b, rrf_k=self.rrf_k,
            dense_index=dense_index, ef_search=ef_search, iterative_scan=iterative_scan,
            max_query_chars=self.max_query_chars, _store=self.store,
        )  # fmt: skip

    @property
    def dsn(self) -> str:
        """The server's DSN, as the loading (owner) user; the reader role's credentials stay private."""
        return self.store.dsn

    def close(self) -> None:
        """Drop the loaded corpus and role, and stop the embedded server (if this retriever started it)."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> PostgresRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- read replicas ------------------------------------------------------------------------

    def on_replicas(
        self, *dsns: str, include_primary: bool = False, timeout: float = REPLAY_TIMEOUT_S
    ) -> PostgresRetriever:
        """The same loaded corpus, searched on streaming replicas of this retriever's server (no reload).

        Each request goes, in turn, to one of ``dsns`` (and to the primary too with ``include_primary=True``)
        and runs there exactly as here: the reader role, a token signed for that server's session and
        transaction, RLS, both lanes. Results equal the primary's once a replica has replayed the load; the
        view waits for that (up to ``timeout`` s) when it opens. Closing the view closes its replica
        connections only (:class:`~labsrc.engines.read_replicas.ReadReplicas`).
        """
        replicas = ReadReplicas(
            getattr(self.store, "primary", self.store), dsns, include_primary=include_primary, timeout=timeout
        )
        try:
            view = PostgresRetriever(
                self.chunks, self.vectors, analyzer=self.analyzer, k1=self.k1, b=self.b, rrf_k=self.rrf_k,
                dense_index=self.dense_index, ef_search=self.ef_search, iterative_scan=self.iterative_scan,
                max_query_chars=self.max_query_chars, _store=replicas,
            )  # fmt: skip
        except BaseException:
            replicas.close()
            raise
        view._owns_store = True  # its ReadReplicas: the replicas' pools, never the primary's store
        return view

    # --- the boundary, for audits --------------------------------------------------------

    def connect_as(self, caller: Caller, on_date: dt.date) -> Any:
        """A psycopg connection as the reader role, authorized for ``caller`` on ``on_date`` like a request.

        ``SELECT chunk_id FROM lab_chunks`` through it returns exactly the
        caller's permitted ids. The authorization lasts until the transaction
        ends; use it as ``with engine.connect_as(caller, day) as conn: ...``.
        It is a new session of its own, not one of the pool's: use it from one
        thread. Whatever SQL you run through it (``SET``, ``set_config``,
        ``RESET``, ``SET ROLE``, ``ALTER ROLE ... SET``) cannot widen what it
        sees, change a statistic, or reach a later session.
        """
        _check_request(caller, on_date)
        return self.store.connect_as(caller, on_date)

    def universe(self, caller: Caller, on_date: dt.date) -> tuple[PolicyChunk, ...]:
        """The caller's permitted chunks on ``on_date``, in chunk_id order, as the database sees them."""
        _check_request(caller, on_date)
        with self.store.request(caller, on_date) as conn:
            ids = [row[0] for row in conn.execute(f"SELECT chunk_id FROM {self.store.schema}.lab_chunks ORDER BY chunk_id")]
        return tuple(self._by_id[i] for i in ids)

    # --- the request ---------------------------------------------------------------------

    def versions(self, on_date: dt.date) -> dict[str, str]:
        dense_index = "exact"
        if self.dense_index == "hnsw":
            params = self.store.ensure_hnsw()
            dense_index = (
                f"hnsw(m={params['m']},ef_construction={params['ef_construction']},"
                f"ef_search={self.ef_search or 'default'},iterative_scan={self.iterative_scan or 'default'})"
            )
        base = lane_versions(ENGINE_VERSION, self.analyzer, self.vectors, self.rrf_k, on_date)
        return {
            "retriever": base["retriever"],
            "engine": "postgres",
            "postgresql": self.store.versions["postgresql"],
            "pgvector": self.store.versions["pgvector"],
            "index": base["index"],
            "sparse": base["sparse"],
            "dense": base["dense"],
            "dense_index": dense_index,
            "fusion": base["fusion"],
        }

    def search(
        self,
        query: str,
        caller: Caller,
        on_date: dt.date,
        top_k: int = 2,
        *,
        query_kind: str = "adhoc",
    ) -> RetrievalResult:
        """Run one request: authorize → bm25 → dense → fusion, each timed, in one transaction of its own.

        Safe to call from many threads at once (a pooled connection per call).
        """
        top_k = check_top_k(top_k)
        check_query(query, self.max_query_chars)
        _check_request(caller, on_date)
        # A caller sees at most every chunk: a deeper top_k returns the same lists (and fits SQL's int8).
        depth = max(1, min(top_k, len(self.chunks)))
        timer = StageTimer()
        sparse: list[tuple[PolicyChunk, float]] = []
        dense: list[tuple[PolicyChunk, float]] = []
        with ExitStack() as request:
            with timer.stage("authorize"):  # borrow a connection, begin, sign and write the token
                conn = request.enter_context(self.store.request(caller, on_date, pipeline=True))
            with timer.stage("bm25"):
                if query.strip():
                    ranked, _ = sparse_lane(conn, self.analyzer(query), depth, k1=self.k1, b=self.b)
                    sparse = [(self._by_id[i], s) for i, s in ranked]
            with timer.stage("dense"):
                query_vector = np.asarray(self.vectors.query_vector(query), dtype=np.float64) if query.strip() else None
                # A zero query vector scores 0 against everything: no SQL needed, nothing returned (as in memory).
                if query_vector is not None and np.any(query_vector):
                    candidates = dense_candidates(
                        conn, query_vector, depth, mode=self.dense_index,
                        ef_search=self.ef_search, iterative_scan=self.iterative_scan,
                    )  # fmt: skip
                    dense = [(self._by_id[i], s) for i, s in rescore_dense(candidates, query_vector, depth)]
        self._check_permitted(sparse, dense, caller, on_date)
        with timer.stage("fusion"):
            fused = reciprocal_rank_fusion([sparse, dense], self.rrf_k, top_k=top_k)
        return RetrievalResult.from_lanes(
            sparse, dense, fused, versions=self.versions(on_date), query_kind=query_kind, timings_ms=timer.timings_ms
        )

    @staticmethod
    def _check_permitted(
        sparse: list[tuple[PolicyChunk, float]], dense: list[tuple[PolicyChunk, float]], caller: Caller, on_date: dt.date
    ) -> None:
        """Defence in depth: the lanes' ids are mapped to chunks in Python, so check each against the boundary."""
        for chunk, _ in (*sparse, *dense):
            if not is_permitted(caller, chunk, on_date):
                raise LabError(
                    f"the database returned chunk {chunk.chunk_id!r}, which {caller.actor_id!r} may not see on "
                    f"{on_date.isoformat()}; refusing the result (is row-level security switched off?)"
                )

    def __repr__(self) -> str:
        return (
            f"PostgresRetriever(chunks={len(self.chunks)}, dense_index={self.dense_index!r}, "
            f"schema={self.store.schema!r}, dsn={self.store.dsn!r})"
        )
