"""Dynamic pruning for top-k BM25: MaxScore (Turtle & Flood 1995), term at a time, in NumPy.

Each query term has an upper bound: the largest contribution it makes to any
document. Terms are taken in decreasing order of that bound.

1. *Essential terms.* Their postings are added up until the k-th best partial
   score θ beats the sum of the remaining terms' bounds: then no unseen
   document can reach the top k, and the remaining terms are *non-essential*.
2. *Refinement.* Each non-essential term is looked up for the candidates only
   (a binary search in its postings, never a scan), θ rises, and candidates
   whose partial score plus the remaining bounds falls below θ are dropped.
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

import numpy as np

__all__ = ["TermPostings", "maxscore_candidates", "score_candidates"]

#: A term's postings (ascending positions), its contributions there, their maximum, and how
#: often the term occurs in the query (its contributions count that many times).
TermPostings = tuple[np.ndarray, np.ndarray, float, int]

# Relative margin for comparing sums taken in different orders (their rounding is ~1e-16).
_SLACK = 1e-9


def _times(values: np.ndarray, count: int) -> np.ndarray:
    # The same product exhaustive scoring forms: count · contribution (no copy when count is 1).
    return values if count == 1 else count * values


def _kth_largest(values: np.ndarray, k: int) -> float:
    return float(np.partition(values, values.size - k)[values.size - k])


def _lookup(term: TermPostings, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which candidates the term's postings hold, and its contribution to each of them."""
    postings, contributions, _, count = term
    at = np.minimum(np.searchsorted(postings, candidates), postings.size - 1)
    found = postings[at] == candidates
    return found, _times(contributions[at[found]], count)


def maxscore_candidates(terms: Sequence[TermPostings], top_k: int, n_docs: int) -> np.ndarray | None:
    """Ascending positions that hold the true top ``top_k``, or ``None`` when pruning saves nothing.

    ``terms`` are the query's terms (any order); ``n_docs`` bounds the positions.
    """
    bound = [t[2] * t[3] for t in terms]
    order = sorted(range(len(terms)), key=lambda i: -bound[i])
    rest = [0.0] * (len(order) + 1)
    for j in range(len(order) - 1, -1, -1):
        rest[j] = rest[j + 1] + bound[order[j]]
    docs: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for j in range(len(order) - 1):  # with every term essential, pruning saves nothing
        postings, contributions, _, count = terms[order[j]]
        docs.append(postings)
        weights.append(_times(contributions, count))
        merged, merged_w = np.concatenate(docs), np.concatenate(weights)
        if merged.size * 8 > n_docs:  # many postings: a dense accumulator beats sorting them
            dense = np.bincount(merged, merged_w, minlength=n_docs)
            seen = np.flatnonzero(dense)  # every contribution is > 0
            partial = dense[seen]
        else:
            seen, slot = np.unique(merged, return_inverse=True)
            partial = np.bincount(slot, merged_w, minlength=seen.size)
        if seen.size < top_k:
            continue
        theta = _kth_largest(partial, top_k)
        if theta > rest[j + 1] * (1 + _SLACK):
            return _refine(terms, order[j + 1 :], rest[j + 1 :], seen, partial, top_k, theta)
    return None


def _refine(terms, remaining_order, rest, candidates, partial, top_k, theta) -> np.ndarray:
    """Step 2: add the non-essential terms for the candidates only, dropping those that fall behind."""
    for step, i in enumerate(remaining_order):
        keep = partial + rest[step] * (1 + _SLACK) >= theta * (1 - _SLACK)
        candidates, partial = candidates[keep], partial[keep]
        if candidates.size <= top_k:
            break
        found, contribution = _lookup(terms[i], candidates)
        partial = partial.copy()
        partial[found] += contribution
        theta = max(theta, _kth_largest(partial, top_k))
    else:
        candidates = candidates[partial >= theta * (1 - _SLACK)]
    return candidates


def score_candidates(terms: Sequence[TermPostings], candidates: np.ndarray) -> np.ndarray:
    """Exact scores of ``candidates``: contributions added term by term in the query's order, from 0."""
    scores = np.zeros(candidates.size, dtype=np.float64)
    for term in terms:
        found, contribution = _lookup(term, candidates)
        scores[found] += contribution
    return scores
