import json
import time

import numpy as np
import pytest

import labsrc
from labsrc.patterns.dropin import HybridRetriever, make_snippet, rrf, tokenize
from labsrc.patterns.expansion import QueryExpander

CHUNKS = [
    {"chunk_id": "b", "doc_id": "d1", "title": "Laptops", "text": "Damaged refurbished laptops qualify for replacement.", "tier": "std"},
    {"chunk_id": "a", "doc_id": "d1", "path": "eu/returns.md", "text": "Unworn footwear may be returned within 30 days.", "tier": "vip", "tags": ["x"]},
    {"chunk_id": "c", "doc_id": "d2", "text": "Lost parcels are replaced after a carrier loss claim.", "tier": "std"},
]


class CountingEncoder:
    """A HashingEncoder that records every batch it encodes."""

    def __init__(self):
        self.inner = labsrc.HashingEncoder(analyzer=labsrc.patterns.dropin.DROPIN_ANALYZER)
        self.calls = []

    def encode(self, texts):
        self.calls.append(list(texts))
        return self.inner.encode(texts)


def test_tokenize_is_lowercase_unicode_safe_and_nfkc():
    assert tokenize("Rule RPL-14: Damaged") == ["rule", "rpl-14", "damaged"]
    assert tokenize("VIP-RPL-1") == ["vip-rpl-1"]  # hyphenated codes stay whole, as in the lesson analyzer
    assert tokenize("-x- a--b") == ["x", "a", "b"]  # stray hyphens still separate
    assert tokenize("Café naïve") == ["café", "naïve"]  # non-ASCII letters survive
    assert tokenize("ＲＰＬ１４") == ["rpl14"]  # full-width folded by NFKC
    assert tokenize("snake_case") == ["snake", "case"]
    with pytest.raises(labsrc.InvalidArgument):
        tokenize(None)


def test_rrf_sums_one_over_k_plus_rank():
    scores = rrf({"x": [1, 1], "y": [2], "z": [1]})
    assert scores == {"x": pytest.approx(2 / 61), "z": pytest.approx(1 / 61), "y": pytest.approx(1 / 62)}
    assert list(scores) == ["x", "z", "y"]  # score desc
    assert rrf({"b": [3], "a": [3]}) == {"a": 1 / 63, "b": 1 / 63}
    assert list(rrf({"b": [3], "a": [3]})) == ["a", "b"]  # ties by id
    assert rrf({"x": [1]}, k=10) == {"x": pytest.approx(1 / 11)}
    with pytest.raises(labsrc.InvalidArgument, match="1-based"):
        rrf({"x": [0]})
    with pytest.raises(labsrc.InvalidArgument, match="rrf_k"):
        rrf({"x": [1]}, k=0)


def test_make_snippet_centres_on_first_match_and_cuts_on_words():
    text = " ".join(f"word{i}" for i in range(100)) + " the needle sits here " + " ".join(f"tail{i}" for i in range(100))
    snippet = make_snippet(text, "needle", max_len=60)
    assert "needle" in snippet
    assert len(snippet) <= 60
    assert snippet in text
    words = set(text.split())
    assert all(w in words for w in snippet.split())  # no partial words at the edges
    head = make_snippet(text, "absent", max_len=40)
    assert text.startswith(head) and len(head) <= 40 and head.split()[-1] in words
    assert make_snippet("short text", "x") == "short text"


def test_search_result_fields_and_metadata_pass_through():
    retriever = HybridRetriever.from_chunks(CHUNKS)
    hits = retriever.search("unworn footwear", k=3)
    top = hits[0]
    assert top["chunk_id"] == "a"
    assert set(top) == {"chunk_id", "doc_id", "path", "title", "snippet", "bm25_rank", "embed_rank", "rrf_score", "metadata"}
    assert (top["doc_id"], top["path"], top["title"]) == ("d1", "eu/returns.md", "")
    assert top["metadata"] == {"tier": "vip", "tags": ["x"]}
    assert top["bm25_rank"] == 1 and top["embed_rank"] == 1
    assert top["rrf_score"] == pytest.approx(2 / 61)
    # A chunk the BM25 lane missed has bm25_rank None but may come from the embedding lane.
    assert all(h["bm25_rank"] is None or h["bm25_rank"] >= 1 for h in hits)
    # Results never share the retriever's metadata objects.
    top["metadata"]["tags"].append("mutated")
    assert retriever.get("a")["metadata"] == {"tier": "vip", "tags": ["x"]}
    assert CHUNKS[1]["tags"] == ["x"]


def test_one_chunk_ranked_first_in_both_lanes_scores_2_over_61():
    retriever = HybridRetriever.from_chunks([{"chunk_id": "only", "text": "refund policy"}])
    (hit,) = retriever.search("refund")
    assert hit["rrf_score"] == pytest.approx(2 / 61)


def test_ties_break_on_chunk_id():
    same = [{"chunk_id": cid, "text": "identical refund text"} for cid in ("c3", "c1", "c2")]
    hits = HybridRetriever.from_chunks(same).search("refund")
    # Equal lane scores are ranked by chunk_id, in both lanes, so the fused order follows the id.
    assert [h["chunk_id"] for h in hits] == ["c1", "c2", "c3"]
    assert [h["bm25_rank"] for h in hits] == [1, 2, 3]
    assert [h["embed_rank"] for h in hits] == [1, 2, 3]
    assert [h["rrf_score"] for h in hits] == pytest.approx([2 / 61, 2 / 62, 2 / 63])


def test_results_sorted_and_k_respected():
    chunks = [{"chunk_id": f"c{i:02d}", "text": f"refund laptop policy {'refund ' * (i % 4)}"} for i in range(30)]
    hits = HybridRetriever.from_chunks(chunks).search("refund laptop", k=7, k_bm25=10, k_embed=10)
    assert len(hits) == 7
    keys = [(-h["rrf_score"], h["chunk_id"]) for h in hits]
    assert keys == sorted(keys)


def test_blank_query_returns_nothing_without_encoding():
    encoder = CountingEncoder()
    retriever = HybridRetriever.from_chunks(CHUNKS, embedder=encoder)
    calls = len(encoder.calls)
    assert retriever.search("   ") == []
    assert len(encoder.calls) == calls


def test_bad_arguments_and_records():
    retriever = HybridRetriever.from_chunks(CHUNKS)
    with pytest.raises(labsrc.InvalidArgument, match="k_bm25"):
        retriever.search("x", k_bm25=0)
    with pytest.raises(labsrc.InvalidRecord, match=r"chunks\[0\].*'text'"):
        HybridRetriever.from_chunks([{"chunk_id": "x"}])
    with pytest.raises(labsrc.InvalidArgument, match="duplicate chunk_id"):
        HybridRetriever.from_chunks([{"chunk_id": "x", "text": "a"}, {"chunk_id": "x", "text": "b"}])


def test_from_jsonl_reads_lines_and_names_bad_ones(tmp_path):
    good = tmp_path / "chunks.jsonl"
    good.write_text("\n".join(json.dumps(c) for c in CHUNKS) + "\n", encoding="utf-8")
    from_file = HybridRetriever.from_jsonl(good).search("carrier loss")
    from_list = HybridRetriever.from_chunks(CHUNKS).search("carrier loss")
    assert from_file == from_list
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(CHUNKS[0]) + "\n" + json.dumps({"chunk_id": "z", "text": 5}) + "\n", encoding="utf-8")
    with pytest.raises(labsrc.InvalidRecord) as err:
        HybridRetriever.from_jsonl(bad)
    assert err.value.line == 2 and err.value.field == "text" and str(bad) in str(err.value)


def test_custom_text_and_title_keys():
    retriever = HybridRetriever.from_chunks([{"chunk_id": "x", "body": "the body", "heading": "Refunds"}], text_key="body", title_key="heading")
    (hit,) = retriever.search("refunds")
    assert hit["title"] == "Refunds" and hit["bm25_rank"] == 1 and hit["metadata"] == {}


def test_where_filter_narrows_universe_before_ranking():
    retriever = HybridRetriever.from_chunks(CHUNKS)
    hits = retriever.search("damaged laptops footwear parcels", where={"tier": "std"}, k=10)
    assert {h["chunk_id"] for h in hits} <= {"b", "c"}
    # BM25 statistics are those of the filtered universe: N = 2 chunks, not 3.
    indexed = [(c["chunk_id"], f"{c['title']}\n{c['text']}" if c.get("title") else c["text"]) for c in CHUNKS]
    filtered = labsrc.BM25Index.build([pair for pair, c in zip(indexed, CHUNKS) if c["tier"] == "std"], analyzer=labsrc.patterns.dropin.DROPIN_ANALYZER)
    assert filtered.n_docs == 2
    std = retriever._mask(None, None, {"tier": "std"})  # the universe this filter leaves
    lane = [(c.chunk_id, s) for c, s in retriever.engine.sparse(std, "damaged", 5)]
    everything = [(c.chunk_id, s) for c, s in retriever.engine.sparse(np.ones(3, dtype=bool), "damaged", 5)]
    assert lane == filtered.search("damaged", 5)  # ==: the statistics are the filtered chunks' only
    assert lane != everything
    # top_k larger than the permitted set never returns a filtered-out chunk.
    assert {h["chunk_id"] for h in retriever.search("text", where={"tier": "vip"}, k=50)} <= {"a"}
    assert retriever.search("damaged", where={"tier": "nobody"}) == []


def test_expander_switches_to_adaptive_fusion():
    retriever = HybridRetriever.from_chunks(CHUNKS, expander=QueryExpander())
    plan = retriever.plan("my broken notebook")
    assert plan.fired == ("broken", "notebook")
    assert plan.bm25_query == "my broken notebook damaged defective laptop"
    assert plan.embed_query == "my broken notebook"
    assert tuple(plan.fusion) == (10, 3.0, 0.3)
    hit = retriever.search("my broken notebook")[0]
    assert hit["chunk_id"] == "b"
    assert hit["rrf_score"] == pytest.approx(3.0 / (10 + hit["bm25_rank"]) + (0.3 / (10 + hit["embed_rank"]) if hit["embed_rank"] else 0.0))
    plain = retriever.plan("footwear")
    assert plain.fired == () and tuple(plain.fusion) == (60, 1.0, 1.0)


def test_200_chunk_search_is_fast():
    chunks = [
        {"chunk_id": f"c{i:03d}", "doc_id": f"d{i // 10}", "title": f"Policy {i}", "text": f"rule {i} refunds for item{i} within {i % 30} days of delivery " * 4}
        for i in range(200)
    ]
    retriever = HybridRetriever.from_chunks(chunks)
    start = time.perf_counter()
    hits = retriever.search("refund item42 delivery", k=10)
    elapsed = time.perf_counter() - start
    print(f"200-chunk search: {elapsed * 1000:.2f} ms")
    assert hits[0]["chunk_id"] == "c042"
    assert elapsed < 0.5


def test_close_and_context_manager():
    with HybridRetriever.from_chunks(CHUNKS) as retriever:
        assert len(retriever) == 3
    assert retriever.close() is None


def test_precomputed_embeddings_are_used_as_given():
    encoder = CountingEncoder()
    encoder.encode = lambda texts: np.tile([0.0, 1.0, 0.0], (len(texts), 1))  # every query points at dimension 1
    # Rows follow the input order: CHUNKS[2] ("c") gets the vector that matches the query.
    matrix = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    retriever = HybridRetriever.from_chunks(CHUNKS, embedder=encoder, embeddings=matrix)
    hits = retriever.search("zzz-no-lexical-match")
    assert [(h["chunk_id"], h["embed_rank"], h["bm25_rank"]) for h in hits] == [("c", 1, None)]
    with pytest.raises(labsrc.InvalidArgument, match="N = 3"):
        HybridRetriever.from_chunks(CHUNKS, embeddings=np.zeros((2, 3)))


def test_hostile_queries_are_refused_or_answered_quickly():
    # Issue 22: the drop-in retriever hung on long queries too (MaxScore's quadratic fallback).
    retriever = HybridRetriever.from_chunks(CHUNKS)
    with pytest.raises(labsrc.InvalidArgument, match="limit is 100,000"):
        retriever.search("refurbished laptops " * 52_429)
    for bad, name in ((None, "NoneType"), (b"laptops", "bytes"), (["laptops"], "list")):
        with pytest.raises(labsrc.InvalidArgument, match=f"query must be a str, not {name}"):
            retriever.search(bad)
    uncapped = HybridRetriever.from_chunks(CHUNKS, max_query_chars=None)
    started = time.perf_counter()
    hits = uncapped.search("refurbished laptops " * 12_000)
    assert time.perf_counter() - started < 5  # measured 0.2 s
    assert hits[0]["chunk_id"] == "b"
