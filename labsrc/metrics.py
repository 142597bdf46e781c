"""Retrieval metrics over ranked id lists (ranks are 1-based)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .ranking import check_top_k

__all__ = ["recall_at_k"]


def recall_at_k(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """|relevant ∩ ranked[:k]| / |relevant|; 0.0 when nothing is relevant.

    Manning, Raghavan & Schütze (2008), *Introduction to Information Retrieval*, §8.4.
    """
    k = check_top_k(k, "k")
    relevant = set(relevant)
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)
