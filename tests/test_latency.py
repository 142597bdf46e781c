"""Latency: percentiles, the measured report, and the retriever's own timings as samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

import labsrc
from labsrc.errors import InvalidArgument
from labsrc.evaluation.budgets import RETRIEVAL_BUDGET_MS, STAGES
from labsrc.evaluation.latency import LatencyReport, measure_latency, percentile_ms
from labsrc.records.cases import Case
from labsrc.retriever.policy import PolicyRetriever


def test_percentile_interpolates_linearly() -> None:
    samples = [1.0, 2.0, 3.0, 4.0]
    # h = (n-1)·q/100: q=50 → 1.5 → 2 + 0.5·(3-2); q=95 → 2.85 → 3 + 0.85·(4-3)
    assert percentile_ms(samples, 50) == pytest.approx(2 + 0.5 * (3 - 2))
    assert percentile_ms(samples, 95) == pytest.approx(3 + 0.85 * (4 - 3))
    assert percentile_ms([7.0], 95) == 7.0


def test_percentile_does_not_depend_on_sample_order() -> None:
    rng = np.random.default_rng(0)
    samples = list(rng.exponential(1.0, size=101))
    assert percentile_ms(samples, 95) == pytest.approx(percentile_ms(sorted(samples), 95))
    assert percentile_ms(samples, 50) == pytest.approx(sorted(samples)[50])  # odd n: the middle one


@pytest.mark.parametrize(("samples", "q"), [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_refuses_bad_arguments(samples, q) -> None:
    with pytest.raises(InvalidArgument):
        percentile_ms(samples, q)


def make_report() -> LatencyReport:
    samples = {stage: tuple(float(i) for i in range(1, 21)) for stage in STAGES}
    return LatencyReport(samples, warmup=2, repetitions=20, requests=20)


def test_report_summaries() -> None:
    report = make_report()
    assert report.stages == STAGES
    # 1..20: p50 at h = 9.5 → 10.5; p95 at h = 18.05 → 19.05
    assert report.p50_ms == {stage: pytest.approx(10.5) for stage in STAGES}
    assert report.p95_ms == {stage: pytest.approx(19.05) for stage in STAGES}


def test_exceeded_compares_each_statistic_with_its_budget() -> None:
    report = make_report()
    assert report.exceeded({"dense": 40}, {"dense": 40}) == {"p50": [], "p95": []}
    assert report.exceeded({"bm25": 10}, {"bm25": 19}) == {"p50": ["bm25"], "p95": ["bm25"]}
    assert report.exceeded({"rerank": 100}, {}) == {"p50": ["rerank"], "p95": []}  # unmeasured = exceeded


def test_frame_has_budgets_and_verdicts() -> None:
    frame = make_report().to_frame(RETRIEVAL_BUDGET_MS, {**RETRIEVAL_BUDGET_MS, "fusion": 19.0})
    assert list(frame["stage"]) == list(STAGES)
    row = frame.set_index("stage").loc["fusion"]
    assert row["p95_ms"] == pytest.approx(19.05) and row["p95_budget_ms"] == 19.0
    assert not row["within_budget"]  # p50 10.5 > 8 and p95 19.05 > 19
    assert frame.set_index("stage").loc["dense", "within_budget"]
    assert list(frame["samples"]) == [20] * 4


def test_to_dict_is_json_ready_and_omits_raw_samples() -> None:
    summary = make_report().to_dict(RETRIEVAL_BUDGET_MS, RETRIEVAL_BUDGET_MS)
    assert summary["requests"] == 20 and summary["warmup"] == 2
    assert set(summary["stages"]) == set(STAGES)
    assert summary["stages"]["dense"]["p95_ms"] == pytest.approx(19.05)
    assert "samples" not in summary


def test_unmeasured_budgeted_stage_shows_as_nan() -> None:
    report = LatencyReport({"bm25": (1.0, 2.0)}, warmup=0, repetitions=2, requests=2)
    frame = report.to_frame({"bm25": 12, "dense": 40}, None).set_index("stage")
    assert math.isnan(frame.loc["dense", "p50_ms"]) and not frame.loc["dense", "within_budget"]


def test_measure_latency_takes_one_sample_per_stage_per_timed_request(data: labsrc.Lesson) -> None:
    retriever = PolicyRetriever(data.chunks, data.vectors)
    calls = []
    report = measure_latency(
        retriever, data.cases, data.callers_by_id, data.eval_date,
        warmup=2, repetitions=5, progress=lambda phase, done, total: calls.append((phase, done, total)),
    )
    n = len(data.cases)
    assert report.requests == 5 * n
    assert report.stages == STAGES
    assert all(len(report.samples[s]) == 5 * n for s in STAGES)
    assert all(v >= 0 and math.isfinite(v) for s in STAGES for v in report.samples[s])
    # warm-up requests are reported but not timed
    assert calls[0] == ("warm-up", 1, 7 * n) and calls[-1] == ("timing", 7 * n, 7 * n)
    assert sum(1 for phase, _, _ in calls if phase == "warm-up") == 2 * n


def test_measured_lesson_timings_are_inside_the_budgets(data: labsrc.Lesson) -> None:
    # The lesson corpus is five chunks; every stage runs in well under a millisecond.
    report = measure_latency(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers_by_id,
                             data.eval_date, warmup=2, repetitions=10)
    assert report.exceeded(RETRIEVAL_BUDGET_MS, RETRIEVAL_BUDGET_MS) == {"p50": [], "p95": []}


@pytest.mark.parametrize(("kwargs", "message"), [({"warmup": -1}, "warmup"), ({"repetitions": 0}, "repetitions")])
def test_measure_latency_refuses_bad_counts(data: labsrc.Lesson, kwargs, message) -> None:
    with pytest.raises(InvalidArgument, match=message):
        measure_latency(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers_by_id,
                        data.eval_date, **kwargs)


def test_measure_latency_refuses_no_cases_and_unknown_callers(data: labsrc.Lesson) -> None:
    retriever = PolicyRetriever(data.chunks, data.vectors)
    with pytest.raises(InvalidArgument, match="no cases"):
        measure_latency(retriever, [], data.callers_by_id, data.eval_date)
    with pytest.raises(InvalidArgument, match="unknown caller"):
        measure_latency(retriever, [Case("x", "q", "mallory", "absent")], data.callers_by_id, data.eval_date)
