from __future__ import annotations

import numpy as np
import pytest

from labsrc.errors import InvalidArgument
from labsrc.fusion.mmr import maximal_marginal_relevance, mmr_score

VECTORS = {
    "a": np.array([1.0, 0.0]),
    "a-copy": np.array([1.0, 0.0]),  # a near-duplicate of "a" (here an exact one)
    "b": np.array([0.0, 1.0]),
}
CANDIDATES = [("a", 0.9), ("a-copy", 0.89), ("b", 0.6)]


def test_mmr_score_formula():
    assert mmr_score(0.9, 0.4, 0.7) == pytest.approx(0.7 * 0.9 - 0.3 * 0.4)


def test_lambda_one_keeps_the_relevance_order():
    picked = maximal_marginal_relevance(CANDIDATES, VECTORS, lambda_=1.0, top_k=3)
    assert picked == [("a", pytest.approx(0.9)), ("a-copy", pytest.approx(0.89)), ("b", pytest.approx(0.6))]


def test_a_near_duplicate_gives_way_to_something_new():
    picked = maximal_marginal_relevance(CANDIDATES, VECTORS, lambda_=0.5, top_k=2)
    # After "a": a-copy scores 0.5·0.89 − 0.5·1 = −0.055, b scores 0.5·0.6 − 0.5·0 = 0.3.
    assert picked == [("a", pytest.approx(0.5 * 0.9)), ("b", pytest.approx(0.5 * 0.6))]


def test_mmr_never_adds_a_document_it_was_not_given():
    picked = maximal_marginal_relevance(CANDIDATES, VECTORS, lambda_=0.3, top_k=10)
    assert sorted(d for d, _ in picked) == sorted(d for d, _ in CANDIDATES)


def test_ties_break_on_id():
    vectors = {"y": np.array([1.0, 0.0]), "x": np.array([0.0, 1.0])}
    picked = maximal_marginal_relevance([("y", 0.5), ("x", 0.5)], vectors, lambda_=0.5, top_k=1)
    assert picked[0][0] == "x"


def test_bad_arguments():
    with pytest.raises(InvalidArgument, match="lambda_"):
        maximal_marginal_relevance(CANDIDATES, VECTORS, lambda_=2.0, top_k=1)
    with pytest.raises(InvalidArgument, match="no vector"):
        maximal_marginal_relevance([("zzz", 1.0)], VECTORS, top_k=1)
    with pytest.raises(InvalidArgument, match="more than once"):
        maximal_marginal_relevance([("a", 1.0), ("a", 0.5)], VECTORS, top_k=1)
    with pytest.raises(InvalidArgument, match="top_k"):
        maximal_marginal_relevance(CANDIDATES, VECTORS, top_k=0)
    assert maximal_marginal_relevance([], VECTORS, top_k=3) == []
