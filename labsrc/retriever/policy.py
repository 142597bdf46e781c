"""The retriever: boundary first, then both lanes over the permitted universe, then RRF.

This is the only place the stages are wired together. The order is the point
of the lesson: the boundary runs *before* either lane, so neither lane (nor the
BM25 statistics) can see a chunk the caller may not see, and a new ranking
method can never widen what a caller observes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from labsrc.boundary import BoundaryIndex
from labsrc.cache import LRUCache
from labsrc.errors import InvalidArgument
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k, reciprocal_rank_fusion
from labsrc.lanes.analysis import Analyzer, lesson_analyzer
from labsrc.lanes.bm25 import DEFAULT_B, DEFAULT_K1
from labsrc.lanes.dense import DenseSource, Encoder, as_dense_source
from labsrc.ranking import DEFAULT_MAX_QUERY_CHARS, check_max_query_chars, check_query, check_top_k
from labsrc.records.checks import check_caller, check_chunks
from labsrc.records.policy import Caller, PolicyChunk, chunk_lookup
from labsrc.retriever.engine import LaneEngine
from labsrc.trace import RetrievalTrace, StageTimer

__all__ = [
    "PolicyRetriever",
    "RetrievalResult",
    "hybrid_rank",
    "lane_versions",
    "retriever_for",
    "trace_hybrid_request",
]

RETRIEVER_VERSION = "policy-retriever-v2"


@dataclass(frozen=True)
class RetrievalResult:
    """Everything one request produced. ``fused`` is what the caller gets."""

    sparse: tuple[tuple[PolicyChunk, float], ...]
    dense: tuple[tuple[PolicyChunk, float], ...]
    fused: tuple[tuple[PolicyChunk, float], ...]
    trace: RetrievalTrace

    @classmethod
    def from_lanes(
        cls,
        sparse: Sequence[tuple[PolicyChunk, float]],
        dense: Sequence[tuple[PolicyChunk, float]],
        fused: Sequence[tuple[PolicyChunk, float]],
        *,
        versions: Mapping[str, str],
        query_kind: str,
        timings_ms: Mapping[str, float],
    ) -> RetrievalResult:
        """The result of one request, with its trace (ids, versions, timings; never text)."""
        trace = RetrievalTrace(
            versions=dict(versions),
            query_kind=query_kind,
            sparse_ids=tuple(c.chunk_id for c, _ in sparse),
            dense_ids=tuple(c.chunk_id for c, _ in dense),
            fused_ids=tuple(c.chunk_id for c, _ in fused),
            timings_ms=dict(timings_ms),
        )
        return cls(tuple(sparse), tuple(dense), tuple(fused), trace)

    def lane_ranks(self, chunk_id: str) -> dict[str, int | None]:
        """1-based rank of ``chunk_id`` in each lane and the fused list (None if absent)."""
        out: dict[str, int | None] = {}
        for lane, ids in (
            ("bm25", self.trace.sparse_ids),
            ("dense", self.trace.dense_ids),
            ("hybrid", self.trace.fused_ids),
        ):
            out[lane] = ids.index(chunk_id) + 1 if chunk_id in ids else None
        return out


def lane_versions(
    retriever: str, analyzer: object, vectors: DenseSource, rrf_k: float, on_date: dt.date
) -> dict[str, str]:
    """What a trace records of the retriever, its index date, both lanes and the fusion."""
    rrf_k = int(rrf_k) if float(rrf_k).is_integer() else rrf_k
    return {
        "retriever": retriever,
        "index": f"policy-index/{on_date.isoformat()}",
        "sparse": getattr(analyzer, "name", getattr(analyzer, "__name__", "custom-analyzer")),
        "dense": vectors.version,
        "fusion": f"rrf-k{rrf_k}",
    }


class PolicyRetriever:
    """A permission-safe hybrid retriever over a fixed corpus.

    Parameters
    ----------
    chunks:
        Every stored chunk, permitted or not. Copied; later changes to the
        caller's list do not affect the retriever.
    vectors:
        The dense lane's source: :class:`~labsrc.lanes.dense.FixtureVectors`, another
        dense source, or a bare encoder; ``None`` uses a hashing encoder (word overlap).
        So ``PolicyRetriever`` is itself a gate factory, ``factory(chunks, vectors)``.
    analyzer, k1, b:
        The sparse lane's analyzer and BM25 parameters.
    rrf_k:
        RRF's smoothing constant (not the number of results; that is ``top_k``).
    weights:
        Optional per-lane RRF weights, ``{"bm25": w, "dense": w}``.
    max_query_chars:
        The longest query :meth:`search` accepts, in characters (``None``: no
        limit). Search time grows linearly with the query; this refuses a
        runaway one at once with :class:`~labsrc.errors.InvalidArgument`.
    """

    def __init__(
        self,
        chunks: Sequence[PolicyChunk],
        vectors: DenseSource | Encoder | None = None,
        *,
        analyzer: Analyzer | Callable[[str], list[str]] = lesson_analyzer,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        rrf_k: float = DEFAULT_RRF_K,
        weights: Mapping[str, float] | None = None,
        universe_cache_size: int = 8,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
    ) -> None:
        self.max_query_chars = check_max_query_chars(max_query_chars)
        self.chunks = tuple(chunk_lookup(check_chunks(chunks)).values())
        self.vectors = as_dense_source(vectors)
        self.analyzer = analyzer
        self.k1 = k1
        self.b = b
        # Both lanes over every stored chunk; each request hands the engine the boundary's mask.
        self.engine = LaneEngine(
            self.chunks, self.vectors, analyzer=analyzer, k1=k1, b=b, cache_size=universe_cache_size,
            max_query_chars=None,  # search() checks the query against this retriever's limit
        )  # fmt: skip
        # The boundary's masks are over the engine's chunk order (sorted by chunk_id).
        self.boundary = BoundaryIndex(self.engine.chunks)
        self.rrf_k = check_rrf_k(rrf_k)
        if weights is not None and not isinstance(weights, Mapping):
            raise InvalidArgument(f"weights must be a dict such as {{'bm25': 1.0, 'dense': 1.0}}, not {type(weights).__name__}")
        self.weights = dict(weights or {})
        unknown = sorted(map(repr, set(self.weights) - {"bm25", "dense"}))
        if unknown:
            raise InvalidArgument(f"unknown lane(s) in weights: [{', '.join(unknown)}]; valid lanes: ['bm25', 'dense']")
        for lane, weight in self.weights.items():
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
                raise InvalidArgument(f"weights[{lane!r}] must be a number >= 0, not {weight!r}")

    def versions(self, on_date: dt.date) -> dict[str, str]:
        return lane_versions(RETRIEVER_VERSION, self.analyzer, self.vectors, self.rrf_k, on_date)

    def universe(self, caller: Caller, on_date: dt.date) -> tuple[PolicyChunk, ...]:
        """The caller's permitted chunks on ``on_date``, in chunk_id order."""
        return self.boundary.permitted(check_caller(caller), on_date)

    def search(
        self,
        query: str,
        caller: Caller,
        on_date: dt.date,
        top_k: int = 2,
        *,
        query_kind: str = "adhoc",
    ) -> RetrievalResult:
        """Run one request: authorize → bm25 → dense → fusion, each timed.

        Arguments of the wrong type raise :class:`~labsrc.errors.InvalidArgument`
        naming the argument, before any work is done.
        """
        check_query(query, self.max_query_chars)
        check_caller(caller)
        top_k = check_top_k(top_k)
        if not isinstance(query_kind, str):
            raise InvalidArgument(f"query_kind must be a str, not {type(query_kind).__name__}")
        timer = StageTimer()
        sparse: list[tuple[PolicyChunk, float]] = []
        dense: list[tuple[PolicyChunk, float]] = []
        fused: list[tuple[PolicyChunk, float]] = []
        with timer.stage("authorize"):
            mask = self.boundary.mask(caller, on_date)
        with timer.stage("bm25"):
            sparse = self.engine.sparse(mask, query, top_k)
        with timer.stage("dense"):
            dense = self.engine.dense(mask, query, top_k)
        with timer.stage("fusion"):
            weights = None
            if self.weights:
                weights = [self.weights.get("bm25", 1.0), self.weights.get("dense", 1.0)]
            fused = reciprocal_rank_fusion([sparse, dense], self.rrf_k, weights=weights, top_k=top_k)
        return RetrievalResult.from_lanes(
            sparse, dense, fused, versions=self.versions(on_date), query_kind=query_kind, timings_ms=timer.timings_ms
        )


_RETRIEVERS: LRUCache[tuple[Sequence[PolicyChunk], PolicyRetriever]] = LRUCache(maxsize=4)


def corpus_key(chunks: Sequence[PolicyChunk]) -> tuple[str, object]:
    """How :func:`retriever_for` recognises a corpus it has seen: O(1) for a tuple.

    A tuple of frozen chunks cannot change, so its identity names its contents:
    the key is ``id(chunks)``, and the cache keeps the tuple alive (so the id
    cannot be reused) and checks ``is`` on a hit. Any other sequence (a list can
    change between calls) is keyed by its values, which hashes the whole corpus:
    pass a tuple, as :func:`~labsrc.datasets.lesson` does, to avoid that cost.
    """
    if type(chunks) is tuple:
        return ("identity", id(chunks))
    return ("values", tuple(chunks))


def retriever_for(chunks: Sequence[PolicyChunk], vectors: DenseSource | Encoder) -> PolicyRetriever:
    """A cached :class:`PolicyRetriever` for this exact corpus and dense source (see :func:`corpus_key`)."""
    source = as_dense_source(vectors)
    if not isinstance(chunks, Sequence):
        chunks = check_chunks(chunks)  # a one-shot iterable: held as a tuple from here on
    elif type(chunks) is not tuple:
        check_chunks(chunks)  # checked; still keyed by its values below
    key = (corpus_key(chunks), source)
    # The entry holds the corpus itself, so an identity key's tuple stays alive while cached.
    _, retriever = _RETRIEVERS.get_or_build(key, lambda: (chunks, PolicyRetriever(chunks, source)))
    return retriever


def hybrid_rank(
    query: str,
    caller: Caller,
    chunks: Sequence[PolicyChunk],
    vectors: DenseSource | Encoder,
    on_date: dt.date,
    top_k: int = 2,
) -> list[tuple[PolicyChunk, float]]:
    """The lesson's hybrid: boundary, then BM25 and dense at ``top_k``, then RRF cut to ``top_k``."""
    top_k = check_top_k(top_k)
    check_caller(caller)
    if not check_query(query, None).strip():
        return []
    return list(retriever_for(chunks, vectors).search(query, caller, on_date, top_k).fused)


def trace_hybrid_request(
    query: str,
    query_kind: str,
    caller: Caller,
    chunks: Sequence[PolicyChunk],
    vectors: DenseSource | Encoder,
    on_date: dt.date,
    top_k: int = 2,
) -> RetrievalTrace:
    """Run :func:`hybrid_rank` and return its trace (ids, versions, timings; never text)."""
    return retriever_for(chunks, vectors).search(query, caller, on_date, top_k, query_kind=query_kind).trace
