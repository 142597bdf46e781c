"""Coursework round 3 (issue 23): each mistake a learner made, fed to its check, with the message it now gets.

The checks live in labsrc.course.checks; the records' constructors in labsrc.records; the notebook answers'
shapes in labsrc.course.answers. One test per mistake, named after it.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import numpy as np
import pytest
from factories import reseal

from labsrc import EVAL_DATE, Caller, Case, PolicyRetriever, load_callers, load_cases, load_chunks
from labsrc.course.checks import (
    DENSE_REACH_MIN_COSINE,
    check_adversarial_cases,
    check_dense_source,
    check_encoder_report,
    check_failed_traces,
    check_lane_comparison,
    check_positive_cases,
)
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate
from labsrc.evaluation.metrics import recall_at_k
from labsrc.reports.report import compact_trace
from labsrc.lanes.embed import load_embeddings
from labsrc.records.loading import load_callers as load_callers_file

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "fixtures" / "policies"
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"


@pytest.fixture(scope="module")
def corpus():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    return chunks, callers, load_cases(POLICIES / "cases.jsonl")


@pytest.fixture(scope="module")
def source(corpus):
    # No live encoder: every query these tests ask is one the course stored a vector for.
    return load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2", chunks=corpus[0], allow_live=False)


@pytest.fixture(scope="module")
def run_k2(corpus, source):
    chunks, callers, cases = corpus
    config = GateConfig(top_k=2, warmup=0, repetitions=2, on_date=EVAL_DATE)
    return PolicyRetriever(chunks, source), release_gate(PolicyRetriever(chunks, source), cases, callers, config)


@pytest.fixture(scope="module")
def run_k1(corpus, source):
    chunks, callers, cases = corpus
    config = GateConfig(top_k=1, warmup=0, repetitions=2, on_date=EVAL_DATE)
    return release_gate(PolicyRetriever(chunks, source), cases, callers, config)


def positive(name, query, chunk_id, caller="luna-48291"):
    return Case(name=name, query=query, caller=caller, kind="positive", expected=(chunk_id,))


# --- exercise 1 -----------------------------------------------------------------------------------


def test_a_query_copied_from_its_chunk_is_caught_even_with_a_code_in_it(corpus):
    chunks, callers, cases = corpus
    by_id = {c.chunk_id: c for c in chunks}
    text = by_id["eu-refurb-v2-rule"].text  # "Rule RPL-14. ..." : a code, so the query reads as mixed
    copied = positive("copied", text, "eu-refurb-v2-rule")
    problems = check_positive_cases([*cases, copied], chunks, callers, EVAL_DATE).problems
    words = len(text.replace(".", " ").split())
    assert any(p.startswith(f"case 'copied' copies {words} consecutive words of its expected chunk eu-refurb-v2-rule's "
                            f"text into its query (mixed query of {words} words)") and
               "write the question a customer would ask" in p for p in problems), problems
    # The course's own positives (mixed ones included) copy no run of five words.
    assert check_positive_cases(cases, chunks, callers, EVAL_DATE).passed


def test_an_id_in_the_wrong_letter_case_is_named_with_the_right_one(corpus):
    chunks, callers, cases = corpus
    wrong = positive("wrong-case", "RPL-14 laptop", "EU-Refurb-v2-rule")
    problems = check_positive_cases([*cases, wrong], chunks, callers, EVAL_DATE).problems
    assert ("case 'wrong-case', field 'expected', value 'EU-Refurb-v2-rule': no stored chunk has this id; check the "
            "spelling against chunks.jsonl; ids are case-sensitive: did you mean 'eu-refurb-v2-rule'?") in problems
    typo = positive("typo", "RPL-14 laptop", "eu-refurb-v2-rul")
    problems = check_positive_cases([*cases, typo], chunks, callers, EVAL_DATE).problems
    assert any(p.endswith("did you mean 'eu-refurb-v2-rule' or 'eu-refurb-v1-rule'?") and "'typo'" in p
               for p in problems), problems


# --- exercise 2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("region", ["", "   "])
def test_a_caller_with_a_blank_region_is_refused_like_load_callers_refuses_it(region, tmp_path):
    with pytest.raises(InvalidArgument) as info:
        Caller("ana-eu-01", region, {"support:eu"})
    assert str(info.value) == f"Caller 'ana-eu-01': field 'region' must not be empty or blank, got {region!r}"
    path = tmp_path / "callers.json"
    path.write_text(f'[{{"actor_id": "ana-eu-01", "region": "{region}", "acl_tags": ["support:eu"]}}]', encoding="utf-8")
    with pytest.raises(InvalidRecord, match="region.*must not be empty or blank"):
        load_callers_file(path)


def test_caller_refuses_a_string_of_tags_and_blank_or_wrong_typed_fields():
    with pytest.raises(InvalidArgument, match=r"field 'acl_tags' must be a collection of tag strings, got str "
                                              r"'support:eu'; write acl_tags=\{'support:eu'\} for one tag"):
        Caller("ana", "EU", "support:eu")
    with pytest.raises(InvalidArgument, match="Caller: field 'actor_id' must not be empty or blank"):
        Caller(" ", "EU")
    with pytest.raises(InvalidArgument, match="Caller 'ana': field 'region' must be a string, got NoneType"):
        Caller("ana", None)
    with pytest.raises(InvalidArgument, match="Caller 'ana': field 'acl_tags' must not be empty or blank"):
        Caller("ana", "EU", {""})
    assert Caller("ana", "EU", ["a", "b"]).acl_tags == frozenset({"a", "b"})


def test_a_meaning_only_attack_the_dense_lane_would_aim_is_accepted(corpus, source):
    chunks, callers, _ = corpus
    solution = [c for c in load_cases(SOLUTION / "cases.jsonl") if c.kind != "positive"]
    # No word in common with "VIP-RPL-1. Damaged refurbished laptops receive immediate refund.", but the same need:
    # with the boundary lifted for it, MiniLM ranks the hidden chunk 3 of Luna's 18 + 1 (cosine 0.32).
    attack = Case(name="meaning-only", query="swap a broken reconditioned notebook", caller="luna-48291",
                  kind="restricted", forbidden=("merchant-vip-refurb",))
    with_dense = check_adversarial_cases([*solution, attack], chunks, callers, EVAL_DATE, dense=source)
    assert with_dense.passed, with_dense
    assert ("meaning-only: a meaning-only attack the dense lane, without the boundary, ranks merchant-vip-refurb "
            "within its top 5") in with_dense.passes
    # Without a dense source to ask, the check says so instead of blaming the attack on shared words alone.
    without = check_adversarial_cases([*solution, attack], chunks, callers, EVAL_DATE).problems
    assert any("no dense source was given to ask whether the dense lane would reach it (pass dense= to the check "
               "for a meaning-only attack)" in p for p in without), without


def test_an_attack_neither_lane_aims_at_its_chunk_is_named_with_the_dense_rank(corpus, source):
    chunks, callers, _ = corpus
    solution = [c for c in load_cases(SOLUTION / "cases.jsonl") if c.kind != "positive"]
    far = Case(name="gift-card", query="when does my gift card expire", caller="luna-48291", kind="restricted",
               forbidden=("merchant-vip-refurb",))
    problems = check_adversarial_cases([*solution, far], chunks, callers, EVAL_DATE, dense=source).problems
    assert problems == (
        "case 'gift-card' shares no word with forbidden chunk merchant-vip-refurb, so BM25 would not find it even "
        "without the boundary, and the dense lane, over luna-48291's permitted chunks with merchant-vip-refurb let "
        "through, ranks it 15 (deeper than its top 5): use wording or a code from that chunk, or say what it says "
        "in other words, close enough in meaning for the dense lane",
    )


def test_a_top_ranked_chunk_at_a_low_similarity_is_not_an_attack(corpus, source):
    chunks, callers, _ = corpus
    solution = [c for c in load_cases(SOLUTION / "cases.jsonl") if c.kind != "positive"]
    # A dense lane ranks something first for any query: "can I pay with bitcoin" puts the refund rule 2nd.
    unrelated = Case(name="bitcoin", query="can I pay with bitcoin", caller="luna-48291", kind="restricted",
                     forbidden=("merchant-vip-refurb",))
    problems = check_adversarial_cases([*solution, unrelated], chunks, callers, EVAL_DATE, dense=source).problems
    assert len(problems) == 1
    assert (f"ranks it 2, but at a similarity of only 0.15 (below {DENSE_REACH_MIN_COSINE}): the query is not about "
            "what the chunk says") in problems[0]


def test_a_string_forbidden_is_refused_not_split_into_letters():
    with pytest.raises(InvalidArgument) as info:
        Case(name="vip", query="VIP-RPL-1", caller="luna-48291", kind="restricted", forbidden="merchant-vip-refurb")
    assert str(info.value) == (
        "case 'vip': field 'forbidden' must be a tuple of chunk ids, got the string 'merchant-vip-refurb', which would "
        "be read letter by letter: write forbidden=('merchant-vip-refurb',)"
    )
    with pytest.raises(InvalidArgument, match=r"case 'p': field 'expected' must be a tuple of chunk ids, got the string"):
        Case(name="p", query="RPL-14", caller="luna-48291", kind="positive", expected="eu-refurb-v2-rule")
    with pytest.raises(InvalidArgument, match=r"case 'p': field 'expected' holds the blank id ' '"):
        Case(name="p", query="RPL-14", caller="luna-48291", kind="positive", expected=(" ",))


def test_an_on_date_given_as_a_string_is_refused_naming_the_case():
    with pytest.raises(InvalidArgument) as info:
        Case(name="before-april", query="RPL-14", caller="luna-48291", kind="positive",
             expected=("eu-refurb-v1-rule",), on_date="2025-06-01")
    assert str(info.value) == ("case 'before-april': field 'on_date' must be a datetime.date or None, got the string "
                               "'2025-06-01': write on_date=dt.date(2025, 6, 1)")
    with pytest.raises(InvalidArgument, match="case 'x': field 'on_date' must be a datetime.date or None, got datetime"):
        Case(name="x", query="q", caller="c", kind="absent", on_date=dt.datetime(2025, 6, 1))


@pytest.mark.parametrize(("fields", "message"), [
    ({"name": " "}, "Case: field 'name' must not be empty or blank (got ' '); every case needs a name"),
    ({"caller": ""}, "case 'c1': field 'caller' must not be empty or blank, got ''"),
    ({"kind": 3}, "case 'c1': field 'kind' must be a string, got int 3"),
    ({"query": None}, "case 'c1': field 'query' must be a string, got NoneType None"),
    ({"notes": 5}, "case 'c1': field 'notes' must be a string or None, got int"),
])
def test_case_refuses_blank_or_wrong_typed_fields(fields, message):
    base = {"name": "c1", "query": "RPL-14", "caller": "luna-48291", "kind": "positive", "expected": ("x",)}
    with pytest.raises(InvalidArgument) as info:
        Case(**{**base, **fields})
    assert str(info.value) == message


def test_a_blank_region_or_tag_on_a_policy_chunk_is_refused():
    from labsrc import PolicyChunk

    fields = dict(chunk_id="c1", document_id="d", parent_id="d", version="v1", region="EU", acl_tag="support:eu",
                  effective_from=dt.date(2026, 1, 1), effective_to=None, text="t")
    for name in ("region", "acl_tag"):
        with pytest.raises(InvalidArgument) as info:
            PolicyChunk(**{**fields, name: " "})
        assert str(info.value) == f"PolicyChunk 'c1': field {name!r} must not be empty or blank, got ' '"
    with pytest.raises(InvalidArgument, match="PolicyChunk: field 'chunk_id' must not be empty or blank"):
        PolicyChunk(**{**fields, "chunk_id": ""})
    with pytest.raises(InvalidArgument, match="field 'effective_from' must be a datetime.date, got the string '2026-01-01'"):
        PolicyChunk(**{**fields, "effective_from": "2026-01-01"})


# --- exercise 3 -----------------------------------------------------------------------------------


def _vectors_with_query_rows_from_documents(tmp_path: Path, names: list[str] | None) -> Path:
    """A copy of the model answer's vectors whose query rows (``names``, or all) are their expected chunk's row."""
    folder = tmp_path / "vectors"
    shutil.copytree(SOLUTION / "vectors" / "all-MiniLM-L6-v2", folder)
    query_ids = (folder / "query_ids.txt").read_text(encoding="utf-8").split()
    corpus_ids = (folder / "corpus_ids.txt").read_text(encoding="utf-8").split()
    queries, documents = np.load(folder / "queries.npy"), np.load(folder / "corpus.npy")
    expected = {c.name: c.expected[0] for c in load_cases(SOLUTION / "cases.jsonl") if c.expected}
    for name in names if names is not None else list(expected):
        queries[query_ids.index(name)] = documents[corpus_ids.index(expected[name])]
    np.save(folder / "queries.npy", queries)
    return reseal(folder)  # edited by a learner's own script, which wrote checksums.json again


def test_a_document_vector_reused_as_a_query_vector_is_named(tmp_path, corpus):
    chunks, callers, _ = corpus
    cases = load_cases(SOLUTION / "cases.jsonl")
    swapped = load_embeddings(_vectors_with_query_rows_from_documents(tmp_path, ["eu-paraphrase-rpl14"]), chunks=chunks)
    problems = check_dense_source(swapped, cases, chunks=chunks).problems
    assert problems == (
        "case 'eu-paraphrase-rpl14': its stored query vector is chunk eu-refurb-v2-rule's document vector (cosine "
        "1.0000), not a vector of the query text: a document vector used as a query finds its own chunk by "
        "construction and measures nothing; embed the query itself (labsrc embed --queries)",
    )
    report = {"model": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384, "normalized": True,
              "dense_wins": "eu-paraphrase-rpl14", "shared_terms": set(), "bm25_wins": "eu-exact-clm7"}
    result = check_encoder_report(report, swapped, cases, chunks, callers, EVAL_DATE)
    assert not result.passed and any("its stored query vector is chunk eu-refurb-v2-rule's" in p for p in result.problems)


def test_all_query_vectors_swapped_are_blamed_on_the_vectors_not_the_report(tmp_path, corpus):
    chunks, callers, _ = corpus
    cases = load_cases(SOLUTION / "cases.jsonl")
    swapped = load_embeddings(_vectors_with_query_rows_from_documents(tmp_path, None), chunks=chunks)
    report = {"model": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384, "normalized": True,
              "dense_wins": "eu-paraphrase-rpl14", "shared_terms": set(), "bm25_wins": "eu-exact-clm7"}
    problems = check_encoder_report(report, swapped, cases, chunks, callers, EVAL_DATE).problems
    copied = [p for p in problems if "its stored query vector is chunk" in p]
    assert len(copied) == sum(1 for c in cases if c.expected)
    assert not any("pick a case the dense lane finds" in p for p in problems)
    assert "the lane questions (dense_wins, bm25_wins) are checked once the dense source above is right" in problems


def test_the_model_answers_vectors_are_not_copies(corpus):
    chunks = corpus[0]
    cases = load_cases(SOLUTION / "cases.jsonl")
    result = check_dense_source(load_embeddings(SOLUTION / "vectors" / "all-MiniLM-L6-v2", chunks=chunks), cases, chunks=chunks)
    assert result.passed and "every case query has its own vector, not a chunk's document vector" in result.passes


# --- exercise 4 -----------------------------------------------------------------------------------


def _recall(run, k):
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    return {lane: sum(o.recall(lane, k) for o in positives) / len(positives) for lane in ("bm25", "dense", "hybrid")}


def _latency(run):
    return {s: {"p50": run.latency.p50_ms[s], "p95": run.latency.p95_ms[s]} for s in run.latency.stages}


@pytest.mark.parametrize("k", [5, 60])
def test_recall_at_another_k_than_the_runs_is_named(run_k2, k):
    retriever, run = run_k2
    # The run keeps two results per lane, so Recall@5 of them is the same number as Recall@2 ...
    assert _recall(run, k) == _recall(run, 2)
    # ... and only the k the learner states tells the mistake.
    result = check_lane_comparison(_recall(run, k), _latency(run), run, retriever=retriever, k=k)
    assert result.problems == (
        f"you computed Recall@{k}; the run asked k = 2 (run.config.top_k): it keeps 2 results per lane, so "
        f"Recall@{k} of them is Recall@2's number under the wrong name; set k = run.config.top_k",
    )
    assert check_lane_comparison(_recall(run, 2), _latency(run), run, retriever=retriever, k=2).passed


def test_recall_at_1_instead_of_2_is_named_as_such_not_as_over_all_chunks(run_k2):
    retriever, run = run_k2
    positives = [o for o in run.outcomes if o.case.kind == "positive"]
    at_1 = {lane: sum(recall_at_k(list(o.ids[lane])[:1], o.case.expected, 1) for o in positives) / len(positives)
            for lane in ("bm25", "dense", "hybrid")}
    problems = check_lane_comparison(at_1, _latency(run), run, retriever=retriever).problems
    assert problems, "Recall@1 differs from Recall@2 on the course cases"
    for p in problems:
        assert "this matches Recall@1; the run asked k = 2 (run.config.top_k)" in p, p
        assert "computed over all chunks" not in p


def test_swapped_latency_rows_are_named_as_swapped(run_k1):
    latency = _latency(run_k1)
    swapped = {**latency, "bm25": latency["dense"], "dense": latency["bm25"]}
    problems = check_lane_comparison(_recall(run_k1, 1), swapped, run_k1).problems
    assert any(p.startswith("stage bm25 p50 is") and p.endswith(
        "this is the dense stage's p50: rows swapped? take run.latency.p50_ms['bm25'] for the bm25 stage") for p in problems), problems
    assert any(p.startswith("stage dense p95 is") and p.endswith(
        "this is the bm25 stage's p95: rows swapped? take run.latency.p95_ms['dense'] for the dense stage") for p in problems)
    assert not any("percentile" in p for p in problems)


# --- exercise 5 -----------------------------------------------------------------------------------


def _traces(run):
    traces = []
    for o in run.failed_outcomes:
        seen = sorted(set(o.ids["bm25"]) | set(o.ids["dense"]) | set(o.ids["hybrid"]))
        traces.append({"case": o.case.name, **o.trace.to_dict(), "candidates": [
            {"chunk_id": cid, **{f"{lane}_rank": o.lane_rank(cid, lane) for lane in ("bm25", "dense", "hybrid")}}
            for cid in seen]})
    return traces


def test_chunk_titles_in_a_trace_are_named(run_k1, corpus):
    chunks, callers, _ = corpus
    by_id = {c.chunk_id: c for c in chunks}
    traces = _traces(run_k1)
    traces[0]["titles"] = [by_id[c["chunk_id"]].title for c in traces[0]["candidates"]]
    problems = check_failed_traces(traces, run_k1, chunks, callers).problems
    assert ("trace for case 'us-exact-rtn30' contains the title of ['us-restocking-fee'] in field 'titles[0]': a title "
            "is chunk text too; keep the chunk id, and look the title up through the boundary when you need it") in problems


def test_a_negative_timing_is_named(run_k1, corpus):
    chunks, callers, _ = corpus
    traces = _traces(run_k1)
    traces[1]["timings_ms"] = {**traces[1]["timings_ms"], "bm25": -0.5}
    problems = check_failed_traces(traces, run_k1, chunks, callers).problems
    assert problems == ("trace for case 'eu-paraphrase-rpl14': timings_ms['bm25'] is -0.5: a duration cannot be "
                        "negative; copy the run's o.trace.timings_ms",)


def test_candidates_in_reversed_order_are_named(run_k1, corpus):
    chunks, callers, _ = corpus
    traces = _traces(run_k1)
    traces[1]["candidates"] = traces[1]["candidates"][::-1]
    problems = check_failed_traces(traces, run_k1, chunks, callers).problems
    assert problems == ("trace for case 'eu-paraphrase-rpl14': candidates are in reversed order (['eu-refurb-v2-rule', "
                        "'eu-laptop-accessories']): list them by chunk_id ascending, as labsrc gate's compact traces "
                        "do, so two traces of one case compare line by line",)


def test_text_hidden_in_a_nested_field_is_named_with_the_field(run_k1, corpus):
    chunks, callers, _ = corpus
    by_id = {c.chunk_id: c for c in chunks}
    traces = _traces(run_k1)
    traces[2]["debug"] = {"raw": [by_id["eu-battery-safety"].text]}
    problems = check_failed_traces(traces, run_k1, chunks, callers).problems
    assert problems == ("trace for case 'eu-paraphrase-clm7' contains chunk text (of ['eu-battery-safety']), whole or "
                        "in part, in field 'debug.raw[0]': keep ids, ranks, versions and timings only; a snippet is "
                        "text too",)


def test_a_gate_written_trace_of_a_case_no_lane_found_passes(corpus, source):
    chunks, callers, cases = corpus
    # A stored query (so no live encoder is needed) about something no EU chunk covers: no lane finds the rule.
    unfindable = positive("eu-unfindable", "when does my gift card expire", "eu-refurb-v2-rule")
    config = GateConfig(top_k=2, warmup=0, repetitions=2, on_date=EVAL_DATE)
    retriever = PolicyRetriever(chunks, source)
    run = release_gate(retriever, [*cases, unfindable], callers, config, measure=False)
    outcome = next(o for o in run.outcomes if o.case.name == "eu-unfindable")
    assert outcome.error is None, outcome.error
    assert not outcome.passed and all("eu-refurb-v2-rule" not in outcome.ids[lane] for lane in outcome.ids)
    traces = [compact_trace(o, run) for o in run.failed_outcomes]
    result = check_failed_traces(traces, run, chunks, callers)
    assert result.passed, result


def test_the_reported_meaning_only_attack_is_accepted_with_the_real_encoder(corpus):
    """The attack from the issue, embedded live (the embed extra): no shared word, the same need."""
    pytest.importorskip("sentence_transformers")
    chunks, callers, _ = corpus
    live = load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2", chunks=chunks, allow_live=True)
    solution = [c for c in load_cases(SOLUTION / "cases.jsonl") if c.kind != "positive"]
    attack = Case(name="second-hand-notebook", query="instant money back when my second-hand notebook arrives broken",
                  caller="luna-48291", kind="restricted", forbidden=("merchant-vip-refurb",))
    result = check_adversarial_cases([*solution, attack], chunks, callers, EVAL_DATE, dense=live)
    assert result.passed, result
    assert any(p.startswith("second-hand-notebook: a meaning-only attack") for p in result.passes)
