"""The audited retrievers: what teams actually deploy, each filtering the way its documentation says.

:data:`SUBJECTS` maps a short name to a :class:`AuditSubject`: a description,
the extra it needs, and ``make(config)`` returning the gate factory. The lab's
own retrievers are the controls: they must pass every gate.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from labsrc.gate.config import GateConfig
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["SUBJECTS", "AuditSubject"]


@dataclass(frozen=True)
class AuditSubject:
    """One retriever to audit: ``make(config)`` gives ``factory(chunks, vectors)``."""

    name: str
    description: str
    extra: str
    make: Callable[[GateConfig], Any]
    control: bool = False
    #: Modules the factory imports, imported once in the gate's process by :meth:`factory` so that each
    #: forked build inherits them instead of importing them again (LangChain: 1.8 s a build, Chroma 3.8 s).
    #: Only modules whose import starts no thread (jemalloc's background thread aside, whose fork handlers
    #: reset it): a fork copies no thread, and a library whose import started one (LanceDB's event loop,
    #: Milvus Lite's gRPC) would hang in the worker.
    preload: tuple[str, ...] = ()

    def factory(self, config: GateConfig) -> Any:
        """``make(config)``, after importing :attr:`preload` (a module that is not installed is left to the
        factory, which names the extra to install)."""
        for module in self.preload:
            with warnings.catch_warnings():  # langchain-community announces its sunset on import
                warnings.simplefilter("ignore")
                try:
                    importlib.import_module(module)
                except ImportError:
                    break
        return self.make(config)


def _policy(config: GateConfig) -> Any:
    return partial(PolicyRetriever, rrf_k=config.rrf_k)


def _postgres(**settings: Any) -> Callable[[GateConfig], Any]:
    def make(config: GateConfig) -> Any:
        from labsrc.audit.pgvector_hnsw import SharedServerFactory

        return SharedServerFactory(rrf_k=config.rrf_k, **settings)

    return make


def _langchain(config: GateConfig) -> Any:
    from labsrc.audit.langchain_ensemble import LangChainEnsemble

    return LangChainEnsemble


def _tantivy(config: GateConfig) -> Any:
    from labsrc.audit.tantivy_filter import TantivyFilter

    return TantivyFilter


def _qdrant(config: GateConfig) -> Any:
    from labsrc.audit.qdrant_filter import QdrantFilter

    return QdrantFilter


def _duckdb(config: GateConfig) -> Any:
    from labsrc.audit.duckdb_hybrid import DuckDBHybrid

    return partial(DuckDBHybrid, rrf_k=config.rrf_k)


#: What ``import lancedb`` loads before the module whose import starts its event loop's thread: 2.5 s of
#: its 2.9 s (measured: ``lance_namespace``'s generated REST client alone takes 1.1 s). None of it starts a
#: Python thread; pyarrow starts jemalloc's background thread, as ``import pandas`` does, which jemalloc's
#: own fork handlers make safe (tests/test_audit.py checks both).
LANCEDB_PRELOAD = ("pyarrow", "pyarrow.dataset", "pandas", "lance_namespace")


def _lancedb(prefilter: bool) -> Callable[[GateConfig], Any]:
    def make(config: GateConfig) -> Any:
        from labsrc.audit.lancedb_hybrid import LanceDBHybrid

        return partial(LanceDBHybrid, prefilter=prefilter)

    return make


def _milvus(config: GateConfig) -> Any:
    from labsrc.audit.milvus_hybrid import MilvusHybrid

    return MilvusHybrid


def _llamaindex(config: GateConfig) -> Any:
    from labsrc.audit.llamaindex_bm25 import LlamaIndexHybrid

    return LlamaIndexHybrid


def _chroma(config: GateConfig) -> Any:
    from labsrc.audit.chroma_filter import ChromaFilter

    return ChromaFilter


SUBJECTS: Mapping[str, AuditSubject] = MappingProxyType({
    s.name: s
    for s in (
        AuditSubject("policy-retriever", "labsrc PolicyRetriever (control)", "", _policy, control=True),
        AuditSubject("postgres-exact", "labsrc PostgresRetriever, exact dense (control)", "postgres",
                     _postgres(dense_index="exact"), control=True),
        AuditSubject("langchain-ensemble", "LangChain BM25Retriever + FAISS, EnsembleRetriever 0.6/0.4, "
                     "FAISS filter= (fetch_k 20), BM25 list filtered at the same depth", "audit", _langchain,
                     preload=("langchain_classic.retrievers", "langchain_community.retrievers",
                              "langchain_community.vectorstores", "langchain_core.documents",
                              "langchain_core.embeddings", "langchain_core.retrievers")),
        AuditSubject("tantivy-filter", "tantivy BM25, boundary as const-score filter clauses in the query",
                     "audit", _tantivy, preload=("tantivy",)),
        AuditSubject("qdrant-filter", "Qdrant local mode, cosine, payload filter (region, tags, dates)",
                     "audit", _qdrant, preload=("qdrant_client",)),
        AuditSubject("duckdb-hybrid", "DuckDB fts match_bm25 + vss HNSW (cosine), boundary in WHERE, the lab's RRF, "
                     "both lanes reported",
                     "audit", _duckdb),
        AuditSubject("lancedb-hybrid", "LanceDB native FTS + vectors, query_type='hybrid', where(..., prefilter=True), "
                     "RRFReranker", "audit", _lancedb(prefilter=True), preload=LANCEDB_PRELOAD),
        AuditSubject("lancedb-postfilter", "LanceDB as lancedb-hybrid, where(..., prefilter=False): the post-filter "
                     "its docs offer", "audit", _lancedb(prefilter=False), preload=LANCEDB_PRELOAD),
        AuditSubject("milvus-hybrid", "Milvus Lite BM25 function + dense FLAT cosine, hybrid_search with expr, RRFRanker(60)",
                     "audit", _milvus),
        AuditSubject("llamaindex-fusion", "LlamaIndex BM25Retriever + SimpleVectorStore with MetadataFilters, "
                     "QueryFusionRetriever reciprocal_rerank", "audit", _llamaindex,
                     preload=("llama_index.core", "llama_index.core.embeddings", "llama_index.core.llms.mock",
                              "llama_index.core.retrievers", "llama_index.core.schema",
                              "llama_index.core.vector_stores", "llama_index.retrievers.bm25")),
        AuditSubject("chroma-filter", "Chroma (embeddings passed in), cosine, where filter (region, tags, dates)",
                     "audit", _chroma, preload=("chromadb",)),
        AuditSubject("pgvector-hnsw-off", "labsrc PostgresRetriever, pgvector HNSW, iterative scan off",
                     "postgres", _postgres(dense_index="hnsw", iterative_scan="off")),
        AuditSubject("pgvector-hnsw-on", "labsrc PostgresRetriever, pgvector HNSW, iterative scan relaxed_order",
                     "postgres", _postgres(dense_index="hnsw", iterative_scan="relaxed_order")),
    )
})
