"""Weighted and adaptive RRF.

Both are thin layers over :func:`labsrc.fusion.rrf.fuse_ranked_ids`, the lab's
one RRF implementation (Cormack, Clarke & Buettcher 2009), which already takes
per-lane weights::

    score(d) = Σ_lanes w_lane / (rrf_k + rank_lane(d))        ranks are 1-based

*Adaptive* fusion changes rrf_k and the weights per query: when query expansion
fired, the BM25 lane searched the expanded text, so it is trusted more (weight
3.0 against 0.3) and a smaller rrf_k (10) lets its top ranks dominate.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from labsrc.errors import InvalidArgument
from labsrc.fusion.rrf import DEFAULT_RRF_K, fuse_ranked_ids
from labsrc.ranking import check_top_k

__all__ = [
    "FusionParams",
    "adaptive_fusion_params",
    "weighted_rrf",
]

K = TypeVar("K", bound=Hashable)

class FusionParams(NamedTuple):
    """``(rrf_k, bm25_weight, dense_weight)``; a tuple, so it unpacks and compares as one."""

    rrf_k: float
    bm25_weight: float
    dense_weight: float


#: Plain RRF: rrf_k 60, equal weights.
DEFAULT_FUSION = FusionParams(DEFAULT_RRF_K, 1.0, 1.0)
#: After query expansion: a sharper rrf_k and a trusted lexical lane.
EXPANDED_FUSION = FusionParams(10, 3.0, 0.3)


def adaptive_fusion_params(expanded: bool) -> FusionParams:
    """``(60, 1.0, 1.0)`` for a plain query, ``(10, 3.0, 0.3)`` when expansion fired."""
    if not isinstance(expanded, bool):
        raise InvalidArgument(f"expanded must be True or False, not {expanded!r}")
    return EXPANDED_FUSION if expanded else DEFAULT_FUSION


def weighted_rrf(
    result_lists: Mapping[str, Sequence[tuple[K, float]]] | Sequence[Sequence[tuple[K, float]]],
    weights: Mapping[str, float] | Sequence[float],
    rrf_k: float = DEFAULT_RRF_K,
    *,
    top_k: int | None = None,
) -> list[tuple[K, float]]:
    """score(d) = Σ w_lane / (rrf_k + rank_lane(d)) over lanes of ``(id, score)`` pairs.

    ``result_lists`` is either ``{lane: [(id, score), ...]}`` with ``weights``
    ``{lane: w}``, or a list of lanes with a list of weights of the same length.
    Every lane needs a weight (that is the point of *weighted* RRF). Each lane is
    re-ranked by (score desc, id asc) before ranks are assigned. ``rrf_k`` is the
    smoothing constant (60 by default, per Cormack et al.), not the number of
    results; ``top_k`` cuts the fused list. Returns ``(id, fused score)`` sorted by
    (fused score desc, id asc).
    """
    if isinstance(result_lists, Mapping):
        if not isinstance(weights, Mapping):
            raise InvalidArgument("lanes given as a mapping need weights as a mapping {lane: weight}")
        lanes = {str(lane): list(result) for lane, result in result_lists.items()}
        lane_weights = {str(lane): w for lane, w in weights.items()}
    else:
        if isinstance(weights, Mapping):
            raise InvalidArgument("lanes given as a list need weights as a list of the same length")
        lists = list(result_lists)
        if len(weights) != len(lists):
            raise InvalidArgument(f"got {len(weights)} weights for {len(lists)} result lists")
        lanes = {f"{i:06d}": list(result) for i, result in enumerate(lists)}
        lane_weights = {f"{i:06d}": w for i, w in enumerate(weights)}
    missing = sorted(set(lanes) - set(lane_weights))
    if missing:
        raise InvalidArgument(f"no weight for lane(s) {missing}; weights given for {sorted(lane_weights)}")
    fused = fuse_ranked_ids(lanes, rrf_k, lane_weights)
    return fused if top_k is None else fused[: check_top_k(top_k)]

