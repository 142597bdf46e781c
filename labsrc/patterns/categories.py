"""Split-category search: rank each category on its own, then fuse the lists with RRF.

When prose and code share one index, the prose usually wins: there is more of
it, its words are the query's words, and a code chunk's best hit may sit at
rank 40. Tagging each chunk with a category and searching every category
*separately* (each as its own filtered universe, with its own BM25 statistics)
gives every category a rank-1 result. Fusing the per-category lists with RRF
then interleaves them: the best chunk of each category gets 1 / (rrf_k + 1),
so no category can drown another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.fusion.rrf import DEFAULT_RRF_K, fuse_ranked_ids
from labsrc.patterns.dropin import HybridRetriever
from labsrc.patterns.filters import check_filter
from labsrc.ranking import check_top_k

__all__ = ["category_values", "search_by_category"]


def category_values(retriever: HybridRetriever, category_key: str = "category") -> tuple[str, ...]:
    """The distinct values of ``metadata[category_key]`` in the retriever, sorted."""
    values = set()
    for chunk_id in retriever.chunk_ids:
        value = retriever.get(chunk_id)["metadata"].get(category_key)  # type: ignore[index]
        if value is not None:
            values.add(str(value))
    return tuple(sorted(values))


def search_by_category(
    retriever: HybridRetriever,
    query: str,
    *,
    category_key: str = "category",
    categories: Sequence[str] | None = None,
    k: int = 20,
    per_category_k: int | None = None,
    k_bm25: int = 50,
    k_embed: int = 50,
    rrf_k: float = DEFAULT_RRF_K,
    where: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Search each category separately and fuse the per-category lists with RRF.

    Each category is searched as the filter ``{category_key: category}`` (ANDed
    with ``where``), so it is its own universe. Every hit keeps its fields from
    :meth:`HybridRetriever.search` and gains ``category``, ``category_rank``
    (1-based, within its category) and ``fused_score`` = 1 / (rrf_k +
    category_rank). Results are sorted by (fused_score desc, chunk_id asc), ``k``
    at most. ``categories=None`` searches every category present.
    """
    k = check_top_k(k, "k")
    per_category_k = k if per_category_k is None else check_top_k(per_category_k, "per_category_k")
    if where is not None:
        check_filter(where)
    names = category_values(retriever, category_key) if categories is None else tuple(categories)
    if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise InvalidArgument(f"categories must be distinct non-empty strings, not {names!r}")
    lists: dict[str, list[tuple[str, float]]] = {}
    hits: dict[str, tuple[str, int, dict[str, Any]]] = {}
    for name in names:
        only = {category_key: name} if where is None else {"$and": [dict(where), {category_key: name}]}
        found = retriever.search(query, k_bm25=k_bm25, k_embed=k_embed, k=per_category_k, where=only)
        lists[name] = [(hit["chunk_id"], hit["rrf_score"]) for hit in found]
        for rank, hit in enumerate(found, start=1):
            hits[hit["chunk_id"]] = (name, rank, hit)
    fused = fuse_ranked_ids(lists, rrf_k)[:k]
    return [
        {**hits[chunk_id][2], "category": hits[chunk_id][0], "category_rank": hits[chunk_id][1], "fused_score": score}
        for chunk_id, score in fused
    ]
