"""labsrc.lanes.permitted: one shared index, BM25 statistics from the permitted universe per request."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import REGIONS, TAGS, days, scenarios, texts

import labsrc
from labsrc.lanes import BM25Index, HashingEncoder, brute_force_bm25, lesson_analyzer
from labsrc.lanes.permitted import PermittedBM25, universe_stats
from labsrc.retriever.engine import LaneEngine

DOCS = [("a", "refund laptop refund"), ("b", "laptop parcel"), ("c", "refund")]


def test_statistics_are_the_permitted_universes():
    lane = PermittedBM25(BM25Index.build(DOCS))
    hide_c = np.array([True, True, False])
    stats = lane.stats(hide_c)
    assert (stats.n_docs, stats.total_len, stats.avgdl) == (2, 5.0, 2.5)  # |a| = 3, |b| = 2
    assert lane.df("refund", hide_c) == 1  # c is hidden: only a counts
    assert lane.df("refund", np.ones(3, dtype=bool)) == 2
    # "refund" in a: idf = ln(1 + (2 - 1 + 0.5) / (1 + 0.5)), norm = 1 - b + b * 3 / 2.5
    idf = math.log(1 + 1.5 / 1.5)
    norm = 1 - 0.75 + 0.75 * 3 / 2.5
    expected = idf * 2 * 2.2 / (2 + 1.2 * norm)
    [(doc, score)] = lane.search("refund", hide_c, 5)
    assert doc == "a" and score == pytest.approx(expected, rel=1e-15)


def test_statistics_are_cached_per_mask_not_per_request():
    lane = PermittedBM25(BM25Index.build(DOCS), cache_size=4)
    mask = np.array([True, False, True])
    lane.search("refund", mask, 3)
    lane.search("laptop", mask.copy(), 3)
    assert len(lane._stats) == 1
    assert universe_stats(np.array([3.0, 2.0, 1.0]), np.zeros(3, dtype=bool)).n_docs == 0
    assert lane.search("refund", np.zeros(3, dtype=bool), 3) == []


def test_bad_masks_are_refused():
    lane = PermittedBM25(BM25Index.build(DOCS))
    with pytest.raises(labsrc.InvalidArgument, match="boolean array of shape"):
        lane.search("refund", np.ones(2, dtype=bool), 3)
    with pytest.raises(labsrc.InvalidArgument, match="boolean array of shape"):
        lane.search("refund", np.ones(3, dtype=int), 3)
    with pytest.raises(labsrc.InvalidArgument, match="list of terms"):
        lane.score_terms("refund", np.ones(3, dtype=bool))


ENCODER = HashingEncoder(dimension=16)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def callers(draw):
    return labsrc.Caller("u", draw(st.sampled_from(REGIONS)), frozenset(draw(st.sets(st.sampled_from(TAGS)))))


@SETTINGS
@given(scenario=scenarios(), others=st.lists(st.tuples(callers(), days), min_size=1, max_size=4))
def test_each_lane_equals_a_corpus_of_the_permitted_chunks_only(scenario, others):
    corpus, caller, on_date, query, top_k = scenario
    shared = LaneEngine(corpus, labsrc.lanes.EncoderVectors(ENCODER))
    boundary = labsrc.BoundaryIndex(shared.chunks)
    for who, day in [(caller, on_date), *others]:  # many permission sets over one shared engine
        permitted = boundary.permitted(who, day)
        alone = LaneEngine(permitted, labsrc.lanes.EncoderVectors(ENCODER))
        everything = np.ones(len(permitted), dtype=bool)
        mask = boundary.mask(who, day)
        sparse = shared.sparse(mask, query, top_k)
        assert sparse == alone.sparse(everything, query, top_k)  # ids, order and scores, with ==
        assert shared.dense(mask, query, top_k) == alone.dense(everything, query, top_k)
        reference = brute_force_bm25(query, [(c.chunk_id, c.text) for c in permitted], analyzer=lesson_analyzer)
        for chunk, score in sparse:
            assert score == pytest.approx(reference[chunk.chunk_id], rel=1e-12)
        best = sorted((s for s in reference.values() if s > 0), reverse=True)[:top_k]
        assert [s for _, s in sparse] == pytest.approx(best, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(texts, min_size=1, max_size=30), st.lists(st.booleans(), min_size=30, max_size=30), texts)
def test_the_full_index_and_the_permitted_lane_agree_when_everything_is_permitted(docs, keep, query):
    pairs = [(f"d{i:02d}", text) for i, text in enumerate(docs)]
    index = BM25Index.build(pairs)
    lane = PermittedBM25(index)
    assert lane.search(query, np.ones(len(pairs), dtype=bool), 50) == index.search(query, 50)
    mask = np.array(keep[: len(pairs)])
    kept = BM25Index.build([pair for pair, k in zip(pairs, mask) if k])
    assert lane.search(query, mask, 50) == (kept.search(query, 50) if kept.n_docs else [])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.sampled_from([1, 5, 20]), share=st.sampled_from([0.05, 0.3, 0.9]))
def test_pruned_permitted_search_equals_exhaustive(seed, k, share, monkeypatch_module):
    import labsrc.lanes.permitted as permitted

    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(300)]
    ranks = np.minimum(rng.zipf(1.3, size=(2000, 25)), 300) - 1
    docs = [[vocabulary[r] for r in row[: rng.integers(3, 25)]] for row in ranks]
    index = BM25Index.build_from_terms(((f"d{i:05d}", d) for i, d in enumerate(docs)), analyzer=str.split)
    lane = PermittedBM25(index)
    mask = rng.random(index.n_docs) < share
    query = ["w0", "w1"] + [vocabulary[r] for r in np.minimum(rng.zipf(1.3, size=4), 300) - 1]
    monkeypatch_module.setattr(permitted, "_PRUNE_FROM_POSTINGS", 10**9)
    exhaustive = lane.search_terms(query, mask, k)
    monkeypatch_module.setattr(permitted, "_PRUNE_FROM_POSTINGS", 0)
    assert lane.search_terms(query, mask, k) == exhaustive  # ids and scores, ==
    assert lane.search_terms(query, mask, k) == exhaustive  # again, with df_U now cached for this mask
    kept = BM25Index.build_from_terms(
        ((f"d{i:05d}", d) for i, d in enumerate(docs) if mask[i]), analyzer=str.split
    )
    assert [(index.ids[p], s) for p, s in exhaustive] == kept.search_terms(query, k)


def test_a_mask_of_everything_answers_from_the_index_with_the_same_scores():
    rng = np.random.default_rng(11)
    vocabulary = [f"w{i}" for i in range(60)]
    docs = [[vocabulary[r] for r in np.minimum(rng.zipf(1.4, size=rng.integers(3, 15)), 60) - 1] for _ in range(400)]
    index = BM25Index.build_from_terms(((f"d{i:04d}", d) for i, d in enumerate(docs)), analyzer=str.split)
    lane, everything = PermittedBM25(index), np.ones(index.n_docs, dtype=bool)
    for query in (["w0", "w3", "w3"], ["w1", "w7", "w20"], ["w59"], ["nothing"]):
        positions, scores = lane.score_terms(query, everything)  # the per-request computation
        order = np.lexsort((positions, -scores))[:10]
        assert lane.search_terms(query, everything, 10) == [(int(positions[i]), float(scores[i])) for i in order]
