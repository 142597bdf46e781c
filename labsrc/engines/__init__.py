"""Engines: the same boundary, lanes and gates inside a real database.

:class:`PostgresRetriever` enforces the evidence boundary with PostgreSQL
row-level security over a signed, per-request token the reader role cannot
forge, computes BM25 in SQL over the rows the caller may see, and searches
vectors with pgvector; it is safe to share between threads (a pooled
connection per request). :class:`RetrieverUnderTest` states what any engine
must provide to be gated. :class:`StreamingReplica` starts a streaming read
replica of a server, and :meth:`PostgresRetriever.on_replicas` searches the
loaded corpus on replicas (round-robin, optionally with the primary). Needs
the ``postgres`` extra (``pip install 'hybrid-retrieval-lab[postgres]'``),
imported only when used.
"""

from labsrc.engines.analysis_pool import (
    PARALLEL_FROM,
    analyse_for_copy,
    staging_rows,
)
from labsrc.engines.authorize import (
    REQUEST_SETTING,
    RequestSigner,
    check_caller_text,
)
from labsrc.engines.deadline import (
    Deadline,
    watch,
    DeadlineExpired,
    request_deadline,
)
from labsrc.engines.errors import (
    check_storable,
    driver_errors,
    server_name,
)
from labsrc.engines.groups import (
    GROUP_KEY,
    create_group_table,
    create_group_triggers,
    fill_group_stats,
)
from labsrc.engines.teardown import drop_members, outside_dependents, role_elsewhere
from labsrc.engines.term_dates import DF_FUNCTION, create_df_function, create_term_dates
from labsrc.engines.binary_arrays import FLOAT8_OID, float8_array, float8_array_binary
from labsrc.engines.lanes_sql import (
    Bm25Statistics,
    DENSE_MODES,
    HNSW_OVERFETCH,
    ITERATIVE_SCANS,
    SCORE_SETTINGS,
    bm25_statistics,
    dense_candidates,
    float32_cosine_margin,
    hnsw_settings,
    rescore_dense,
    sparse_lane,
    vector_literal,
)
from labsrc.engines.loading import (
    LoadStats,
    boundary_order,
    document_vectors,
    load_corpus,
    vector_binary,
)
from labsrc.engines.orphans import (
    LOCK_CLASS,
    MARKER_PREFIX,
    drop_orphans,
    find_orphans,
    is_store_schema,
    lock_key,
    mark_owned,
    reader_role,
    READER_MARKER_PREFIX,
    Cleaned,
    Skipped,
    clean_orphans,
    mark_reader,
)
from labsrc.engines.pool import (
    DEFAULT_TIMEOUTS,
    Timeouts,
    leftover_state,
    reset_session,
    ROLE_DEFAULTS,
)
from labsrc.engines.lasting import LARGE_OBJECT_BATCH, LARGE_OBJECT_MAKERS, forbid_large_objects, owner_removes, remove_lasting, unlink_objects
from labsrc.engines.owner import building, connect_owner, drop_or_say, holders, owner_timeouts
from labsrc.engines.privileges import OWNER_GRANTS, owner_step
from labsrc.engines.postgres import (
    DEFAULT_EF_SEARCH,
    DEFAULT_ITERATIVE_SCAN,
    ENGINE_VERSION,
    PostgresRetriever,
)
from labsrc.engines.protocol import (
    RetrieverUnderTest,
)
from labsrc.engines.read_replicas import (
    ReadReplicas,
    ReplicaStore,
)
from labsrc.engines.replica import (
    Replay,
    StreamingReplica,
    replay_lsn_behind,
    wait_for_lsn,
)
from labsrc.engines.schema import (
    BOUNDARY_POLICY,
    INDEX_BUILD_MEMORY,
    PLAIN_VECTOR_MAX_DIM,
    READER_FUNCTIONS,
    READER_TABLES,
    REQUEST_FUNCTION,
    create_indexes,
    create_reader_role,
    create_request_function,
    create_tables,
    drop_store,
    enable_row_security,
    reset_role_settings,
)
from labsrc.engines.server import (
    EmbeddedServer,
    INSTALL_POSTGRES,
    package_root,
    postgres_available,
    require_psycopg,
    require_psycopg_pool,
    server_versions,
)
from labsrc.engines.sessions import (
    BoundaryKey,
    SessionBoundaries,
    boundary_key,
)
from labsrc.engines.socket_dir import (
    make_socket_directory,
    socket_path_fits,
)
from labsrc.engines.store import (
    PostgresStore,
)

__all__ = [
    "BOUNDARY_POLICY",
    "DEFAULT_EF_SEARCH",
    "DEFAULT_ITERATIVE_SCAN",
    "DEFAULT_TIMEOUTS",
    "DENSE_MODES",
    "DF_FUNCTION",
    "ENGINE_VERSION",
    "FLOAT8_OID",
    "GROUP_KEY",
    "HNSW_OVERFETCH",
    "INDEX_BUILD_MEMORY",
    "INSTALL_POSTGRES",
    "ITERATIVE_SCANS",
    "LARGE_OBJECT_BATCH",
    "LARGE_OBJECT_MAKERS",
    "LOCK_CLASS",
    "MARKER_PREFIX",
    "OWNER_GRANTS",
    "PARALLEL_FROM",
    "PLAIN_VECTOR_MAX_DIM",
    "READER_FUNCTIONS",
    "READER_MARKER_PREFIX",
    "READER_TABLES",
    "REQUEST_FUNCTION",
    "REQUEST_SETTING",
    "ROLE_DEFAULTS",
    "SCORE_SETTINGS",
    "Bm25Statistics",
    "BoundaryKey",
    "Cleaned",
    "Deadline",
    "DeadlineExpired",
    "EmbeddedServer",
    "LoadStats",
    "PostgresRetriever",
    "PostgresStore",
    "ReadReplicas",
    "Replay",
    "ReplicaStore",
    "RequestSigner",
    "RetrieverUnderTest",
    "SessionBoundaries",
    "Skipped",
    "StreamingReplica",
    "Timeouts",
    "analyse_for_copy",
    "bm25_statistics",
    "boundary_key",
    "boundary_order",
    "building",
    "check_caller_text",
    "check_storable",
    "clean_orphans",
    "connect_owner",
    "create_df_function",
    "create_group_table",
    "create_group_triggers",
    "create_indexes",
    "create_reader_role",
    "create_request_function",
    "create_tables",
    "create_term_dates",
    "dense_candidates",
    "document_vectors",
    "driver_errors",
    "drop_members",
    "drop_or_say",
    "drop_orphans",
    "drop_store",
    "enable_row_security",
    "fill_group_stats",
    "find_orphans",
    "float32_cosine_margin",
    "float8_array",
    "float8_array_binary",
    "forbid_large_objects",
    "hnsw_settings",
    "holders",
    "is_store_schema",
    "leftover_state",
    "load_corpus",
    "lock_key",
    "make_socket_directory",
    "mark_owned",
    "mark_reader",
    "outside_dependents",
    "owner_removes",
    "owner_step",
    "owner_timeouts",
    "package_root",
    "postgres_available",
    "reader_role",
    "remove_lasting",
    "replay_lsn_behind",
    "request_deadline",
    "require_psycopg",
    "require_psycopg_pool",
    "rescore_dense",
    "reset_role_settings",
    "reset_session",
    "role_elsewhere",
    "server_name",
    "server_versions",
    "socket_path_fits",
    "sparse_lane",
    "staging_rows",
    "unlink_objects",
    "vector_binary",
    "vector_literal",
    "wait_for_lsn",
    "watch",
]
