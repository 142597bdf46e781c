"""One loaded corpus in PostgreSQL: its server, schema, reader role and connections.

A :class:`PostgresStore` owns everything the engine created and removes it on
:meth:`close`: its own schema (``lab_<random>``, so several stores share a
server without colliding), its reader role, and, when it started one, the
embedded server. Retrievers with different dense settings can share one store
(:meth:`PostgresRetriever.with_dense <labsrc.engines.postgres.PostgresRetriever.with_dense>`).
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from labsrc.engines.loading import LoadStats, document_vectors, load_corpus
from labsrc.engines.schema import (
    apply_request,
    create_indexes,
    create_reader_role,
    create_tables,
    drop_store,
    enable_row_security,
)
from labsrc.engines.server import EmbeddedServer, require_psycopg, server_versions
from labsrc.errors import InvalidArgument, LabError
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["PostgresStore"]


class PostgresStore:
    """Create the schema and role, bulk-load the corpus, switch on RLS; hand out reader connections.

    Parameters
    ----------
    chunks:
        Every stored chunk, sorted by ``chunk_id``, ids unique.
    source:
        The dense lane's vectors (document vectors are read once, at load).
    analyzer:
        The BM25 analyzer (terms are counted in Python, at load).
    dsn:
        A libpq connection string or URL of an existing server, or ``None`` to
        start an :class:`~labsrc.engines.server.EmbeddedServer`. The DSN's user
        must be able to create a schema and a role (and pgvector, if absent).
    """

    def __init__(
        self,
        chunks: Sequence[PolicyChunk],
        source: DenseSource,
        analyzer: Callable[[str], list[str]],
        *,
        dsn: str | None = None,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self._psycopg = require_psycopg()
        self.server = EmbeddedServer() if dsn is None else None
        self.dsn: str = self.server.dsn if self.server is not None else dsn  # type: ignore[assignment]
        suffix = secrets.token_hex(4)
        self.schema = f"lab_{suffix}"
        self.role = f"lab_{suffix}_reader"
        self._password = secrets.token_urlsafe(24)
        self._reader: Any = None
        self.hnsw: dict[str, int] | None = None
        self.closed = False
        try:
            self.admin = self._psycopg.connect(self.dsn, autocommit=True)
        except self._psycopg.OperationalError as exc:
            self._stop_server()
            raise InvalidArgument(f"cannot connect to PostgreSQL at {self.dsn!r}: {exc}") from exc
        try:
            self.load_stats = self._build(chunks, source, analyzer, progress)
            self.versions = server_versions(self.admin)
        except BaseException:
            self.close()
            raise

    def _build(
        self,
        chunks: Sequence[PolicyChunk],
        source: DenseSource,
        analyzer: Callable[[str], list[str]],
        progress: Callable[[str, int, int], None] | None,
    ) -> LoadStats:
        vectors, dimension = document_vectors(chunks, source)
        create_tables(self.admin, self.schema, dimension)
        self.vector_schema = self.admin.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        ).fetchone()[0]
        self.search_path = f'"{self.schema}", "{self.vector_schema}"'
        self.admin.execute(f"SET search_path = {self.search_path}")
        try:
            stats = load_corpus(self.admin, chunks, vectors, analyzer, progress=progress)
        except self._psycopg.DataError as exc:
            raise InvalidArgument(f"PostgreSQL refused a chunk while loading: {exc}") from exc
        create_indexes(self.admin, self.schema)
        create_reader_role(self.admin, self.schema, self.role, self._password)
        enable_row_security(self.admin, self.schema, self.role)
        return stats

    # --- connections ------------------------------------------------------------------

    def _connect_reader(self, *, autocommit: bool) -> Any:
        if self.closed:
            raise LabError("this PostgreSQL store is closed")
        conn = self._psycopg.connect(
            self.dsn, user=self.role, password=self._password, autocommit=autocommit,
            options=f"-c search_path={self.schema},{self.vector_schema}",
        )
        conn.isolation_level = self._psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        return conn

    @property
    def reader(self) -> Any:
        """The retriever's own connection as the reader role (autocommit; one transaction per request)."""
        if self._reader is None or self._reader.closed:
            self._reader = self._connect_reader(autocommit=True)
        return self._reader

    def connect_as(self, caller: Caller, on_date: dt.date) -> Any:
        """A new reader-role connection inside a transaction authorized for ``caller`` on ``on_date``.

        Exactly how a request is set up: repeatable-read, read-only, the three
        settings written with ``SET LOCAL``. They last until the transaction ends
        (``commit``/``rollback``, or leaving ``with conn:``); after that the
        session sees no rows at all.
        """
        conn = self._connect_reader(autocommit=False)
        try:
            apply_request(conn, caller, on_date)
        except BaseException:
            conn.close()
            raise
        return conn

    # --- the HNSW index -----------------------------------------------------------------

    def ensure_hnsw(self, m: int = 16, ef_construction: int = 64) -> dict[str, int]:
        """Build the HNSW index on the vectors (cosine), once; returns its parameters."""
        if self.hnsw is None:
            self.admin.execute(
                f"CREATE INDEX lab_chunks_embedding_hnsw ON lab_chunks USING hnsw (embedding vector_cosine_ops) "
                f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
            )
            self.admin.execute("ANALYZE lab_chunks")
            self.hnsw = {"m": int(m), "ef_construction": int(ef_construction)}
        return self.hnsw

    # --- lifecycle ---------------------------------------------------------------------

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()

    def close(self) -> None:
        """Close connections, drop the schema and role, stop the embedded server (idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self._reader is not None:
            self._reader.close()
        admin = getattr(self, "admin", None)
        if admin is not None:
            try:
                if self.server is None:  # an embedded server is deleted whole; a shared one is cleaned
                    # Other sessions of the role (connect_as ones left open) would block DROP ROLE.
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (self.role,)
                    )
                    drop_store(admin, self.schema, self.role)
            finally:
                admin.close()
        self._stop_server()
