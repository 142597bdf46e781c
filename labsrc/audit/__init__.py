"""Audit: gate retrievers the lab did not build.

A plug-in is named ``MODULE:FACTORY`` (:func:`load_factory`); the audited
subjects (:data:`SUBJECTS`) are what teams deploy, LangChain, tantivy, Qdrant,
DuckDB, LanceDB, Milvus Lite, LlamaIndex, Chroma and pgvector HNSW, each filtering by metadata the way its own documentation
recommends, with the lab's retrievers as controls. :func:`run_audit` puts each
through the gate (:func:`labsrc.gate.gate_retriever`) on each dataset: the
lesson, the policy corpus, or a BEIR collection under a permission layout.
:func:`gate_from_files` gates one retriever on a team's own files (what
``labsrc gate`` and :mod:`labsrc.testing` run).
"""

from labsrc.audit.chroma_filter import ChromaFilter
from labsrc.audit.common import OPEN_END, boundary_metadata, dense_source, document_vectors, permits
from labsrc.audit.duckdb_hybrid import DuckDBHybrid, load_extensions
from labsrc.audit.gate_files import LabRetriever, as_gate_config, gate_from_files
from labsrc.audit.lancedb_hybrid import LanceDBHybrid, boundary_where
from labsrc.audit.langchain_ensemble import FETCH_K, WEIGHTS, LangChainEnsemble
from labsrc.audit.llamaindex_bm25 import LlamaIndexHybrid
from labsrc.audit.milvus_hybrid import MilvusHybrid, boundary_expr
from labsrc.audit.pgvector_hnsw import SharedServerFactory
from labsrc.audit.plugin import CLI_OPTION, SpecFactory, load_factory, parse_spec, worker_factory
from labsrc.audit.qdrant_filter import QdrantFilter
from labsrc.audit.rows import ROW_STATUSES, AuditRow, load_rows, save_rows
from labsrc.audit.tantivy_filter import TantivyFilter
from labsrc.audit.subjects import SUBJECTS, AuditSubject
from labsrc.audit.table import (
    AUDIT_GATES,
    BEIR_CASES,
    BEIR_GATE,
    AuditDataset,
    audit_cost,
    audit_frame,
    audit_markdown,
    audit_row,
    dataset_digest,
    load_dataset,
    plot_audit,
    run_audit,
)

__all__ = [
    "CLI_OPTION",
    "AUDIT_GATES",
    "BEIR_CASES",
    "BEIR_GATE",
    "ChromaFilter",
    "DuckDBHybrid",
    "LlamaIndexHybrid",
    "LanceDBHybrid",
    "MilvusHybrid",
    "boundary_expr",
    "boundary_where",
    "load_extensions",
    "FETCH_K",
    "LabRetriever",
    "LangChainEnsemble",
    "OPEN_END",
    "QdrantFilter",
    "SharedServerFactory",
    "TantivyFilter",
    "WEIGHTS",
    "as_gate_config",
    "boundary_metadata",
    "dense_source",
    "document_vectors",
    "permits",
    "AuditDataset",
    "AuditRow",
    "AuditSubject",
    "SUBJECTS",
    "audit_frame",
    "audit_cost",
    "audit_markdown",
    "audit_row",
    "dataset_digest",
    "load_rows",
    "ROW_STATUSES",
    "save_rows",
    "load_dataset",
    "gate_from_files",
    "load_factory",
    "worker_factory",
    "SpecFactory",
    "parse_spec",
    "plot_audit",
    "run_audit",
]
