"""Fusion: many ranked lists in, one ranked list out.

Reciprocal Rank Fusion (the lesson's), weighted and adaptive RRF, convex score
fusion and maximal marginal relevance. Ties break on id ascending.
"""

from labsrc.fusion.convex import (
    check_alpha,
    convex_fusion,
    convex_score,
    min_max_normalise,
)
from labsrc.fusion.mmr import (
    maximal_marginal_relevance,
    mmr_score,
)
from labsrc.fusion.rrf import (
    DEFAULT_RRF_K,
    fuse_ranked_ids,
    reciprocal_rank_fusion,
    rrf_contribution,
)
from labsrc.fusion.weighted import (
    FusionParams,
    adaptive_fusion_params,
    weighted_rrf,
)

__all__ = [
    "DEFAULT_RRF_K",
    "FusionParams",
    "adaptive_fusion_params",
    "check_alpha",
    "convex_fusion",
    "convex_score",
    "fuse_ranked_ids",
    "maximal_marginal_relevance",
    "min_max_normalise",
    "mmr_score",
    "reciprocal_rank_fusion",
    "rrf_contribution",
    "weighted_rrf",
]
