"""Shared ranking helpers: argument checks and top-k selection.

Both lanes rank a *universe sorted by chunk_id*, so "break ties by id" is the
same as "break ties by position" and can be done with integer keys.
"""

from __future__ import annotations

import numpy as np

from labsrc.errors import InvalidArgument

__all__ = ["check_top_k", "top_k_positions"]


def check_top_k(top_k: object, name: str = "top_k") -> int:
    """``top_k`` must be a positive int (bool is refused: ``True`` is not a count)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
        raise InvalidArgument(f"{name} must be a positive int, not {top_k!r}")
    if top_k <= 0:
        raise InvalidArgument(f"{name} must be > 0, got {top_k}")
    return int(top_k)


def top_k_positions(scores: np.ndarray, top_k: int) -> np.ndarray:
    """Positions of the ``top_k`` best *positive* scores, by (score desc, position asc).

    Never sorts the whole array: ``np.partition`` finds the k-th largest score in
    linear time, and only the candidates at or above it are sorted. Candidates tied
    with the k-th score are all kept before sorting, so the cut is exact.
    """
    candidates = np.flatnonzero(scores > 0)
    if candidates.size > top_k:
        values = scores[candidates]
        kth_largest = np.partition(values, values.size - top_k)[values.size - top_k]
        candidates = candidates[values >= kth_largest]
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order][:top_k]
