"""The fast BM25 path, checked three ways: against the readable reference, against bm25s on
BEIR SciFact, and by the quality it reaches there (with metrics cross-checked by ranx).

The SciFact tests need the collection (see docs/benchmarks.md, "Real benchmark"); without
it they skip with the reason. The rest run everywhere.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ranx_oracle import ranx_jobs

from labsrc.datasets import find_dataset_dir, missing_data_reason
from labsrc.errors import InvalidArgument
from labsrc.evaluation import BeirLanes
from labsrc.evaluation.benchmark import (
    BenchmarkResult,
    load_lanes,
    run_benchmark,
    write_trec_run,
)
from labsrc.evaluation.metrics import evaluate_run
from labsrc.lanes.analysis import english_analyzer
from labsrc.lanes.bm25 import bm25_term_score, brute_force_bm25
from labsrc.lanes.sparse import BM25Index

# --- the fast path against the readable reference (no data needed) -------------------------

DOCS = [
    ("b", "Rule RPL-14. Damaged refurbished laptops qualify for replacement."),
    ("a", "Unworn footwear may be returned within 30 days of delivery."),
    ("c", "A lost parcel after carrier pickup qualifies for refund. Refund refund."),
    ("d", ""),
]


def test_build_from_terms_equals_build_from_text():
    analyzer = english_analyzer()
    from_text = BM25Index.build(DOCS, analyzer=analyzer)
    from_terms = BM25Index.build_from_terms([(i, analyzer(t)) for i, t in DOCS], analyzer=analyzer)
    assert from_text.ids == from_terms.ids == ("a", "b", "c", "d")
    assert from_text.vocabulary == from_terms.vocabulary
    for name in ("ptr", "doc_pos", "tf", "doc_len", "impact"):
        assert np.array_equal(getattr(from_text, name), getattr(from_terms, name)), name


def test_impacts_are_the_per_term_bm25_scores():
    index = BM25Index.build(DOCS, analyzer=english_analyzer())
    t = index.vocabulary["refund"]
    lo, hi = index.ptr[t], index.ptr[t + 1]
    [pos] = index.doc_pos[lo:hi]
    assert index.ids[pos] == "c" and index.tf[lo] == 3
    assert index.impact[lo] == bm25_term_score(index.term_idf("refund"), 3, index.norm[pos], 1.2)
    assert not index.impact.flags.writeable


def test_search_terms_equals_search_and_the_brute_force_reference():
    analyzer = english_analyzer()
    index = BM25Index.build(DOCS, analyzer=analyzer)
    for query in ("refurbished laptops", "refund qualifies", "delivery of footwear", "nothing matches"):
        reference = {d: s for d, s in brute_force_bm25(query, DOCS, analyzer=analyzer).items() if s > 0}
        found = index.search_terms(analyzer(query), 10)
        assert found == index.search(query, 10)
        assert dict(found) == pytest.approx(reference, rel=1e-12)
        assert [d for d, _ in found] == sorted(reference, key=lambda d: (-reference[d], d))


def test_a_repeated_query_term_counts_once_per_occurrence():
    index = BM25Index.build(DOCS, analyzer=english_analyzer())
    assert index.score_terms(["refund", "refund"]) == pytest.approx(2 * index.score_terms(["refund"]))


def test_terms_must_be_lists_not_strings():
    index = BM25Index.build(DOCS, analyzer=english_analyzer())
    with pytest.raises(InvalidArgument, match="list of terms"):
        index.score_terms("refund")
    with pytest.raises(InvalidArgument, match="must be a list of strings"):
        BM25Index.build_from_terms([("a", "refund")])
    with pytest.raises(InvalidArgument, match="duplicate document id 'a'"):
        BM25Index.build_from_terms([("a", ["x"]), ("a", ["y"])])


def test_an_empty_index_finds_nothing():
    index = BM25Index.build_from_terms([])
    assert index.n_docs == 0 and index.search_terms(["x"], 3) == []


# --- SciFact ----------------------------------------------------------------------------------

SCIFACT = find_dataset_dir("scifact")
needs_scifact = pytest.mark.skipif(SCIFACT is None, reason=missing_data_reason("scifact"))


@pytest.fixture(scope="module")
def lanes() -> BeirLanes:
    if SCIFACT is None:
        pytest.skip(missing_data_reason("scifact"))
    return load_lanes(SCIFACT)


@pytest.fixture(scope="module")
def result(lanes: BeirLanes) -> BenchmarkResult:
    return run_benchmark(lanes, split="test", depth=100, rrf_k=60)


@needs_scifact
def test_collection_counts(lanes: BeirLanes):
    dataset = lanes.dataset
    assert len(dataset.corpus) == 5183 and lanes.index.n_docs == 5183
    assert len(dataset.split_qrels("test")) == 300 and len(dataset.split_qrels("train")) == 809
    assert lanes.vectors is not None and lanes.vectors.dimension == 384


@needs_scifact
def test_bm25_equals_bm25s_lucene_with_the_same_tokens(lanes: BeirLanes):
    bm25s = pytest.importorskip("bm25s", reason="bm25s is the oracle (dev extra)")
    analyzer = lanes.analyzer
    doc_ids = list(lanes.dataset.corpus)
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75, dtype="float64")
    retriever.index([analyzer(d.indexed_text) for d in lanes.dataset.corpus.values()], show_progress=False)
    position = {doc_id: i for i, doc_id in enumerate(lanes.index.ids)}
    order = np.array([position[doc_id] for doc_id in doc_ids])
    queries = lanes.dataset.split_queries("test")
    compared = 0
    for text in queries.values():
        terms = analyzer(text)
        ours = lanes.index.score_terms(terms)[order]
        # bm25s's "lucene" term-frequency part omits Lucene's constant (k1 + 1) factor
        # (bm25s/scoring.py, _score_tfc_lucene), so its scores are ours / (1.2 + 1).
        theirs = (1.2 + 1.0) * retriever.get_scores(terms)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=0)
        compared += int((ours > 0).sum())
    assert compared > 300_000  # hundreds of thousands of non-zero scores were compared


@needs_scifact
def test_fast_index_equals_brute_force_on_real_text(lanes: BeirLanes):
    # The readable reference is O(N^2) per term, so compare on a 200-document slice.
    documents = [(c.chunk_id, c.text) for c in lanes.dataset.chunks[:200]]
    analyzer = lanes.analyzer
    index = BM25Index.build(documents, analyzer=analyzer)
    for text in list(lanes.dataset.split_queries("test").values())[:5]:
        reference = {d: s for d, s in brute_force_bm25(text, documents, analyzer=analyzer).items() if s > 0}
        assert dict(index.search(text, 200)) == pytest.approx(reference, rel=1e-12)


@needs_scifact
def test_quality_targets_on_scifact_test(result: BenchmarkResult):
    ndcg = {lane: values["ndcg@10"] for lane, values in result.metrics.items()}
    assert ndcg["bm25"] >= 0.675  # bm25s (lucene, stemmed, stopworded) 0.6791; Anserini flat 0.6789
    assert ndcg["dense"] == pytest.approx(0.645, abs=0.002)  # MTEB reports 0.64508 for these vectors
    assert ndcg["rrf"] >= 0.711
    assert ndcg["convex"] >= 0.719


@needs_scifact
def test_convex_alpha_was_tuned_on_train(result: BenchmarkResult):
    sweep = result.sweep
    assert sweep is not None and sweep.split == "train" and len(sweep.values) == 21
    assert result.config["alpha"] == sweep.alpha == max(sweep.values, key=lambda pair: pair[1])[0]
    assert 0.0 < sweep.alpha < 1.0  # both lanes contribute


@needs_scifact
def test_metrics_equal_ranx(result: BenchmarkResult, lanes: BeirLanes, tmp_path_factory):
    qrels = {qid: dict(judged) for qid, judged in lanes.dataset.split_qrels("test").items()}
    run_dir: Path = tmp_path_factory.mktemp("runs")
    metrics = ["ndcg@10", "recall@100", "mrr@10"]
    jobs = []
    for lane, run in result.runs.items():
        path = write_trec_run(run, run_dir / f"{lane}.trec", f"labsrc-{lane}")
        plain = {"qrels": qrels, "metrics": metrics, "make_comparable": False}
        jobs += [{"evaluate": {**plain, "run_file": str(path)}},
                 {"evaluate": {**plain, "run": {q: dict(d) for q, d in run.items()}}}]
    answers = iter(ranx_jobs(jobs))  # ranx, without numba, in one child process (tests/ranx_oracle.py)
    for lane, run in result.runs.items():
        ours = evaluate_run(run, qrels, metrics)
        from_file, from_dict = next(answers), next(answers)
        for metric in metrics:
            assert ours[metric] == pytest.approx(from_file[metric], abs=1e-9), (lane, metric)
            assert ours[metric] == pytest.approx(from_dict[metric], abs=1e-9), (lane, metric)
        assert ours == pytest.approx(dict(result.metrics[lane]), abs=0)
