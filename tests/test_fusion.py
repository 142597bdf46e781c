import pytest
from factories import make_chunk

import labsrc
from labsrc.fusion.rrf import fuse_ranked_ids, rrf_contribution

A, B, C = make_chunk("a"), make_chunk("b"), make_chunk("c")


def test_contribution_is_one_over_k_plus_rank():
    assert rrf_contribution(1) == 1 / 61
    assert rrf_contribution(3, rrf_k=10, weight=2.0) == 2.0 / 13
    with pytest.raises(labsrc.InvalidArgument, match="1-based"):
        rrf_contribution(0)


def test_spec_figures(data):
    luna, chunks, vectors, day = data.luna, data.chunks, data.vectors, data.eval_date
    exact = labsrc.hybrid_rank("RPL-14", luna, chunks, vectors, day)
    assert [(c.chunk_id, s) for c, s in exact] == [("eu-refurb-v2-rule", 1 / 61)]
    para = labsrc.hybrid_rank("swap a broken reconditioned notebook", luna, chunks, vectors, day)
    assert [(c.chunk_id, s) for c, s in para] == [("eu-refurb-v2-rule", 1 / 61), ("eu-footwear-v1-rule", 1 / 62)]
    shared = labsrc.hybrid_rank("damaged refurbished laptop replacement after delivery", luna, chunks, vectors, day)
    assert [(c.chunk_id, s) for c, s in shared] == [
        ("eu-refurb-v2-rule", 2 / 61),
        ("eu-footwear-v1-rule", 2 / 62),
    ]
    assert shared[0][1] == 2 / 61  # exactly, not approximately


def test_input_order_is_never_trusted():
    lane = [(B, 0.2), (A, 0.9)]  # deliberately not sorted
    fused = labsrc.reciprocal_rank_fusion([lane])
    assert [(c.chunk_id, s) for c, s in fused] == [("a", 1 / 61), ("b", 1 / 62)]


def test_ties_break_on_chunk_id():
    fused = labsrc.reciprocal_rank_fusion([[(B, 1.0)], [(A, 1.0)]])
    assert [(c.chunk_id, s) for c, s in fused] == [("a", 1 / 61), ("b", 1 / 61)]
    # Equal lane scores are ranked by id too before ranks are assigned.
    fused = labsrc.reciprocal_rank_fusion([[(C, 0.5), (B, 0.5)]])
    assert [c.chunk_id for c, _ in fused] == ["b", "c"]


def test_weights_and_rrf_k():
    fused = labsrc.reciprocal_rank_fusion([[(A, 1.0)], [(B, 1.0)]], rrf_k=10, weights=[3.0, 0.3])
    assert [(c.chunk_id, s) for c, s in fused] == [("a", 3.0 / 11), ("b", 0.3 / 11)]


def test_top_k_cut():
    fused = labsrc.reciprocal_rank_fusion([[(A, 3.0), (B, 2.0), (C, 1.0)]], top_k=2)
    assert [c.chunk_id for c, _ in fused] == ["a", "b"]


@pytest.mark.parametrize("rrf_k", [0, -60, float("nan"), True])
def test_bad_rrf_k(rrf_k):
    with pytest.raises(labsrc.InvalidArgument, match="rrf_k"):
        labsrc.reciprocal_rank_fusion([[(A, 1.0)]], rrf_k=rrf_k)


def test_bad_weights_and_duplicates():
    with pytest.raises(labsrc.InvalidArgument, match="weights"):
        labsrc.reciprocal_rank_fusion([[(A, 1.0)]], weights=[1.0, 1.0])
    with pytest.raises(labsrc.InvalidArgument, match="more than once"):
        labsrc.reciprocal_rank_fusion([[(A, 1.0), (A, 0.5)]])
    with pytest.raises(labsrc.InvalidArgument, match="unknown lanes"):
        fuse_ranked_ids({"bm25": [("a", 1.0)]}, weights={"dense": 1.0})


def test_inputs_are_not_mutated():
    lane = [(B, 0.2), (A, 0.9)]
    labsrc.reciprocal_rank_fusion([lane])
    assert lane == [(B, 0.2), (A, 0.9)]


def test_empty_lanes_fuse_to_nothing():
    assert labsrc.reciprocal_rank_fusion([[], []]) == []
