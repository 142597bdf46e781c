"""Convex score fusion: min-max normalise each lane, then mix them with one weight.

Convex fusion (Bruch, Gai & Ingber 2023, "An Analysis of Fusion Functions for
Hybrid Retrieval") uses scores, unlike RRF, but only after min-max normalising
each lane, and mixes them with one weight ``alpha`` that must be tuned on
labelled queries that are not the test set.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from labsrc.errors import InvalidArgument
from labsrc.ranking import check_top_k

__all__ = ["check_alpha", "convex_fusion", "convex_score", "min_max_normalise"]

K = TypeVar("K", bound=Hashable)



def check_alpha(alpha: object) -> float:
    """``alpha`` must be a number in [0, 1] (the weight of the dense lane)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
        raise InvalidArgument(f"alpha must be a number in [0, 1] (the dense lane's weight), not {alpha!r}")
    return float(alpha)


def min_max_normalise(scores: Mapping[K, float]) -> dict[K, float]:
    """φ(s) = (s − min) / (max − min) over one lane's candidates, so they span [0, 1].

    The min and max are taken over the scores given (a lane's top ``depth``), as in
    Bruch, Gai & Ingber (2023). When every candidate has the same score the
    spread is zero; each of them is then the lane's best and gets 1.0.
    """
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        return {key: 1.0 for key in scores}
    return {key: (value - low) / (high - low) for key, value in scores.items()}


def convex_score(dense: float, sparse: float, alpha: float) -> float:
    """alpha · dense + (1 − alpha) · sparse, on normalised scores (Bruch, Gai & Ingber 2023)."""
    return alpha * dense + (1.0 - alpha) * sparse


def convex_fusion(
    sparse: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    alpha: float,
    *,
    top_k: int | None = None,
) -> list[tuple[K, float]]:
    """Convex combination of min-max normalised lane scores over the union of both lanes.

    Each lane is normalised over its own candidates (:func:`min_max_normalise`);
    a document that one lane did not return gets 0 from that lane, the same as
    that lane's lowest candidate. ``alpha`` weighs the dense lane: 0 is BM25 only
    (re-ranked over the union), 1 is dense only. Never guess ``alpha``: tune it on
    a labelled split that is not the one you report.

    Returns ``(id, fused score)`` sorted by (score desc, id asc), cut at ``top_k``.
    """
    alpha = check_alpha(alpha)
    lanes = {"sparse": sparse, "dense": dense}
    normalised: dict[str, dict[K, float]] = {}
    for lane, result in lanes.items():
        scores = dict(result)
        if len(scores) != len(result):
            raise InvalidArgument(f"the {lane} lane contains the same id more than once")
        normalised[lane] = min_max_normalise(scores)
    union = set(normalised["sparse"]) | set(normalised["dense"])
    fused = {
        item: convex_score(normalised["dense"].get(item, 0.0), normalised["sparse"].get(item, 0.0), alpha)
        for item in union
    }
    ranked = sorted(fused.items(), key=lambda pair: (-pair[1], pair[0]))
    return ranked if top_k is None else ranked[: check_top_k(top_k)]
