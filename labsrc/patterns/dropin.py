"""A drop-in hybrid retriever over plain dicts or JSONL chunks.

For engineers who want BM25 + embeddings + RRF without the lesson's records::

    retriever = HybridRetriever.from_jsonl("chunks.jsonl")
    for hit in retriever.search("damaged laptop refund", k=5):
        print(hit["chunk_id"], hit["rrf_score"], hit["snippet"])

It is the lab's own machinery behind a small API: the BM25 lane is
:class:`~labsrc.lanes.sparse.BM25Index`, the dense lane is
:func:`~labsrc.lanes.dense.cosine_similarity` over an :class:`~labsrc.lanes.dense.Encoder`,
and fusion is :func:`~labsrc.fusion.rrf.fuse_ranked_ids`. A metadata filter
(``where=``) narrows the universe **before** either lane runs, exactly like the
evidence boundary: BM25 statistics are computed over the filtered chunks only.

Result fields (one dict per hit):

=============  ====================================================================
chunk_id       the input's ``chunk_id``
doc_id         the input's ``doc_id`` (defaults to ``chunk_id``)
path           the input's ``path`` or ``None``
title          the input's title field (``title_key``) or ``""``
snippet        :func:`make_snippet` of the text around the first query term
bm25_rank      1-based rank in the BM25 lane, ``None`` when that lane missed
embed_rank     1-based rank in the embedding lane, ``None`` when that lane missed
rrf_score      Σ w / (rrf_k + rank) over the lanes that found the chunk
metadata       every other input field, passed through untouched (a copy)
=============  ====================================================================
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import numpy as np

from labsrc.lanes.analysis import Analyzer
from labsrc.cache import LRUCache
from labsrc.lanes.dense import Encoder, HashingEncoder, cosine_similarity, encode_checked
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.patterns.expansion import QueryExpander
from labsrc.patterns.filters import check_filter, matches_filter
from labsrc.fusion.rrf import DEFAULT_RRF_K, check_rrf_k, fuse_ranked_ids, rrf_contribution
from labsrc.records.loading import iter_jsonl
from labsrc.ranking import check_top_k, top_k_positions
from labsrc.lanes.sparse import DEFAULT_B, DEFAULT_K1, BM25Index
from labsrc.fusion.weighted import FusionParams, adaptive_fusion_params

__all__ = [
    "DROPIN_ANALYZER",
    "HybridRetriever",
    "QueryPlan",
    "make_snippet",
    "rrf",
    "tokenize",
]

#: Casefolded runs of letters and digits after NFKC; no stopwords.
DROPIN_ANALYZER = Analyzer(pattern=r"[^\W_]+", stopwords=frozenset(), name="dropin-tokenizer-v1")

#: Fields a result carries itself; everything else in an input dict is metadata.
RESULT_FIELDS = ("chunk_id", "doc_id", "path", "title", "snippet", "bm25_rank", "embed_rank", "rrf_score")


def tokenize(text: str) -> list[str]:
    """Lowercased letter-and-digit runs, unicode-safe: ``tokenize("Café ＲＰＬ１４") == ["café", "rpl14"]``.

    NFKC folds compatibility characters first (full-width letters and digits
    become ASCII), then ``str.casefold`` lowercases (the unicode-aware lowercase:
    ``"ß"`` becomes ``"ss"``). Non-ASCII letters are kept, never split off.
    Punctuation, ``_`` and hyphens separate tokens; there are no stopwords.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"tokenize takes a string, not {type(text).__name__}")
    return DROPIN_ANALYZER(text)


def rrf(ranks: Mapping[str, Sequence[int]], k: float = DEFAULT_RRF_K) -> dict[str, float]:
    """score(id) = Σ_lanes 1 / (k + rank), from ``{id: [its 1-based rank in each lane]}``.

    ``k`` is RRF's smoothing constant (60 by default, per Cormack et al. 2009),
    not a number of results. The dict comes back in (score desc, id asc) order.
    """
    check_rrf_k(k)
    scores: dict[str, float] = {}
    for item, lane_ranks in ranks.items():
        if isinstance(lane_ranks, (str, bytes)) or not isinstance(lane_ranks, Sequence):
            raise InvalidArgument(f"ranks[{item!r}] must be a list of 1-based ranks, not {lane_ranks!r}")
        for rank in lane_ranks:
            if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
                raise InvalidArgument(f"ranks[{item!r}] holds {rank!r}; ranks are 1-based ints")
        # Sum in rank order so the float result never depends on the input order.
        scores[item] = sum(rrf_contribution(int(rank), k) for rank in sorted(lane_ranks))
    return dict(sorted(scores.items(), key=lambda pair: (-pair[1], pair[0])))


def _word_pattern(term: str) -> re.Pattern[str]:
    # The term as a whole word: not preceded or followed by a letter or digit.
    return re.compile(r"(?<![^\W_])" + re.escape(term) + r"(?![^\W_])", re.IGNORECASE)


def make_snippet(text: str, query: str, max_len: int = 240) -> str:
    """At most ``max_len`` characters of ``text`` centred on the first query-term match.

    The window is cut on word boundaries (whitespace) where it does not reach
    the text's ends. When no query term occurs in ``text`` the snippet is the
    head of the text. A text shorter than ``max_len`` comes back whole.
    """
    max_len = check_top_k(max_len, "max_len")
    if len(text) <= max_len:
        return text
    first: tuple[int, int] | None = None
    for term in dict.fromkeys(tokenize(query)):
        match = _word_pattern(term).search(text)
        if match and (first is None or match.start() < first[0]):
            first = (match.start(), match.end())
    if first is None:
        start = 0
    else:
        centre = (first[0] + first[1]) // 2
        start = min(max(0, centre - max_len // 2), len(text) - max_len)
    end = start + max_len
    if start > 0:
        # Drop the partial word at the left edge (unless the match itself would go).
        space = text.find(" ", start, first[0] if first else end)
        if space != -1:
            start = space + 1
    if end < len(text):
        space = text.rfind(" ", first[1] if first else start, end + 1)
        if space > start:
            end = space
    return text[start:end].strip()


# --- records ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chunk:
    chunk_id: str
    doc_id: str
    path: str | None
    title: str
    text: str  # what snippets show
    index_text: str  # what both lanes index
    metadata: Mapping[str, Any]

    def filter_view(self) -> dict[str, Any]:
        """What a ``where=`` filter sees: the metadata plus the record's own fields."""
        return {**self.metadata, "chunk_id": self.chunk_id, "doc_id": self.doc_id, "path": self.path, "title": self.title}


def _text_field(record: Mapping[str, Any], key: str, *, where: str, line: int | None, required: bool) -> str | None:
    value = record.get(key)
    if value is None:
        if required:
            raise InvalidRecord("missing required field", path=where, line=line, field=key)
        return None
    if not isinstance(value, str):
        raise InvalidRecord(f"must be a string, got {type(value).__name__}", path=where, line=line, field=key)
    if required and not value.strip():
        raise InvalidRecord("must not be empty or blank", path=where, line=line, field=key)
    return value


def _chunk_from_dict(
    record: Mapping[str, Any], *, text_key: str, title_key: str, where: str, line: int | None
) -> _Chunk:
    if not isinstance(record, Mapping):
        raise InvalidRecord(f"each chunk must be a dict, got {type(record).__name__}", path=where, line=line)
    chunk_id = _text_field(record, "chunk_id", where=where, line=line, required=True)
    doc_id = _text_field(record, "doc_id", where=where, line=line, required=False) or chunk_id
    path = _text_field(record, "path", where=where, line=line, required=False)
    title = _text_field(record, title_key, where=where, line=line, required=False) or ""
    text = _text_field(record, text_key, where=where, line=line, required=True)
    own = {"chunk_id", "doc_id", "path", title_key, text_key}
    metadata = {key: copy.deepcopy(value) for key, value in record.items() if key not in own}
    index_text = f"{title}\n{text}" if title else text
    return _Chunk(chunk_id, doc_id, path, title, text, index_text, MappingProxyType(metadata))  # type: ignore[arg-type]


# --- the retriever ----------------------------------------------------------------------


class _Store(Protocol):
    def iter_chunks(self) -> Iterator[dict[str, Any]]: ...


@dataclass(frozen=True)
class QueryPlan:
    """How one query will run: the text each lane sees and the fusion parameters."""

    query: str
    bm25_query: str
    embed_query: str
    fired: tuple[str, ...]
    fusion: FusionParams


@dataclass(frozen=True)
class _Universe:
    positions: np.ndarray  # ascending, i.e. in chunk_id order
    index: BM25Index


class HybridRetriever:
    """BM25 + embeddings + RRF over in-memory chunks. Build it with a ``from_*`` classmethod.

    Chunks are held sorted by ``chunk_id``, so "ties break on chunk_id" is the
    same as "ties break on position" in both lanes and in fusion.
    """

    def __init__(
        self,
        chunks: Sequence[_Chunk],
        *,
        embedder: Encoder | None = None,
        embeddings: np.ndarray | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> None:
        order = sorted(range(len(chunks)), key=lambda i: chunks[i].chunk_id)
        ordered = [chunks[i] for i in order]
        for left, right in zip(ordered, ordered[1:]):
            if left.chunk_id == right.chunk_id:
                raise InvalidArgument(f"duplicate chunk_id {left.chunk_id!r}")
        self._chunks: tuple[_Chunk, ...] = tuple(ordered)
        self._position = {c.chunk_id: i for i, c in enumerate(self._chunks)}
        self.embedder: Encoder = HashingEncoder(analyzer=DROPIN_ANALYZER) if embedder is None else embedder
        if not isinstance(self.embedder, Encoder):
            raise InvalidArgument(f"embedder must have an encode(list[str]) method; {type(self.embedder).__name__} has not")
        self.expander = expander
        self.k1, self.b = k1, b
        if embeddings is None:
            texts = [c.index_text for c in self._chunks]
            matrix = self._encode(texts) if texts else np.zeros((0, 0))
        else:
            matrix = np.array(embeddings, dtype=np.float64)  # a copy: the caller's array may change later
            if matrix.ndim != 2 or matrix.shape[0] != len(self._chunks) or not np.all(np.isfinite(matrix)):
                raise InvalidArgument(
                    f"embeddings must be a finite [N, D] array with N = {len(self._chunks)}, got shape {matrix.shape}"
                )
            matrix = matrix[order]  # rows follow the chunks into chunk_id order
        matrix.setflags(write=False)
        self._matrix = matrix
        everything = np.arange(len(self._chunks))
        self._full = _Universe(everything, self._build_index(everything))
        self._universes: LRUCache[_Universe] = LRUCache(maxsize=8)

    # --- construction ---------------------------------------------------------------

    @classmethod
    def from_chunks(
        cls,
        chunks: Iterable[Mapping[str, Any]],
        *,
        text_key: str = "text",
        title_key: str = "title",
        embedder: Encoder | None = None,
        embeddings: np.ndarray | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> HybridRetriever:
        """Index a list of dicts. Each needs ``chunk_id`` and ``text_key``; see the module docs.

        ``embedder=None`` uses :class:`~labsrc.lanes.dense.HashingEncoder`, a word-overlap
        stand-in (not a semantic model); pass a real encoder for paraphrase recall.
        ``embeddings`` (optional, [N, D], rows in the order of ``chunks``) are
        precomputed document vectors: then the embedder only encodes queries.
        ``expander`` is a :class:`~labsrc.patterns.expansion.QueryExpander` (see :meth:`plan`);
        ``k1`` and ``b`` are the BM25 parameters.
        """
        records = [
            _chunk_from_dict(record, text_key=text_key, title_key=title_key, where=f"chunks[{i}]", line=None)
            for i, record in enumerate(chunks)
        ]
        return cls(records, embedder=embedder, embeddings=embeddings, expander=expander, k1=k1, b=b)

    @classmethod
    def from_jsonl(
        cls,
        path: str | Path,
        *,
        text_key: str = "text",
        title_key: str = "title",
        embedder: Encoder | None = None,
        embeddings: np.ndarray | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> HybridRetriever:
        """Read one JSON object per line, then as :meth:`from_chunks`. Errors name the file, line and field."""
        records = []
        seen: dict[str, int] = {}
        for line, record in iter_jsonl(path):
            chunk = _chunk_from_dict(record, text_key=text_key, title_key=title_key, where=str(path), line=line)
            if chunk.chunk_id in seen:
                raise InvalidRecord(
                    f"duplicate chunk_id {chunk.chunk_id!r} (first seen on line {seen[chunk.chunk_id]})",
                    path=path,
                    line=line,
                    field="chunk_id",
                )
            seen[chunk.chunk_id] = line
            records.append(chunk)
        return cls(records, embedder=embedder, embeddings=embeddings, expander=expander, k1=k1, b=b)

    @classmethod
    def from_store(
        cls,
        store: _Store,
        *,
        embedder: Encoder | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> HybridRetriever:
        """Rebuild from a :class:`~labsrc.patterns.store.SQLiteStore` without re-embedding.

        Stored embeddings are used as they are; the embedder only encodes
        queries (and any chunk stored without an embedding). The BM25 lane
        indexes ``enriched_text`` where present, snippets show ``text``.
        """
        records: list[_Chunk] = []
        vectors: list[np.ndarray | None] = []
        for row in store.iter_chunks():
            title = row.get("title") or ""
            indexed = row.get("enriched_text") or row["text"]
            metadata = dict(row.get("metadata") or {})
            records.append(
                _Chunk(
                    row["chunk_id"],
                    row["doc_id"],
                    row.get("path"),
                    title,
                    row["text"],
                    f"{title}\n{indexed}" if title else indexed,
                    MappingProxyType(metadata),
                )
            )
            vectors.append(row.get("embedding"))
        retriever_embedder = HashingEncoder(analyzer=DROPIN_ANALYZER) if embedder is None else embedder
        missing = [i for i, v in enumerate(vectors) if v is None]
        embeddings: np.ndarray | None = None
        if len(missing) < len(vectors):
            # Some or all vectors are stored: encode only the chunks stored without one.
            encoded = encode_checked(retriever_embedder, [records[i].index_text for i in missing]) if missing else None
            filled = dict(zip(missing, encoded)) if encoded is not None else {}
            rows = [np.asarray(v, dtype=np.float64) if v is not None else filled[i] for i, v in enumerate(vectors)]
            shapes = sorted({r.shape for r in rows})
            if len(shapes) > 1:
                raise InvalidArgument(
                    f"embeddings of different shapes {shapes} (stored, or encoded for chunks stored without one); "
                    "pass the embedder that made the stored vectors"
                )
            embeddings = np.stack(rows)
        return cls(records, embedder=retriever_embedder, embeddings=embeddings, expander=expander, k1=k1, b=b)

    # --- helpers ------------------------------------------------------------------------

    def _encode(self, texts: list[str]) -> np.ndarray:
        return encode_checked(self.embedder, texts)

    def _build_index(self, positions: np.ndarray) -> BM25Index:
        pairs = [(self._chunks[p].chunk_id, self._chunks[p].index_text) for p in positions]
        return BM25Index.build(pairs, analyzer=DROPIN_ANALYZER, k1=self.k1, b=self.b)

    def _universe(self, where: Mapping[str, Any] | None) -> _Universe:
        if not where:
            return self._full
        check_filter(where)
        positions = np.array(
            [i for i, c in enumerate(self._chunks) if matches_filter(c.filter_view(), where)], dtype=np.int64
        )
        key = tuple(positions.tolist())
        # One BM25 index per filtered universe: its N, n_t and avgdl count only the chunks that passed.
        return self._universes.get_or_build(key, lambda: _Universe(positions, self._build_index(positions)))

    # --- querying ---------------------------------------------------------------------------

    def plan(self, query: str) -> QueryPlan:
        """The lanes' query texts and the fusion parameters for ``query``.

        Without an expander, both lanes see the query and fusion is plain RRF
        (rrf_k 60, weights 1). When the expander fires, BM25 searches the
        expanded text, the embedding lane keeps the original wording, and
        :func:`~labsrc.fusion.weighted.adaptive_fusion_params` switches to (10, 3.0, 0.3).
        """
        if not isinstance(query, str):
            raise InvalidArgument(f"query must be a string, not {type(query).__name__}")
        expanded, fired = (query, ()) if self.expander is None else self.expander.expand(query)
        return QueryPlan(query, expanded, query, fired, adaptive_fusion_params(bool(fired)))

    def search(
        self,
        query: str,
        *,
        k_bm25: int = 50,
        k_embed: int = 50,
        k: int = 20,
        where: Mapping[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """The top ``k`` fused hits for ``query`` (see the module docs for the fields).

        ``k_bm25`` and ``k_embed`` are how many candidates each lane contributes
        before fusion; ``k`` is how many fused results come back. ``where`` is a
        metadata filter (:mod:`labsrc.patterns.filters`) applied before ranking. Results
        are sorted by (rrf_score desc, chunk_id asc). A blank query returns ``[]``.
        """
        k_bm25, k_embed, k = check_top_k(k_bm25, "k_bm25"), check_top_k(k_embed, "k_embed"), check_top_k(k, "k")
        plan = self.plan(query)
        if not query.strip():
            return []
        universe = self._universe(where)
        if universe.positions.size == 0:
            return []
        bm25_hits = universe.index.search(plan.bm25_query, k_bm25)
        query_vector = self._encode([plan.embed_query])[0]
        scores = cosine_similarity(self._matrix[universe.positions], query_vector)
        embed_hits = [
            (self._chunks[universe.positions[p]].chunk_id, float(scores[p])) for p in top_k_positions(scores, k_embed)
        ]
        rrf_k, bm25_weight, embed_weight = plan.fusion
        fused = fuse_ranked_ids(
            {"bm25": bm25_hits, "embed": embed_hits}, rrf_k, {"bm25": bm25_weight, "embed": embed_weight}
        )[:k]
        bm25_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(bm25_hits, start=1)}
        embed_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(embed_hits, start=1)}
        return [
            self._result(chunk_id, score, bm25_rank.get(chunk_id), embed_rank.get(chunk_id), query)
            for chunk_id, score in fused
        ]

    def _result(
        self, chunk_id: str, score: float, bm25_rank: int | None, embed_rank: int | None, query: str
    ) -> dict[str, Any]:
        chunk = self._chunks[self._position[chunk_id]]
        return {
            "chunk_id": chunk.chunk_id,
            "doc_id": chunk.doc_id,
            "path": chunk.path,
            "title": chunk.title,
            "snippet": make_snippet(chunk.text, query),
            "bm25_rank": bm25_rank,
            "embed_rank": embed_rank,
            "rrf_score": score,
            "metadata": copy.deepcopy(dict(chunk.metadata)),
        }

    def get(self, chunk_id: str) -> dict[str, Any] | None:
        """The stored chunk (with its full ``text``) or ``None``."""
        position = self._position.get(chunk_id)
        if position is None:
            return None
        chunk = self._chunks[position]
        return {
            "chunk_id": chunk.chunk_id,
            "doc_id": chunk.doc_id,
            "path": chunk.path,
            "title": chunk.title,
            "text": chunk.text,
            "metadata": copy.deepcopy(dict(chunk.metadata)),
        }

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(c.chunk_id for c in self._chunks)

    @property
    def embedding_dimension(self) -> int:
        return int(self._matrix.shape[1]) if self._matrix.ndim == 2 else 0

    def __len__(self) -> int:
        return len(self._chunks)

    def close(self) -> None:
        """Release resources. The in-memory retriever holds none; kept for API compatibility."""

    def __enter__(self) -> HybridRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"HybridRetriever({len(self._chunks)} chunks, embedder={type(self.embedder).__name__})"
