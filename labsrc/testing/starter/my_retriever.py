"""A team's own retriever, gated by labsrc: filter first, then rank only what the caller may see.

The gate calls ``build(chunks, vectors)`` once per build (every stored chunk, hidden
ones included) and then ``search(query, caller, on_date, top_k)`` for each request.
Replace the two lanes with your own (a search engine, a vector database, an
embedding model) but keep the order: the filter runs before any lane, so a hidden
chunk can never be returned, counted in a statistic or move a score.
"""

from labsrc import (
    HashingEncoder,
    RetrievalResult,
    bm25_rank,
    dense_rank,
    reciprocal_rank_fusion,
)
from labsrc.trace import StageTimer

#: Recorded in every answer's trace (ids and versions, never text): change it when the ranking changes.
VERSIONS = {"retriever": "my-retriever-v1"}


def build(chunks, vectors):
    """The factory ``labsrc gate --retriever my_retriever:build`` names."""
    return MyRetriever(chunks, vectors)


def may_see(caller, chunk, on_date):
    """The boundary: the caller's region, a tag the caller holds, in force on the date (both ends inclusive)."""
    return (
        chunk.region == caller.region
        and chunk.acl_tag in caller.acl_tags
        and chunk.effective_from <= on_date
        and (chunk.effective_to is None or on_date <= chunk.effective_to)
    )


class MyRetriever:
    def __init__(self, chunks, vectors):
        self.chunks = tuple(chunks)
        # The dense lane: the gate's --vectors when given, else a hashing encoder (word overlap, not meaning:
        # a stand-in for your embedding model). Made once per build, so its document vectors are reused.
        self.dense = vectors if vectors is not None else HashingEncoder()

    def search(self, query, caller, on_date, top_k):
        timer = StageTimer()  # milliseconds per stage, which the gate's latency budgets read
        with timer.stage("request"):
            # 1. Filter FIRST: nothing below ever sees a chunk this caller may not see on this date.
            with timer.stage("authorize"):
                mine = [chunk for chunk in self.chunks if may_see(caller, chunk, on_date)]
            # 2. Rank only what is left, in two lanes: BM25 statistics come from the caller's chunks alone.
            with timer.stage("bm25"):
                sparse = bm25_rank(query, mine, top_k) if mine else []
            with timer.stage("dense"):
                dense = dense_rank(query, mine, self.dense, top_k) if mine else []
            # 3. Fuse the two ranked lists with reciprocal rank fusion (k = 60).
            with timer.stage("fusion"):
                fused = reciprocal_rank_fusion([sparse, dense], top_k=top_k)
        # Reporting every lane (not only the fused list) lets the gate test each lane's recall and
        # "hybrid >= each lane"; the timings let it test the latency budgets stage by stage.
        return RetrievalResult.from_lanes(
            sparse, dense, fused, versions=VERSIONS, query_kind="adhoc", timings_ms=timer.timings_ms
        )
