"""BM25's formulas, one small function each, and the readable reference that scores the slow, obvious way.

Scoring follows Robertson & Zaragoza (2009), "The Probabilistic Relevance
Framework: BM25 and Beyond", with Lucene's always-positive idf (Kamphuis et al.,
ECIR 2020, "Which BM25 Do You Mean?"). Every BM25 in the lab (the index, the
per-request statistics lane, the SQL engine) evaluates these same expressions,
and the tests check each against :func:`brute_force_bm25`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import lesson_analyzer

__all__ = [
    "DEFAULT_B",
    "DEFAULT_K1",
    "TermExplanation",
    "bm25_term_score",
    "brute_force_bm25",
    "idf_lucene",
    "length_norm",
]

DEFAULT_K1 = 1.2
DEFAULT_B = 0.75


# --- the formulas -------------------------------------------------------------


def idf_lucene(n_t: int | np.ndarray, n_docs: int) -> float | np.ndarray:
    """idf(t) = ln(1 + (N − n_t + 0.5) / (n_t + 0.5)).

    Lucene's variant of the Robertson–Spärck Jones weight; the ``1 +`` keeps it
    positive even for a term in every document.
    """
    return np.log1p((n_docs - n_t + 0.5) / (n_t + 0.5))


def length_norm(doc_len: float | np.ndarray, avgdl: float, b: float) -> float | np.ndarray:
    """1 − b + b · |d| / avgdl: how much a document's length discounts its term counts."""
    return 1.0 - b + b * doc_len / avgdl


def bm25_term_score(
    idf: float | np.ndarray, tf: float | np.ndarray, norm: float | np.ndarray, k1: float
) -> float | np.ndarray:
    """idf · f·(k1 + 1) / (f + k1 · norm)  (Robertson & Zaragoza 2009, eq. 3.15)."""
    return idf * (tf * (k1 + 1.0)) / (tf + k1 * norm)


def check_pairs(pairs: object, kind: str) -> list[tuple[str, object]]:
    """``(id, text)`` pairs (``kind="text"``) or ``(id, terms)`` pairs (``kind="terms"``), checked, as a list."""
    if not isinstance(pairs, Iterable) or isinstance(pairs, (str, bytes, Mapping)):
        raise InvalidArgument(f"pairs must be an iterable of (id, {kind}) pairs, not {type(pairs).__name__}")
    out = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2 or not isinstance(pair[0], str):
            raise InvalidArgument(f"pairs[{i}] must be an (id, {kind}) pair with a str id, not {pair!r:.80}")
        if kind == "text" and not isinstance(pair[1], str):
            raise InvalidArgument(f"pairs[{i}]: the text of {pair[0]!r} must be a str, not {type(pair[1]).__name__}")
        if kind == "terms":
            check_terms(pair[1], f"terms of {pair[0]!r}")
        out.append((pair[0], pair[1]))
    return out


def check_terms(terms: object, name: str = "terms") -> Sequence[str]:
    """An analysed query or document: a list (or tuple) of str, never one string."""
    if isinstance(terms, str):
        raise InvalidArgument(f"{name} is one string; it must be a list of strings (a list of terms: pass query text "
                              "to search() instead)")  # fmt: skip
    if not isinstance(terms, (list, tuple)) or not all(isinstance(t, str) for t in terms):
        raise InvalidArgument(f"{name} must be a list of str, not {type(terms).__name__} {terms!r:.60}")
    return terms


def check_params(k1: float, b: float) -> None:
    if not (isinstance(k1, (int, float)) and math.isfinite(k1) and k1 >= 0):
        raise InvalidArgument(f"k1 must be a finite number >= 0, not {k1!r}")
    if not (isinstance(b, (int, float)) and 0 <= b <= 1):
        raise InvalidArgument(f"b must be a number in [0, 1], not {b!r}")


# --- explanation record -----------------------------------------------------------


@dataclass(frozen=True)
class TermExplanation:
    """One query term's share of a document's BM25 score (for notebooks and debugging)."""

    term: str
    query_count: int  # how often the term occurs in the query
    idf: float
    tf: int
    doc_len: int
    avgdl: float
    length_norm: float
    contribution: float  # query_count · bm25_term_score(...); 0 when tf == 0


def brute_force_bm25(
    query: str,
    documents: Sequence[tuple[str, str]],
    *,
    analyzer: Callable[[str], list[str]] = lesson_analyzer,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> dict[str, float]:
    """BM25 written the slow, obvious way: rescan every document for every term.

    O(N · |q| · |d|) -- fine for the lesson's five chunks, a reference for testing
    :class:`BM25Index`, and the reason the index exists.
    """
    analysed = {doc_id: analyzer(text) for doc_id, text in documents}
    n_docs = len(analysed)
    if n_docs == 0:
        return {}
    avgdl = sum(len(terms) for terms in analysed.values()) / n_docs
    scores = {}
    for doc_id, terms in analysed.items():
        score = 0.0
        for term in analyzer(query):
            n_t = sum(term in other for other in analysed.values())
            f = terms.count(term)
            if f:
                score += bm25_term_score(idf_lucene(n_t, n_docs), f, length_norm(len(terms), avgdl, b), k1)
        scores[doc_id] = float(score)
    return scores
