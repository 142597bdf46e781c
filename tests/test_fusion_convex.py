"""Convex (min-max normalised) score fusion, added to labsrc.fusion.rrf for the BEIR track."""

from __future__ import annotations

import pytest

from labsrc.errors import InvalidArgument
from labsrc.fusion import check_alpha, convex_fusion, convex_score, min_max_normalise


def test_min_max_normalise_spans_zero_to_one():
    assert min_max_normalise({"a": 9.0, "b": 5.0, "c": 1.0}) == pytest.approx({"a": 1.0, "b": (5 - 1) / (9 - 1), "c": 0.0})
    assert min_max_normalise({}) == {}


def test_min_max_normalise_of_equal_scores_is_one():
    assert min_max_normalise({"a": 0.3, "b": 0.3}) == {"a": 1.0, "b": 1.0}


def test_min_max_normalise_does_not_mutate_its_input():
    scores = {"a": 2.0, "b": 1.0}
    min_max_normalise(scores)
    assert scores == {"a": 2.0, "b": 1.0}


def test_convex_score_formula():
    assert convex_score(dense=0.8, sparse=0.2, alpha=0.25) == pytest.approx(0.25 * 0.8 + 0.75 * 0.2)


def test_convex_fusion_over_the_union_of_both_lanes():
    sparse = [("a", 12.0), ("b", 8.0), ("c", 4.0)]
    dense = [("d", 1.0), ("b", 0.75), ("a", 0.5)]
    fused = convex_fusion(sparse, dense, alpha=0.5)
    # sparse: a 1, b 0.5, c 0; dense: d 1, b 0.5, a 0; a missing document gets 0 from that lane.
    assert fused == [
        ("a", pytest.approx(0.5 * 0 + 0.5 * 1)),
        ("b", pytest.approx(0.5 * 0.5 + 0.5 * 0.5)),
        ("d", pytest.approx(0.5 * 1 + 0.5 * 0)),
        ("c", pytest.approx(0.0)),
    ]  # a, b and d tie at 0.5: ids ascending


def test_alpha_zero_and_one_are_the_single_lanes():
    sparse = [("a", 3.0), ("b", 2.0)]
    dense = [("b", 0.9), ("c", 0.1)]
    # A document one lane did not return scores 0 there, tying with that lane's last candidate.
    assert convex_fusion(sparse, dense, alpha=0.0) == [("a", 1.0), ("b", 0.0), ("c", 0.0)]
    assert convex_fusion(sparse, dense, alpha=1.0) == [("b", 1.0), ("a", 0.0), ("c", 0.0)]


def test_convex_fusion_ignores_input_order_and_cuts_at_top_k():
    sparse = [("b", 1.0), ("a", 3.0)]
    dense = [("a", 0.2), ("b", 0.4)]
    assert convex_fusion(sparse, dense, 0.3) == convex_fusion(list(reversed(sparse)), list(reversed(dense)), 0.3)
    assert [d for d, _ in convex_fusion(sparse, dense, 0.3, top_k=1)] == ["a"]


@pytest.mark.parametrize("alpha", [-0.1, 1.5, True, "0.5", float("nan")])
def test_alpha_must_be_in_the_unit_interval(alpha):
    with pytest.raises(InvalidArgument, match=r"alpha must be a number in \[0, 1\]"):
        check_alpha(alpha)


def test_duplicate_ids_in_a_lane_are_refused():
    with pytest.raises(InvalidArgument, match="sparse lane contains the same id more than once"):
        convex_fusion([("a", 1.0), ("a", 2.0)], [], 0.5)
