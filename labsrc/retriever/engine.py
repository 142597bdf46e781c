"""The lane engine: both lanes over one stored corpus, each request naming its universe by a mask.

Every retriever in the lab runs on this one engine: :class:`~labsrc.retriever.PolicyRetriever`
(the boundary's mask for a caller and a date) and the drop-in
:class:`~labsrc.patterns.HybridRetriever` (the boundary's mask, narrowed by a
metadata filter). The engine never decides who may see what; it is handed a
boolean mask over the stored chunks and answers for exactly the chunks the
mask keeps.

There is one BM25 index and one vector matrix per corpus, whatever the number
of callers. The sparse lane takes N, avgdl and df from the masked chunks at
request time (:class:`~labsrc.lanes.permitted.PermittedBM25`); the dense lane
masks the matrix's scores. Nothing is built per caller or per permission set.

**Noninterference.** A lane's ids, order and scores for a mask equal (``==``)
those the same code gives over a corpus that holds only the masked chunks.
Chunks are held sorted by ``chunk_id``, so a position is also the tie-break key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import Analyzer, lesson_analyzer
from labsrc.lanes.bm25 import DEFAULT_B, DEFAULT_K1
from labsrc.lanes.dense import DenseIndex, DenseSource
from labsrc.lanes.permitted import PermittedBM25, mask_key
from labsrc.lanes.sparse import BM25Index
from labsrc.ranking import DEFAULT_MAX_QUERY_CHARS, check_max_query_chars, check_query, check_top_k
from labsrc.records.checks import check_chunks
from labsrc.records.policy import PolicyChunk, chunk_lookup

__all__ = ["LaneEngine", "mask_key"]


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
    cache_size:
        How many distinct masks keep their N_U and avgdl_U (cheap to recompute).
    max_query_chars:
        The longest query text a lane accepts (``None``: no limit); longer is an
        :class:`~labsrc.errors.InvalidArgument` before any work is done.
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
        cache_size: int = 64,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
    ) -> None:
        self.max_query_chars = check_max_query_chars(max_query_chars)
        if not callable(analyzer):
            raise InvalidArgument(f"analyzer must be callable (text -> list of terms), not {type(analyzer).__name__}")
        given = tuple(chunk_lookup(check_chunks(chunks)).values())
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
        self.cache_size = cache_size

    def __len__(self) -> int:
        return len(self.chunks)

    @cached_property
    def bm25(self) -> PermittedBM25:
        """The one BM25 index over every stored chunk, scored with per-request statistics."""
        index = BM25Index.build(
            zip((c.chunk_id for c in self.chunks), self.index_texts), analyzer=self.analyzer, k1=self.k1, b=self.b
        )
        return PermittedBM25(index, cache_size=self.cache_size)

    @cached_property
    def dense_index(self) -> DenseIndex:
        """The one vector matrix over every stored chunk (rows in chunk_id order)."""
        return DenseIndex(self.chunks, self.source)

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

    def sparse(self, mask: np.ndarray, query: str, top_k: int) -> list[tuple[PolicyChunk, float]]:
        """BM25 over the masked chunks only, statistics included: ``(chunk, score)`` with score > 0."""
        top_k = check_top_k(top_k)
        mask = self._check_mask(mask)
        if not check_query(query, self.max_query_chars).strip() or not mask.any():
            return []
        hits = self.bm25.search_terms(self.analyzer(query), mask, top_k)
        return [(self.chunks[p], s) for p, s in hits]

    def dense(self, mask: np.ndarray, query: str, top_k: int) -> list[tuple[PolicyChunk, float]]:
        """Cosine over the masked chunks only: ``(chunk, score)`` with score > 0."""
        top_k = check_top_k(top_k)
        mask = self._check_mask(mask)
        if not check_query(query, self.max_query_chars).strip() or not mask.any():
            return []
        return self.dense_index.search(query, top_k, mask)
