"""labsrc.course.checks: each coursework check passes good work and names exactly what is wrong otherwise."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

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
    CheckFailed,
    CheckResult,
    check_adversarial_cases,
    check_candidates_artifact,
    check_dense_source,
    check_failed_traces,
    check_lane_comparison,
    check_positive_cases,
    chunk_text_in,
    hidden_ids_in,
    policy_codes,
    query_style,
)
from labsrc.evaluation.config import GateConfig
from labsrc.evaluation.gates import release_gate
from labsrc.evaluation.report import compact_trace
from labsrc.lanes.embed import embed_to_dir, load_embeddings

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
    assert (
        "case 'vip-refund' expects merchant-vip-refurb, which caller luna-48291 cannot see on 2026-05-27 "
        "(restricted): a positive case may only expect permitted evidence"
    ) in problems
    assert any("case 'old-rule' expects eu-refurb-v1-rule" in p and "(superseded)" in p for p in problems)
    assert "case 'typo' expects 'eu-carrier-loss-v9', which is not in the corpus" in problems
    assert any(p.startswith("case 'stranger' names unknown caller 'nobody'") for p in problems)
    assert "only 4 positive case(s); the assignment asks for at least 8: add 4 more" in problems
    assert any(p.startswith("no paraphrase positive case") for p in problems)


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


def test_forbidding_a_visible_chunk_or_the_wrong_reason_is_named(corpus):
    chunks, callers, _ = corpus
    cases = [
        case("visible", "RPL-14", "restricted", forbidden=("eu-refurb-v2-rule",)),
        case("wrong-reason", "RPL-14 return within 30 days", "restricted", forbidden=("eu-refurb-v1-rule",)),
        case("no-overlap", "gift cards", "superseded", forbidden=("eu-refurb-v1-rule",)),
        case("not-absent", "what does CLM-7 say", "absent"),
    ]
    problems = check_adversarial_cases(cases, chunks, callers, EVAL_DATE, minimum=1).problems
    assert (
        "case 'visible' forbids eu-refurb-v2-rule, but caller luna-48291 may see it on 2026-05-27: the gate would "
        "fail on permitted evidence; forbid only chunks the boundary hides"
    ) in problems
    assert (
        "restricted case 'wrong-reason' forbids eu-refurb-v1-rule, which is hidden from luna-48291 as superseded, "
        "not as restricted: pick a chunk that tests the restricted rule"
    ) in problems
    assert any(p.startswith("case 'no-overlap' shares no word with forbidden chunk eu-refurb-v1-rule") for p in problems)
    assert (
        "absent case 'not-absent' names a code that permitted chunk(s) ['eu-carrier-loss-v1'] carry: "
        "the evidence is not absent for this caller"
    ) in problems


def test_a_not_yet_effective_chunk_counts_as_superseded(corpus):
    chunks, callers, cases = corpus
    holiday = [c for c in cases if c.name == "not-yet-effective-holiday"]
    result = check_adversarial_cases(holiday, chunks, callers, EVAL_DATE, minimum=1)
    assert not any("not-yet-effective-holiday" in p for p in result.problems)


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
    assert any(p.startswith("MODEL.json lacks ['packaged_by', 'sentence_transformers'") for p in problems)
    assert "case(s) ['other'] have no stored query vector: re-run 'labsrc embed --queries' on your cases" in problems


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
        "trace for case 'us-exact-rtn30' contains chunk text (of ['us-return-window-v2']): "
        "keep ids, ranks, versions and timings only"
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
    assert "case 'eu-exact-rpl14': ranks are [0]; they must be 1, 2, ... in order (1-based)" in problems
    assert "case 'us-exact-rtn30': the record contains chunk text (of ['us-restocking-fee']); store ids, not text" in problems
    assert "no candidate record for case(s) ['apac-exact-gft5']" in problems
