"""labsrc.lanes.maxscore and the pruned BM25Index.search_terms: exactly exhaustive scoring's top k."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labsrc.lanes import BM25Index, sparse
from labsrc.lanes.maxscore import _SLACK, StoredTerm, _kth_largest, _survivors, maxscore_candidates, score_candidates
from labsrc.ranking import block_max_threshold, top_k_entries, top_k_positions


def exhaustive_top(index: BM25Index, terms: list[str], k: int) -> list[tuple[str, float]]:
    scores = index.score_terms(terms)
    order = np.lexsort((np.arange(scores.size), -scores))[:k]
    return [(index.ids[p], float(scores[p])) for p in order if scores[p] > 0]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.sampled_from([1, 3, 10, 50]), words=st.integers(3, 8))
def test_pruned_search_equals_exhaustive_scoring(seed, k, words):
    rng = np.random.default_rng(seed)
    # A Zipf corpus large enough to prune: common words in most documents, rare ones in few.
    vocabulary = [f"w{i}" for i in range(400)]
    ranks = np.minimum(rng.zipf(1.3, size=(3000, 20)), 400) - 1
    docs = [[vocabulary[r] for r in row[: rng.integers(5, 20)]] for row in ranks]
    index = BM25Index.build_from_terms(((f"d{i:05d}", d) for i, d in enumerate(docs)), analyzer=str.split)
    query = [vocabulary[0]] + [vocabulary[r] for r in np.minimum(rng.zipf(1.3, size=words), 400) - 1]
    lists = index._term_lists(query)
    assert sum(term.positions.size for term in lists) > 1000  # the common words make the postings long
    candidates = maxscore_candidates(lists, k, index.n_docs)
    truth = exhaustive_top(index, query, k)
    if candidates is not None:
        scores = score_candidates(lists, candidates)
        best = top_k_positions(scores, k)
        assert [(index.ids[p], float(s)) for p, s in zip(candidates[best], scores[best])] == truth
        assert set(truth) <= {(index.ids[p], float(s)) for p, s in zip(candidates, scores)}
    assert index.search_terms(query, k) == truth
    # The index prunes only from 250,000 documents; lowered, this corpus takes the pruned path.
    with mock.patch.object(sparse, "_PRUNE_FROM_DOCS", 0), mock.patch.object(sparse, "_PRUNE_FROM_POSTINGS", 500):
        with mock.patch.object(sparse, "maxscore_candidates", wraps=maxscore_candidates) as spy:
            assert index.search_terms(query, k) == truth
            positions, scores = index.top_positions(query, k)
        assert spy.called
    assert [(index.ids[p], s) for p, s in zip(positions.tolist(), scores.tolist())] == truth


def test_common_words_are_not_scanned():
    # Two rare terms, one word in every document: the rare ones decide, the common one is looked up.
    docs = [["common"] * 3 + (["rare"] if i % 500 == 0 else []) + (["odd"] if i % 700 == 0 else []) for i in range(5000)]
    index = BM25Index.build_from_terms(((f"d{i:05d}", d) for i, d in enumerate(docs)), analyzer=str.split)
    lists = index._term_lists(["rare", "odd", "common"])
    assert [term.row is not None for term in lists] == [False, False, True]  # the common word has a dense row
    candidates = maxscore_candidates(lists, 3, index.n_docs)
    assert candidates is not None and candidates.size <= 20  # not 5,000
    assert index.search_terms(["rare", "odd", "common"], 3) == exhaustive_top(index, ["rare", "odd", "common"], 3)


def test_a_dense_row_looks_candidates_up_as_the_binary_search_does():
    rng = np.random.default_rng(4)
    positions = np.sort(rng.choice(10_000, 3_000, replace=False))
    contributions = rng.random(3_000) + 0.1
    row = np.zeros(10_000)
    row[positions] = contributions
    candidates = np.sort(rng.choice(10_000, 800, replace=False))
    searched = StoredTerm(positions, contributions, float(contributions.max()))
    gathered = StoredTerm(positions, contributions, float(contributions.max()), row)
    (found_a, values_a), (found_b, values_b) = searched.lookup(candidates), gathered.lookup(candidates)
    assert found_a.tolist() == found_b.tolist() and values_a.tolist() == values_b.tolist()
    assert found_a.sum() == np.isin(candidates, positions).sum() > 0


def test_block_max_threshold_is_a_lower_bound_on_the_kth_score():
    rng = np.random.default_rng(3)
    scores = rng.random(10_000)
    for k in (1, 10, 100):
        tau = block_max_threshold(scores, k)
        kth = np.sort(scores)[-k]
        assert tau <= kth
        assert np.count_nonzero(scores >= tau) < 40 * k  # few candidates survive
    assert block_max_threshold(scores[:100], 10) == float("-inf")  # too few scores for blocks


@pytest.mark.parametrize("size", [7, 600, 20_000])
def test_top_k_positions_breaks_ties_by_position(size):
    scores = np.round(np.random.default_rng(size).random(size), 2)  # many ties
    scores[::3] = 0.0
    for k in (1, 5, 60):
        expected = [p for p in np.lexsort((np.arange(size), -scores)) if scores[p] > 0][:k]
        assert top_k_positions(scores, k).tolist() == expected


def test_top_k_entries_returns_the_scores_of_the_positions():
    scores = np.array([0.5, 0.9, 0.0, 0.9, -1.0, 0.7])
    positions, values = top_k_entries(scores, 3)
    assert positions.tolist() == [1, 3, 5] and values.tolist() == [0.9, 0.9, 0.7]
    positions, values = top_k_entries(scores[:0], 3)
    assert positions.size == values.size == 0


class CountingTerm:
    """A ScoredTerm that counts how often its postings are read in full."""

    reads = 0
    lookup_ns = 30.0

    def __init__(self, position: int, contribution: float) -> None:
        self.positions = np.array([position], dtype=np.int64)
        self.contributions = np.array([contribution])
        self.bound = contribution

    def postings(self):
        CountingTerm.reads += 1
        return self.positions, self.contributions

    def lookup(self, candidates):
        found = np.isin(candidates, self.positions)
        return found, np.full(int(found.sum()), self.contributions[0])


def test_a_long_query_reads_each_terms_postings_a_linear_number_of_times():
    # Issue 22: "refurbished laptops " * n fell back to growing the essential set one term at a
    # time, merging `count` terms at each step: n = 4,000 took 9.6 s, 8,000 took 36 s. Every term
    # here has one posting, fewer than top_k, so the cheap bound finds nothing and the fallback runs.
    n = 600
    terms = [CountingTerm(i % 7, 1.0 + (i % 3)) for i in range(n)]
    CountingTerm.reads = 0
    candidates = maxscore_candidates(terms, 2, 10)
    # Growing one term at a time read n²/2 = 180,000 postings lists; doubling reads fewer than 3n.
    assert CountingTerm.reads < 3 * n
    scores = score_candidates(terms, candidates) if candidates is not None else None
    exhaustive = np.zeros(10)
    for term in terms:
        exhaustive[term.positions] += term.contributions
    truth = top_k_positions(exhaustive, 2)
    if candidates is not None:
        assert candidates[top_k_positions(scores, 2)].tolist() == truth.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_survivors_in_one_pass_are_the_plain_passes_survivors(seed):
    # θ is the k-th largest partial sum; a survivor has partial + remaining >= θ·(1 − slack). The one-pass
    # version picks entries above a block-max cut first; it must find the very same θ, entries and values.
    rng = np.random.default_rng(seed)
    partial = np.zeros(50_000)
    seen = rng.choice(partial.size, 8_000, replace=False)
    partial[seen] = np.round(rng.random(seen.size) * 5, 1 + seed % 3)  # rounded: many ties at θ
    for k in (1, 10, 100):
        theta = _kth_largest(partial, k)
        for remaining in (0.0, theta * 0.01, theta * 0.5, theta * (1 - 1e-10), theta, theta * 2):
            plain = np.flatnonzero(partial + remaining >= theta * (1 - _SLACK))
            found = _survivors(partial, remaining, k)
            if not theta > remaining:
                assert found is None
                continue
            got_theta, keep, values = found
            assert got_theta == theta
            assert keep.tolist() == plain.tolist() and values.tolist() == partial[plain].tolist()
    # Too few entries for blocks: the plain passes themselves.
    assert _survivors(np.array([3.0, 1.0, 2.0]), 0.5, 2)[1].tolist() == [0, 2]


def test_survivors_too_costly_to_refine_are_scored_exhaustively():
    # A rare word picks a few hundred candidates; three common words with dense rows stay non-essential.
    rng = np.random.default_rng(7)
    docs = [["a"] * int(rng.integers(1, 4)) + ["b", "c"] + (["rare"] * 3 if i % 20 == 0 else []) for i in range(6000)]
    index = BM25Index.build_from_terms(((f"d{i:05d}", d) for i, d in enumerate(docs)), analyzer=str.split)
    query = ["rare", "a", "b", "c"]
    lists = index._term_lists(query)
    free = maxscore_candidates(lists, 5, index.n_docs)
    assert free is not None and 5 < free.size <= 300  # pruned: the rare word's 300 documents at most
    refine_ns = 300 * 3 * lists[1].lookup_ns  # an upper bound on what refining them costs
    assert maxscore_candidates(lists, 5, index.n_docs, exhaustive_ns=refine_ns * 100).tolist() == free.tolist()
    assert maxscore_candidates(lists, 5, index.n_docs, exhaustive_ns=1.0) is None  # cheaper to score every document
    # Through the index: told that every document is cheap to score, it scores them all, with the same answer.
    truth = exhaustive_top(index, query, 5)
    with mock.patch.object(sparse, "_PRUNE_FROM_DOCS", 0), mock.patch.object(sparse, "_PRUNE_FROM_POSTINGS", 500):
        assert index.search_terms(query, 5) == truth
        with mock.patch.object(sparse, "exhaustive_ns", return_value=1.0), \
                mock.patch.object(sparse, "query_scores", wraps=sparse.query_scores) as every_document:
            assert index.search_terms(query, 5) == truth
        assert every_document.called
