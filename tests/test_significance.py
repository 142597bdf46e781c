"""The paired randomization test: exact arithmetic on tiny inputs, Monte Carlo against the exact
answer, against ranx's Fisher test and scipy's permutation test (on the SciFact runs), and what the
release gate says with 3 cases."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from ranx_oracle import ranx_jobs

import labsrc
from labsrc.datasets import find_dataset_dir, missing_data_reason
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import release_gate
from labsrc.reports.report import recall_significance, significance_lines
from labsrc.evaluation.significance import (
    MIN_PAIRED_QUERIES,
    compare_lanes,
    lane_significance,
    paired_differences,
    randomization_test,
    smallest_p_value,
    too_few_pairs_note,
)
from labsrc.retriever.policy import PolicyRetriever

# --- exact arithmetic -----------------------------------------------------------------------


def test_three_pairs_enumerate_all_eight_sign_assignments():
    # d = (1, 2, 3): the 8 sums ±1±2±3 are 6, 4, 2, 0, 0, -2, -4, -6; only 6 and -6 reach |6|: p = 2/8.
    assert randomization_test([0, 0, 0], [1, 2, 3]) == pytest.approx(2 / 8)
    assert smallest_p_value(3) == pytest.approx(2 / 2**3) == pytest.approx(0.25)


def test_p_counts_every_assignment_at_least_as_extreme():
    # d = (1, 1, 1, -1), observed |sum| = 2. The sum of four ±1 is 0 for C(4, 2) = 6 of the 16
    # assignments and at least 2 in absolute value for the other 10: p = 10/16.
    assert randomization_test([0, 0, 0, 0], [1, 1, 1, -1]) == pytest.approx(10 / 16)


def test_two_sided_and_symmetric_in_its_arguments():
    a, b = [0.2, 0.5, 0.9, 0.4, 0.1], [0.3, 0.7, 0.8, 0.9, 0.3]
    assert randomization_test(a, b) == pytest.approx(randomization_test(b, a))


def test_identical_lanes_give_p_one():
    assert randomization_test([0.3, 0.6, 0.1], [0.3, 0.6, 0.1]) == 1.0
    assert randomization_test([0.5] * 40, [0.5] * 40) == 1.0


def test_ties_in_floating_point_still_count_as_extreme():
    # 0.1 + 0.2 and 0.3 are equal in exact arithmetic but not in float64: (+0.1, +0.2, -0.3)
    # has |sum| 0 = observed, so all 8 assignments with |sum| >= 0 count (the 2 with sum ±0.6 too).
    assert randomization_test([0, 0, 0], [0.1, 0.2, -0.3]) == 1.0


# --- Monte Carlo ---------------------------------------------------------------------------


def test_monte_carlo_is_deterministic_and_close_to_the_exact_p():
    rng = np.random.default_rng(7)
    a = rng.random(14)
    b = a + rng.normal(0.1, 0.25, 14)
    exact = randomization_test(a, b, permutations=2**14)  # 16,384 assignments: all of them
    sampled = randomization_test(a, b, permutations=10_000, seed=1)  # 2**14 > 10,000: Monte Carlo
    # Standard error of a 10,000-draw estimate is at most sqrt(0.25 / 10,000) = 0.005.
    assert abs(sampled - exact) < 0.02
    assert sampled == randomization_test(a, b, permutations=10_000, seed=1)
    assert 0 < exact < 1


def test_a_large_consistent_gain_gets_a_tiny_p():
    # 30 queries, each +0.1: only the all-plus and all-minus assignments reach |3.0|, p = 2/2^30,
    # so none of 10,000 random draws does.
    assert randomization_test([0.5] * 30, [0.6] * 30) == 0.0


@pytest.mark.parametrize(
    ("a", "b", "permutations", "message"),
    [
        ([1, 2], [1], 10, "one length"),
        ([], [], 10, "at least one query"),
        ([1.0, float("nan")], [1.0, 2.0], 10, "finite"),
        ([1, 2], [2, 3], 0, "positive integer"),
        ([1, 2], [2, 3], True, "positive integer"),
    ],
)
def test_bad_arguments_are_invalid_argument(a, b, permutations, message):
    with pytest.raises(InvalidArgument, match=message):
        randomization_test(a, b, permutations=permutations)


def test_paired_differences_need_the_same_queries():
    qids, d = paired_differences({"q1": 0.5, "q2": 0.25}, {"q2": 1.0, "q1": 0.5})
    assert qids == ("q1", "q2") and d.tolist() == [0.5 - 0.5, 1.0 - 0.25]
    with pytest.raises(InvalidArgument, match=r"only in the baseline: \['q2'\]"):
        paired_differences({"q1": 0.5, "q2": 0.25}, {"q1": 0.5})


def test_compare_lanes_tests_every_pair_in_order():
    per_query = {
        "bm25": {"q1": 0.0, "q2": 0.0, "q3": 0.0},
        "dense": {"q1": 1.0, "q2": 2.0, "q3": 3.0},
        "rrf": {"q1": 1.0, "q2": 2.0, "q3": 3.0},
    }
    bm25_dense, bm25_rrf, dense_rrf = compare_lanes(per_query, "ndcg@10")
    assert (bm25_dense.baseline, bm25_dense.lane) == ("bm25", "dense")
    assert bm25_dense.difference == pytest.approx((1 + 2 + 3) / 3 - 0)
    assert bm25_dense.p_value == pytest.approx(2 / 8) and bm25_dense.exact and bm25_dense.permutations == 8
    assert (bm25_rrf.baseline, bm25_rrf.lane) == ("bm25", "rrf")
    assert dense_rrf.difference == 0.0 and dense_rrf.p_value == 1.0
    with pytest.raises(InvalidArgument, match="unknown lane"):
        compare_lanes(per_query, "ndcg@10", pairs=[("bm25", "splade")])


def test_too_few_pairs_say_why_instead_of_a_p_value():
    assert too_few_pairs_note(MIN_PAIRED_QUERIES) is None
    note = too_few_pairs_note(3, "positive case")
    assert note.startswith("no significance test: with 3 positive cases none is meaningful")
    assert "2/2^3 = 0.25" in note
    assert too_few_pairs_note(1, "query").startswith("no significance test: with 1 query ")
    assert "no paired positive cases" in too_few_pairs_note(0, "positive case")
    few = lane_significance({"a": {"q": 1.0}, "b": {"q": 0.0}}, "recall@2")
    assert few.comparisons == () and few.note and few.to_dict()["comparisons"] == []
    many = {lane: {f"q{i:02d}": float(i % 3 == j) for i in range(20)} for j, lane in enumerate(("a", "b"))}
    enough = lane_significance(many, "recall@2")
    assert enough.note is None and len(enough.comparisons) == 1 and enough.queries == 20


# --- against ranx on SciFact ---------------------------------------------------------------

SCIFACT = find_dataset_dir("scifact")


def _scipy_p_value(differences: np.ndarray, permutations: int) -> float:
    """scipy's paired sign-flip permutation test of the mean difference, two-sided (an independent oracle)."""
    stats = pytest.importorskip("scipy.stats", reason="scipy (dev extra)")
    result = stats.permutation_test((differences,), lambda d, axis: np.mean(d, axis=axis), vectorized=True,
                                    permutation_type="samples", n_resamples=permutations, alternative="two-sided",
                                    random_state=np.random.default_rng(7))
    return float(result.pvalue)


def test_p_values_agree_with_ranx_fisher():
    # ranx's own Fisher test (the one ranx.compare runs), run without numba (tests/ranx_oracle.py) on 30 paired
    # queries whose lanes differ (p of a few percent) or not (p well above 0.05).
    rng = np.random.default_rng(3)
    base = rng.uniform(0, 1, 30)
    pairs = {"a gain": (base, np.clip(base + rng.normal(0.08, 0.15, 30), 0, 1)),
             "no gain": (base, np.clip(base + rng.normal(0.0, 0.15, 30), 0, 1))}
    jobs = [{"fisher": {"control": list(a), "treatment": list(b), "n_permutations": 5_000, "seed": 42}}
            for a, b in pairs.values()]
    theirs = dict(zip(pairs, ranx_jobs(jobs)))
    for name, (a, b) in pairs.items():
        ours = randomization_test(list(a), list(b), permutations=5_000)
        # Two independent 5,000-draw estimates: each has standard error <= 0.0071.
        assert abs(ours - theirs[name]) < 0.03, (name, ours, theirs[name])
    assert theirs["a gain"] < 0.05 < theirs["no gain"]  # the two pairs test different things


@pytest.mark.skipif(SCIFACT is None, reason=missing_data_reason("scifact"))
def test_p_values_agree_with_a_permutation_test_on_scifact():
    from labsrc.evaluation.benchmark import load_lanes, run_benchmark
    from labsrc.evaluation.metrics import evaluate_run

    lanes = load_lanes(SCIFACT)
    result = run_benchmark(lanes, split="test", depth=100)
    qrels = {q: dict(v) for q, v in lanes.dataset.split_qrels("test").items()}
    per_query = {lane: evaluate_run({q: dict(result.runs[lane].get(q, {})) for q in qrels}, qrels, ["ndcg@10"],
                                    per_query=True)["ndcg@10"] for lane in result.runs}
    ours = {(c.baseline, c.lane): c for c in result.significance.comparisons}
    assert set(ours) == set(itertools.combinations(result.runs, 2))  # 4 lanes: 6 pairs
    for (baseline, lane), c in ours.items():
        _, differences = paired_differences(per_query[baseline], per_query[lane])
        theirs = _scipy_p_value(differences, 10_000)
        # Two independent 10,000-draw estimates: each has standard error <= 0.005.
        assert abs(c.p_value - theirs) < 0.02, (baseline, lane, c.p_value, theirs)
        assert c.lane_mean - c.baseline_mean == pytest.approx(c.difference)
        assert differences.mean() == pytest.approx(c.difference)
    assert ours["bm25", "rrf"].p_value < 0.01  # RRF's gain over BM25 (+0.036 nDCG@10) is no accident
    assert ours["rrf", "convex"].p_value > 0.05  # convex's +0.010 over RRF could be


# --- the release gate ----------------------------------------------------------------------

LESSON = load_gate_config(fixtures_dir() / "lesson" / "gate.json")
NO_TIMING = GateConfig(**{**LESSON.to_dict(), "on_date": LESSON.on_date})


def test_the_lesson_gate_prints_no_p_value(data: labsrc.Lesson):
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, NO_TIMING, measure=False)
    report = recall_significance(run)
    assert report.queries == 3 and report.comparisons == ()
    assert significance_lines(report) == [
        (
            "no significance test: with 3 positive cases none is meaningful (the lab asks for at least 20); "
            "with 3 pairs the smallest two-sided p-value possible is 2/2^3 = 0.25."
        )
    ]


def test_with_21_positive_cases_the_gate_tests_hybrid_against_each_lane(data: labsrc.Lesson):
    # The lesson's 3 positives 7 times over. Per case, hybrid - bm25 recall is (0, 1, 0) (bm25 misses
    # the paraphrase) and hybrid - dense is (1, 0, 0). So 7 differences of +1 and 14 of 0: only the
    # 2 of 2^7 sign patterns of the seven +1s that agree reach |7|, p = 2/128 = 0.0156.
    positives = [c for c in data.cases if c.kind == "positive"]
    cases = [dataclasses.replace(c, name=f"{c.name}-{i}") for i in range(7) for c in positives]
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), cases, data.callers, NO_TIMING, measure=False)
    report = recall_significance(run)
    assert report.note is None and report.queries == 21
    by_lane = {c.baseline: c for c in report.comparisons}
    assert set(by_lane) == {"bm25", "dense"} and {c.lane for c in report.comparisons} == {"hybrid"}
    for c in by_lane.values():
        assert c.difference == pytest.approx(7 / 21)
        assert c.p_value == pytest.approx(2 / 2**7, abs=0.005)  # 10,000 draws: standard error 0.0012
    line = significance_lines(report)[0]
    assert line.startswith("hybrid vs bm25: mean recall@2 1.00 vs 0.67 (difference +0.33), p = 0.0")
