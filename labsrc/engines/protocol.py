"""What any engine must provide to be gated: the retriever-under-test protocol.

The release gate, the case runner, the latency report and the noninterference
attacks call exactly these members, so an OpenSearch, Qdrant or Vespa adapter
that provides them is judged by the very same gates. The two in-tree
implementations are the examples: :class:`~labsrc.retriever.PolicyRetriever`
(in memory) and :class:`~labsrc.engines.postgres.PostgresRetriever` (RLS, BM25 in
SQL, pgvector).

=====================  ===================================================================
member                 contract
=====================  ===================================================================
``chunks``             every stored chunk (the exclusion probe searches this deep)
``vectors``            the dense source (its ``version`` and optional ``model`` are reported)
``rrf_k``              RRF's constant (the gate refuses a config that disagrees)
``versions(on_date)``  ``{name: version}`` recorded in every trace and report
``search(...)``        a :class:`~labsrc.retriever.RetrievalResult`: sparse, dense and fused
                       ``(chunk, score)`` lists, best first, ties by ``chunk_id`` ascending,
                       at most ``top_k`` each, only chunks the caller may see on ``on_date``,
                       plus the trace with ``timings_ms`` per stage
=====================  ===================================================================
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol, runtime_checkable

from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk
from labsrc.retriever.policy import RetrievalResult

__all__ = ["RetrieverUnderTest"]


@runtime_checkable
class RetrieverUnderTest(Protocol):
    """Anything the gates can judge (see the module docstring for each member's contract)."""

    chunks: tuple[PolicyChunk, ...]
    vectors: DenseSource
    rrf_k: float

    def versions(self, on_date: dt.date) -> dict[str, str]: ...

    def search(
        self, query: str, caller: Caller, on_date: dt.date, top_k: int = 2, *, query_kind: str = "adhoc"
    ) -> RetrievalResult: ...
