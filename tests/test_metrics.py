"""Metrics: hand-computed values (arithmetic shown), edge cases, and ranx as an oracle."""

from __future__ import annotations

import math
import random

import pytest
from ranx_oracle import ranx_jobs

from labsrc.errors import InvalidArgument
from labsrc.evaluation.metrics import (
    evaluate_run,
    hit_at_k,
    ndcg_at_k,
    precision_at_k,
    rank_run,
    recall_at_k,
    reciprocal_rank,
)

RANKED = ["d3", "d1", "d7", "d2"]


# --- per-query metrics ----------------------------------------------------------------


def test_recall_at_k_counts_relevant_ids_in_the_top_k() -> None:
    assert recall_at_k(RANKED, {"d1", "d2", "d9"}, 2) == pytest.approx(1 / 3)
    assert recall_at_k(RANKED, {"d1", "d2", "d9"}, 4) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, {"d1", "d2", "d9"}, 100) == pytest.approx(2 / 3)


def test_recall_of_the_lesson_lanes() -> None:
    # exact-code, paraphrase, shared-language: BM25 finds 1 + 0 + 1 of 3.
    bm25 = [["eu-refurb-v2-rule"], [], ["eu-refurb-v2-rule", "eu-footwear-v1-rule"]]
    values = [recall_at_k(ranked, {"eu-refurb-v2-rule"}, 2) for ranked in bm25]
    assert sum(values) / 3 == pytest.approx((1 + 0 + 1) / 3)


def test_recall_with_nothing_relevant_is_zero() -> None:
    assert recall_at_k(RANKED, set(), 3) == 0.0
    assert recall_at_k(RANKED, {"d1": 0, "d2": 0}, 3) == 0.0  # grade 0 is not relevant


def test_precision_divides_by_k_even_for_short_lists() -> None:
    assert precision_at_k(RANKED, {"d1", "d2"}, 2) == pytest.approx(1 / 2)
    assert precision_at_k(["d1"], {"d1"}, 5) == pytest.approx(1 / 5)  # trec_eval P_5


def test_hit_at_k() -> None:
    assert hit_at_k(RANKED, {"d7"}, 2) == 0.0
    assert hit_at_k(RANKED, {"d7"}, 3) == 1.0


def test_reciprocal_rank_with_and_without_cutoff() -> None:
    assert reciprocal_rank(RANKED, {"d7", "d2"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(RANKED, {"d7", "d2"}, k=2) == 0.0
    assert reciprocal_rank(RANKED, {"nope"}) == 0.0


def test_ndcg_linear_gain_arithmetic() -> None:
    gains = {"d1": 3, "d2": 1, "d9": 2}
    # DCG@3 of [d3, d1, d7] = 0/log2(2) + 3/log2(3) + 0/log2(4)
    dcg = 3 / math.log2(3)
    # IDCG@3 = ideal gains [3, 2, 1] = 3/log2(2) + 2/log2(3) + 1/log2(4)
    idcg = 3 / 1 + 2 / math.log2(3) + 1 / 2
    assert ndcg_at_k(RANKED, gains, 3) == pytest.approx(dcg / idcg)


def test_ndcg_of_a_set_uses_gain_one() -> None:
    # [d3, d1]: d1 at rank 2 → 1/log2(3); ideal with two relevant ids: 1 + 1/log2(3)
    assert ndcg_at_k(RANKED, {"d1", "d2"}, 2) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def test_ndcg_of_a_perfect_ranking_is_one_and_of_nothing_relevant_zero() -> None:
    assert ndcg_at_k(["a", "b"], {"a": 2, "b": 1}, 2) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "b"], {}, 2) == 0.0


@pytest.mark.parametrize("fn", [recall_at_k, precision_at_k, hit_at_k, ndcg_at_k])
@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_bad_cutoffs_are_errors(fn, k) -> None:
    with pytest.raises(InvalidArgument):
        fn(RANKED, {"d1"}, k)


def test_metrics_do_not_mutate_inputs() -> None:
    ranked, relevant = list(RANKED), {"d1": 2, "d2": 1}
    ndcg_at_k(ranked, relevant, 3)
    recall_at_k(ranked, relevant, 3)
    assert ranked == RANKED and relevant == {"d1": 2, "d2": 1}


# --- aggregation --------------------------------------------------------------------------


def test_rank_run_sorts_by_score_then_id() -> None:
    assert rank_run({"b": 1.0, "a": 1.0, "c": 2.0}) == ["c", "a", "b"]


def test_evaluate_run_means_over_qrels_and_missing_queries_count_zero() -> None:
    run = {"q1": {"a": 0.9, "b": 0.1}}
    qrels = {"q1": {"a": 1}, "q2": {"x": 1}}
    assert evaluate_run(run, qrels, ["recall@1"]) == {"recall@1": pytest.approx((1.0 + 0.0) / 2)}


def test_evaluate_run_ignores_queries_not_in_qrels() -> None:
    run = {"q1": {"a": 0.9}, "extra": {"z": 1.0}}
    assert evaluate_run(run, {"q1": {"a": 1}}, ["mrr@10"]) == {"mrr@10": pytest.approx(1.0)}


def test_evaluate_run_breaks_score_ties_by_doc_id() -> None:
    # "a" and "b" tie; "a" ranks first, so precision@1 counts "a".
    assert evaluate_run({"q": {"b": 1.0, "a": 1.0}}, {"q": {"a": 1}}, ["precision@1"])["precision@1"] == 1.0
    assert evaluate_run({"q": {"b": 1.0, "a": 1.0}}, {"q": {"b": 1}}, ["precision@1"])["precision@1"] == 0.0


def test_evaluate_run_per_query() -> None:
    table = evaluate_run({"q1": {"a": 1.0}}, {"q1": {"a": 1}, "q2": {"b": 1}}, ["hit_rate@1"], per_query=True)
    assert table == {"hit_rate@1": {"q1": 1.0, "q2": 0.0}}


@pytest.mark.parametrize("name", ["bleu@10", "recall@-1", "ndcg@ten"])
def test_evaluate_run_rejects_unknown_metric_names(name: str) -> None:
    with pytest.raises(InvalidArgument, match="valid metrics"):
        evaluate_run({"q": {"a": 1.0}}, {"q": {"a": 1}}, [name])


def test_evaluate_run_rejects_a_zero_cutoff() -> None:
    with pytest.raises(InvalidArgument, match="must be > 0"):
        evaluate_run({"q": {"a": 1.0}}, {"q": {"a": 1}}, ["ndcg@0"])


def test_evaluate_run_needs_qrels() -> None:
    with pytest.raises(InvalidArgument, match="qrels is empty"):
        evaluate_run({"q": {"a": 1.0}}, {}, ["recall@1"])


# --- ranx as an oracle ----------------------------------------------------------------------

ORACLE_METRICS = [
    f"{name}@{k}" for name in ("ndcg", "recall", "mrr", "precision", "hit_rate") for k in (1, 3, 5, 10, 20)
]


def _random_collection(seed: int) -> tuple[dict, dict]:
    """Random graded qrels and runs with distinct scores (ties are tested above, by our own rule)."""
    rng = random.Random(seed)
    docs = [f"d{i:03d}" for i in range(60)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for q in range(40):
        qid = f"q{q:02d}"
        judged = rng.sample(docs, rng.randint(1, 12))
        grades = {doc: rng.choice([0, 1, 1, 2, 3]) for doc in judged}
        if not any(grades.values()):
            grades[judged[0]] = 1  # ranx and trec_eval skip queries with no relevant doc differently
        qrels[qid] = grades
        if q % 9 == 4:
            continue  # a query missing from the run counts 0
        retrieved = rng.sample(docs, rng.randint(0, 30))
        scores = rng.sample(range(1, 10_000), len(retrieved))
        run[qid] = {doc: score / 997.0 for doc, score in zip(retrieved, scores)}
    return run, qrels


SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def ranx_answers() -> dict:
    """ranx's values for every collection below, computed once, without numba (tests/ranx_oracle.py)."""
    jobs = []
    for seed in SEEDS:
        run, qrels = _random_collection(seed)
        jobs.append({"evaluate": {"qrels": qrels, "run": run, "metrics": ORACLE_METRICS}})
    run, qrels = _random_collection(7)
    jobs.append({"evaluate": {"qrels": qrels, "run": run, "metrics": ["ndcg@10", "mrr@10"], "return_mean": False}})
    answers = ranx_jobs(jobs)
    return {**dict(zip(SEEDS, answers)), "per_query": answers[-1]}


@pytest.mark.parametrize("seed", SEEDS)
def test_evaluate_run_matches_ranx(seed: int, ranx_answers) -> None:
    run, qrels = _random_collection(seed)
    ours = evaluate_run(run, qrels, ORACLE_METRICS)
    theirs = ranx_answers[seed]
    for name in ORACLE_METRICS:
        assert ours[name] == pytest.approx(theirs[name], abs=1e-9), name


def test_per_query_values_match_ranx(ranx_answers) -> None:
    run, qrels = _random_collection(7)
    ours = evaluate_run(run, qrels, ["ndcg@10", "mrr@10"], per_query=True)
    theirs = ranx_answers["per_query"]
    qids = sorted(qrels)  # ranx orders queries by id, as evaluate_run does
    for name in ("ndcg@10", "mrr@10"):
        assert [ours[name][q] for q in qids] == pytest.approx(theirs[name], abs=1e-9)
