"""labsrc.lanes.postings: packed postings, one concatenate and one bincount; dense rows for common terms."""

from __future__ import annotations

import numpy as np
import pytest

from labsrc.lanes import BM25Index
from labsrc.lanes import postings
from labsrc.lanes.postings import TermColumns, dense_row_pays, pack_postings, query_scores, score_columns, term_columns


def test_packing_keeps_positions_and_the_impacts_bits():
    positions = np.array([0, 2, 1])
    impacts = np.array([0.1, 1 / 3, 2.5e-300])
    packed = pack_postings(positions, impacts)
    assert packed.dtype == np.int64 and packed.shape == (2, 3)
    assert packed[0].tolist() == [0, 2, 1]
    assert packed[1].view(np.float64).tolist() == impacts.tolist()  # the same bits: no rounding
    with pytest.raises(ValueError):
        packed[0, 0] = 5  # read-only, like the rest of the index


def test_columns_are_views_made_on_first_use_and_unknown_terms_are_not_kept():
    packed = pack_postings(np.array([0, 1, 1]), np.array([1.0, 2.0, 3.0]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 2, 3], 10)  # a: postings 0-1, b: posting 2
    assert len(columns) == 0
    block = columns["a"]
    assert block.shape == (2, 2) and np.shares_memory(block, packed)
    assert columns["zzz"] is None and "zzz" not in columns  # arbitrary query words cannot grow it
    assert set(columns) == {"a"}


def test_term_columns_keep_query_order_one_block_per_occurrence():
    packed = pack_postings(np.array([0, 1, 1]), np.array([1.0, 2.0, 3.0]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 2, 3], 10)
    blocks = term_columns(columns, ["b", "x", "a"])
    assert [block[0].tolist() for block in blocks] == [[1], [0, 1]]  # the unknown "x" adds nothing
    blocks = term_columns(columns, ["b", "a", "b", "x", "b"])
    assert [block[0].tolist() for block in blocks] == [[1], [0, 1], [1], [1]]
    assert all(np.shares_memory(block, packed) for block in blocks)  # views: nothing copied yet


def test_scores_add_each_terms_impacts_in_query_order():
    # a: doc 0 gets 1.0, doc 1 gets 2.0; b: doc 1 gets 3.0.  "b a" → doc 0: 1.0, doc 1: 3.0 + 2.0.
    packed = pack_postings(np.array([0, 1, 1]), np.array([1.0, 2.0, 3.0]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 2, 3], 10)
    assert score_columns(term_columns(columns, ["b", "a"]), 3).tolist() == [1.0, 5.0, 0.0]
    # "b a b": b counts twice, where it occurs: (3.0 + 2.0) + 3.0.
    assert score_columns(term_columns(columns, ["b", "a", "b"]), 3).tolist() == [1.0, 8.0, 0.0]
    # One term alone: its block is a view of the index, which must stay untouched.
    assert score_columns(term_columns(columns, ["a"]), 3).tolist() == [1.0, 2.0, 0.0]
    assert packed[1].view(np.float64).tolist() == [1.0, 2.0, 3.0]
    assert score_columns([], 2).tolist() == [0.0, 0.0]


def test_a_repeated_term_is_added_where_it_occurs_not_multiplied():
    # "a b a" with impacts a = 0.1, b = 1.1 in one document:
    # (0.1 + 1.1) + 0.1 = 1.3000000000000003, but 2 · 0.1 + 1.1 = 1.3.
    packed = pack_postings(np.array([0, 0]), np.array([0.1, 1.1]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 1, 2], 10)
    assert score_columns(term_columns(columns, ["a", "b", "a"]), 1).tolist() == [(0.1 + 1.1) + 0.1]
    assert (0.1 + 1.1) + 0.1 != 2 * 0.1 + 1.1  # the example tells the two orders apart


def test_the_index_scores_with_packed_postings_as_term_by_term_addition():
    docs = [("d1", "refund laptop laptop"), ("d2", "refund parcel"), ("d3", "laptop parcel parcel refund")]
    index = BM25Index.build(docs)
    query = ["parcel", "laptop", "refund", "laptop"]
    expected = np.zeros(index.n_docs)
    for term in query:  # query order, a repeated term once per occurrence, from 0
        t = index.vocabulary[term]
        lo, hi = index.ptr[t], index.ptr[t + 1]
        expected[index.doc_pos[lo:hi]] += index.impact[lo:hi]
    assert index.score_terms(query).tolist() == expected.tolist()  # ==, not approx


# --- dense rows for terms in a large share of the documents ---------------------------------


def test_a_dense_row_pays_when_its_postings_cost_more_than_a_pass_over_the_documents():
    # 2.0 ns a posting against 0.3 ns a document plus 3,000 ns of calls.
    assert (postings.POSTING_NS, postings.ROW_DOC_NS, postings.ROW_CALLS_NS) == (2.0, 0.3, 3000.0)
    # 5,183 documents (SciFact): 5,183 · 0.3 + 3,000 = 4,554.9 ns, so df > 2,277.45.
    assert not dense_row_pays(2277, 5183) and dense_row_pays(2278, 5183)
    # 100,000 documents: 33,000 ns, so df > 16,500 (16.5% of them).
    assert not dense_row_pays(16_500, 100_000) and dense_row_pays(16_501, 100_000)
    assert not dense_row_pays(8, 8)  # a tiny corpus never pays for the calls


@pytest.fixture
def quarter_rule(monkeypatch):
    """Dense rows for terms in more than a quarter of the documents, so a tiny corpus shows both kinds."""
    monkeypatch.setattr(postings, "dense_row_pays", lambda df, n_docs: df * 4 > n_docs)


def _sequential_scores(postings_in_query_order, n_docs):
    """The reference: every posting added to its document's running score, one at a time, in order."""
    scores = [0.0] * n_docs
    for positions, impacts in postings_in_query_order:
        for doc, impact in zip(positions.tolist(), impacts.tolist()):
            scores[doc] += impact
    return scores


def test_a_term_in_more_than_a_quarter_of_the_documents_gets_a_dense_row(quarter_rule):
    # 8 documents: "a" is in 3 (3 · 4 > 8: dense), "b" in 2 (2 · 4 = 8: a block).
    packed = pack_postings(np.array([1, 4, 6, 2, 6]), np.array([0.5, 0.25, 2.0, 1.0, 3.0]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 3, 5], 8)
    row = columns["a"]
    assert row.tolist() == [0.0, 0.5, 0.0, 0.0, 0.25, 0.0, 2.0, 0.0]  # 0.0 where "a" is absent
    assert not row.flags.writeable and columns.dense_terms == {"a"}
    assert columns["b"].shape == (2, 2) and columns.dense_terms == {"a"}


def test_blocks_and_dense_rows_add_in_query_order_exactly(quarter_rule):
    # Document 0 holds "a" (0.1, dense: 3 of 8 documents) and "b" (1.1, a block).
    # "a b a" must be (0.1 + 1.1) + 0.1 = 1.3000000000000003, not 2 · 0.1 + 1.1 = 1.3.
    packed = pack_postings(np.array([0, 3, 5, 0, 7]), np.array([0.1, 0.2, 0.3, 1.1, 0.7]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 3, 5], 8)
    for query in (["a", "b", "a"], ["b", "a", "b"], ["b", "b", "a", "b", "a"], ["a"], ["b"], []):
        parts = term_columns(columns, query)
        spans = [(0, 3) if term == "a" else (3, 5) for term in query]
        expected = _sequential_scores([(packed[0, lo:hi], packed[1, lo:hi].view(np.float64)) for lo, hi in spans], 8)
        assert score_columns(parts, 8).tolist() == expected, query
        assert query_scores(columns, query, 8).tolist() == expected, query
    assert query_scores(columns, ["a", "b", "a"], 8)[0] == (0.1 + 1.1) + 0.1 != 2 * 0.1 + 1.1
    assert packed[1].view(np.float64).tolist() == [0.1, 0.2, 0.3, 1.1, 0.7]  # the index is untouched
    assert columns["a"].tolist() == [0.1, 0.0, 0.0, 0.2, 0.0, 0.3, 0.0, 0.0]  # and so is the row


@pytest.mark.parametrize("seed", range(5))
def test_an_index_with_dense_rows_scores_exactly_as_posting_by_posting_addition(seed, quarter_rule):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(12)]
    weights = 1.0 / np.arange(1, 13)  # Zipf-like: the first words are in most documents
    draw = weights / weights.sum()
    docs = [(f"d{i:03d}", list(rng.choice(words, size=rng.integers(1, 15), p=draw))) for i in range(60)]
    index = BM25Index.build_from_terms(docs)
    for _ in range(20):
        query = list(rng.choice(words + ["absent"], size=rng.integers(1, 7)))
        expected = _sequential_scores(
            [(index.doc_pos[index.ptr[t] : index.ptr[t + 1]], index.impact[index.ptr[t] : index.ptr[t + 1]])
             for t in (index.vocabulary[w] for w in query if w in index.vocabulary)],
            index.n_docs,
        )  # fmt: skip
        assert index.score_terms(query).tolist() == expected
    assert index._columns.dense_terms  # the common words did take the dense path
