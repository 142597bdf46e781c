"""Reciprocal Rank Fusion of the lanes' ranked lists.

RRF (Cormack, Clarke & Buettcher, SIGIR 2009) uses only ranks, never raw
scores, which is why a BM25 score of 2.9 and a cosine of 0.99 can be combined
without calibrating one against the other.

"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

from labsrc.errors import InvalidArgument
from labsrc.ranking import check_top_k
from labsrc.records.policy import PolicyChunk

__all__ = [
    "DEFAULT_RRF_K",
    "fuse_ranked_ids",
    "reciprocal_rank_fusion",
    "rrf_contribution",
]

DEFAULT_RRF_K = 60

K = TypeVar("K", bound=Hashable)


def check_rrf_k(rrf_k: object) -> float:
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or not math.isfinite(rrf_k) or rrf_k <= 0:
        raise InvalidArgument(
            f"rrf_k must be a positive number (60 by default, per Cormack et al.), not {rrf_k!r}; "
            "it is the smoothing constant, not the number of results (that is top_k)"
        )
    return rrf_k


def rrf_contribution(rank: int, rrf_k: float = DEFAULT_RRF_K, weight: float = 1.0) -> float:
    """weight / (rrf_k + rank), with 1-based ``rank``: one lane's vote for one document."""
    if rank < 1:
        raise InvalidArgument(f"ranks are 1-based; got {rank}")
    return weight / (rrf_k + rank)


def _ranked_ids(result: Sequence[tuple[K, float]], key: str) -> list[K]:
    # Never trust the input order: sort each lane by (score desc, id asc) ourselves.
    ids = [item for item, _ in result]
    if len(set(ids)) != len(ids):
        raise InvalidArgument(f"{key} contains the same id more than once")
    return [item for item, _ in sorted(result, key=lambda pair: (-pair[1], pair[0]))]


def fuse_ranked_ids(
    ranked_lists: Mapping[str, Sequence[tuple[K, float]]],
    rrf_k: float = DEFAULT_RRF_K,
    weights: Mapping[str, float] | None = None,
) -> list[tuple[K, float]]:
    """score(d) = Σ_lanes w_lane / (rrf_k + rank_lane(d)), over ``{lane: [(id, score), ...]}``.

    Returns ``(id, fused score)`` sorted by (score desc, id asc). Contributions are
    added in lane-name order, so the float result does not depend on dict order.
    """
    rrf_k = check_rrf_k(rrf_k)
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(ranked_lists))
    if unknown:
        raise InvalidArgument(f"weights name unknown lanes {unknown}; lanes are {sorted(ranked_lists)}")
    fused: dict[K, float] = {}
    for lane in sorted(ranked_lists):
        weight = weights.get(lane, 1.0)
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise InvalidArgument(f"weight for lane {lane!r} must be a finite number >= 0, not {weight!r}")
        for rank, item in enumerate(_ranked_ids(ranked_lists[lane], f"lane {lane!r}"), start=1):
            fused[item] = fused.get(item, 0.0) + rrf_contribution(rank, rrf_k, weight)
    return sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))


def reciprocal_rank_fusion(
    result_lists: Iterable[Sequence[tuple[PolicyChunk, float]]],
    rrf_k: float = DEFAULT_RRF_K,
    *,
    weights: Sequence[float] | None = None,
    top_k: int | None = None,
) -> list[tuple[PolicyChunk, float]]:
    """Fuse lanes' ``(chunk, score)`` lists with RRF; returns ``(chunk, fused score)``.

    ``rrf_k`` is RRF's smoothing constant (60 by default, per Cormack et al.); it is
    different from ``top_k``, the number of results kept. Each input list is
    re-sorted by (score desc, chunk_id asc) before ranks are assigned, so the
    caller's ordering never matters. Ties in the fused score break on chunk_id.
    """
    lists = [list(result) for result in result_lists]
    if weights is not None and len(weights) != len(lists):
        raise InvalidArgument(f"got {len(weights)} weights for {len(lists)} result lists")
    chunks: dict[str, PolicyChunk] = {}
    lanes: dict[str, list[tuple[str, float]]] = {}
    for i, result in enumerate(lists):
        lane = f"{i:06d}"
        lanes[lane] = []
        for chunk, score in result:
            if chunks.setdefault(chunk.chunk_id, chunk) != chunk:
                raise InvalidArgument(f"two different chunks share chunk_id {chunk.chunk_id!r}")
            lanes[lane].append((chunk.chunk_id, score))
    lane_weights = None if weights is None else {f"{i:06d}": w for i, w in enumerate(weights)}
    fused = fuse_ranked_ids(lanes, rrf_k, lane_weights)
    if top_k is not None:
        fused = fused[: check_top_k(top_k)]
    return [(chunks[chunk_id], score) for chunk_id, score in fused]

