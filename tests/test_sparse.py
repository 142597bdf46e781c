import math
import random

import numpy as np
import pytest
from factories import make_chunk
from hypothesis import given, settings
from hypothesis import strategies as st

import labsrc
from labsrc.lanes.bm25 import bm25_term_score, brute_force_bm25, idf_lucene, length_norm
from labsrc.lanes.sparse import BM25Index

SHARED = "damaged refurbished laptop replacement after delivery"
PARAPHRASE = "swap a broken reconditioned notebook"


def ids_scores(results):
    return [(chunk.chunk_id, score) for chunk, score in results]


# --- formulas --------------------------------------------------------------------------


def test_idf_lucene_formula():
    assert idf_lucene(1, 3) == pytest.approx(math.log(1 + (3 - 1 + 0.5) / (1 + 0.5)))
    assert idf_lucene(3, 3) > 0  # the "1 +" keeps a term in every document positive


def test_term_score_formula():
    # RPL-14 in eu-refurb-v2-rule: tf 1, |d| 14, avgdl (14 + 8 + 8) / 3 = 10.
    norm = length_norm(14, 10.0, 0.75)
    assert norm == pytest.approx(1 - 0.75 + 0.75 * 14 / 10)
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    assert bm25_term_score(idf, 1, norm, 1.2) == pytest.approx(idf * 1 * 2.2 / (1 + 1.2 * 1.3))


# --- the spec's figures ------------------------------------------------------------------


def test_exact_code(permitted):
    assert ids_scores(labsrc.bm25_rank("RPL-14", permitted)) == [("eu-refurb-v2-rule", pytest.approx(0.842900, abs=1e-6))]


def test_paraphrase_misses(permitted):
    assert labsrc.bm25_rank(PARAPHRASE, permitted) == []


def test_shared_language(permitted):
    assert ids_scores(labsrc.bm25_rank(SHARED, permitted)) == [
        ("eu-refurb-v2-rule", pytest.approx(2.932610, abs=1e-6)),
        ("eu-footwear-v1-rule", pytest.approx(0.511885, abs=1e-6)),
    ]


def test_hidden_code_finds_nothing(permitted):
    assert labsrc.bm25_rank("VIP-RPL-1", permitted) == []


def test_miss_diagnosis_by_token_overlap(permitted):
    rule = set(labsrc.tokens(permitted[0].text))
    assert rule & set(labsrc.tokens("RPL-14")) == {"rpl-14"}
    assert rule & set(labsrc.tokens(PARAPHRASE)) == set()


def test_statistics_leak_is_closed(data, permitted):
    # Statistics over every stored chunk would shift Luna's score: the side channel.
    leaky = dict((c.chunk_id, s) for c, s in labsrc.bm25_rank(SHARED, data.chunks, top_k=5))
    safe = dict((c.chunk_id, s) for c, s in labsrc.bm25_rank(SHARED, permitted, top_k=5))
    assert leaky["eu-refurb-v2-rule"] == pytest.approx(2.752307, abs=1e-6)
    assert safe["eu-refurb-v2-rule"] == pytest.approx(2.932610, abs=1e-6)


def test_explain_adds_up_to_the_score(permitted):
    rows = labsrc.explain(SHARED, "eu-refurb-v2-rule", permitted)
    by_term = {r.term: r for r in rows}
    assert [r.term for r in rows] == ["damaged", "refurbished", "laptop", "replacement", "delivery"]
    assert by_term["laptop"].tf == 0 and by_term["laptop"].contribution == 0.0  # "laptops" != "laptop"
    assert by_term["damaged"].idf == pytest.approx(math.log(1 + 2.5 / 1.5))
    assert by_term["delivery"].idf == pytest.approx(math.log(1 + 1.5 / 2.5))  # in 2 of 3 chunks
    assert by_term["damaged"].length_norm == pytest.approx(1.3)
    assert sum(r.contribution for r in rows) == pytest.approx(2.932610, abs=1e-6)


def test_explain_refuses_a_chunk_outside_the_universe(permitted):
    with pytest.raises(labsrc.InvalidArgument, match="merchant-vip-refurb"):
        labsrc.explain("VIP-RPL-1", "merchant-vip-refurb", permitted)


# --- ordering, cuts and bad arguments ----------------------------------------------------


def test_ties_break_on_chunk_id():
    chunks = [make_chunk(cid, "refund policy") for cid in ("c", "a", "b")]
    assert [c.chunk_id for c, _ in labsrc.bm25_rank("refund", chunks, top_k=3)] == ["a", "b", "c"]
    assert [c.chunk_id for c, _ in labsrc.bm25_rank("refund", chunks, top_k=2)] == ["a", "b"]


def test_top_k_larger_than_the_universe(permitted):
    results = labsrc.bm25_rank(SHARED, permitted, top_k=1000)
    assert [c.chunk_id for c, _ in results] == ["eu-refurb-v2-rule", "eu-footwear-v1-rule"]  # score > 0 only


@pytest.mark.parametrize("top_k", [0, -1, 1.5, True])
def test_bad_top_k(permitted, top_k):
    with pytest.raises(labsrc.InvalidArgument, match="top_k"):
        labsrc.bm25_rank("RPL-14", permitted, top_k=top_k)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_blank_query_returns_nothing(permitted, query):
    assert labsrc.bm25_rank(query, permitted) == []


def test_empty_universe():
    assert labsrc.bm25_rank("RPL-14", []) == []


def test_duplicate_ids_in_universe_are_refused():
    with pytest.raises(labsrc.InvalidArgument, match="duplicate"):
        labsrc.bm25_rank("x", [make_chunk("a"), make_chunk("a", "other text")])


def test_changed_chunk_text_is_not_served_from_a_stale_index():
    before = [make_chunk("a", "refund policy"), make_chunk("b", "footwear")]
    after = [make_chunk("a", "footwear"), make_chunk("b", "footwear")]
    assert [c.chunk_id for c, _ in labsrc.bm25_rank("refund", before)] == ["a"]
    assert labsrc.bm25_rank("refund", after) == []


def test_repeated_query_terms_count_once_per_occurrence():
    index = BM25Index.build([("a", "refund policy"), ("b", "footwear rules")])
    once = dict(index.search("refund", 2))["a"]
    twice = dict(index.search("refund refund", 2))["a"]
    assert twice == pytest.approx(2 * once)


# --- the inverted index agrees with the brute-force reference -----------------------------

WORDS = ["refund", "laptop", "rpl-14", "carrier", "damaged", "parcel", "footwear", "return", "days", "café"]


@settings(max_examples=200, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from(WORDS), min_size=0, max_size=12), min_size=1, max_size=12),
    query=st.lists(st.sampled_from(WORDS + ["absent"]), min_size=1, max_size=5),
    k1=st.sampled_from([0.5, 0.9, 1.2, 2.0]),
    b=st.sampled_from([0.0, 0.4, 0.75, 1.0]),
)
def test_index_matches_brute_force(docs, query, k1, b):
    pairs = [(f"d{i:02d}", " ".join(words)) for i, words in enumerate(docs)]
    text = " ".join(query)
    reference = brute_force_bm25(text, pairs, k1=k1, b=b)
    index = BM25Index.build(pairs, k1=k1, b=b)
    scores = index.score_all(text)
    for doc_id, expected in reference.items():
        assert scores[index.ids.index(doc_id)] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    # The ranking is a full sort of the index's own scores (checked against the reference above)
    # by (score desc, id asc). A mathematical tie may differ in the last bit (tf 2 in 2 words and
    # tf 6 in 6 words at b = 1, or 3 · w against w + w + w), so the order comes from those scores.
    expected_top = sorted(((d, float(scores[i])) for i, d in enumerate(index.ids) if scores[i] > 0), key=lambda p: (-p[1], p[0]))
    assert index.search(text, 3) == expected_top[:3]
    assert index.search(text, 3) == [(d, s) for d, s in index.search_terms(index.analyzer(text), 3)]


# --- oracle: bm25s -----------------------------------------------------------------------


def test_scores_match_bm25s_lucene():
    bm25s = pytest.importorskip("bm25s")
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(60)]
    corpus = [[rng.choice(vocabulary) for _ in range(rng.randint(1, 40))] for _ in range(300)]
    queries = [[rng.choice(vocabulary) for _ in range(rng.randint(1, 4))] for _ in range(25)]

    # Identical token lists for both: our analyzer keeps "w12" whole and drops nothing.
    pairs = [(f"d{i:03d}", " ".join(doc)) for i, doc in enumerate(corpus)]
    index = BM25Index.build(pairs, k1=1.2, b=0.75)

    retriever = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    retriever.index(corpus, show_progress=False)
    for query in queries:
        theirs = np.asarray(retriever.get_scores(query), dtype=np.float64)
        ours = index.score_all(" ".join(query))
        # bm25s's "lucene" term-frequency component omits the constant (k1 + 1) factor
        # of Robertson's formula; it rescales every score equally and leaves ranks alone.
        order = [index.ids.index(f"d{i:03d}") for i in range(len(corpus))]
        np.testing.assert_allclose(ours[order], theirs * (1.2 + 1), rtol=1e-6, atol=1e-9)


# --- arrays of positions ----------------------------------------------------------------


def test_top_positions_are_search_terms_before_the_ids_are_looked_up():
    rng = random.Random(7)
    docs = [(f"d{i:03d}", " ".join(rng.choices(WORDS, k=rng.randint(1, 12)))) for i in range(300)]
    index = BM25Index.build(docs)
    queries = [[rng.choice(WORDS) for _ in range(rng.randint(1, 6))] + ["absent"] for _ in range(40)]
    many = index.top_positions_many(queries, 7)
    for terms, (positions, scores) in zip(queries, many):
        assert positions.dtype.kind == "i" and scores.dtype == np.float64
        assert [(index.ids[p], s) for p, s in zip(positions.tolist(), scores.tolist())] == index.search_terms(terms, 7)
        single_positions, single_scores = index.top_positions(terms, 7)
        assert np.array_equal(single_positions, positions) and np.array_equal(single_scores, scores)
    assert index.top_positions(["absent"], 3)[0].size == 0


def test_top_positions_refuse_text_and_bad_k():
    index = BM25Index.build([("a", "refund")])
    with pytest.raises(labsrc.InvalidArgument, match="list of terms"):
        index.top_positions("refund", 1)
    with pytest.raises(labsrc.InvalidArgument, match="query 1 is one string"):
        index.top_positions_many([["refund"], "refund"], 1)
    with pytest.raises(labsrc.InvalidArgument, match="top_k"):
        index.top_positions_many([["refund"]], 0)
    empty = BM25Index.build([])
    assert [p.size for p, _ in empty.top_positions_many([["refund"]], 2)] == [0]
