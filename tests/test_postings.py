"""labsrc.lanes.postings: packed postings, gathered with one concatenate and added with one bincount."""

from __future__ import annotations

import numpy as np
import pytest

from labsrc.lanes import BM25Index
from labsrc.lanes.postings import TermColumns, pack_postings, score_columns, term_columns


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
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 2, 3])  # a: postings 0-1, b: posting 2
    assert len(columns) == 0
    block = columns["a"]
    assert block.shape == (2, 2) and np.shares_memory(block, packed)
    assert columns["zzz"] is None and "zzz" not in columns  # arbitrary query words cannot grow it
    assert set(columns) == {"a"}


def test_term_columns_keep_query_order_one_block_per_occurrence():
    packed = pack_postings(np.array([0, 1, 1]), np.array([1.0, 2.0, 3.0]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 2, 3])
    blocks = term_columns(columns, ["b", "x", "a"])
    assert [block[0].tolist() for block in blocks] == [[1], [0, 1]]  # the unknown "x" adds nothing
    blocks = term_columns(columns, ["b", "a", "b", "x", "b"])
    assert [block[0].tolist() for block in blocks] == [[1], [0, 1], [1], [1]]
    assert all(np.shares_memory(block, packed) for block in blocks)  # views: nothing copied yet


def test_scores_add_each_terms_impacts_in_query_order():
    # a: doc 0 gets 1.0, doc 1 gets 2.0; b: doc 1 gets 3.0.  "b a" → doc 0: 1.0, doc 1: 3.0 + 2.0.
    packed = pack_postings(np.array([0, 1, 1]), np.array([1.0, 2.0, 3.0]))
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 2, 3])
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
    columns = TermColumns(packed, {"a": 0, "b": 1}, [0, 1, 2])
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
