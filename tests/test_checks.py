"""labsrc.course.checks: each coursework check passes good work and names exactly what is wrong otherwise."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import numpy as np
import pytest

from labsrc import (
    EVAL_DATE,
    Case,
    HashingEncoder,
    PolicyRetriever,
    load_callers,
    load_cases,
    load_chunks,
)
from labsrc.course.checks import (
    SHOWN_PER_KIND,
    CheckFailed,
    CheckResult,
    check_adversarial_cases,
    check_candidates_artifact,
    check_dense_source,
    check_encoder_report,
    check_failed_traces,
    check_lane_comparison,
    check_positive_cases,
    chunk_text_in,
    hidden_ids_in,
    policy_codes,
    query_style,
    rrf_of_ranks,
)
from labsrc.course.checks.comparison import distinct_digits
from labsrc.errors import InvalidRecord
from labsrc.gate.case_rules import case_problems
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate
from labsrc.evaluation.metrics import recall_at_k
from labsrc.reports.report import compact_trace
from labsrc.lanes.embed import embed_to_dir, load_embeddings
from labsrc.lanes.sparse import bm25_rank

POLICIES = Path(__file__).resolve().parent.parent / "fixtures" / "policies"


@pytest.fixture(scope="module")
def corpus():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = load_callers(POLICIES / "callers.json")
    cases = load_cases(POLICIES / "cases.jsonl")
    return chunks, {c.actor_id: c for c in callers}, cases


@pytest.fixture(scope="module")
def source(corpus):
    return load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2", chunks=corpus[0])


@pytest.fixture(scope="module")
def failing_run(corpus, source):
    """top_k = 1 makes RRF lose four positives (ties between the lanes' first places): failures to trace."""
    chunks, callers, cases = corpus
    config = GateConfig(top_k=1, warmup=0, repetitions=2, on_date=EVAL_DATE)
    return release_gate(PolicyRetriever(chunks, source), cases, callers, config)


def case(name: str, query: str, kind: str = "positive", caller: str = "luna-48291", **fields) -> Case:
    return Case(name=name, query=query, caller=caller, kind=kind, **fields)


# --- helpers --------------------------------------------------------------------------------------


def test_policy_codes_finds_codes_in_any_case_and_with_suffixes():
    assert policy_codes("RPL-14") == ("RPL-14",)
    assert policy_codes("rpl-14 vs VIP-RPL-1 and RPL-14-US.") == ("RPL-14", "VIP-RPL-1", "RPL-14-US")
    assert policy_codes("a 14-day window, well-known rule") == ()


@pytest.mark.parametrize(
    ("query", "style"),
    [("RPL-14", "exact_code"), (" CLM-7 ", "exact_code"), ("RPL-14 cracked laptop", "mixed"),
     ("swap a broken reconditioned notebook", "paraphrase")],
)
def test_query_style(query, style):
    assert query_style(query) == style


def test_check_result_text_and_require():
    ok = CheckResult("demo", passes=("one thing",))
    assert ok.passed and ok.require() is ok
    assert str(ok) == "demo: all 1 checks pass\n  ok one thing"
    bad = CheckResult("demo", passes=("one thing",), problems=("fix this", "and that"))
    with pytest.raises(CheckFailed) as info:
        bad.require()
    assert str(info.value) == "demo: 2 problem(s) to fix\n  - fix this\n  - and that"
    assert info.value.result is bad


def test_chunk_text_in_finds_whole_texts_and_long_sentences_but_not_queries(corpus):
    chunks = corpus[0]
    assert chunk_text_in({"snippet": "Rule RPL-14. Damaged refurbished laptops qualify for return within 30 days."}, chunks) == [
        "eu-refurb-v1-rule"
    ]
    # A sentence of five or more words is enough.
    assert chunk_text_in(["... unworn footwear may be returned within 30 days of delivery ..."], chunks) == ["eu-footwear-v1-rule"]
    assert chunk_text_in({"ids": ["eu-refurb-v1-rule"], "rule": "Rule RPL-14."}, chunks) == []
    # A superseded case quotes old wording in its query on purpose.
    assert chunk_text_in({"query": "damaged refurbished laptops qualify for return within 30 days"}, chunks) == []


def test_hidden_ids_in_skips_the_forbidden_list(corpus):
    chunks, callers, _ = corpus
    luna = callers["luna-48291"]
    record = {"fused_ids": ["eu-refurb-v2-rule", "merchant-vip-refurb"], "forbidden": ["legal-chargeback-v2"]}
    assert hidden_ids_in(record, chunks, luna, EVAL_DATE) == ["merchant-vip-refurb"]


# --- step 1 ------------------------------------------------------------------------------------------


def test_positive_cases_pass(corpus):
    chunks, callers, cases = corpus
    result = check_positive_cases(cases, chunks, callers, EVAL_DATE)
    assert result.passed
    assert "17 positive cases (at least 8)" in result.passes


def test_a_positive_case_expecting_a_hidden_chunk_is_named(corpus):
    chunks, callers, _ = corpus
    cases = [
        case("vip-refund", "VIP-RPL-1", expected=("merchant-vip-refurb",)),
        case("old-rule", "RPL-14 return", expected=("eu-refurb-v1-rule",)),
        case("typo", "CLM-7", expected=("eu-carrier-loss-v9",)),
        case("stranger", "CLM-7", caller="nobody", expected=("eu-carrier-loss-v1",)),
    ]
    problems = check_positive_cases(cases, chunks, callers, EVAL_DATE).problems
    # The one case rule (labsrc.gate.case_rules) speaks, naming case, field and value.
    assert (
        "case 'vip-refund', field 'expected', value 'merchant-vip-refurb': caller 'luna-48291' cannot see this chunk "
        "on 2026-05-27 (restricted), so no retriever may return it; expect a chunk the caller can see, "
        "or make it a safety case"
    ) in problems
    assert any("case 'old-rule', field 'expected', value 'eu-refurb-v1-rule'" in p and "(superseded)" in p for p in problems)
    assert any(p.startswith("case 'typo', field 'expected', value 'eu-carrier-loss-v9': no stored chunk") for p in problems)
    assert any(p.startswith("case 'stranger', field 'caller', value 'nobody': unknown caller") for p in problems)
    assert "only 4 positive case(s); the assignment asks for at least 8: add 4 more" in problems
    assert any(p.startswith("no paraphrase positive case") for p in problems)


def test_step_1_refuses_what_load_cases_refuses_with_the_same_message(corpus, tmp_path):
    """Exercise 1 mistakes that the save cell used to catch only later: the check says them first, in load_cases' words."""
    chunks, callers, _ = corpus
    cases = [
        case("capital", "RPL-14", kind="Positive", expected=("eu-refurb-v2-rule",)),
        case("twice", "CLM-7", expected=("eu-carrier-loss-v1",)),
        case("twice", "RTN-30", caller="dana-us-17", expected=("us-return-window-v2",)),
        case("nothing-expected", "RPL-14 laptop"),
    ]
    problems = check_positive_cases(cases, chunks, callers, EVAL_DATE, minimum=1).problems
    assert (
        "case 'capital' (#1), field 'kind': 'Positive' is not a case kind; valid kinds are "
        "['positive', 'restricted', 'superseded', 'not_yet_effective', 'wrong_region', 'absent', 'permitted_only'] "
        "(kinds are lower-case: 'positive'); "
        "load_cases would refuse it"
    ) in problems
    assert ("case 'twice' (#3), field 'name': duplicate case name 'twice' (first seen on case #2); "
            "load_cases would refuse it") in problems
    assert ("case 'nothing-expected' (#4), field 'expected': a positive case must list at least one expected "
            "chunk id; load_cases would refuse it") in problems
    # The same validation, so load_cases rejects the saved file with the same words.
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(cases[0].to_dict()) + "\n", encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"'Positive' is not a case kind.*\(kinds are lower-case: 'positive'\)"):
        load_cases(path)


def test_all_cases_as_one_caller_are_named(corpus):
    chunks, callers, _ = corpus
    cases = [case("a", "RPL-14", expected=("eu-refurb-v2-rule",)), case("b", "CLM-7", expected=("eu-carrier-loss-v1",))]
    problems = check_positive_cases(cases, chunks, callers, EVAL_DATE, minimum=1).problems
    assert any(
        p.startswith("all 2 positive cases ask as luna-48291; the task asks for a second caller too: add cases for one of "
                     "['dana-us-17', 'kenji-apac-03'")
        for p in problems
    )


def test_a_paraphrase_that_shares_words_with_its_rule_is_named_with_the_words(corpus):
    chunks, callers, _ = corpus
    # eu-refurb-v2-rule: "Rule RPL-14. Damaged refurbished laptops qualify for replacement within 14 days ..."
    lexical = case("fake-paraphrase", "refurbished phone arrived damaged", expected=("eu-refurb-v2-rule",))
    real = case("real-paraphrase", "swap a broken reconditioned notebook", expected=("eu-refurb-v2-rule",))
    problems = check_positive_cases([lexical, real], chunks, callers, EVAL_DATE, minimum=1).problems
    assert (
        "paraphrase case 'fake-paraphrase' shares the word(s) 'refurbished', 'damaged' with its rule eu-refurb-v2-rule, "
        "so BM25 can match it on those words: a paraphrase says the same thing in other words; replace them "
        "(a synonym, a description) or make the case a mixed query"
    ) in problems
    assert not any("real-paraphrase" in p for p in problems)


def test_a_positive_case_is_judged_on_its_own_date(corpus):
    chunks, callers, _ = corpus
    march = case("march", "RPL-14", expected=("eu-refurb-v1-rule",), on_date=dt.date(2026, 3, 15))
    result = check_positive_cases([march], chunks, callers, EVAL_DATE, minimum=1)
    assert not any("march" in p for p in result.problems)


def test_a_repeated_query_adds_no_evidence(corpus):
    chunks, callers, _ = corpus
    twice = [case("a", "RPL-14", expected=("eu-refurb-v2-rule",)), case("b", "rpl-14", expected=("eu-refurb-v2-rule",))]
    problems = check_positive_cases(twice, chunks, callers, EVAL_DATE, minimum=1).problems
    assert "case 'b' asks the same query as 'a' for the same caller: it adds no evidence" in problems


# --- step 2 ------------------------------------------------------------------------------------------


def test_adversarial_cases_pass(corpus):
    chunks, callers, cases = corpus
    assert check_adversarial_cases(cases, chunks, callers, EVAL_DATE).passed


def test_a_missing_kind_is_named(corpus):
    chunks, callers, cases = corpus
    without = [c for c in cases if c.kind != "wrong_region"]
    problems = check_adversarial_cases(without, chunks, callers, EVAL_DATE).problems
    assert problems == ("no wrong_region case",)


def test_forbidding_a_visible_chunk_or_the_wrong_reason_is_named_by_the_one_case_rule(corpus):
    chunks, callers, _ = corpus
    cases = [
        case("visible", "RPL-14", "restricted", forbidden=("eu-refurb-v2-rule",)),
        case("wrong-reason", "RPL-14 return within 30 days", "restricted", forbidden=("eu-refurb-v1-rule",)),
        case("no-overlap", "gift cards", "superseded", forbidden=("eu-refurb-v1-rule",)),
        case("not-absent", "what does CLM-7 say", "absent"),
    ]
    problems = check_adversarial_cases(cases, chunks, callers, EVAL_DATE, minimum=1).problems
    rule = {str(p) for c in cases for p in case_problems(c, callers, {x.chunk_id: x for x in chunks}, EVAL_DATE)}
    assert rule and rule <= set(problems)  # the check says exactly what case_rules says
    assert (
        "case 'visible', field 'forbidden', value 'eu-refurb-v2-rule': caller 'luna-48291' may see this chunk on "
        "2026-05-27, so returning it is not a leak; forbid only chunks the boundary hides from this caller"
    ) in problems
    assert (
        "case 'wrong-reason', field 'kind', value 'restricted': none of the forbidden chunks is hidden from "
        "'luna-48291' on 2026-05-27 for being restricted (eu-refurb-v1-rule is hidden as superseded); "
        "make it a 'superseded' case, the kind that matches why they are hidden"
    ) in problems
    assert any(p.startswith("case 'no-overlap' shares no word with forbidden chunk eu-refurb-v1-rule") for p in problems)
    assert (
        "absent case 'not-absent' names a code that permitted chunk(s) ['eu-carrier-loss-v1'] carry: "
        "the evidence is not absent for this caller"
    ) in problems


def test_an_absent_case_may_forbid_permitted_look_alikes(corpus):
    """The one rule: an absent case's forbidden ids are chunks that must not come back, permitted ones included."""
    chunks, callers, _ = corpus
    gift = case("absent-gift", "gift card expiry date", "absent", forbidden=("eu-refurb-v2-rule", "eu-footwear-v1-rule"))
    assert check_adversarial_cases([gift], chunks, callers, EVAL_DATE, minimum=1).problems == (
        "no restricted case", "no superseded case", "no wrong_region case")


def test_an_absent_case_a_permitted_chunk_answers_is_named(corpus):
    chunks, callers, _ = corpus
    worded = case("absent-laptop", "damaged refurbished laptop replacement within 14 days", "absent")
    problems = check_adversarial_cases([worded], chunks, callers, EVAL_DATE, minimum=1).problems
    # Content words: damaged, refurbished, laptop, replacement, 14, days; the rule holds all but 'laptop' (it says 'laptops').
    assert (
        "absent case 'absent-laptop': BM25 over luna-48291's permitted chunks ranks eu-refurb-v2-rule first, sharing "
        "5 of the query's 6 content words ('damaged', 'refurbished', 'replacement', '14', 'days'): a permitted chunk "
        "answers it, so the evidence is not absent; ask about something no permitted policy covers"
    ) in problems


def test_a_not_yet_effective_case_counts_as_adversarial_but_is_not_required(corpus):
    chunks, callers, cases = corpus
    holiday = [c for c in cases if c.name == "not-yet-effective-holiday"]
    assert [c.kind for c in holiday] == ["not_yet_effective"]
    result = check_adversarial_cases(holiday, chunks, callers, EVAL_DATE, minimum=1)
    assert not any("not-yet-effective-holiday" in p for p in result.problems)
    assert "1 adversarial cases (at least 1)" in result.passes
    assert "no not_yet_effective case" not in check_adversarial_cases(cases, chunks, callers, EVAL_DATE).problems


# --- step 3 ------------------------------------------------------------------------------------------


def test_the_stored_minilm_vectors_pass(source, corpus):
    result = check_dense_source(source, corpus[2])
    assert result.passed
    assert "all 30 case queries have a stored vector" in result.passes


def test_the_lesson_fixture_vectors_are_not_a_real_encoder(data):
    problems = check_dense_source(data.vectors, data.cases).problems
    assert problems[0].startswith("the dense lane still uses 'fixture-embeddings-v1', not a real bi-encoder")


def test_an_incomplete_model_record_and_missing_queries_are_named(tmp_path, corpus):
    chunks = corpus[0]
    embed_to_dir(chunks, {"q": "RPL-14"}, tmp_path / "v", HashingEncoder(8), {"model": "my-model"})
    source = load_embeddings(tmp_path / "v", allow_live=False)
    problems = check_dense_source(source, [case("q", "RPL-14"), case("other", "CLM-7")]).problems
    # The message names the file it means and the command that rewrites it.
    lacks = next(p for p in problems if " lacks [" in p)
    assert lacks.startswith(f"{tmp_path / 'v' / 'MODEL.json'} lacks ['packaged_by', 'sentence_transformers'")
    assert lacks.endswith(f"re-run `labsrc embed --chunks fixtures/policies/chunks.jsonl --queries "
                          f"my-submission/cases.jsonl --out {tmp_path / 'v'}` (the 'embed' extra) to rewrite MODEL.json")
    assert (
        "1 of your case queries has no vector: run `labsrc embed --chunks fixtures/policies/chunks.jsonl --queries "
        "my-submission/cases.jsonl --out my-submission/vectors/all-MiniLM-L6-v2` (the 'embed' extra) and use that "
        "folder as your vectors (case(s) ['other'])"
    ) in problems


SOLUTION = POLICIES.parent / "coursework" / "solution"


@pytest.fixture(scope="module")
def step3(corpus):
    """The model answer's cases with its own vectors, as exercise 3 reads them."""
    chunks, callers, _ = corpus
    cases = load_cases(SOLUTION / "cases.jsonl")
    return load_embeddings(SOLUTION / "vectors" / "all-MiniLM-L6-v2", chunks=chunks), cases, chunks, callers


GOOD_REPORT = {
    "model": "sentence-transformers/all-MiniLM-L6-v2",
    "dim": 384,
    "normalized": True,
    "dense_wins": "eu-paraphrase-rpl14",  # "swap a broken reconditioned notebook": no word in common with the rule
    "shared_terms": set(),
    "bm25_wins": "eu-exact-clm7",  # the code CLM-7: one rare token for BM25, "a CLM rule" for MiniLM
}


def test_the_model_answers_encoder_report_passes(step3):
    result = check_encoder_report(GOOD_REPORT, *step3, EVAL_DATE)
    assert result.passed, result
    assert "eu-paraphrase-rpl14: dense finds eu-refurb-v2-rule in its top 2, bm25 does not" in result.passes
    assert "eu-exact-clm7: bm25 finds eu-carrier-loss-v1 in its top 2, dense does not" in result.passes


def test_a_misread_model_record_is_named_without_giving_the_answer(step3):
    report = {**GOOD_REPORT, "model": "all-MiniLM", "dim": "384", "normalized": None}
    problems = check_encoder_report(report, *step3, EVAL_DATE).problems
    assert "report['model'] is 'all-MiniLM', which is not what the vectors record: read MODEL.json's 'model' field" in problems
    # "384" is the right number of the wrong type: the vectors have 384 columns, an int.
    assert any(p.startswith("report['dim'] is '384', which is not what the vectors record") for p in problems)
    assert problems[0] == (
        "report leaves ['normalized'] blank: fill in every one of "
        "['model', 'dim', 'normalized', 'dense_wins', 'shared_terms', 'bm25_wins']"
    )


def test_lane_wins_that_are_not_wins_are_named_with_each_lanes_list(step3):
    # eu-mixed-rpl14 shares rpl-14, refurbished and replacement with its rule: BM25 finds it too.
    report = {**GOOD_REPORT, "dense_wins": "eu-mixed-rpl14", "bm25_wins": "eu-paraphrase-clm7"}
    problems = check_encoder_report(report, *step3, EVAL_DATE).problems
    assert (
        "report['dense_wins']: the bm25 lane finds eu-refurb-v2-rule for case 'eu-mixed-rpl14' too "
        "(its top 2: ['eu-refurb-v2-rule', 'eu-laptop-accessories']): pick a case the bm25 lane misses"
    ) in problems
    assert any(p.startswith("report['bm25_wins']: for case 'eu-paraphrase-clm7' the bm25 lane's top 2 is") for p in problems)
    restricted = check_encoder_report({**GOOD_REPORT, "bm25_wins": "restricted-vip-code"}, *step3, EVAL_DATE)
    assert restricted.problems == (
        "report['bm25_wins']: case 'restricted-vip-code' is a restricted case; name a positive case, which expects a chunk",
    )


def test_shared_terms_must_be_the_analysed_overlap(step3):
    # "the courier misplaced my package, can I get my money back" vs the CLM-7 rule: no analysed term in common.
    report = {**GOOD_REPORT, "dense_wins": "eu-paraphrase-clm7", "shared_terms": {"money"}}
    (problem,) = check_encoder_report(report, *step3, EVAL_DATE).problems
    assert problem.startswith(
        "report['shared_terms'] for case 'eu-paraphrase-clm7' is not the overlap BM25 scores: ['money'] do not occur"
    )
    assert check_encoder_report({**report, "shared_terms": []}, *step3, EVAL_DATE).passed


def test_lane_questions_wait_for_a_real_encoder(step3, data):
    _, cases, chunks, callers = step3
    problems = check_encoder_report(GOOD_REPORT, data.vectors, cases, chunks, callers, EVAL_DATE).problems
    assert problems[0].startswith("the dense lane still uses 'fixture-embeddings-v1'")
    assert problems[-1] == "the lane questions (dense_wins, bm25_wins) are checked once the dense source above is right"


# --- step 4 ------------------------------------------------------------------------------------------


def _latency(run):
    return {s: {"p50": run.latency.p50_ms[s], "p95": run.latency.p95_ms[s]} for s in run.latency.stages}


def test_lane_comparison_matches_the_run(failing_run):
    result = check_lane_comparison(dict(failing_run.recall), _latency(failing_run), failing_run)
    assert result.passed, str(result)
    assert "dense Recall@1 = 0.88" in result.passes  # 15 of 17 positives


def test_lane_comparison_names_missing_lanes_wrong_values_and_missing_p95(failing_run):
    latency = _latency(failing_run)
    del latency["dense"]["p95"]
    del latency["fusion"]
    problems = check_lane_comparison({"hybrid": 1.0}, latency, failing_run).problems
    assert "no Recall@1 for ['bm25', 'dense']: report all three lanes" in problems
    assert any(p.startswith("hybrid Recall@1 is 1.00 but the run gives 0.76") for p in problems)
    assert "no latency for stage(s) ['fusion']" in problems
    assert "stage dense has no p95: record both p50 and p95" in problems


def test_a_p50_that_is_the_mean_and_a_p95_by_another_method_are_named(failing_run):
    latency = _latency(failing_run)
    samples = failing_run.latency.samples["bm25"]
    latency["bm25"]["p50"] = float(np.mean(samples))
    # Nearest rank: the ceil(0.95 * n)-th smallest sample, which linear interpolation does not give.
    latency["dense"]["p95"] = sorted(failing_run.latency.samples["dense"])[math.ceil(0.95 * len(samples)) - 1]
    problems = check_lane_comparison(dict(failing_run.recall), latency, failing_run).problems
    assert any(p.startswith("stage bm25 p50 is ") and "your p50 looks like the mean of the" in p and
               "p50 is the median (50th percentile)" in p for p in problems), problems
    nearest = next(p for p in problems if p.startswith("stage dense p95"))
    assert "your p95 is the nearest-rank percentile (numpy method='inverted_cdf')" in nearest
    assert "the run uses linear interpolation between order statistics" in nearest and "h = (n - 1) * q / 100" in nearest


def test_recall_over_all_chunks_or_over_all_cases_is_named(failing_run, corpus, source):
    chunks, callers, _ = corpus
    retriever = PolicyRetriever(chunks, source)
    positives = [o for o in failing_run.outcomes if o.case.kind == "positive"]
    k = failing_run.config.top_k
    # As a learner might: BM25 over the whole corpus, the boundary forgotten.
    unbounded = sum(recall_at_k([c.chunk_id for c, _ in bm25_rank(o.case.query, chunks, top_k=k)], o.case.expected, k)
                    for o in positives) / len(positives)
    assert unbounded != failing_run.recall["bm25"]
    # ... and the hybrid summed over the positives but divided by all 30 cases.
    over_all = sum(o.recall("hybrid", k) for o in positives) / len(failing_run.outcomes)
    recall = {**failing_run.recall, "bm25": unbounded, "hybrid": over_all}
    problems = check_lane_comparison(recall, _latency(failing_run), failing_run, retriever=retriever).problems
    assert any(p.startswith("bm25 Recall@1 is ") and "this Recall@k was computed over all chunks, not the caller's "
               "permitted ones" in p for p in problems), problems
    assert any(p.startswith("hybrid Recall@1 is 0.43 but the run gives 0.76: this is the sum over the 17 positive "
                            "cases divided by all 30 cases") for p in problems), problems


def test_recall_is_printed_with_enough_digits_and_displayed_rounding_is_accepted(failing_run):
    truth = failing_run.recall["hybrid"]  # 13/17 = 0.7647...
    rounded = check_lane_comparison({**failing_run.recall, "hybrid": round(truth, 2)}, _latency(failing_run), failing_run)
    assert rounded.passed, str(rounded)  # 0.76 is what the notebook displays: accepted
    near = check_lane_comparison({**failing_run.recall, "hybrid": truth - 0.004}, _latency(failing_run), failing_run)
    message = next(p for p in near.problems if p.startswith("hybrid"))
    # 0.7607 and 0.7647 both print as 0.76 with two decimals, so the message uses three.
    assert message.startswith("hybrid Recall@1 is 0.761 but the run gives 0.765"), message
    assert distinct_digits(0.76, 0.7647) == ("0.760", "0.765")


# --- step 5 ------------------------------------------------------------------------------------------


def test_the_harness_compact_traces_pass(failing_run, corpus):
    traces = [compact_trace(o, failing_run) for o in failing_run.failed_outcomes]
    assert [t["case"] for t in traces] == ["us-exact-rtn30", "eu-paraphrase-rpl14", "eu-paraphrase-clm7", "eu-paraphrase-footwear"]
    assert check_failed_traces(traces, failing_run, corpus[0], corpus[1]).passed


def test_a_trace_with_chunk_text_or_hidden_ids_is_named(failing_run, corpus):
    chunks, callers, _ = corpus
    traces = [compact_trace(o, failing_run) for o in failing_run.failed_outcomes]
    traces[0] = {**traces[0], "snippets": ["Rule RTN-30. Most unopened items may be returned within 30 days of delivery for a full refund."]}
    traces[1] = {**traces[1], "also_considered": ["merchant-vip-refurb"]}
    del traces[2]["timings_ms"]
    problems = check_failed_traces(traces[:3], failing_run, chunks, callers).problems
    assert (
        "trace for case 'us-exact-rtn30' contains chunk text (of ['us-return-window-v2']), whole or in part, "
        "in field 'snippets[0]': keep ids, ranks, versions and timings only; a snippet is text too"
    ) in problems
    assert (
        "trace for case 'eu-paraphrase-rpl14' mentions ['merchant-vip-refurb'], which caller luna-48291 cannot see: "
        "no restricted content"
    ) in problems
    assert (
        "trace for case 'eu-paraphrase-clm7' lacks ['timings_ms']: a compact trace keeps candidate ids, lane ranks, "
        "versions and timings"
    ) in problems
    assert "no trace for failed case(s) ['eu-paraphrase-footwear']" in problems


def test_a_trace_with_made_up_ids_is_named(failing_run, corpus):
    trace = compact_trace(failing_run.failed_outcomes[0], failing_run)
    trace["fused_ids"] = ["us-return-window-v2"]
    problems = check_failed_traces([trace], failing_run, corpus[0], corpus[1]).problems
    assert "trace for case 'us-exact-rtn30': fused_ids ['us-return-window-v2'] differ from the run's ['us-restocking-fee']" in problems


def test_a_60_character_snippet_is_text_too(failing_run, corpus):
    chunks, callers, _ = corpus
    by_id = {c.chunk_id: c for c in chunks}
    traces = [compact_trace(o, failing_run) for o in failing_run.failed_outcomes]
    snippet = by_id["us-return-window-v2"].text[:60]  # 'Rule RTN-30. Most unopened items may be returned within 30 d'
    traces[0] = {**traces[0], "snippet": snippet}
    problems = check_failed_traces(traces, failing_run, chunks, callers).problems
    assert any(p.startswith("trace for case 'us-exact-rtn30' contains chunk text (of ['us-return-window-v2'])")
               for p in problems), problems


def test_zero_based_string_ranks_empty_candidates_and_a_missing_expected_chunk_are_named(failing_run, corpus):
    chunks, callers, _ = corpus
    traces = [compact_trace(o, failing_run) for o in failing_run.failed_outcomes]
    first = traces[0]["candidates"][0]
    traces[0]["candidates"][0] = {**first, "bm25_rank": first["bm25_rank"] - 1 if first["bm25_rank"] else 0}
    traces[0]["candidates"][1] = {**traces[0]["candidates"][1], "dense_rank": "1"}
    traces[1]["candidates"] = []
    expected = failing_run.failed_outcomes[2].case.expected[0]  # eu-carrier-loss-v1, dense rank 1
    traces[2]["candidates"] = [c for c in traces[2]["candidates"] if c["chunk_id"] != expected]
    problems = check_failed_traces(traces, failing_run, chunks, callers).problems
    assert any("candidate" in p and "bm25_rank is 0: ranks are 1-based, the first is 1" in p for p in problems), problems
    assert any("dense_rank is the string '1': store ranks as integers (1, 2, ...) or None" in p for p in problems)
    assert ("trace for case 'eu-paraphrase-rpl14' has no candidates: list every chunk id the lanes returned, each with "
            "its bm25_rank, dense_rank and hybrid_rank") in problems
    assert ("trace for case 'eu-paraphrase-clm7': candidates leave out the expected chunk eu-carrier-loss-v1 "
            "(dense rank 1): a trace of a failed case must show where the expected chunk went") in problems


# --- step 6 ------------------------------------------------------------------------------------------


def _records(run):
    """The reranker artifact built from the run, as a learner would: fused ids with lane ranks."""
    return [
        {
            "case": o.case.name,
            "candidates": [
                {"rank": rank, "chunk_id": cid, "rrf_score": score,
                 "bm25_rank": o.lane_rank(cid, "bm25"), "dense_rank": o.lane_rank(cid, "dense")}
                for rank, (cid, score) in enumerate(zip(o.ids["hybrid"], o.scores["hybrid"]), start=1)
            ],
        }
        for o in run.outcomes
    ]


def test_the_fused_candidates_pass(failing_run, corpus):
    result = check_candidates_artifact(_records(failing_run), failing_run, corpus[0], corpus[1])
    assert result.passed, str(result)


def test_lane_lists_zero_based_ranks_text_and_missing_cases_are_named(failing_run, corpus):
    chunks, callers, _ = corpus
    records = _records(failing_run)
    by_name = {r["case"]: r for r in records}
    by_name["eu-exact-clm7"]["candidates"] = [{"rank": 1, "chunk_id": "eu-neighbour-delivery", "rrf_score": 1 / 61}]
    by_name["eu-exact-rpl14"]["candidates"][0]["rank"] = 0
    by_name["us-exact-rtn30"]["candidates"][0]["text"] = "Rule RTN-31. Opened electronics returned inside the return window are charged a 15 percent restocking fee."
    del by_name["apac-exact-gft5"]
    problems = check_candidates_artifact(list(by_name.values()), failing_run, chunks, callers).problems
    assert (
        "case 'eu-exact-clm7': candidates are not the fused list (expected ['eu-carrier-loss-v1'], "
        "got ['eu-neighbour-delivery']): keep the RRF output"
    ) in problems
    assert ("case 'eu-exact-rpl14': ranks are [0]; they must be 1, 2, ... in order (1-based): "
            "enumerate(..., start=1)") in problems
    assert any(p.startswith("case 'us-exact-rtn30': the record contains chunk text (of ['us-restocking-fee'])")
               for p in problems)
    assert "no candidate record for case(s) ['apac-exact-gft5']" in problems


@pytest.mark.parametrize("bad", [3.1, 1.0])
def test_rrf_scores_that_are_not_the_rrf_of_the_lane_ranks_are_named(failing_run, corpus, bad):
    chunks, callers, _ = corpus
    records = _records(failing_run)
    for record in records:
        for candidate in record["candidates"]:
            candidate["rrf_score"] = bad
    result = check_candidates_artifact(records, failing_run, chunks, callers)
    # eu-exact-rpl14's fused first: BM25 rank 1 and dense rank 1, so 1/(60 + 1) + 1/(60 + 1) = 0.032787.
    assert (
        f"case 'eu-exact-rpl14': eu-refurb-v2-rule has rrf_score {bad!r}, but its lane ranks (bm25 1, dense 1) give "
        "1/(60 + 1) + 1/(60 + 1) = 0.032787: rrf_score is the sum of 1/(rrf_k + rank) over the lanes that returned "
        "the chunk (o.scores['hybrid'])"
    ) in result.problems
    assert rrf_of_ranks([1, 1], 60) == pytest.approx(2 / 61) and rrf_of_ranks([2, None], 60) == pytest.approx(1 / 62)


def test_a_string_rrf_score_gets_a_type_message(failing_run, corpus):
    chunks, callers, _ = corpus
    records = _records(failing_run)
    candidate = records[0]["candidates"][0]
    candidate["rrf_score"] = f"{candidate['rrf_score']:.6f}"
    problems = check_candidates_artifact(records, failing_run, chunks, callers).problems
    assert problems == (
        "case 'eu-exact-rpl14': candidate eu-refurb-v2-rule has rrf_score '0.032787', a str: store the number itself "
        "(a float), not its text",
    )
    assert not any("every candidate needs its rrf_score" in p for p in problems)


def test_string_ranks_everywhere_read_as_one_group_with_a_few_examples(failing_run, corpus):
    chunks, callers, _ = corpus
    records = _records(failing_run)
    for record in records:
        for candidate in record["candidates"]:
            candidate["bm25_rank"] = None if candidate["bm25_rank"] is None else str(candidate["bm25_rank"])
    result = check_candidates_artifact(records, failing_run, chunks, callers)
    strings = [p for p, kind in zip(result.problems, result.kinds) if kind == "ranks stored as strings"]
    assert len(strings) == len(result.problems) > SHOWN_PER_KIND
    text = str(result)
    assert f"  - {len(strings)} ranks stored as strings, for example:" in text
    assert f"      ... and {len(strings) - SHOWN_PER_KIND} more like these" in text
    assert len(text.splitlines()) == 1 + 1 + SHOWN_PER_KIND + 1  # head, group, examples, "and N more"
