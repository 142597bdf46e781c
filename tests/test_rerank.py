import pytest

import labsrc
from labsrc.patterns.rerank import Reranker, TermOverlapReranker, rerank_search

CHUNKS = [{"chunk_id": f"c{i:02d}", "text": f"refund refund refund policy {i}"} for i in range(20)] + [
    {"chunk_id": "z-answer", "text": "refund for a damaged laptop within 14 days"}
]


class SpyReranker:
    def __init__(self):
        self.seen = []

    def score(self, query, texts):
        self.seen.append(list(texts))
        return [1.0 if "laptop" in t else 0.0 for t in texts]


def test_overfetches_three_times_the_limit_then_trims():
    retriever = labsrc.HybridRetriever.from_chunks(CHUNKS)
    spy = SpyReranker()
    hits = rerank_search(retriever, "refund damaged laptop", spy, limit=4)
    assert len(spy.seen[0]) == 3 * 4
    assert len(hits) == 4
    assert hits[0]["chunk_id"] == "z-answer" and hits[0]["rerank_score"] == 1.0
    # Ties keep the hybrid order.
    assert [h["first_stage_rank"] for h in hits[1:]] == sorted(h["first_stage_rank"] for h in hits[1:])


def test_reranker_can_promote_from_beyond_the_limit():
    retriever = labsrc.HybridRetriever.from_chunks(CHUNKS)
    first_stage = [h["chunk_id"] for h in retriever.search("refund refund policy laptop", k=12)]
    assert first_stage.index("z-answer") + 1 > 4  # outside the top 4, inside the 3 x 4 over-fetch
    hits = rerank_search(retriever, "refund refund policy laptop", SpyReranker(), limit=4)
    assert hits[0]["chunk_id"] == "z-answer" and hits[0]["first_stage_rank"] == first_stage.index("z-answer") + 1


def test_term_overlap_reranker():
    reranker = TermOverlapReranker()
    assert isinstance(reranker, Reranker)
    assert reranker.score("damaged laptop", ["damaged laptop", "laptop laptop", "nothing"]) == [1.0, 0.5, 0.0]


def test_a_bad_reranker_is_an_error():
    retriever = labsrc.HybridRetriever.from_chunks(CHUNKS)
    with pytest.raises(labsrc.InvalidArgument, match="score"):
        rerank_search(retriever, "refund", object())
    short = type("Short", (), {"score": lambda self, q, texts: [1.0]})()
    with pytest.raises(labsrc.InvalidArgument, match="1 scores"):
        rerank_search(retriever, "refund", short, limit=2)
