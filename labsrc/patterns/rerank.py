"""The reranker hook: over-fetch, reorder, trim.

A reranker (typically a cross-encoder) reads the query and each candidate
together, which is too slow for a whole corpus but fine for a short list. The
hook asks the hybrid retriever for ``overfetch × limit`` candidates (3× by
default), lets the reranker score them, reorders by that score and keeps
``limit``. Over-fetching gives the reranker something to promote: with exactly
``limit`` candidates it could only shuffle them.

The lab ships only the protocol and :class:`TermOverlapReranker`, a transparent
model-free stand-in for demos and tests. No model is downloaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from labsrc.errors import InvalidArgument
from labsrc.patterns.dropin import HybridRetriever, tokenize
from labsrc.ranking import check_top_k

__all__ = ["DEFAULT_OVERFETCH", "Reranker", "TermOverlapReranker", "rerank_search"]

#: Candidates fetched per result kept.
DEFAULT_OVERFETCH = 3


@runtime_checkable
class Reranker(Protocol):
    """Anything that scores candidate texts for a query: higher is better."""

    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]: ...


class TermOverlapReranker:
    """score = |distinct query terms in the text| / |distinct query terms|.

    A deliberately simple reranker: it prefers candidates that contain *all*
    the query's words over ones that repeat one of them.
    """

    def __init__(self, analyzer: Callable[[str], list[str]] = tokenize) -> None:
        self.analyzer = analyzer

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        wanted = set(self.analyzer(query))
        if not wanted:
            return [0.0] * len(texts)
        return [len(wanted & set(self.analyzer(text))) / len(wanted) for text in texts]


def rerank_search(
    retriever: HybridRetriever,
    query: str,
    reranker: Reranker,
    *,
    limit: int = 10,
    overfetch: int = DEFAULT_OVERFETCH,
    k_bm25: int = 50,
    k_embed: int = 50,
    where: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Fetch ``overfetch × limit`` hybrid candidates, rerank them, keep ``limit``.

    Each hit keeps its :meth:`HybridRetriever.search` fields and gains
    ``first_stage_rank`` (1-based, before reranking) and ``rerank_score``.
    Order: (rerank_score desc, first_stage_rank asc), so the reranker's ties keep
    the hybrid order.
    """
    limit = check_top_k(limit, "limit")
    overfetch = check_top_k(overfetch, "overfetch")
    if not isinstance(reranker, Reranker):
        raise InvalidArgument(f"reranker must have score(query, texts); {type(reranker).__name__} has not")
    fetch = limit * overfetch
    candidates = retriever.search(query, k_bm25=max(k_bm25, fetch), k_embed=max(k_embed, fetch), k=fetch, where=where)
    if not candidates:
        return []
    texts = [retriever.get(hit["chunk_id"])["text"] for hit in candidates]  # type: ignore[index]
    scores = [float(s) for s in reranker.score(query, texts)]
    if len(scores) != len(candidates) or not all(math.isfinite(s) for s in scores):
        raise InvalidArgument(f"reranker returned {len(scores)} scores for {len(candidates)} texts, or non-finite values")
    ranked = sorted(
        ({**hit, "first_stage_rank": rank, "rerank_score": score} for rank, (hit, score) in enumerate(zip(candidates, scores), start=1)),
        key=lambda hit: (-hit["rerank_score"], hit["first_stage_rank"]),
    )
    return ranked[:limit]
