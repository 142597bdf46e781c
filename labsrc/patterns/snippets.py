"""Display helpers: BM25-scored snippets and per-query min-max normalised scores.

:func:`labsrc.patterns.dropin.make_snippet` centres a window on the *first* query term.
:func:`best_snippet` instead picks the window that best answers the query: it
cuts the text into candidate windows of whole sentences, treats them as a tiny
collection and ranks them with the lab's own :class:`~labsrc.lanes.sparse.BM25Index`.
Within one text, a term that occurs in every window gets a low idf, so the
window holding the rare query term (the policy code, the number of days) wins.

Scores shown to people should be comparable at a glance. RRF scores such as
0.0328 mean nothing to a reader, so :func:`min_max_normalize` rescales one
query's scores to 0–1. It is for display only: normalised scores of different
queries cannot be compared, and ranking never uses them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import lesson_analyzer
from labsrc.lanes.bm25 import DEFAULT_B, DEFAULT_K1
from labsrc.lanes.sparse import BM25Index
from labsrc.ranking import check_top_k

__all__ = ["Snippet", "best_snippet", "min_max", "min_max_normalize", "with_display_scores"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n\s*")


@dataclass(frozen=True)
class Snippet:
    """A window of a text: ``text == source[start:end]``; ``score`` is its BM25 score (0: no match)."""

    text: str
    start: int
    end: int
    score: float


def _sentences(text: str) -> list[tuple[int, int]]:
    spans, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    return [(s, e) for s, e in spans if text[s:e].strip()]


def _fit(text: str, start: int, end: int, max_chars: int) -> tuple[int, int]:
    """Cut ``text[start:end]`` to at most ``max_chars``, at a space where there is one."""
    if end - start <= max_chars:
        return start, end
    space = text.rfind(" ", start, start + max_chars + 1)
    return start, space if space > start else start + max_chars


def best_snippet(
    text: str,
    query: str,
    *,
    max_chars: int = 240,
    analyzer: Callable[[str], list[str]] = lesson_analyzer,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> Snippet:
    """The window of whole sentences (at most ``max_chars``) with the highest BM25 score.

    Candidates start at each sentence and take following sentences while they
    fit; a sentence longer than ``max_chars`` is cut at a word boundary. Ties go to
    the earliest window. When no window matches the query, the snippet is the
    head of the text with score 0.
    """
    if not isinstance(text, str) or not isinstance(query, str):
        raise InvalidArgument("best_snippet takes a text and a query, both strings")
    max_chars = check_top_k(max_chars, "max_chars")
    sentences = _sentences(text)
    if not sentences:
        return Snippet("", 0, 0, 0.0)
    windows: list[tuple[int, int]] = []
    for i, (start, end) in enumerate(sentences):
        for _, next_end in sentences[i + 1 :]:
            if next_end - start > max_chars:
                break
            end = next_end
        windows.append(_fit(text, start, end, max_chars))
    # Zero-padded ids sort in text order, so BM25's id tie-break picks the earliest window.
    index = BM25Index.build(
        ((f"{i:08d}", text[s:e]) for i, (s, e) in enumerate(windows)), analyzer=analyzer, k1=k1, b=b
    )
    best = index.search(query, 1) if query.strip() else []
    if best:
        start, end = windows[int(best[0][0])]
        return Snippet(text[start:end], start, end, best[0][1])
    start, end = _fit(text, sentences[0][0], len(text), max_chars)
    return Snippet(text[start:end].rstrip(), start, start + len(text[start:end].rstrip()), 0.0)


def min_max(score: float, low: float, high: float) -> float:
    """(score − low) / (high − low); 1.0 when every score is the same (high == low)."""
    return 1.0 if high == low else (score - low) / (high - low)


def min_max_normalize(scores: Sequence[float]) -> list[float]:
    """One query's scores rescaled to 0–1 for display (best → 1, worst → 0), order kept."""
    values = [float(s) for s in scores]
    if not all(math.isfinite(v) for v in values):
        raise InvalidArgument(f"scores must be finite numbers, got {list(scores)!r}")
    if not values:
        return []
    low, high = min(values), max(values)
    return [min_max(v, low, high) for v in values]


def with_display_scores(
    results: Sequence[Mapping[str, Any]], *, key: str = "rrf_score", out: str = "display_score"
) -> list[dict[str, Any]]:
    """Copies of ``results`` with ``out`` = the min-max normalised ``key``; the order is unchanged."""
    missing = [i for i, r in enumerate(results) if key not in r]
    if missing:
        raise InvalidArgument(f"results {missing} have no {key!r} field")
    normalised = min_max_normalize([r[key] for r in results])
    return [{**result, out: value} for result, value in zip(results, normalised)]
