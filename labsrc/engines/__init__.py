"""Engines: the same boundary, lanes and gates inside a real database.

:class:`PostgresRetriever` enforces the evidence boundary with PostgreSQL
row-level security, computes BM25 in SQL over the rows the caller may see, and
searches vectors with pgvector; :class:`RetrieverUnderTest` states what any
engine must provide to be gated. Needs the ``postgres`` extra
(``pip install 'hybrid-retrieval-lab[postgres]'``), imported only when used.
"""

from labsrc.engines.lanes_sql import (
    Bm25Statistics,
    DENSE_MODES,
    ITERATIVE_SCANS,
    bm25_statistics,
    dense_candidates,
    float32_cosine_margin,
    rescore_dense,
    sparse_lane,
    vector_literal,
)
from labsrc.engines.loading import (
    LoadStats,
    analysed_postings,
    document_vectors,
    load_corpus,
)
from labsrc.engines.postgres import (
    ENGINE_VERSION,
    PostgresRetriever,
)
from labsrc.engines.protocol import (
    RetrieverUnderTest,
)
from labsrc.engines.schema import (
    BOUNDARY_POLICY,
    REQUEST_SETTINGS,
    apply_request,
    create_indexes,
    create_reader_role,
    create_tables,
    drop_store,
    enable_row_security,
)
from labsrc.engines.server import (
    EmbeddedServer,
    INSTALL_POSTGRES,
    postgres_available,
    require_psycopg,
    server_versions,
)
from labsrc.engines.store import (
    PostgresStore,
)

__all__ = [
    "BOUNDARY_POLICY",
    "Bm25Statistics",
    "DENSE_MODES",
    "ENGINE_VERSION",
    "EmbeddedServer",
    "INSTALL_POSTGRES",
    "ITERATIVE_SCANS",
    "LoadStats",
    "PostgresRetriever",
    "PostgresStore",
    "REQUEST_SETTINGS",
    "RetrieverUnderTest",
    "analysed_postings",
    "apply_request",
    "bm25_statistics",
    "create_indexes",
    "create_reader_role",
    "create_tables",
    "dense_candidates",
    "document_vectors",
    "drop_store",
    "enable_row_security",
    "float32_cosine_margin",
    "load_corpus",
    "postgres_available",
    "require_psycopg",
    "rescore_dense",
    "server_versions",
    "sparse_lane",
    "vector_literal",
]
