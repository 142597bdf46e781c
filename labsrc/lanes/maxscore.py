"""Dynamic pruning for top-k BM25: MaxScore (Turtle & Flood 1995), term at a time, in NumPy.

Each query term has an upper bound: the largest contribution it makes to any
document. Terms are taken in decreasing order of that bound.

1. *Essential terms.* Their postings are added up until the k-th best partial
   score θ beats the sum of the remaining terms' bounds: then no unseen
   document can reach the top k, and the remaining terms are *non-essential*.
2. *Refinement.* Each non-essential term is looked up for the candidates only
   (a binary search in its postings, never a scan), θ rises, and candidates
   whose partial score plus the remaining bounds falls below θ are dropped.
   When refining the survivors would cost more than scoring every document
   (``exhaustive_ns``, the caller's estimate), the answer is "no pruning" and
   the caller scores exhaustively: a query of common words only can leave
   a hundred thousand survivors at 1M documents.
3. *Exact scores.* The few survivors are scored term by term in the query's
   own order, from 0, so their scores are the very sums exhaustive scoring
   gives (``==``), and ties break by position as everywhere in the lab.

Common words (low idf, low bound) are never scanned in full, which is how
Lucene and PISA keep a query's cost following its rare terms' postings. The
bound is the maximum of the contributions actually used, so it holds whatever
statistics produced them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from labsrc.lanes.postings import POSTING_NS, ROW_DOC_NS, TOP_K_DOC_NS
from labsrc.ranking import block_max_threshold

__all__ = ["ScoredTerm", "StoredTerm", "exhaustive_ns", "maxscore_candidates", "score_candidates"]

# Relative margin for comparing sums taken in different orders (their rounding is ~1e-16).
_SLACK = 1e-9

#: What refining one candidate against one non-essential term costs, in the units of
#: :data:`labsrc.lanes.postings.POSTING_NS`: a gather from the term's dense row, or a binary search in its
#: postings (plus the filtering around either). Set where the 1M-document Zipf benchmark's 200 queries
#: (``bench_bm25_scale.py``) took least time, scanning 4–14 and 10–40: a query whose survivors would cost
#: more to refine than scoring every document is scored exhaustively instead (its slowest query, three
#: words in 19–96 % of the documents, took 15.5 ms pruned and 5.0 ms exhaustively).
ROW_LOOKUP_NS, SEARCH_LOOKUP_NS = 8.0, 30.0


class ScoredTerm(Protocol):
    """One query term as MaxScore sees it: a bound on its contribution, and two ways to read it."""

    bound: float  # >= its contribution to any document
    lookup_ns: float  # what looking one candidate up costs (nanoseconds on this project's machine)

    def postings(self) -> tuple[np.ndarray, np.ndarray]:
        """All its (ascending positions, contributions): a scan of its postings."""
        ...

    def lookup(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(found, contributions)``: which ascending ``candidates`` it holds, and what it adds to them."""
        ...


def find(postings: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Binary search: where each candidate would sit in ``postings``, and whether it is there."""
    at = np.minimum(np.searchsorted(postings, candidates), postings.size - 1)
    return at, postings[at] == candidates


@dataclass(frozen=True)
class StoredTerm:
    """One occurrence of a query term in an index whose contributions are stored per posting.

    A term repeated in the query is one ``StoredTerm`` per occurrence, so exact
    scores add it where it occurs, as exhaustive scoring does.
    """

    positions: np.ndarray
    contributions: np.ndarray
    bound: float  # the largest of the contributions
    row: np.ndarray | None = None  # the same contributions for every document (0.0 where absent), if kept

    def postings(self) -> tuple[np.ndarray, np.ndarray]:
        return self.positions, self.contributions

    @property
    def lookup_ns(self) -> float:
        return ROW_LOOKUP_NS if self.row is not None else SEARCH_LOOKUP_NS

    def lookup(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.row is not None:  # a common term's dense row: one gather, not a binary search per candidate
            values = self.row[candidates]
            found = values != 0.0  # contributions are > 0; a 0.0 would add nothing anyway
            return found, values[found]
        at, found = find(self.positions, candidates)
        return found, self.contributions[at[found]]


def exhaustive_ns(terms: Sequence[StoredTerm], n_docs: int) -> float:
    """What scoring every document costs instead (``query_scores``, then the top k), in ``lookup_ns``'s units."""
    rows = sum(term.row is not None for term in terms)
    postings = sum(term.positions.size for term in terms if term.row is None)
    return rows * n_docs * ROW_DOC_NS + postings * POSTING_NS + n_docs * TOP_K_DOC_NS


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of ``values`` (k <= size): a block-max bound first, so only a few are partitioned."""
    floor = block_max_threshold(values, k)
    if floor > float("-inf"):
        values = values[values >= floor]  # at least k of them, by the bound's construction
    return float(np.partition(values, values.size - k)[values.size - k])


def _merge(docs: list[np.ndarray], weights: list[np.ndarray], n_docs: int) -> tuple[np.ndarray | None, np.ndarray]:
    """``(positions, partial sums)`` of several terms' postings, positions ascending and unique.

    With many postings the sums come back dense, one per document (0 where none
    was seen), and positions as ``None``: that is cheaper than sorting them.
    """
    if len(docs) == 1:  # one term: its postings are already unique and sorted
        return docs[0], weights[0]
    merged, merged_w = np.concatenate(docs), np.concatenate(weights)
    if merged.size * 32 > n_docs:
        return None, np.bincount(merged, merged_w, minlength=n_docs)
    seen, slot = np.unique(merged, return_inverse=True)
    return seen, np.bincount(slot, merged_w, minlength=seen.size)


def _essential_count(terms: Sequence[ScoredTerm], order: list[int], rest: list[float], top_k: int) -> int | None:
    """How many terms (in bound order) must be scanned, by a bound that needs no merging.

    Any one term's k-th largest contribution is a lower bound on the k-th best
    score (k documents have at least that much from it alone). Once that bound
    beats what the remaining terms could add, the terms so far are the essential
    ones. ``None`` when no such point exists.
    """
    floor = 0.0
    for j in range(len(order) - 1):
        _, contributions = terms[order[j]].postings()
        if contributions.size >= top_k:
            floor = max(floor, _kth_largest(contributions, top_k))
        if floor > rest[j + 1] * (1 + _SLACK):
            return j + 1
    return None


def _doubling(n_terms: int) -> list[int]:
    """Essential-set sizes to try when the cheap bound found none: 2, 4, 8, ... below ``n_terms``.

    Each try merges its terms' postings afresh, so growing one term at a time
    costs the square of the query's length (a 4,000-word query took seconds);
    doubling keeps the merges' total under twice the last one: linear. Any size
    that passes the θ test is exact, so a larger essential set than needed only
    prunes a little less. All ``n_terms`` essential is exhaustive scoring: not tried.
    """
    sizes, count = [], 2
    while count < n_terms:
        sizes.append(count)
        count *= 2
    if sizes and sizes[-1] != n_terms - 1:
        sizes.append(n_terms - 1)
    return sizes


def maxscore_candidates(
    terms: Sequence[ScoredTerm], top_k: int, n_docs: int, *, exhaustive_ns: float | None = None
) -> np.ndarray | None:
    """Ascending positions that hold the true top ``top_k``, or ``None`` when pruning saves nothing.

    ``terms`` are the query's terms (any order); ``n_docs`` bounds the positions.
    ``exhaustive_ns`` is what scoring every document would cost (the units of
    :attr:`ScoredTerm.lookup_ns`): when refining the survivors of the essential
    terms would cost more, the answer is ``None`` too.
    """
    bound = [t.bound for t in terms]
    order = sorted(range(len(terms)), key=lambda i: -bound[i])
    rest = [0.0] * (len(order) + 1)
    for j in range(len(order) - 1, -1, -1):
        rest[j] = rest[j + 1] + bound[order[j]]
    essential = _essential_count(terms, order, rest, top_k)
    steps = [essential] if essential is not None else _doubling(len(order))
    for count in steps:  # the cheap bound first; else grow the essential set with exact partial sums
        parts = [terms[i].postings() for i in order[:count]]
        seen, partial = _merge([d for d, _ in parts], [w for _, w in parts], n_docs)
        if partial.size < top_k:
            continue
        remaining = rest[count] * (1 + _SLACK)
        kept = _survivors(partial, remaining, top_k)
        if kept is None:
            continue
        theta, keep, values = kept
        survivors = keep if seen is None else seen[keep]
        if exhaustive_ns is not None and _refine_ns(terms, order[count:], survivors.size) > exhaustive_ns:
            return None
        return _refine(terms, order[count:], rest[count:], survivors, values, top_k, theta)
    return None


def _refine_ns(terms: Sequence[ScoredTerm], remaining_order: list[int], survivors: int) -> float:
    """At most what refining ``survivors`` candidates against the remaining terms costs."""
    return survivors * sum(terms[i].lookup_ns for i in remaining_order)


def _survivors(partial: np.ndarray, remaining: float, top_k: int) -> tuple[float, np.ndarray, np.ndarray] | None:
    """``(θ, positions, partial sums)`` of the entries that may still reach the top k, or ``None`` if unseen ones may.

    θ is the k-th largest partial sum (dense zeros, unseen documents, never exceed
    it). Unseen documents score at most ``remaining``: when that is not below θ,
    nothing is pruned. Seen ones survive when partial + remaining >= θ.

    One pass over ``partial`` picks every entry that could survive: a block-max
    floor f <= θ (:func:`~labsrc.ranking.block_max_threshold`) gives a cut below
    f − remaining, which every survivor passes (θ >= f) and which also keeps every
    entry >= f, so θ is the k-th largest of the picked few. Then θ and the
    survivors are found among those, with the very comparison a full pass makes.
    Separate passes read a dense 1M-document array about six times; this,
    with the way out to exhaustive scoring, made the 1M Zipf benchmark 1.12–1.14×
    faster (three runs, the same answers).
    """
    floor = block_max_threshold(partial, top_k)
    if floor <= 0.0:  # too few entries for blocks, or no positive floor: the plain passes
        theta = _kth_largest(partial, top_k)
        if not theta > remaining:
            return None
        keep = np.flatnonzero(partial + remaining >= theta * (1 - _SLACK))
        return theta, keep, partial[keep]
    # Below the cut, partial + remaining < f·(1 − slack) <= θ·(1 − slack), with room for the sum's rounding.
    cut = floor * (1 - _SLACK) - remaining - floor * 1e-12
    picked = (partial >= cut).nonzero()[0]
    values = partial[picked]
    theta = float(np.partition(values, values.size - top_k)[values.size - top_k])
    if not theta > remaining:
        return None
    keep = (values + remaining >= theta * (1 - _SLACK)).nonzero()[0]
    return theta, picked[keep], values[keep]


def _refine(terms, remaining_order, rest, candidates, partial, top_k, theta) -> np.ndarray:
    """Step 2: add the non-essential terms for the candidates only, dropping those that fall behind."""
    for step, i in enumerate(remaining_order):
        keep = partial + rest[step] * (1 + _SLACK) >= theta * (1 - _SLACK)
        candidates, partial = candidates[keep], partial[keep]  # copies: partial may be a view of postings
        if candidates.size <= top_k:
            break
        found, contribution = terms[i].lookup(candidates)
        partial[found] += contribution
        theta = max(theta, _kth_largest(partial, top_k))
    else:
        candidates = candidates[partial >= theta * (1 - _SLACK)]
    return candidates


def score_candidates(terms: Sequence[ScoredTerm], candidates: np.ndarray) -> np.ndarray:
    """Exact scores of ``candidates``: contributions added term by term in the query's order, from 0."""
    scores = np.zeros(candidates.size, dtype=np.float64)
    for term in terms:
        found, contribution = term.lookup(candidates)
        scores[found] += contribution
    return scores
