import pytest

import labsrc


def test_budget_values():
    assert dict(labsrc.RETRIEVAL_BUDGET_MS) == {"authorize": 10, "bm25": 12, "dense": 40, "fusion": 8}
    with pytest.raises(TypeError):
        labsrc.RETRIEVAL_BUDGET_MS["dense"] = 100  # type: ignore[index]


def test_healthy_timings_exceed_nothing():
    assert labsrc.exceeded_retrieval_budgets({"authorize": 2, "bm25": 4, "dense": 11, "fusion": 1}) == []


def test_missing_stage_is_exceeded():
    assert labsrc.exceeded_retrieval_budgets({"authorize": 2, "bm25": 4, "fusion": 1}) == ["dense"]


def test_over_budget_and_boundary():
    timings = {"authorize": 10, "bm25": 12.0001, "dense": 40, "fusion": float("nan")}
    assert labsrc.exceeded_retrieval_budgets(timings) == ["bm25", "fusion"]  # equal to budget is fine


def test_custom_budgets():
    assert labsrc.exceeded_retrieval_budgets({"rerank": 30}, {"rerank": 25}) == ["rerank"]


def test_measured_lesson_request_stays_within_budget(data):
    # A generous smoke test: the five-chunk lesson is far below every budget.
    trace = labsrc.trace_hybrid_request("RPL-14", "exact", data.luna, data.chunks, data.vectors, data.eval_date)
    assert labsrc.exceeded_retrieval_budgets(trace.timings_ms) == []
