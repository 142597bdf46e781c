"""Coursework round 5 (issue 48, item 4): each message names the mistake the learner actually made.

Each test makes one mistake the way a learner would (in the exercise's own code, from the run it works on), feeds
it to the check that meets it, and asserts the message names that mistake, not a neighbouring one: warm-up rounds
in the percentiles (not interpolation), RRF summed only where both lanes rank a chunk (not rounding), two
expectations for one question (not a repeat), swapped lanes and a list kept at another k (not "differ").
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from labsrc import EVAL_DATE, PolicyRetriever, load_callers, load_cases, load_chunks, percentile_ms
from labsrc.course.checks import check_candidates_artifact, check_failed_traces, check_lane_comparison, check_positive_cases
from labsrc.evaluation.latency import LatencyReport
from labsrc.gate.config import GateConfig
from labsrc.gate.gates import release_gate
from labsrc.lanes.embed import load_embeddings

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "fixtures" / "policies"
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"
STAGES = ("authorize", "bm25", "dense", "fusion")


@pytest.fixture(scope="module")
def corpus():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    return chunks, callers, load_cases(POLICIES / "cases.jsonl")


@pytest.fixture(scope="module")
def retriever(corpus):
    # No live encoder: every query these tests ask is one the course stored a vector for.
    source = load_embeddings(POLICIES / "vectors" / "all-MiniLM-L6-v2", chunks=corpus[0], allow_live=False)
    return PolicyRetriever(corpus[0], source)


def _run(corpus, retriever, top_k):
    chunks, callers, cases = corpus
    return release_gate(retriever, cases, callers, GateConfig(top_k=top_k, on_date=EVAL_DATE), measure=False)


@pytest.fixture(scope="module")
def run_k1(corpus, retriever):
    """Exercise 5's run: the course's cases at top_k = 1, where some fail."""
    return _run(corpus, retriever, 1)


@pytest.fixture(scope="module")
def run_k4(corpus, retriever):
    """Exercise 6's run: the course's cases at top_k = 4, a reranker's deeper list."""
    return _run(corpus, retriever, 4)


def _trace(o):
    """Exercise 5's model trace of a failed outcome, as the solution builds it."""
    seen = sorted(set(o.ids["bm25"]) | set(o.ids["dense"]) | set(o.ids["hybrid"]))
    return {"case": o.case.name, **o.trace.to_dict(),
            "candidates": [{"chunk_id": cid, **{f"{lane}_rank": o.lane_rank(cid, lane)
                                                for lane in ("bm25", "dense", "hybrid")}} for cid in seen]}


# --- 1. percentiles with the warm-up rounds included ------------------------------------------------


def test_percentiles_over_the_warm_up_rounds_too_are_named_warm_up_not_interpolation(corpus, retriever):
    chunks, callers, cases = corpus
    run = _run(corpus, retriever, 2)
    # measure_latency keeps the warm-up rounds' timings apart (2 rounds of the 30 cases here), and out of p50/p95.
    from labsrc.evaluation import measure_latency
    measured = measure_latency(retriever, cases, callers, EVAL_DATE, 2, warmup=2, repetitions=3)
    assert {s: len(measured.warmup_samples[s]) for s in STAGES} == {s: 2 * len(cases) for s in STAGES}
    assert {s: len(measured.samples[s]) for s in STAGES} == {s: 3 * len(cases) for s in STAGES}
    # Timings vary, so the run's are fixed numbers: the first (warm-up) rounds slow, the timed ones fast, as usual.
    warm = tuple(2.0 + 0.37 * i for i in range(2 * len(cases)))
    timed = tuple(0.05 + 0.011 * i for i in range(3 * len(cases)))
    run = dataclasses.replace(run, latency=LatencyReport({s: timed for s in STAGES}, 2, 3, len(timed),
                                                         warmup_samples={s: warm for s in STAGES}))
    # The learner takes p50 and p95 over every timing the run took.
    every = {s: [*run.latency.warmup_samples[s], *run.latency.samples[s]] for s in STAGES}
    latency = {s: {"p50": percentile_ms(every[s], 50), "p95": percentile_ms(every[s], 95)} for s in STAGES}
    problems = check_lane_comparison(dict(run.recall), latency, run).problems
    assert len(problems) == 2 * len(STAGES), problems
    for stage in STAGES:
        for stat, q in (("p50", 50), ("p95", 95)):
            problem = next(p for p in problems if p.startswith(f"stage {stage} {stat} is "))
            assert ("these samples are not the run's: it drops the warm-up rounds (2 untimed rounds, 60 requests, "
                    "that build caches and indexes) and summarises only the 90 samples of its 3 timed rounds; your "
                    f"{stat} is taken over all 150, warm-up included: take run.latency.{stat}_ms[{stage!r}], or "
                    f"percentile_ms(run.latency.samples[{stage!r}], {q})") in problem
            assert "interpolation" not in problem, problem


# --- 2. RRF summed only where both lanes rank the chunk ---------------------------------------------


def test_rrf_summed_only_over_chunks_both_lanes_return_is_named_not_rounding(run_k4, corpus):
    chunks, callers, _ = corpus
    records = []
    for o in run_k4.outcomes:
        candidates = []
        for rank, cid in enumerate(o.ids["hybrid"], start=1):
            bm25, dense = o.lane_rank(cid, "bm25"), o.lane_rank(cid, "dense")
            # The mistake: a chunk only one lane returned gets no RRF at all.
            score = 1 / (60 + bm25) + 1 / (60 + dense) if bm25 is not None and dense is not None else 0.0
            candidates.append({"rank": rank, "chunk_id": cid, "rrf_score": score, "bm25_rank": bm25, "dense_rank": dense})
        records.append({"case": o.case.name, "candidates": candidates})
    problems = check_candidates_artifact(records, run_k4, chunks, callers).problems
    assert (
        "case 'eu-exact-rpl14': eu-refurb-tablet-rule has rrf_score 0.0: RRF sums 1/(k + rank) over every lane that "
        "returned the chunk; eu-refurb-tablet-rule is in one lane, so its score is 1/(60 + 2) = "
        f"{1 / (60 + 2)!r} (dense rank 2; bm25 did not return it), not 0 (o.scores['hybrid'])"
    ) in problems
    assert not any("rounded" in p for p in problems), problems


# --- 3. two positive cases, one question, different expected chunks ---------------------------------


def test_one_question_with_two_expected_chunks_is_named_a_conflict_not_a_repeat(corpus):
    chunks, callers, _ = corpus
    mine = [c for c in load_cases(SOLUTION / "cases.jsonl") if c.kind == "positive"]
    rpl14 = next(c for c in mine if c.name == "eu-exact-rpl14")
    # The learner copies the code case for the tablet rule and changes the expected chunk, not the query.
    tablet = dataclasses.replace(rpl14, name="eu-exact-rpl14-tablet", expected=("eu-refurb-tablet-rule",))
    problems = check_positive_cases([*mine, tablet], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'eu-exact-rpl14-tablet' asks the same query as 'eu-exact-rpl14' for the same caller but expects "
        "eu-refurb-tablet-rule where 'eu-exact-rpl14' expects eu-refurb-v2-rule: the two expectations conflict "
        "(one question, two different right answers); if both chunks answer it, keep one case expecting both "
        "(eu-refurb-tablet-rule, eu-refurb-v2-rule), otherwise drop the case whose chunk does not answer it",
    )
    # The same case expecting the same chunk is still a plain repeat.
    again = dataclasses.replace(rpl14, name="eu-exact-rpl14-again")
    assert check_positive_cases([*mine, again], chunks, callers, EVAL_DATE).problems == (
        "case 'eu-exact-rpl14-again' asks the same query as 'eu-exact-rpl14' for the same caller: it adds no evidence",
    )


# --- 4. the lanes swapped in a trace -----------------------------------------------------------------


def test_swapped_lanes_in_a_trace_are_named_swapped(run_k1, corpus):
    chunks, callers, _ = corpus
    traces = []
    for o in run_k1.failed_outcomes:
        trace = _trace(o)
        # The mistake: the dense lane's ids filed as sparse_ids, and BM25's as dense_ids.
        trace["sparse_ids"], trace["dense_ids"] = list(o.trace.dense_ids), list(o.trace.sparse_ids)
        traces.append(trace)
    problems = check_failed_traces(traces, run_k1, chunks, callers).problems
    assert (
        "trace for case 'eu-paraphrase-rpl14': sparse_ids are the run's dense_ids and the other way round "
        "(sparse_ids ['eu-refurb-v2-rule'], dense_ids ['eu-laptop-accessories']): sparse_ids is the BM25 lane's "
        "list (o.trace.sparse_ids), dense_ids the dense lane's (o.trace.dense_ids)"
    ) in problems
    assert not any("differ from the run's" in p for p in problems), problems


# --- 5. a list kept at another k ---------------------------------------------------------------------


def test_a_trace_searched_at_the_default_k_names_the_runs_top_k(run_k1, corpus, retriever):
    chunks, callers, _ = corpus
    traces = []
    for o in run_k1.failed_outcomes:
        # The mistake: searched again without run.config.top_k, so search's default (2) applies.
        trace = _trace(o)
        fresh = retriever.search(o.case.query, callers[o.case.caller], run_k1.on_date).trace
        trace.update(sparse_ids=list(fresh.sparse_ids), dense_ids=list(fresh.dense_ids), fused_ids=list(fresh.fused_ids))
        traces.append(trace)
    problems = check_failed_traces(traces, run_k1, chunks, callers).problems
    assert (
        "trace for case 'eu-paraphrase-rpl14': dense_ids holds 2 ids (['eu-refurb-v2-rule', 'eu-refurb-tablet-rule']), "
        "the run's 1 (['eu-refurb-v2-rule']); fused_ids holds 2 ids (['eu-laptop-accessories', 'eu-refurb-v2-rule']), "
        "the run's 1 (['eu-laptop-accessories']): the run kept top_k = 1 (run.config.top_k), so none of its lists "
        "holds more than 1; search with top_k=run.config.top_k, or copy o.trace.to_dict()"
    ) in problems
    assert not any("differ from the run's" in p for p in problems), problems


def test_candidates_cut_before_the_runs_k_name_the_runs_top_k(run_k4, corpus):
    chunks, callers, _ = corpus
    # The mistake: "a reranker takes the top 2", so the fused list is cut at 2 where the run kept 4.
    records = [{"case": o.case.name,
                "candidates": [{"rank": rank, "chunk_id": cid, "rrf_score": score, "bm25_rank": o.lane_rank(cid, "bm25"),
                                "dense_rank": o.lane_rank(cid, "dense")}
                               for rank, (cid, score) in enumerate(zip(o.ids["hybrid"][:2], o.scores["hybrid"][:2]),
                                                                   start=1)]}
               for o in run_k4.outcomes]
    problems = check_candidates_artifact(records, run_k4, chunks, callers).problems
    fused = list(next(o for o in run_k4.outcomes if o.case.name == "eu-exact-rpl14").ids["hybrid"])
    assert (
        f"case 'eu-exact-rpl14': candidates hold 2 ids ({fused[:2]}), the fused list 4 ({fused}): the run kept "
        "top_k = 4 (run.config.top_k); keep the whole fused list, o.ids['hybrid']"
    ) in problems
    assert not any("are not the fused list" in p for p in problems), problems
