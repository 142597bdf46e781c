"""Release gates on the lesson, on deliberately broken retrievers, and on hand-made timings."""

from __future__ import annotations

import datetime as dt

import pytest

import labsrc
from labsrc.datasets.lesson import fixtures_dir
from labsrc.errors import InvalidArgument
from labsrc.gate import LANES
from labsrc.gate.config import GateConfig, load_gate_config
from labsrc.gate.gates import (
    GATE_TABLE,
    CaseOutcome,
    evaluate_gates,
    lane_recall,
    release_gate,
    run_cases,
)
from labsrc.evaluation.latency import LatencyReport
from labsrc.records.cases import Case
from labsrc.records.policy import Caller
from labsrc.retriever.policy import PolicyRetriever
from labsrc.trace import RetrievalTrace

LESSON_CONFIG = load_gate_config(fixtures_dir() / "lesson" / "gate.json")
# Everything the lesson store holds, in every region's eyes: what a broken boundary would show.
ALL_TAGS = frozenset({"support:eu", "merchant:vip-ops"})


class BoundaryBypass(PolicyRetriever):
    """A deliberately unsafe retriever: it searches as an EU caller holding every tag."""

    def search(self, query, caller, on_date, top_k=2, *, query_kind="adhoc"):  # type: ignore[override]
        return super().search(query, Caller(caller.actor_id, "EU", ALL_TAGS), on_date, top_k, query_kind=query_kind)


@pytest.fixture(scope="module")
def lesson_run(data: labsrc.Lesson):
    retriever = PolicyRetriever(data.chunks, data.vectors)
    return release_gate(retriever, data.cases, data.callers, LESSON_CONFIG, measure=False)


def gate(results, name):
    (found,) = [g for g in results if g.name == name]
    return found


# --- the lesson ---------------------------------------------------------------------------


def test_lesson_recall_at_2_per_lane(lesson_run) -> None:
    # exact-code / paraphrase / shared-language: BM25 1+0+1, dense 0+1+1, hybrid 1+1+1 (of 3).
    assert lesson_run.recall["bm25"] == pytest.approx((1 + 0 + 1) / 3)
    assert lesson_run.recall["dense"] == pytest.approx((0 + 1 + 1) / 3)
    assert lesson_run.recall["hybrid"] == pytest.approx((1 + 1 + 1) / 3)


def test_every_lesson_gate_passes_in_table_order(lesson_run) -> None:
    assert [g.name for g in lesson_run.gates] == [
        "recall@2 bm25",
        "recall@2 dense",
        "recall@2 hybrid",
        "hybrid > each lane",
        "restricted exclusion",
        "superseded exclusion",
        "not_yet_effective exclusion",
        "wrong_region exclusion",
        "abstention",
        "boundary on every returned id",
    ]
    assert all(g.passed for g in lesson_run.gates), [g for g in lesson_run.gates if not g.passed]
    # The lesson's chunks are all in force on its date: nothing to replay, so not tested (and not a failure).
    assert [g.name for g in lesson_run.gates if not g.tested] == ["not_yet_effective exclusion"]
    assert lesson_run.passed and lesson_run.failed_outcomes == ()


def test_gate_families_have_a_table_row(lesson_run) -> None:
    assert {g.family for g in lesson_run.gates} <= set(GATE_TABLE)
    assert GATE_TABLE["restricted"] == ("queries that strongly match hidden chunks", "the retriever boundary is unsafe")


def test_lesson_outcomes_match_the_spec(lesson_run) -> None:
    by_name = {o.case.name: o for o in lesson_run.outcomes}
    paraphrase = by_name["paraphrase"]
    assert paraphrase.ids["bm25"] == ()
    assert paraphrase.ids["dense"] == paraphrase.ids["hybrid"] == ("eu-refurb-v2-rule", "eu-footwear-v1-rule")
    assert paraphrase.scores["hybrid"] == pytest.approx((1 / 61, 1 / 62))
    assert by_name["shared-language"].scores["hybrid"][0] == pytest.approx(2 / 61)
    assert by_name["restricted-merchant-code"].returned == ()
    assert by_name["no-access-caller"].returned == ()
    assert by_name["absent-gift-card"].returned == ()


def test_versions_and_dense_model_are_recorded(lesson_run, data) -> None:
    assert lesson_run.versions == {
        "retriever": "policy-retriever-v2",
        "index": "policy-index/2026-05-27",
        "sparse": "bm25-tokenizer-v1",
        "dense": "fixture-embeddings-v1",
        "fusion": "rrf-k60",
    }
    assert lesson_run.dense_model == dict(data.vectors.model)
    assert lesson_run.on_date == dt.date(2026, 5, 27)


def test_exclusion_holds_whatever_top_k(data) -> None:
    config = GateConfig(top_k=50, hybrid_rule="at_least")
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, config,
                       on_date=data.eval_date, measure=False)
    for name in ("restricted exclusion", "superseded exclusion", "wrong_region exclusion", "abstention"):
        assert gate(run.gates, name).passed


def test_default_rule_is_at_least(data) -> None:
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers,
                       on_date=data.eval_date, measure=False)
    assert gate(run.gates, "hybrid >= each lane").passed


# --- broken retrievers must fail the gates ------------------------------------------------------


def test_a_boundary_bypass_fails_restricted_and_wrong_region_exclusion(data) -> None:
    run = release_gate(BoundaryBypass(data.chunks, data.vectors), data.cases, data.callers, LESSON_CONFIG, measure=False)
    restricted = gate(run.gates, "restricted exclusion")
    wrong_region = gate(run.gates, "wrong_region exclusion")
    assert not restricted.passed and restricted.failing_cases == ("restricted-merchant-code",)
    assert not wrong_region.passed and wrong_region.failing_cases == ("no-access-caller",)
    assert not run.passed
    assert {o.case.name for o in run.failed_outcomes} >= {"restricted-merchant-code", "no-access-caller"}


def test_a_leak_below_top_k_is_still_caught(data) -> None:
    case = Case("deep-leak", "RPL-14 damaged refurbished laptops replacement", "luna-48291", "restricted",
                forbidden=("merchant-vip-refurb",))
    leaky = BoundaryBypass(data.chunks, data.vectors)
    # Precondition: at top_k 1 the hidden rule is not visible; it sits at rank 2.
    assert leaky.search(case.query, data.luna, data.eval_date, 1).trace.fused_ids == ("eu-refurb-v2-rule",)
    (outcome,) = run_cases(leaky, [case], data.callers_by_id, data.eval_date, top_k=1)
    assert "merchant-vip-refurb" not in outcome.ids["hybrid"]
    assert outcome.probe_ids["bm25"].index("merchant-vip-refurb") + 1 == 2
    assert outcome.leaked() == ("merchant-vip-refurb",)
    assert not gate(evaluate_gates([outcome], GateConfig(top_k=1)), "restricted exclusion").passed


def test_superseded_leak_is_caught_on_an_old_date(data) -> None:
    # On 2026-03-01 only v1 is in force, so a case forbidding v1 on that date must fail.
    case = Case("old-date", "RPL-14", "luna-48291", "superseded", forbidden=("eu-refurb-v1-rule",),
                on_date=dt.date(2026, 3, 1))
    (outcome,) = run_cases(PolicyRetriever(data.chunks, data.vectors), [case], data.callers, data.eval_date)
    assert outcome.ids["hybrid"] == ("eu-refurb-v1-rule",)
    result = gate(evaluate_gates([outcome]), "superseded exclusion")
    assert not result.passed and result.failing_cases == ("old-date",)


def test_abstention_fails_when_forbidden_evidence_is_returned(data) -> None:
    case = Case("overreach", "damaged refurbished laptop replacement after delivery", "luna-48291", "absent",
                forbidden=("eu-footwear-v1-rule",))
    outcomes = run_cases(PolicyRetriever(data.chunks, data.vectors), [case], data.callers, data.eval_date)
    result = gate(evaluate_gates(outcomes), "abstention")
    assert not result.passed and result.failing_cases == ("overreach",)
    # 2 fused ids: the forbidden one fails the gate, the other is listed for review (one case: singular).
    assert result.detail == "1 case, 1 returned a forbidden id; 1 other fused id returned, for review"
    assert outcomes[0].overreach() == ("eu-footwear-v1-rule",)


def test_a_missed_positive_fails_recall_and_names_the_case(data) -> None:
    wrong = Case("wrong-answer", "RPL-14", "luna-48291", "positive", expected=("eu-carrier-loss-v1",))
    cases = [*data.cases, wrong]
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), cases, data.callers, LESSON_CONFIG, measure=False)
    hybrid = gate(run.gates, "recall@2 hybrid")
    assert not hybrid.passed and hybrid.failing_cases == ("wrong-answer",)
    assert run.recall["hybrid"] == pytest.approx(3 / 4)
    assert [o.case.name for o in run.failed_outcomes] == ["wrong-answer"]


# --- gate logic on hand-made outcomes ------------------------------------------------------------


def outcome(name: str, kind: str, bm25=(), dense=(), hybrid=(), expected=(), forbidden=()) -> CaseOutcome:
    trace = RetrievalTrace({}, kind, bm25, dense, hybrid)
    case = Case(name, "q", "someone", kind, expected=expected, forbidden=forbidden)
    return CaseOutcome(case, {"bm25": bm25, "dense": dense, "hybrid": hybrid}, trace, top_k=2)


def test_strict_rule_fails_when_hybrid_only_ties_a_lane() -> None:
    tie = [outcome("both", "positive", ("a",), ("a",), ("a",), expected=("a",))]
    assert not gate(evaluate_gates(tie, GateConfig(hybrid_rule="strict")), "hybrid > each lane").passed
    assert gate(evaluate_gates(tie, GateConfig(hybrid_rule="at_least")), "hybrid >= each lane").passed
    assert all("hybrid" not in g.name or "recall" in g.name for g in evaluate_gates(tie, GateConfig(hybrid_rule="off")))


def test_lane_thresholds_gate_and_name_missed_cases() -> None:
    outcomes = [
        outcome("code", "positive", ("a",), (), ("a",), expected=("a",)),
        outcome("para", "positive", (), ("a",), ("a",), expected=("a",)),
    ]
    results = evaluate_gates(outcomes, GateConfig(min_recall={"bm25": 0.75, "hybrid": 1.0}))
    bm25 = gate(results, "recall@2 bm25")
    assert not bm25.passed and bm25.failing_cases == ("para",)
    assert bm25.detail == "0.50 (>= 0.75; 2 positive cases)"
    assert gate(results, "recall@2 dense").passed  # reported only


def test_without_positive_cases_recall_gates_are_not_tested() -> None:
    results = evaluate_gates([outcome("r", "restricted", forbidden=("x",))])
    untested = [g for g in results if g.family in ("recall", "hybrid")]
    assert [g.name for g in untested] == ["recall@2 bm25", "recall@2 dense", "recall@2 hybrid", "hybrid >= each lane"]
    for g in untested:
        # Neither PASS nor FAIL: nothing was measured.
        assert g.status == "NOT TESTED" and not g.tested
        assert g.detail.startswith("no positive cases to replay; add a positive case")
        assert g.passed  # require_cases is false by default, so it does not fail the run
    assert gate(results, "restricted exclusion").status == "PASS"
    assert lane_recall([outcome("r", "restricted", forbidden=("x",))], 2) == {lane: 0.0 for lane in LANES}


def test_require_cases_makes_an_untested_gate_fail_the_run() -> None:
    only_positive = [outcome("p", "positive", ("a",), ("a",), ("a",), expected=("a",))]
    results = evaluate_gates(only_positive, GateConfig(require_cases=True))
    safety = [g for g in results if g.family in ("restricted", "superseded", "wrong_region", "abstention")]
    assert len(safety) == 4
    assert all(g.status == "NOT TESTED" and not g.passed for g in safety)
    assert gate(results, "recall@2 hybrid").status == "PASS"


def test_a_kind_with_no_cases_is_not_tested_and_says_what_to_add() -> None:
    results = evaluate_gates([outcome("p", "positive", ("a",), ("a",), ("a",), expected=("a",))])
    superseded = gate(results, "superseded exclusion")
    assert superseded.status == "NOT TESTED"
    assert superseded.detail == ("no superseded cases to replay; add a superseded case whose query matches an "
                                 "older version of a current rule")
    assert superseded.to_dict()["status"] == "NOT TESTED"


def test_case_outcome_verdicts() -> None:
    assert outcome("p", "positive", hybrid=("b", "a"), expected=("a",)).passed
    assert not outcome("p", "positive", hybrid=("b",), expected=("a",)).passed
    assert not outcome("r", "restricted", dense=("x",), forbidden=("x",)).passed
    assert outcome("a", "absent", bm25=("x",), forbidden=("x",)).passed  # only the fused list counts
    assert not outcome("a", "absent", hybrid=("x",), forbidden=("x",)).passed


# --- latency gate -----------------------------------------------------------------------------


def latency(**samples: tuple[float, ...]) -> LatencyReport:
    n = len(next(iter(samples.values())))
    return LatencyReport(samples, warmup=0, repetitions=n, requests=n)


HEALTHY = dict(authorize=(2.0,) * 20, bm25=(4.0,) * 20, dense=(11.0,) * 20, fusion=(1.0,) * 20)


def test_latency_gate_passes_within_budget() -> None:
    result = gate(evaluate_gates([], GateConfig(), latency(**HEALTHY)), "latency p50/p95")
    assert result.passed and result.failing_stages == ()
    assert result.family == "latency"


def test_latency_gate_fails_on_a_slow_p95_and_names_the_stage() -> None:
    slow = {**HEALTHY, "dense": (11.0,) * 18 + (90.0, 95.0)}  # p50 fine, p95 over 40
    result = gate(evaluate_gates([], GateConfig(), latency(**slow)), "latency p50/p95")
    assert not result.passed and result.failing_stages == ("dense",)
    assert "dense p95" in result.detail and "dense p50" not in result.detail


def test_latency_gate_fails_on_an_unmeasured_stage() -> None:
    missing = {k: v for k, v in HEALTHY.items() if k != "dense"}
    result = gate(evaluate_gates([], GateConfig(), latency(**missing)), "latency p50/p95")
    assert result.failing_stages == ("dense",) and "not measured" in result.detail


def test_release_gate_measures_latency_with_warmup_and_repetitions(data) -> None:
    config = GateConfig(hybrid_rule="strict", warmup=1, repetitions=3)
    run = release_gate(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, config,
                       on_date=data.eval_date)
    assert run.latency is not None
    assert run.latency.requests == 3 * len(data.cases)
    assert all(len(run.latency.samples[s]) == 3 * len(data.cases) for s in ("authorize", "bm25", "dense", "fusion"))
    # Five-chunk lesson stages take microseconds; budgets are milliseconds.
    assert gate(run.gates, "latency p50/p95").passed


# --- arguments ----------------------------------------------------------------------------------


def test_release_gate_refuses_a_mismatched_rrf_k(data) -> None:
    with pytest.raises(InvalidArgument, match="rrf_k"):
        release_gate(PolicyRetriever(data.chunks, data.vectors, rrf_k=10), data.cases, data.callers, GateConfig())


def test_release_gate_refuses_no_cases(data) -> None:
    with pytest.raises(InvalidArgument, match="no cases"):
        release_gate(PolicyRetriever(data.chunks, data.vectors), [], data.callers, measure=False)


def test_run_cases_refuses_unknown_callers(data) -> None:
    with pytest.raises(InvalidArgument, match="unknown caller 'mallory'"):
        run_cases(PolicyRetriever(data.chunks, data.vectors), [Case("x", "q", "mallory", "absent")],
                  data.callers, data.eval_date)


def test_run_cases_is_deterministic_and_leaves_inputs_alone(data) -> None:
    cases = list(data.cases)
    retriever = PolicyRetriever(data.chunks, data.vectors)
    first = run_cases(retriever, cases, data.callers_by_id, data.eval_date)
    second = run_cases(retriever, cases, data.callers_by_id, data.eval_date)
    assert [dict(o.ids) for o in first] == [dict(o.ids) for o in second]
    assert cases == list(data.cases)


def test_run_cases_reports_progress(data) -> None:
    calls = []
    run_cases(PolicyRetriever(data.chunks, data.vectors), data.cases, data.callers, data.eval_date,
              progress=lambda phase, done, total: calls.append((phase, done, total)))
    n = len(data.cases)
    assert calls == [("cases", i, n) for i in range(1, n + 1)]
