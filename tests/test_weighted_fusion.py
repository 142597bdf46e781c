import pytest

import labsrc
from labsrc.fusion.weighted import adaptive_fusion_params, weighted_rrf
from labsrc.patterns import ensemble_retriever


def test_one_chunk_first_in_both_lanes_at_k60_weights_1_scores_2_over_61():
    fused = weighted_rrf({"bm25": [("a", 3.2)], "dense": [("a", 0.9)]}, {"bm25": 1.0, "dense": 1.0}, 60)
    assert fused == [("a", pytest.approx(2 / 61))]


def test_weighted_sum_of_reciprocal_ranks():
    bm25 = [("a", 5.0), ("b", 4.0), ("c", 1.0)]
    dense = [("c", 0.9), ("a", 0.5)]
    fused = dict(weighted_rrf({"bm25": bm25, "dense": dense}, {"bm25": 0.6, "dense": 0.4}))
    assert fused["a"] == pytest.approx(0.6 / 61 + 0.4 / 62)
    assert fused["b"] == pytest.approx(0.6 / 62)
    assert fused["c"] == pytest.approx(0.6 / 63 + 0.4 / 61)


def test_list_form_and_top_k():
    lanes = [[("a", 1.0), ("b", 0.5)], [("b", 1.0)]]
    # b: 3.0 / (10 + 2) + 0.3 / (10 + 1) = 0.2773 beats a: 3.0 / (10 + 1) = 0.2727
    assert weighted_rrf(lanes, [3.0, 0.3], rrf_k=10, top_k=1) == [("b", pytest.approx(3.0 / 12 + 0.3 / 11))]
    assert weighted_rrf(lanes, [3.0, 0.3], rrf_k=10)[1] == ("a", pytest.approx(3.0 / 11))


def test_every_lane_needs_a_weight():
    with pytest.raises(labsrc.InvalidArgument, match="no weight"):
        weighted_rrf({"bm25": [], "dense": []}, {"bm25": 1.0})
    with pytest.raises(labsrc.InvalidArgument, match="2 weights for 1"):
        weighted_rrf([[("a", 1.0)]], [1.0, 1.0])


def test_adaptive_params():
    assert adaptive_fusion_params(False) == (60, 1.0, 1.0)
    assert adaptive_fusion_params(True) == (10, 3.0, 0.3)
    rrf_k, bm25_weight, dense_weight = adaptive_fusion_params(True)
    assert (rrf_k, bm25_weight, dense_weight) == (10, 3.0, 0.3)
    with pytest.raises(labsrc.InvalidArgument):
        adaptive_fusion_params("yes")  # type: ignore[arg-type]


def test_ensemble_returns_real_fused_scores_in_relevance_order(data):
    retriever = ensemble_retriever(data.chunks, data.vectors)
    assert (retriever.k1, retriever.b) == (0.5, 0.75)
    result = retriever.search("damaged refurbished laptop replacement after delivery", data.luna, data.eval_date, top_k=2)
    scores = [score for _, score in result.fused]
    assert len(result.fused) == 2
    assert scores == sorted(scores, reverse=True)
    assert all(score > 0 for score in scores)  # never a placeholder such as -1
    ranks = result.lane_ranks(result.fused[0][0].chunk_id)
    expected = (0.6 / (60 + ranks["bm25"]) if ranks["bm25"] else 0) + (0.4 / (60 + ranks["dense"]) if ranks["dense"] else 0)
    assert scores[0] == pytest.approx(expected)
    # The semantic lane reports real cosine similarities.
    for chunk, cosine in result.dense:
        assert 0 < cosine <= 1


def test_ensemble_k1_changes_bm25_scores(data):
    permitted = labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date)
    default = dict((c.chunk_id, s) for c, s in labsrc.bm25_rank("damaged laptops", permitted, 3))
    half = dict((c.chunk_id, s) for c, s in labsrc.bm25_rank("damaged laptops", permitted, 3, k1=0.5))
    assert default.keys() == half.keys()
    assert all(default[k] != pytest.approx(half[k]) for k in default)
