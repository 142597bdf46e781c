"""The sparse lane: BM25 over an inverted index with postings.

The formulas live in :mod:`labsrc.lanes.bm25`. The index stores, for every term, the
documents containing it and the term frequency in each (the *postings*), so a
query touches only the documents that share a term with it, never the whole
corpus.

N, n_t and avgdl are those of the documents the index was built from. The
retrievers keep one index over every stored chunk and score it with the
permitted universe's statistics per request (:mod:`labsrc.lanes.permitted`),
so a chunk the caller cannot see never shifts an idf or the average length
(spec, "Statistics leak"). The lesson-level :func:`bm25_rank` indexes exactly
the chunks it is given, which is the same thing for a small universe.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from operator import itemgetter
from pathlib import Path

import numpy as np

from labsrc.cache import LRUCache
from labsrc.errors import InvalidArgument
from labsrc.lanes.analysis import Analyzer, lesson_analyzer
from labsrc.lanes.bm25 import (
    DEFAULT_B,
    DEFAULT_K1,
    TermExplanation,
    bm25_term_score,
    check_pairs,
    check_params,
    check_terms,
    idf_lucene,
    length_norm,
)
from labsrc.lanes.index_files import read_index, write_index
from labsrc.lanes.maxscore import StoredTerm, exhaustive_ns, maxscore_candidates, score_candidates
from labsrc.lanes.postings import TermColumns, pack_postings, query_scores, term_columns
from labsrc.ranking import check_query, check_top_k, top_k_entries
from labsrc.records.checks import check_chunks
from labsrc.records.policy import PolicyChunk, chunk_lookup

__all__ = ["BM25Index", "bm25_rank", "explain", "sparse_index_for"]

#: Below this many postings a query is scored exhaustively: pruning's bookkeeping would cost more.
_PRUNE_FROM_POSTINGS = 20_000
#: Below this many documents one exhaustive pass (common terms as dense rows) beat MaxScore. Measured
#: on Zipf text at top-10, µs per query exhaustive / pruned: 100,000 documents 196 / 350;
#: 300,000: 865 / 887; 1,000,000: 3,092 / 1,883.
_PRUNE_FROM_DOCS = 250_000


class BM25Index:
    """An immutable BM25 index over ``(id, text)`` pairs.

    Layout (compressed sparse rows, one row per term): the postings of term ``t``
    are ``doc_pos[ptr[t]:ptr[t+1]]`` with counts ``tf[ptr[t]:ptr[t+1]]``. Documents
    are stored sorted by id, so a document's position doubles as its tie-break key.

    Each posting also carries its precomputed *impact*, the term's whole BM25
    contribution to that document, ``bm25_term_score(idf[t], tf, norm[d], k1)``.
    Nothing in it depends on the query, so a query only adds impacts: one gather
    of its terms' packed postings and one scatter-add (:mod:`labsrc.lanes.postings`;
    a term in a large share of the documents is added as a dense row instead),
    then a partial sort for the top k. From 250,000 documents, queries with many
    postings are pruned with MaxScore (:mod:`labsrc.lanes.maxscore`). The arithmetic
    is the same expression the readable reference evaluates, so the scores match
    :func:`brute_force_bm25` (the tests check it).
    """

    def __init__(
        self,
        ids: Sequence[str],
        doc_len: np.ndarray,
        vocabulary: dict[str, int],
        ptr: np.ndarray,
        doc_pos: np.ndarray,
        tf: np.ndarray,
        *,
        analyzer: Callable[[str], list[str]],
        k1: float,
        b: float,
        impact: np.ndarray | None = None,
        packed: np.ndarray | None = None,
    ) -> None:
        check_params(k1, b)
        self.ids: tuple[str, ...] = tuple(ids)
        self.doc_len = doc_len
        self.vocabulary = vocabulary
        self.ptr = ptr
        self.tf = tf
        self.analyzer = analyzer
        self.k1 = float(k1)
        self.b = float(b)
        self.n_docs = len(self.ids)
        self.avgdl = float(doc_len.mean()) if self.n_docs else 0.0
        df = np.diff(ptr)
        self.idf = idf_lucene(df, self.n_docs) if self.n_docs else np.zeros(0)
        # The length norm depends only on the document; compute it once per index.
        self.norm = length_norm(doc_len, self.avgdl, self.b) if self.avgdl > 0 else np.ones(self.n_docs)
        # Query-independent impacts, one per posting: idf(t) · saturated tf (see the class docstring).
        # A saved index passes its stored postings (memory-mapped) instead of recomputing them.
        if packed is None:
            if impact is None:
                impact = bm25_term_score(np.repeat(self.idf, df), tf, self.norm[doc_pos], self.k1)
            elif impact.shape != tf.shape:
                raise InvalidArgument(f"impact has shape {impact.shape}; the postings have {tf.shape}")
            packed = pack_postings(doc_pos, impact)
        elif packed.shape != (2, tf.size) or packed.dtype != np.int64:
            raise InvalidArgument(f"packed postings must be int64 of shape (2, {tf.size}), not {packed.dtype} {packed.shape}")
        # Documents and impacts side by side (labsrc.lanes.postings); the public arrays are its rows.
        self._packed = packed
        self.doc_pos = self._postings = packed[0]
        self.impact = packed[1].view(np.float64)
        # Plain-Python copies for the per-query hot path: indexing a list is cheaper than a NumPy scalar.
        self._ptr = [int(x) for x in ptr]
        self._columns = TermColumns(packed, vocabulary, self._ptr, self.n_docs)
        # Each term's largest contribution: MaxScore's upper bound (every term has a posting).
        self._bounds = np.maximum.reduceat(self.impact, ptr[:-1]).tolist() if self.impact.size else []

    @cached_property
    def _positions(self) -> dict[str, int]:
        # Only explain() needs id -> position; built on first use, so loading stays fast.
        return {doc_id: i for i, doc_id in enumerate(self.ids)}

    # --- building ---------------------------------------------------------------

    @classmethod
    def build(
        cls,
        pairs: Iterable[tuple[str, str]],
        *,
        analyzer: Callable[[str], list[str]] = lesson_analyzer,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> BM25Index:
        """Index ``(id, text)`` pairs. Ids must be unique."""
        check_params(k1, b)
        return cls.build_from_terms(
            ((doc_id, analyzer(text)) for doc_id, text in check_pairs(pairs, "text")), analyzer=analyzer, k1=k1, b=b
        )

    @classmethod
    def build_from_terms(
        cls,
        pairs: Iterable[tuple[str, Sequence[str]]],
        *,
        analyzer: Callable[[str], list[str]] = lesson_analyzer,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
    ) -> BM25Index:
        """Index ``(id, terms)`` pairs whose text is already analysed. Ids must be unique.

        ``analyzer`` must be the one that produced the terms: :meth:`search` uses
        it on query text. Benchmarks and oracles use this to give every library
        the very same token lists.
        """
        check_params(k1, b)
        docs = sorted(check_pairs(pairs, "terms"), key=lambda pair: pair[0])
        for (left, _), (right, _) in zip(docs, docs[1:]):
            if left == right:
                raise InvalidArgument(f"duplicate document id {left!r} in BM25Index.build")
        vocabulary: dict[str, int] = {}
        flat: list[int] = []
        doc_len = np.zeros(len(docs), dtype=np.float64)
        for pos, (doc_id, terms) in enumerate(docs):
            # Term ids in order of first occurrence (corpus order, then document order).
            flat.extend([vocabulary.setdefault(term, len(vocabulary)) for term in terms])
            doc_len[pos] = len(terms)
        n_docs = max(len(docs), 1)
        term_arr = np.asarray(flat, dtype=np.int64)
        doc_arr = np.repeat(np.arange(len(docs), dtype=np.int64), doc_len.astype(np.int64))
        # One key per (term, document) occurrence; unique() sorts them by term, then
        # document, and counts repeats, which are exactly the term frequencies.
        keys, counts = np.unique(term_arr * n_docs + doc_arr, return_counts=True)
        ptr = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // n_docs, minlength=len(vocabulary)), out=ptr[1:])
        return cls(
            [doc_id for doc_id, _ in docs],
            doc_len,
            vocabulary,
            ptr,
            keys % n_docs,
            counts.astype(np.float64),
            analyzer=analyzer,
            k1=k1,
            b=b,
        )

    # --- files (labsrc.lanes.persistence) ---------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the index to the folder ``path``, atomically; the old save stays loadable until then."""
        return write_index(self, path)

    @classmethod
    def load(cls, path: str | Path, mmap: bool = False, *, analyzer: Analyzer | None = None) -> BM25Index:
        """An index written by :meth:`save`, checked; ``mmap=True`` maps its arrays read-only.

        ``analyzer``: the one it was saved with, needed when its token pattern is not the lab's own."""
        return cls(**read_index(path, mmap=bool(mmap), analyzer=analyzer))

    # --- statistics ---------------------------------------------------------------

    def df(self, term: str) -> int:
        """n_t: the number of indexed documents containing ``term``."""
        t = self.vocabulary.get(term)
        return 0 if t is None else int(self.ptr[t + 1] - self.ptr[t])

    def term_idf(self, term: str) -> float:
        """idf of ``term`` in this index (the formula applies to unseen terms too: n_t = 0)."""
        return float(idf_lucene(self.df(term), self.n_docs))

    # --- scoring ---------------------------------------------------------------

    def query_terms(self, query: str) -> Counter[str]:
        """The analysed query as term → count, in first-occurrence order."""
        return Counter(self.analyzer(query))

    def score_all(self, query: str) -> np.ndarray:
        """BM25 score of every indexed document (by position); 0 where no term matches.

        Only the postings of the query's terms are read. A term repeated in the
        query counts once per occurrence (Robertson's qtf with k3 → ∞, as in Lucene),
        added where it occurs, as :func:`~labsrc.lanes.bm25.brute_force_bm25` adds.
        """
        return self.score_terms(self.analyzer(check_query(query, None)))

    def score_terms(self, terms: Sequence[str]) -> np.ndarray:
        """:meth:`score_all` for a query that is already analysed into ``terms``.

        One gather and one ``bincount`` for all of the query's postings: the
        postings and impacts of its terms are concatenated in query order (a
        repeated term once per occurrence), and ``bincount`` adds them in that
        order from 0, so each document's score is the same sum, in the same order,
        as adding term by term. A very common term is added as a dense row, in its
        place in that order (:func:`~labsrc.lanes.postings.score_columns`).
        """
        check_terms(terms)
        return query_scores(self._columns, terms, self.n_docs)

    def _slices(self, terms: Sequence[str]) -> list[tuple[int, int, int]]:
        """``(term id, start, end)`` of each known query term, one per occurrence, in query order."""
        ptr, vocabulary = self._ptr, self.vocabulary
        return [(t, ptr[t], ptr[t + 1]) for term in terms if (t := vocabulary.get(term)) is not None]

    def search(self, query: str, top_k: int) -> list[tuple[str, float]]:
        """The ``top_k`` ``(id, score)`` pairs with score > 0, by (score desc, id asc)."""
        top_k = check_top_k(top_k)
        if not check_query(query, None).strip() or self.n_docs == 0:
            return []
        return self._pairs(*top_k_entries(self.score_all(query), top_k))

    def search_terms(self, terms: Sequence[str], top_k: int) -> list[tuple[str, float]]:
        """:meth:`search` for a query that is already analysed into ``terms``.

        Large queries are pruned with MaxScore (:mod:`labsrc.lanes.maxscore`):
        the result is exactly exhaustive scoring's top ``top_k``, ids and scores.
        """
        return self._pairs(*self.top_positions(terms, top_k))

    def top_positions(self, terms: Sequence[str], top_k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search_terms` as two arrays: the documents' positions (index into :attr:`ids`) and scores.

        This is what the ids are looked up from; batch evaluation and the
        benchmark use it directly, as bm25s returns positions rather than ids.
        """
        top_k = check_top_k(top_k)
        check_terms(terms)
        return self._top_arrays(terms, top_k)

    def top_positions_many(
        self, queries: Iterable[Sequence[str]], top_k: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top_positions` for each analysed query in ``queries``, in order (the arguments checked once)."""
        top_k = check_top_k(top_k)
        queries = list(queries)
        for i, terms in enumerate(queries):
            check_terms(terms, f"query {i}")
        return [self._top_arrays(terms, top_k) for terms in queries]

    def _top_arrays(self, terms: Sequence[str], top_k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.n_docs == 0:
            return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float64)
        if self.n_docs >= _PRUNE_FROM_DOCS:
            slices = self._slices(terms)
            if sum(hi - lo for _, lo, hi in slices) > _PRUNE_FROM_POSTINGS:
                lists = self._stored_terms(slices, terms)
                every_doc_ns = exhaustive_ns(lists, self.n_docs)
                candidates = maxscore_candidates(lists, top_k, self.n_docs, exhaustive_ns=every_doc_ns)
                if candidates is not None:
                    positions, scores = top_k_entries(score_candidates(lists, candidates), top_k)
                    return candidates[positions], scores
        return top_k_entries(query_scores(self._columns, terms, self.n_docs), top_k)

    def _stored_terms(self, slices: list[tuple[int, int, int]], terms: Sequence[str]) -> list[StoredTerm]:
        """Each known term's postings, contributions, their maximum and dense row if any (one per occurrence)."""
        postings, impacts, bounds = self._postings, self.impact, self._bounds
        rows = [part if part.ndim == 1 else None for part in term_columns(self._columns, terms)]
        return [StoredTerm(postings[lo:hi], impacts[lo:hi], bounds[t], row) for (t, lo, hi), row in zip(slices, rows)]

    def _term_lists(self, terms: Sequence[str]) -> list[StoredTerm]:
        return self._stored_terms(self._slices(terms), terms)

    def _pairs(self, positions: np.ndarray, scores: np.ndarray) -> list[tuple[str, float]]:
        if positions.size == 1:
            return [(self.ids[int(positions[0])], float(scores[0]))]
        # itemgetter(*many) looks all the ids up in one call (it returns a tuple for two or more).
        return list(zip(itemgetter(*positions.tolist())(self.ids), scores.tolist())) if positions.size else []

    def explain(self, query: str, doc_id: str) -> list[TermExplanation]:
        """Each query term's idf, tf, length norm and contribution to ``doc_id``'s score.

        The contributions add up to the document's score.
        """
        check_query(query, None)
        pos = self._positions.get(doc_id)
        if pos is None:
            raise InvalidArgument(f"{doc_id!r} is not in this index (is it outside the caller's universe?)")
        rows = []
        for term, query_count in self.query_terms(query).items():
            t = self.vocabulary.get(term)
            tf = 0
            if t is not None:
                lo, hi = self.ptr[t], self.ptr[t + 1]
                hit = np.searchsorted(self.doc_pos[lo:hi], pos)
                if hit < hi - lo and self.doc_pos[lo + hit] == pos:
                    tf = int(self.tf[lo + hit])
            idf = self.term_idf(term)
            norm = float(self.norm[pos])
            contribution = query_count * float(bm25_term_score(idf, tf, norm, self.k1)) if tf else 0.0
            rows.append(
                TermExplanation(term, query_count, idf, tf, int(self.doc_len[pos]), self.avgdl, norm, contribution)
            )
        return rows


# --- the lane over policy chunks -----------------------------------------------------

_INDEX_CACHE: LRUCache[BM25Index] = LRUCache(maxsize=16)


def sparse_index_for(
    chunks: Sequence[PolicyChunk],
    *,
    analyzer: Analyzer | Callable[[str], list[str]] = lesson_analyzer,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
) -> BM25Index:
    """The BM25 index of exactly these chunks, built once and reused.

    Cached by the chunks' values: the same permitted universe (same caller and
    date, same corpus) reuses its postings across queries, and any change to a
    chunk is a different key.
    """
    universe = tuple(chunks)
    key = ("bm25", universe, analyzer, float(k1), float(b))
    return _INDEX_CACHE.get_or_build(
        key, lambda: BM25Index.build(((c.chunk_id, c.text) for c in universe), analyzer=analyzer, k1=k1, b=b)
    )


def bm25_rank(
    query: str,
    chunks: Sequence[PolicyChunk],
    top_k: int = 2,
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    *,
    analyzer: Analyzer | Callable[[str], list[str]] = lesson_analyzer,
) -> list[tuple[PolicyChunk, float]]:
    """Rank ``chunks`` (already the permitted universe) for ``query`` with BM25.

    Returns ``(chunk, score)`` pairs with score > 0, sorted by (score desc,
    chunk_id asc), at most ``top_k``.
    """
    top_k = check_top_k(top_k)
    if not check_query(query, None).strip():
        return []
    lookup = chunk_lookup(check_chunks(chunks))
    index = sparse_index_for(list(lookup.values()), analyzer=analyzer, k1=k1, b=b)
    return [(lookup[doc_id], score) for doc_id, score in index.search(query, top_k)]


def explain(
    query: str,
    chunk_id: str,
    chunks: Sequence[PolicyChunk],
    k1: float = DEFAULT_K1,
    b: float = DEFAULT_B,
    *,
    analyzer: Analyzer | Callable[[str], list[str]] = lesson_analyzer,
) -> list[TermExplanation]:
    """Per-term BM25 breakdown of ``chunk_id``'s score within the universe ``chunks``."""
    lookup = chunk_lookup(check_chunks(chunks))
    return sparse_index_for(list(lookup.values()), analyzer=analyzer, k1=k1, b=b).explain(query, chunk_id)
