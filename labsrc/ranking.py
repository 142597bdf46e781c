"""Shared ranking helpers: argument checks and top-k selection.

Both lanes rank a *universe sorted by chunk_id*, so "break ties by id" is the
same as "break ties by position" and can be done with integer keys.
"""

from __future__ import annotations

import numpy as np

from labsrc.errors import InvalidArgument

__all__ = [
    "DEFAULT_MAX_QUERY_CHARS",
    "block_max_threshold",
    "check_max_query_chars",
    "check_query",
    "check_top_k",
    "top_k_entries",
    "top_k_positions",
]

#: The longest query text the retrievers accept by default, in characters (``max_query_chars=``).
#: A search costs time linear in the query's length (about 0.2 s a megabyte on the lesson), but
#: nobody types 100,000 characters: a longer text is refused at once, before it is analysed.
DEFAULT_MAX_QUERY_CHARS = 100_000


def check_top_k(top_k: object, name: str = "top_k") -> int:
    """``top_k`` must be a positive int (bool is refused: ``True`` is not a count)."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
        raise InvalidArgument(f"{name} must be a positive int, not {top_k!r}")
    if top_k <= 0:
        raise InvalidArgument(f"{name} must be > 0, got {top_k}")
    return int(top_k)


def check_max_query_chars(max_query_chars: object) -> int | None:
    """``max_query_chars`` must be a positive int, or ``None`` for no cap."""
    if max_query_chars is None:
        return None
    return check_top_k(max_query_chars, "max_query_chars")


def check_query(query: object, max_chars: int | None = DEFAULT_MAX_QUERY_CHARS, name: str = "query") -> str:
    """``query`` must be a ``str`` of at most ``max_chars`` characters (``None``: any length).

    Bytes are refused rather than guessed at: the caller knows their encoding.
    """
    if not isinstance(query, str):
        hint = " (decode it first, e.g. query.decode('utf-8'))" if isinstance(query, (bytes, bytearray)) else ""
        raise InvalidArgument(f"{name} must be a str, not {type(query).__name__}{hint}")
    if max_chars is not None and len(query) > max_chars:
        raise InvalidArgument(
            f"{name} is {len(query):,} characters long; the limit is {max_chars:,} "
            "(raise it with max_query_chars=, or None for no limit)"
        )
    return query


#: The smallest positive float64, so ``scores >= _SMALLEST_POSITIVE`` is exactly ``scores > 0``.
_SMALLEST_POSITIVE = float(np.nextafter(0.0, 1.0))


def block_max_threshold(scores: np.ndarray, top_k: int) -> float:
    """A lower bound on the ``top_k``-th largest score, from the maxima of blocks of scores.

    Split the scores into ``B >= top_k`` blocks and take each block's maximum. The
    ``top_k``-th largest of those maxima, τ, is the maximum of ``top_k`` different
    blocks, so at least ``top_k`` scores are >= τ: every score in the top k is >= τ.
    Blocks are strided (element i is in block i mod B), so one vectorised ``max``
    over a (L, B) view finds all maxima; elements past the last full row are left
    out, which keeps the bound valid. Returns ``-inf`` when there are too few scores.
    """
    blocks = max(4 * top_k, 256)
    rows = scores.size // blocks
    if rows < 2:
        return float("-inf")
    maxima = scores[: rows * blocks].reshape(rows, blocks).max(0)
    maxima.partition(blocks - top_k)  # in place: maxima is a fresh array
    return float(maxima[blocks - top_k])


def top_k_entries(scores: np.ndarray, top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and values of the ``top_k`` best *positive* scores, by (score desc, position asc).

    Never sorts the whole array. :func:`block_max_threshold` gives a score τ that
    the k-th best is at least; only the scores >= τ (and > 0) are candidates,
    usually a few times ``top_k``, and only they are sorted. Candidates tied with
    the k-th score are all kept before sorting, so the cut is exact.
    """
    floor = block_max_threshold(scores, top_k)
    # ``.nonzero()[0]`` rather than ``np.flatnonzero``: the same positions, one Python call fewer.
    candidates = (scores >= (floor if floor > 0 else _SMALLEST_POSITIVE)).nonzero()[0]
    values = scores[candidates]
    if candidates.size > 4 * top_k:
        kth_largest = np.partition(values, values.size - top_k)[values.size - top_k]
        keep = values >= kth_largest
        candidates, values = candidates[keep], values[keep]
    order = np.lexsort((candidates, -values))[:top_k]
    return candidates[order], values[order]


def top_k_positions(scores: np.ndarray, top_k: int) -> np.ndarray:
    """Positions of the ``top_k`` best *positive* scores, by (score desc, position asc)."""
    return top_k_entries(scores, top_k)[0]
