"""The lane engine: both lanes over one stored corpus, each request naming its universe by a mask.

Every retriever in the lab runs on this one engine: :class:`~labsrc.retriever.PolicyRetriever`
(the boundary's mask for a caller and a date) and the drop-in
:class:`~labsrc.patterns.HybridRetriever` (the boundary's mask, narrowed by a
metadata filter). The engine never decides who may see what; it is handed a
boolean mask over the stored chunks and answers for exactly the chunks the
mask keeps.

**Noninterference.** A lane's ids, order and scores for a mask equal (``==``)
those the same code gives over a corpus that holds only the masked chunks: the
BM25 statistics (N, avgdl, df) are those of the masked chunks alone, and the
dense lane scores only masked rows. Chunks are held sorted by ``chunk_id``, so a
position is also the tie-break key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np

from labsrc.cache import LRUCache
from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import Analyzer, lesson_analyzer
from labsrc.lanes.dense import DenseIndex, DenseSource
from labsrc.lanes.sparse import DEFAULT_B, DEFAULT_K1, BM25Index
from labsrc.ranking import check_top_k
from labsrc.records.policy import PolicyChunk, chunk_lookup

__all__ = ["LaneEngine", "mask_key"]


def mask_key(mask: np.ndarray) -> bytes:
    """A compact, hashable key for a boolean mask (one bit per stored chunk)."""
    return np.packbits(mask).tobytes()


class _Universe:
    """Both lanes' indexes over one permitted set, each built on first use and reused."""

    def __init__(self, engine: LaneEngine, positions: np.ndarray) -> None:
        self._engine = engine
        self.positions = positions
        self.chunks = tuple(engine.chunks[p] for p in positions.tolist())

    @cached_property
    def bm25(self) -> BM25Index:
        e = self._engine
        pairs = ((e.chunks[p].chunk_id, e.index_texts[p]) for p in self.positions.tolist())
        return BM25Index.build(pairs, analyzer=e.analyzer, k1=e.k1, b=e.b)

    @cached_property
    def dense(self) -> DenseIndex:
        return DenseIndex(self.chunks, self._engine.source)

    @cached_property
    def by_id(self) -> dict[str, PolicyChunk]:
        return {c.chunk_id: c for c in self.chunks}


class LaneEngine:
    """The BM25 and dense lanes over a fixed corpus.

    Parameters
    ----------
    chunks:
        Every stored chunk, permitted or not; held sorted by ``chunk_id``
        (duplicate ids are refused).
    source:
        The dense lane's vectors for chunks and queries.
    index_texts:
        What the BM25 lane indexes for each chunk, aligned with ``chunks``
        (default: each chunk's ``text``).
    analyzer, k1, b:
        The sparse lane's analyzer and BM25 parameters.
    """

    def __init__(
        self,
        chunks: Sequence[PolicyChunk],
        source: DenseSource,
        *,
        index_texts: Sequence[str] | None = None,
        analyzer: Analyzer | Callable[[str], list[str]] = lesson_analyzer,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        cache_size: int = 8,
    ) -> None:
        given = tuple(chunk_lookup(chunks).values())
        if index_texts is not None and len(index_texts) != len(given):
            raise InvalidArgument(f"index_texts has {len(index_texts)} entries for {len(given)} chunks")
        order = sorted(range(len(given)), key=lambda i: given[i].chunk_id)
        self.chunks: tuple[PolicyChunk, ...] = tuple(given[i] for i in order)
        texts = [c.text for c in given] if index_texts is None else list(index_texts)
        self.index_texts: tuple[str, ...] = tuple(texts[i] for i in order)
        self.positions = {c.chunk_id: i for i, c in enumerate(self.chunks)}
        self.source = source
        self.analyzer = analyzer
        self.k1 = k1
        self.b = b
        self._universes: LRUCache[_Universe] = LRUCache(maxsize=cache_size)

    def __len__(self) -> int:
        return len(self.chunks)

    def _check_mask(self, mask: np.ndarray) -> np.ndarray:
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (len(self.chunks),):
            raise InvalidArgument(
                f"mask must be a boolean array of shape ({len(self.chunks)},), got {mask.dtype} {mask.shape}"
            )
        return mask

    def mask_for(self, chunk_ids: Sequence[str]) -> np.ndarray:
        """The mask that keeps exactly ``chunk_ids`` (ids not stored are refused)."""
        mask = np.zeros(len(self.chunks), dtype=bool)
        unknown = sorted(set(chunk_ids) - set(self.positions))
        if unknown:
            raise InvalidArgument(f"unknown chunk id(s) {unknown[:5]}")
        mask[[self.positions[i] for i in chunk_ids]] = True
        return mask

    def universe(self, mask: np.ndarray) -> _Universe:
        """The lanes' view of the masked chunks (cached per distinct mask, never per caller)."""
        mask = self._check_mask(mask)
        return self._universes.get_or_build(mask_key(mask), lambda: _Universe(self, np.flatnonzero(mask)))

    def sparse(self, mask: np.ndarray, query: str, top_k: int) -> list[tuple[PolicyChunk, float]]:
        """BM25 over the masked chunks only, statistics included: ``(chunk, score)`` with score > 0."""
        top_k = check_top_k(top_k)
        if not query.strip():
            return []
        universe = self.universe(mask)
        if not universe.chunks:
            return []
        return [(universe.by_id[i], s) for i, s in universe.bm25.search(query, top_k)]

    def dense(self, mask: np.ndarray, query: str, top_k: int) -> list[tuple[PolicyChunk, float]]:
        """Cosine over the masked chunks only: ``(chunk, score)`` with score > 0."""
        top_k = check_top_k(top_k)
        if not query.strip():
            return []
        universe = self.universe(mask)
        if not universe.chunks:
            return []
        return universe.dense.search(query, top_k)
