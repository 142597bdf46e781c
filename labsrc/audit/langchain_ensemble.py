"""LangChain: ``BM25Retriever`` plus FAISS in an ``EnsembleRetriever``, weights 0.6 / 0.4.

The shape of LangChain's hybrid-search how-to. Metadata filtering follows its
documentation: FAISS takes ``filter`` (here a callable over the metadata) and
applies it to ``fetch_k`` (default 20) nearest neighbours, then keeps ``k``;
``BM25Retriever`` has no filter, so its top ``fetch_k`` documents are filtered
the same way. Both rank over every stored chunk. ``EnsembleRetriever`` fuses
with weighted RRF (``c = 60``) and returns documents without scores; the score
reported here is the ensemble's own weighted RRF sum, recomputed from the two
lists it fused. Needs the ``audit`` extra (``langchain-community``,
``langchain-classic``, ``faiss-cpu``, ``rank-bm25``).
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Sequence
from typing import Any

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors, permits
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["FETCH_K", "WEIGHTS", "LangChainEnsemble"]

#: The ensemble's weights (BM25, FAISS), as in LangChain's how-to.
WEIGHTS = (0.6, 0.4)
#: FAISS's default over-fetch before its filter; the BM25 list is filtered at the same depth.
FETCH_K = 20


def _imports() -> dict[str, Any]:
    try:
        with warnings.catch_warnings():  # langchain-community announces its sunset on import
            warnings.simplefilter("ignore")
            from langchain_classic.retrievers import EnsembleRetriever
            from langchain_community.retrievers import BM25Retriever
            from langchain_community.vectorstores import FAISS
            from langchain_core.documents import Document
            from langchain_core.embeddings import Embeddings
            from langchain_core.retrievers import BaseRetriever
    except ImportError as exc:
        raise MissingDependency(
            f"the LangChain subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})"
        ) from exc
    return dict(EnsembleRetriever=EnsembleRetriever, BM25Retriever=BM25Retriever, FAISS=FAISS,
                Document=Document, Embeddings=Embeddings, BaseRetriever=BaseRetriever)


class LangChainEnsemble:
    """``factory(chunks, vectors)``: the ensemble over every stored chunk, filtered per request."""

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None) -> None:
        lc = _imports()
        self._lc = lc
        self.source = dense_source(vectors)
        self.chunks = tuple(chunks)
        self.bm25 = self.store = None
        if not self.chunks:  # LangChain cannot build either index over nothing
            return
        documents = [lc["Document"](page_content=c.text, metadata=boundary_metadata(c)) for c in self.chunks]
        self.bm25 = lc["BM25Retriever"].from_documents(documents, k=FETCH_K)
        source = self.source

        class SourceEmbeddings(lc["Embeddings"]):  # type: ignore[misc, valid-type]
            def embed_documents(self, texts: list[str]) -> list[list[float]]:  # only queries are embedded here
                return [source.query_vector(t).tolist() for t in texts]

            def embed_query(self, text: str) -> list[float]:
                return source.query_vector(text).tolist()

        matrix = document_vectors(self.source, self.chunks)
        self.store = lc["FAISS"].from_embeddings(
            list(zip([c.text for c in self.chunks], matrix.tolist())), SourceEmbeddings(),
            metadatas=[boundary_metadata(c) for c in self.chunks],
        )

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        if self.bm25 is None or self.store is None or not query.strip():
            return []
        lc = self._lc
        allowed = lambda metadata: permits(metadata, caller, on_date)  # noqa: E731
        bm25 = self.bm25

        class FilteredBM25(lc["BaseRetriever"]):  # type: ignore[misc, valid-type]
            def _get_relevant_documents(self, text: str, *, run_manager: Any) -> list[Any]:
                return [d for d in bm25.invoke(text) if allowed(d.metadata)][:top_k]

        dense = self.store.as_retriever(search_kwargs={"k": top_k, "fetch_k": FETCH_K, "filter": allowed})
        ensemble = lc["EnsembleRetriever"](retrievers=[FilteredBM25(), dense], weights=list(WEIGHTS),
                                            id_key="chunk_id")
        lists = [r.invoke(query) for r in ensemble.retrievers]
        fused = ensemble.weighted_reciprocal_rank(lists)
        scores: dict[str, float] = {}
        for weight, docs in zip(WEIGHTS, lists):
            for rank, doc in enumerate(docs, start=1):
                key = doc.metadata["chunk_id"]
                scores[key] = scores.get(key, 0.0) + weight / (rank + ensemble.c)
        return [(d.metadata["chunk_id"], scores[d.metadata["chunk_id"]]) for d in fused][:top_k]
