"""LlamaIndex: ``BM25Retriever`` plus a ``VectorStoreIndex``, fused by ``QueryFusionRetriever``.

The shape of LlamaIndex's hybrid-retrieval guide, filtered the way its
documentation says: one ``MetadataFilters`` per caller and day (region ``EQ``,
``acl_tag`` ``IN`` the caller's tags, ``effective_from`` ``LTE`` and
``effective_to`` ``GTE`` the day), handed to ``BM25Retriever.from_defaults(nodes=...,
similarity_top_k=k, filters=...)`` (``llama-index-retrievers-bm25``; it takes its
filters when built, so one is built per filter, on first use, and kept) and to the
vector index's retriever (``as_retriever(similarity_top_k=k, filters=...)`` over
the default ``SimpleVectorStore``). ``QueryFusionRetriever(mode="reciprocal_rerank",
num_queries=1, use_async=False)`` fuses the two lists with its own RRF
(``k = 60``, ranks from 0); with one query it never calls its LLM, so it is given
``MockLLM`` instead of resolving the default (OpenAI) one. The nodes carry the
fixture vectors (``TextNode(embedding=...)``), and the query embedding model is
a small ``BaseEmbedding`` over the run's query encoder: nothing is downloaded.
The boundary metadata is excluded from the text BM25 tokenizes (LlamaIndex's
default would index ``region: EU`` as words of the chunk).

What we measured, in the installed code (0.8.0, ``bm25s`` 0.3.16):
``BM25Retriever`` turns ``filters`` into a 0/1 weight mask that multiplies the
scores of *every* stored node before the top k is taken, so a filtered-out node
is not removed, it scores 0; whenever fewer than k permitted nodes match a query
term, the free slots are filled with score-0 nodes, hidden ones included (a query
with no matching term returns k score-0 nodes, visible or not), and the fusion
ranks them like any other. BM25's statistics (document frequencies, average
length) are those of every stored node, so a hidden chunk moves a visible chunk's
score (0.7199 alone; 0.5210 beside a superseded chunk sharing its terms, 0.7130
beside a wrong-region one sharing one term, in the tests). A caller
who may see nothing makes ``from_defaults`` raise ``ValueError``; that lane is
then empty. ``SimpleVectorStore`` applies the filters *before* ranking (a
pre-filter over its whole dict), so the dense list holds only permitted nodes.
One ``BM25Retriever`` is built per caller and day, on first use (its filters
are fixed at construction), and a lock serialises searches, so one instance is
safe from many threads. Needs the ``audit`` extra (``llama-index-core``,
``llama-index-retrievers-bm25``).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["LlamaIndexHybrid"]

#: The constant ``QueryFusionRetriever``'s reciprocal-rank fusion uses (fixed in its code).
RRF_K = 60


def _imports() -> dict[str, Any]:
    try:
        from importlib.metadata import version

        from llama_index.core import VectorStoreIndex
        from llama_index.core.embeddings import BaseEmbedding
        from llama_index.core.llms.mock import MockLLM
        from llama_index.core.retrievers import QueryFusionRetriever
        from llama_index.core.schema import TextNode
        from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters
        from llama_index.retrievers.bm25 import BM25Retriever
    except ImportError as exc:
        raise MissingDependency(
            f"the LlamaIndex subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})"
        ) from exc
    return dict(VectorStoreIndex=VectorStoreIndex, BaseEmbedding=BaseEmbedding, MockLLM=MockLLM,
                QueryFusionRetriever=QueryFusionRetriever, TextNode=TextNode, FilterOperator=FilterOperator,
                MetadataFilter=MetadataFilter, MetadataFilters=MetadataFilters, BM25Retriever=BM25Retriever,
                version=version)


def _embedding(li: dict[str, Any], source: DenseSource) -> Any:
    """A query embedding model over the run's encoder (documents arrive with their vectors)."""

    class SourceEmbedding(li["BaseEmbedding"]):  # type: ignore[misc, valid-type]
        def _get_query_embedding(self, query: str) -> list[float]:
            return source.query_vector(query).tolist()

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            return source.query_vector(text).tolist()

    return SourceEmbedding(model_name="labsrc-dense-source")


class LlamaIndexHybrid:
    """``factory(chunks, vectors)``: BM25 and a vector index over every stored chunk, filtered per request."""

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None) -> None:
        li = self._li = _imports()
        self.source = dense_source(vectors)
        self.chunks = tuple(chunks)
        self._lock = threading.Lock()
        self._retrievers: dict[tuple[Any, ...], Any] = {}
        self.nodes: list[Any] = []
        self.index = None
        if not self.chunks:  # BM25Retriever refuses an empty corpus
            return
        matrix = document_vectors(self.source, self.chunks)
        for chunk, row in zip(self.chunks, matrix):
            metadata = boundary_metadata(chunk)
            self.nodes.append(li["TextNode"](
                id_=chunk.chunk_id, text=chunk.text, metadata=metadata,
                embedding=row.tolist() if np.any(row) else None,  # a chunk with no vector is not in the dense index
                excluded_embed_metadata_keys=list(metadata), excluded_llm_metadata_keys=list(metadata),
            ))
        self.index = li["VectorStoreIndex"]([n for n in self.nodes if n.embedding is not None],
                                            embed_model=_embedding(li, self.source))

    def _filters(self, caller: Caller, on_date: dt.date) -> Any:
        li, day = self._li, on_date.toordinal()
        op, one = li["FilterOperator"], li["MetadataFilter"]
        return li["MetadataFilters"](filters=[
            one(key="region", value=caller.region, operator=op.EQ),
            one(key="acl_tag", value=sorted(caller.acl_tags), operator=op.IN),
            one(key="effective_from", value=day, operator=op.LTE),
            one(key="effective_to", value=day, operator=op.GTE),
        ])

    def _bm25(self, filters: Any, caller: Caller, on_date: dt.date, top_k: int) -> Any:
        """One ``BM25Retriever`` per filter, built on first use and kept: it takes its filters when built, so
        a team builds one per filter (its index and statistics are every node's either way). Its public
        ``similarity_top_k`` is set to each request's depth (at most the number of nodes, as bm25s requires)."""
        key = (caller.region, tuple(sorted(caller.acl_tags)), on_date.toordinal())
        depth = min(top_k, len(self.nodes))
        if key not in self._retrievers:
            try:
                self._retrievers[key] = self._li["BM25Retriever"].from_defaults(
                    nodes=self.nodes, similarity_top_k=depth, filters=filters)
            except ValueError:  # "All nodes were filtered out by the metadata filters"
                self._retrievers[key] = None
        retriever = self._retrievers[key]
        if retriever is not None:
            retriever.similarity_top_k = depth
        return retriever

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        if not self.nodes or not query.strip() or top_k <= 0:
            return []
        li, filters = self._li, self._filters(caller, on_date)
        with self._lock:
            retrievers = []
            bm25 = self._bm25(filters, caller, on_date, top_k)
            if bm25 is not None:
                retrievers.append(bm25)
            if np.any(self.source.query_vector(query)):
                retrievers.append(self.index.as_retriever(similarity_top_k=top_k, filters=filters))
            if not retrievers:
                return []
            fusion = li["QueryFusionRetriever"](retrievers, llm=li["MockLLM"](), mode="reciprocal_rerank",
                                                num_queries=1, use_async=False,
                                                similarity_top_k=len(self.nodes) * len(retrievers))
            fused = fusion.retrieve(query)
        pairs = sorted(((n.node.node_id, float(n.score or 0.0)) for n in fused), key=lambda p: (-p[1], p[0]))
        return pairs[:top_k]

    def versions(self, on_date: dt.date | None = None) -> dict[str, str]:
        v = self._li["version"]
        return {"retriever": f"llama-index-core {v('llama-index-core')}, llama-index-retrievers-bm25 "
                             f"{v('llama-index-retrievers-bm25')} (bm25s {v('bm25s')}): BM25Retriever(filters=) + "
                             f"VectorStoreIndex/SimpleVectorStore(filters=), each at depth top_k, "
                             f"QueryFusionRetriever reciprocal_rerank k={RRF_K}"}

    def close(self) -> None:
        self.nodes, self.index, self._retrievers = [], None, {}
