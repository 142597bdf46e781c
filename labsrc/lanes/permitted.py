"""BM25 with the permitted universe's statistics, computed per request over one shared index.

One inverted index holds every stored chunk (its postings, term frequencies and
document lengths). A request brings the boundary's mask, and BM25 is scored
with the statistics of the permitted universe U only:

* N_U = |U|, the number of permitted documents;
* avgdl_U = Σ_{d∈U} |d| / N_U, their average length;
* df_U(t) = |{d ∈ U : t ∈ d}|, the mask applied to the term's postings.

Nothing is rebuilt per caller: N_U and avgdl_U are cached per distinct mask
(never per caller), and df_U is a count over the postings the query touches
anyway. So the cost of a request follows the postings of its terms.

**Exactness.** Every number above is an integer count or a sum of integer
lengths (exact in float64), and each document's score adds its terms'
contributions in the query's term order, starting from 0. The scores a caller
gets are therefore equal (``==``) to those the same code gives over a corpus that
holds only the permitted chunks, and match :func:`~labsrc.lanes.bm25.brute_force_bm25`
to rounding; the property tests check both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np

from labsrc.cache import LRUCache
from labsrc.errors import InvalidArgument
from labsrc.lanes.bm25 import bm25_term_score, check_terms, idf_lucene, length_norm
from labsrc.lanes.maxscore import SEARCH_LOOKUP_NS, find, maxscore_candidates, score_candidates
from labsrc.lanes.sparse import BM25Index
from labsrc.ranking import check_query, check_top_k, top_k_entries, top_k_positions

__all__ = ["PermittedBM25", "UniverseStats", "mask_key", "universe_stats"]

#: Below this many postings a query is scored exhaustively: pruning's bookkeeping would cost more.
_PRUNE_FROM_POSTINGS = 20_000
#: df_U of a term with at least this many postings is cached per mask (counting it reads them all).
_CACHE_DF_FROM = 4_096


def mask_key(mask: np.ndarray) -> bytes:
    """A compact, hashable key for a boolean mask (one bit per stored chunk)."""
    return np.packbits(mask).tobytes()


@dataclass(frozen=True)
class UniverseStats:
    """The corpus statistics of one permitted universe: N_U and avgdl_U."""

    n_docs: int
    total_len: float
    avgdl: float


def universe_stats(doc_len: np.ndarray, mask: np.ndarray) -> UniverseStats:
    """N_U and avgdl_U = Σ |d| / N_U over the documents the mask keeps (0 for an empty universe)."""
    n_docs = int(np.count_nonzero(mask))
    total = float(doc_len[mask].sum())  # integer lengths: the float sum is exact in any order
    return UniverseStats(n_docs, total, total / n_docs if n_docs else 0.0)


class _Universe:
    """What one mask keeps between requests: its N_U and avgdl_U, and df_U of long postings lists."""

    def __init__(self, stats: UniverseStats) -> None:
        self.stats = stats
        self.df: dict[int, int] = {}


@dataclass(frozen=True)
class _PermittedTerm:
    """A query term under one universe's statistics, for MaxScore (:mod:`labsrc.lanes.maxscore`)."""

    positions: np.ndarray  # all of the term's postings, permitted or not
    tf: np.ndarray
    mask: np.ndarray
    doc_len: np.ndarray
    idf: float
    avgdl: float
    k1: float
    b: float
    bound: float
    # MaxScore reads it only against an exhaustive estimate, and this lane passes none: scoring every posting
    # under a mask cost 47 ns a posting at 1M documents (90 % permitted), so pruning always paid.
    lookup_ns: ClassVar[float] = SEARCH_LOOKUP_NS

    def _contributions(self, docs: np.ndarray, tf: np.ndarray) -> np.ndarray:
        # The very expressions of PermittedBM25.score_terms, on a subset: equal values.
        return bm25_term_score(self.idf, tf, length_norm(self.doc_len[docs], self.avgdl, self.b), self.k1)

    @cached_property
    def _permitted(self) -> tuple[np.ndarray, np.ndarray]:
        keep = self.mask[self.positions]
        docs = self.positions[keep]
        return docs, self._contributions(docs, self.tf[keep])

    def postings(self) -> tuple[np.ndarray, np.ndarray]:
        return self._permitted  # computed once: MaxScore reads a term's postings more than once

    def lookup(self, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at, found = find(self.positions, candidates)  # candidates are permitted already
        return found, self._contributions(candidates[found], self.tf[at[found]])


class PermittedBM25:
    """BM25 over a shared :class:`~labsrc.lanes.sparse.BM25Index`, with statistics from a mask.

    Parameters
    ----------
    index:
        The one index over every stored document (positions sorted by id).
    cache_size:
        How many distinct masks keep their N_U and avgdl_U.
    """

    def __init__(self, index: BM25Index, *, cache_size: int = 64) -> None:
        self.index = index
        self._doc_len = np.asarray(index.doc_len, dtype=np.float64)
        self._tf = np.asarray(index.tf, dtype=np.float64)
        self._stats: LRUCache[_Universe] = LRUCache(maxsize=cache_size)

    def _check_mask(self, mask: np.ndarray) -> np.ndarray:
        mask = np.asarray(mask)
        if mask.dtype != bool or mask.shape != (self.index.n_docs,):
            raise InvalidArgument(
                f"mask must be a boolean array of shape ({self.index.n_docs},), got {mask.dtype} {mask.shape}"
            )
        return mask

    def _universe(self, mask: np.ndarray) -> _Universe:
        return self._stats.get_or_build(mask_key(mask), lambda: _Universe(universe_stats(self._doc_len, mask)))

    def stats(self, mask: np.ndarray) -> UniverseStats:
        """N_U and avgdl_U for ``mask``, cached by the mask's bits (never by who asked)."""
        return self._universe(self._check_mask(mask)).stats

    @cached_property
    def _term_extremes(self) -> tuple[np.ndarray, np.ndarray]:
        """Each term's largest tf and shortest document: its BM25 bound holds for any universe."""
        index = self.index
        if index.tf.size == 0:
            return np.zeros(0), np.zeros(0)
        starts = np.asarray(index.ptr[:-1])
        return np.maximum.reduceat(self._tf, starts), np.minimum.reduceat(self._doc_len[index.doc_pos], starts)

    def df(self, term: str, mask: np.ndarray) -> int:
        """df_U(t): the permitted documents containing ``term``."""
        t = self.index.vocabulary.get(term)
        if t is None:
            return 0
        lo, hi = self.index.ptr[t], self.index.ptr[t + 1]
        return int(np.count_nonzero(self._check_mask(mask)[self.index.doc_pos[lo:hi]]))

    def score_terms(self, terms: Sequence[str], mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions, scores)`` of every permitted document sharing a term with the query.

        Positions are ascending (id order). A term repeated in the query counts
        once per occurrence, as in :class:`~labsrc.lanes.sparse.BM25Index`.
        """
        check_terms(terms)
        weighted = self._weighted_postings(terms, self._check_mask(mask))
        if weighted is None:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        all_docs, weights = weighted
        if self._dense_pays(all_docs):
            dense = np.bincount(all_docs, weights=weights, minlength=self.index.n_docs)
            positions = np.flatnonzero(dense)  # every contribution is > 0
            return positions, dense[positions]
        return _sum_by_document(all_docs, weights)

    def _dense_pays(self, postings: np.ndarray) -> bool:
        """Many postings: a dense accumulator over every document beats sorting them."""
        return postings.size * 8 > self.index.n_docs

    def _weighted_postings(self, terms: Sequence[str], mask: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The permitted postings of the query's terms and their BM25 contributions, in query order.

        A repeated term comes once per occurrence. Summed with ``bincount``, which
        adds in input order from 0, every document's score is added term by term in
        the query's order: one fixed order, whatever else the index holds, so scores
        are ``==`` an index of the permitted chunks only.
        """
        stats = self.stats(mask)
        if stats.n_docs == 0:
            return None
        index, k1, b, ptr = self.index, self.index.k1, self.index.b, self.index._ptr
        known = [t for term in terms if (t := index.vocabulary.get(term)) is not None]
        if not known:  # query order, one per occurrence: the summation order below
            return None
        # All of the query's postings at once (a few NumPy calls per query, not per term).
        lengths = [ptr[t + 1] - ptr[t] for t in known]
        all_docs = np.concatenate([index._postings[ptr[t] : ptr[t + 1]] for t in known])
        tf = np.concatenate([self._tf[ptr[t] : ptr[t + 1]] for t in known])
        term_of = np.repeat(np.arange(len(known)), lengths)
        if stats.n_docs == index.n_docs:  # everything permitted: df_U is the whole posting list's length
            df = np.asarray(lengths)
        else:
            keep = mask[all_docs]
            all_docs, tf, term_of = all_docs[keep], tf[keep], term_of[keep]
            df = np.bincount(term_of, minlength=len(known))  # df_U of each query term (occurrence)
        live = df > 0
        if not live.any():
            return None
        idf = np.zeros(len(known))
        idf[live] = idf_lucene(df[live], stats.n_docs)
        norm = length_norm(self._doc_len[all_docs], stats.avgdl, b)
        weights = bm25_term_score(idf[term_of], tf, norm, k1)  # elementwise: the same values term by term
        return all_docs, weights

    def search_terms(self, terms: Sequence[str], mask: np.ndarray, top_k: int) -> list[tuple[int, float]]:
        """The ``top_k`` ``(position, score)`` pairs with score > 0, by (score desc, position asc).

        Long queries are pruned with MaxScore, with bounds from each term's largest
        tf and shortest document under this universe's idf and avgdl: the result is
        exactly exhaustive scoring's top ``top_k``.
        """
        top_k = check_top_k(top_k)
        check_terms(terms)
        mask = self._check_mask(mask)
        if self.stats(mask).n_docs == self.index.n_docs:
            # Everything is permitted: the universe's statistics are the index's own, and so are
            # its stored impacts, so the index's answer is this lane's answer (the tests check ==).
            positions, scores = self.index.top_positions(terms, top_k)
            return list(zip(positions.tolist(), scores.tolist()))
        pruned = self._pruned(terms, mask, top_k)
        if pruned is not None:
            return pruned
        weighted = self._weighted_postings(terms, mask)
        if weighted is None:
            return []
        all_docs, weights = weighted
        if self._dense_pays(all_docs):  # the dense scores, ranked without compacting them first
            positions, scores = top_k_entries(np.bincount(all_docs, weights, minlength=self.index.n_docs), top_k)
        else:
            touched, sums = _sum_by_document(all_docs, weights)
            best, scores = top_k_entries(sums, top_k)
            positions = touched[best]
        return list(zip(positions.tolist(), scores.tolist()))

    def _pruned(self, terms: Sequence[str], mask: np.ndarray, top_k: int) -> list[tuple[int, float]] | None:
        index = self.index
        known = [t for term in terms if (t := index.vocabulary.get(term)) is not None]  # one per occurrence
        ptr = index._ptr
        if len(known) < 2 or sum(ptr[t + 1] - ptr[t] for t in known) <= _PRUNE_FROM_POSTINGS:
            return None
        universe = self._universe(mask)
        stats = universe.stats
        if stats.n_docs == 0:
            return []
        dfs = {}  # df_U of each distinct query term
        for t in dict.fromkeys(known):
            df = universe.df.get(t)
            if df is None:
                lo, hi = ptr[t], ptr[t + 1]
                df = int(np.count_nonzero(mask[index._postings[lo:hi]]))
                if hi - lo >= _CACHE_DF_FROM:  # long lists are worth remembering for this mask
                    universe.df[t] = df
            dfs[t] = df
        live = [t for t, df in dfs.items() if df]
        if not live:
            return []
        idf = idf_lucene(np.array([dfs[t] for t in live], dtype=np.int64), stats.n_docs)
        max_tf, min_len = self._term_extremes
        k1, b = index.k1, index.b
        by_term = {}
        for slot, t in enumerate(live):
            lo, hi = ptr[t], ptr[t + 1]
            top = bm25_term_score(idf[slot], max_tf[t], length_norm(min_len[t], stats.avgdl, b), k1)
            by_term[t] = _PermittedTerm(index._postings[lo:hi], self._tf[lo:hi], mask, self._doc_len, idf[slot],
                                        stats.avgdl, k1, b, float(top))  # fmt: skip
        # One entry per occurrence, in query order (the order scores are added in). A repeated
        # term shares one object, so its permitted contributions are computed once.
        scored = [by_term[t] for t in known if t in by_term]
        candidates = maxscore_candidates(scored, top_k, index.n_docs)
        if candidates is None:
            return None
        scores = score_candidates(scored, candidates)
        best = top_k_positions(scores, top_k)
        return list(zip(candidates[best].tolist(), scores[best].tolist()))

    def search(self, query: str, mask: np.ndarray, top_k: int) -> list[tuple[str, float]]:
        """The ``top_k`` ``(id, score)`` pairs for ``query`` within the mask's universe."""
        top_k = check_top_k(top_k)
        if not check_query(query, None).strip():
            return []
        ids = self.index.ids
        return [(ids[p], s) for p, s in self.search_terms(self.index.analyzer(query), mask, top_k)]


def _sum_by_document(docs: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ascending distinct ``docs`` and each one's summed weights, added in input order from 0 (as bincount does)."""
    positions, slot = np.unique(docs, return_inverse=True)
    return positions, np.bincount(slot, weights=weights, minlength=positions.size)
