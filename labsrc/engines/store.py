"""One loaded corpus in PostgreSQL: its server, schema, reader role, signing key and connection pool.

A :class:`PostgresStore` owns everything the engine created and removes it on
:meth:`close`: its own schema (``lab_<random>``, so several stores share a
server without colliding), its reader role, its pool of reader connections
and, when it started one, the embedded server. Retrievers with different dense
settings can share one store
(:meth:`PostgresRetriever.with_dense <labsrc.engines.postgres.PostgresRetriever.with_dense>`).

Thread safety: :meth:`request` hands each caller its own pooled connection
and transaction, so any number of threads may run requests at once. The owner
connection (``admin``) is used under a lock.
"""

from __future__ import annotations

import datetime as dt
import secrets
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from labsrc.engines.authorize import RequestSigner
from labsrc.engines.deadline import request_deadline, watch
from labsrc.engines.errors import driver_errors, first_line, hide_password, server_name
from labsrc.engines.groups import create_group_triggers, fill_group_stats
from labsrc.engines.loading import LoadStats, document_vectors, load_corpus, longest_key
from labsrc.engines.orphans import drop_orphans, mark_owned, mark_reader
from labsrc.engines.lasting import forbid_large_objects, owner_removes, remove_lasting, unlink_objects
from labsrc.engines.owner import building, connect_owner, drop_or_say, holders
from labsrc.engines.pool import DEFAULT_TIMEOUTS, ROLE_DEFAULTS, Timeouts, reader_options, reset_session, role_has_defaults
from labsrc.engines.schema import (
    INDEX_BUILD_MEMORY,
    create_indexes,
    create_reader_role,
    create_request_function,
    create_tables,
    enable_row_security,
    reset_role_settings,
)
from labsrc.engines.term_dates import create_df_function, create_term_dates
from labsrc.engines.server import EmbeddedServer, require_psycopg, require_psycopg_pool, server_versions
from labsrc.engines.sessions import SessionBoundaries, boundary_key, corpus_version, forget_totals
from labsrc.errors import InvalidArgument, LabError
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["PostgresStore"]

#: Most reader connections a store's pool keeps open (threads beyond it wait for one, up to the connect timeout).
POOL_MAX_SIZE = 16


class PostgresStore:
    """Create the schema, key and role, bulk-load the corpus, switch on RLS; lend out authorized connections.

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
    timeouts:
        Connect, statement and lock timeouts (:class:`~labsrc.engines.pool.Timeouts`).
    """

    def __init__(
        self,
        chunks: Sequence[PolicyChunk],
        source: DenseSource,
        analyzer: Callable[[str], list[str]],
        *,
        dsn: str | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        if not isinstance(timeouts, Timeouts):
            raise InvalidArgument(f"timeouts must be a labsrc.engines.Timeouts, not {type(timeouts).__name__}")
        if dsn is not None and not isinstance(dsn, str):
            raise InvalidArgument(f"dsn must be a str or None, not {type(dsn).__name__}")
        self._psycopg = require_psycopg()
        self._pool_module = require_psycopg_pool()
        self.timeouts = timeouts
        self.closed = False
        self.pool: Any = None
        self.admin: Any = None
        self.server = EmbeddedServer() if dsn is None else None
        self.dsn: str = self.server.dsn if self.server is not None else dsn  # type: ignore[assignment]
        self.server_name = server_name(self.dsn)
        suffix = secrets.token_hex(4)
        self.schema = f"lab_{suffix}"
        self.role = f"lab_{suffix}_reader"
        self._password = secrets.token_urlsafe(24)
        self._signer = RequestSigner()
        self._admin_lock = threading.Lock()
        self.hnsw: dict[str, int] | None = None
        #: Pooled sessions closed because a request left state on them (:meth:`_reset`).
        self.discarded_sessions = 0
        #: Which boundary each pooled session serves (:mod:`labsrc.engines.sessions`); ``.closed`` counts switches.
        self.session_boundaries = SessionBoundaries()
        #: Schemas of dead processes this store dropped when it started (:func:`~labsrc.engines.orphans.drop_orphans`).
        self.orphans_dropped: tuple[str, ...] = ()
        self._count_lock = threading.Lock()
        self._kept_objects: list[int] = []  # the reader's large objects the owner took over but could not unlink yet
        try:
            self.admin = connect_owner(self._psycopg, self.dsn, timeouts)  # lock and statement timeouts on every statement
        except (self._psycopg.Error, UnicodeError) as exc:
            self._stop_server()
            raise InvalidArgument(
                f"cannot connect to PostgreSQL at {self.server_name} (connect timeout {timeouts.connect:g} s): "
                f"{hide_password(first_line(exc), self.dsn)}"
            ) from exc
        except BaseException:
            self._stop_server()
            raise
        try:
            with driver_errors(self.server_name, timeouts, self.dsn):
                self.load_stats = self._build(chunks, source, analyzer, progress)
                self.versions = server_versions(self.admin)
                self.pool = self._open_pool()
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
        if self.server is None:  # a server by DSN: drop what killed processes left there (labsrc.engines.orphans)
            self.orphans_dropped = tuple(drop_orphans(self.admin))
        if self.server is not None:  # its own server, as a superuser: no reader session makes a large object
            forbid_large_objects(self.admin)
        vectors, dimension = document_vectors(chunks, source)
        create_tables(self.admin, self.schema, dimension)
        mark_owned(self.admin, self.schema)  # the admin session holds the schema's lock for the store's lifetime
        self.vector_schema = self.admin.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'"
        ).fetchone()[0]
        self.search_path = f'"{self.schema}", "{self.vector_schema}"'
        self.admin.execute(f"SET search_path = {self.search_path}")
        with building(self.admin, self.timeouts):  # statements that take minutes at 100k chunks
            stats = load_corpus(self.admin, chunks, vectors, analyzer, progress=progress)
            self.groups = fill_group_stats(self.admin, self.schema)
            create_group_triggers(self.admin, self.schema)
            try:
                create_indexes(self.admin, self.schema)
            except self._psycopg.errors.ProgramLimitExceeded as exc:
                raise InvalidArgument(
                    f"PostgreSQL cannot index this corpus: {first_line(exc)}; a chunk_id, region, acl_tag or analysed "
                    f"term (with the others in its row) must stay under about 2,700 bytes{longest_key(chunks, analyzer)}"
                ) from exc
            self.term_rows = create_term_dates(self.admin, self.schema)
        create_request_function(self.admin, self.schema, self._signer)
        create_df_function(self.admin, self.schema)
        create_reader_role(self.admin, self.schema, self.role, self._password)
        mark_reader(self.admin, self.schema)  # the role's marker: only its creator (or a superuser) can write one
        enable_row_security(self.admin, self.schema, self.role)
        return stats

    # --- connections ------------------------------------------------------------------

    def _reader_kwargs(self, *, autocommit: bool) -> dict[str, Any]:
        return {
            "user": self.role,
            "password": self._password,
            "autocommit": autocommit,
            "connect_timeout": self.timeouts.connect_s,
            # pg_temp last: a temporary table the session made can never stand in for lab_chunks or lab_postings.
            "options": reader_options(f"{self.schema},{self.vector_schema},pg_temp", self.timeouts),
        }

    def _configure(self, conn: Any) -> None:
        """A new reader session: refuse it (and wipe the defaults) if the role has set itself defaults."""
        with watch(conn, self.timeouts.request):  # housekeeping: not the lanes' statement budget
            has_defaults = role_has_defaults(conn)
        if has_defaults:
            with self._admin_lock:
                reset_role_settings(self.admin, self.role)
            raise LabError(f"reader role {self.role} had set itself session defaults; removed, reconnecting")
        conn.isolation_level = self._psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True

    def _reset(self, conn: Any) -> None:
        """A connection back from a request: nothing it set, created, prepared, held or listened to reaches the
        next request. Settings and temporary objects are undone; anything else closes the connection (the pool
        discards a connection whose reset raises, and opens a new session in its place). What outlives the
        session is removed in bounded batches, by the reader or else by the owner (:mod:`labsrc.engines.lasting`).
        """
        with watch(conn, self.timeouts.request):  # housekeeping: not the lanes' statement budget
            leftovers = reset_session(conn)
        if not leftovers:
            return
        with self._count_lock:
            self.discarded_sessions += 1
        try:
            with watch(conn, self.timeouts.request):
                remove_lasting(conn)  # large objects, prepared transactions: they outlive the session
        except (self._psycopg.Error, LabError):
            self._owner_removes()  # the session is discarded either way; the owner takes over what it made
        if ROLE_DEFAULTS in leftovers:
            with self._admin_lock:
                reset_role_settings(self.admin, self.role)
        raise LabError(f"a request left {', '.join(leftovers)} on its session; closing it")

    def _owner_removes(self) -> None:
        """The reader's large objects, taken over and unlinked by the owner; those another role holds wait for close()."""
        try:
            with self._admin_lock, driver_errors(self.server_name, self.timeouts, self.dsn):
                _, left = owner_removes(self.admin, self.schema, self.role)
                self._kept_objects.extend(left)  # under the lock: close() reads it under the same one
        except LabError as exc:
            warnings.warn(f"the reader's large objects were not all removed: {exc}", RuntimeWarning, stacklevel=3)

    def _open_pool(self) -> Any:
        pool = self._pool_module.ConnectionPool(
            self.dsn,
            kwargs=self._reader_kwargs(autocommit=True),
            min_size=1,
            max_size=POOL_MAX_SIZE,
            configure=self._configure,
            reset=self._reset,
            timeout=self.timeouts.connect,
            reconnect_timeout=max(self.timeouts.connect, 30.0),
            name=self.schema,
            open=False,
        )
        pool.open(wait=True, timeout=self.timeouts.connect)
        return pool

    def _connect_reader(self) -> Any:
        """A new reader session outside the pool (for :meth:`connect_as`), checked like a pooled one."""
        if self.closed:
            raise LabError("this PostgreSQL store is closed")
        for _ in range(2):
            conn = self._psycopg.connect(self.dsn, **self._reader_kwargs(autocommit=True))
            try:
                self._configure(conn)
            except LabError:
                conn.close()
                continue
            except BaseException:
                conn.close()
                raise
            conn.autocommit = False
            return conn
        raise LabError(f"reader role {self.role} keeps setting itself session defaults")

    @contextmanager
    def request(self, caller: Caller, on_date: dt.date, *, pipeline: bool = False) -> Iterator[Any]:
        """A pooled reader connection inside a fresh transaction authorized for ``caller`` on ``on_date``.

        One per request, never shared: ``with store.request(caller, day) as conn: ...``. The
        transaction is read-only and ends with ``COMMIT``, which writes nothing (a ``ROLLBACK`` would
        make psycopg forget the connection's prepared statements); the connection is reset before it
        returns to the pool (:meth:`_reset`). Every driver error inside the block comes out as a
        :class:`~labsrc.errors.LabError` naming the server.

        With ``pipeline=True`` the connection is in psycopg's pipeline mode: statements are sent as they are
        executed but the client waits only when it fetches a result, so statements executed between two
        fetches share one round trip (``BEGIN`` travels with the authorization's first query, the token with
        the corpus version's, :mod:`labsrc.engines.sessions`). Every statement runs in the same order as without it.
        """
        if self.closed or self.pool is None:
            raise LabError("this PostgreSQL store is closed")
        with driver_errors(self.server_name, self.timeouts, self.dsn):
            yield from self._session(caller, on_date, pipeline)

    def _session(self, caller: Caller, on_date: dt.date, pipeline: bool) -> Iterator[Any]:
        """An authorized pooled session that has served only requests that saw exactly these rows.

        A session drawn by a request of another boundary is closed (the pool opens a new one): what an earlier
        request may have left in it, such as placeholder setting names, holds only rows of its own boundary. So
        is one whose boundary's rows changed since its first request, found once this request is authorized
        (:mod:`labsrc.engines.sessions`). Waiting for a session is bounded by the connect timeout in all.
        """
        key = boundary_key(caller, on_date)
        deadline = time.monotonic() + self.timeouts.connect
        while True:
            with self.pool.connection(timeout=max(deadline - time.monotonic(), 0.001)) as conn:
                current = False
                if self.session_boundaries.claim(conn, key):
                    with request_deadline(conn, self.timeouts.request, self.server_name):
                        with conn.pipeline() if pipeline else nullcontext():
                            with conn.transaction():
                                self._signer.authorize(conn, caller, on_date)
                                version = corpus_version(conn, self.schema)
                                current = self.session_boundaries.same_corpus(conn, version)
                                if current:
                                    try:
                                        yield conn
                                    finally:
                                        forget_totals(conn)
                if current:
                    return
                forget_totals(conn)
                conn.close()

    def connect_as(self, caller: Caller, on_date: dt.date) -> Any:
        """A new reader-role connection (not pooled) inside a transaction authorized for ``caller`` on ``on_date``.

        Exactly how a request is set up: repeatable-read, read-only, a request token signed for this
        session and this transaction. The authorization lasts until the transaction ends
        (``commit``/``rollback``, or leaving ``with conn:``); after that the session sees no rows at
        all, and no ``SET``, ``set_config`` or ``RESET`` it runs can make it see more. The connection
        is the caller's alone: do not share it between threads.
        """
        with driver_errors(self.server_name, self.timeouts, self.dsn):
            conn = self._connect_reader()
            try:
                self._signer.authorize(conn, caller, on_date)
            except BaseException:
                conn.close()
                raise
        return conn

    # --- the HNSW index -----------------------------------------------------------------

    def ensure_hnsw(self, m: int = 16, ef_construction: int = 64) -> dict[str, int]:
        """Build the HNSW index on the vectors (cosine), once; returns its parameters."""
        if self.hnsw is not None:  # every hnsw request asks: no lock once it is built
            return self.hnsw
        with self._admin_lock:
            if self.hnsw is None:
                with driver_errors(self.server_name, self.timeouts, self.dsn), building(self.admin, self.timeouts):
                    # The graph is built fastest in memory: pgvector warns and slows down once it outgrows this.
                    self.admin.execute(f"SET maintenance_work_mem = '{INDEX_BUILD_MEMORY}'")
                    try:
                        self.admin.execute(
                            f"CREATE INDEX lab_vectors_embedding_hnsw ON lab_vectors USING hnsw (embedding vector_cosine_ops) "
                            f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
                        )
                    finally:
                        self.admin.execute("RESET maintenance_work_mem")
                    self.admin.execute("ANALYZE lab_vectors")
                self.hnsw = {"m": int(m), "ef_construction": int(ef_construction)}
            return self.hnsw

    # --- lifecycle ---------------------------------------------------------------------

    def _stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()

    def close(self) -> None:
        """Close connections, drop the schema and role, stop the embedded server (idempotent).

        Never raises for a server that is gone (an embedded one is deleted whole either way) or for a lock another
        role holds: each statement gives up after the lock timeout, and a :class:`RuntimeWarning` says in one line
        what was kept and why (``schema lab_… and role … kept: role eve (pid 4242) holds a lock on large object
        16411``); ``labsrc engines clean`` drops it later. It waits on others at most two lock timeouts and 6 s
        (the pool, the reader's sessions): about 16 s with the default timeouts.
        """
        if self.closed:
            return
        self.closed = True
        try:
            if self.pool is not None:
                self.pool.close(timeout=1.0)
            if self.admin is not None and self.server is None:  # an embedded server is deleted whole
                try:
                    with self._admin_lock, driver_errors(self.server_name, self.timeouts, self.dsn):
                        kept = unlink_objects(self.admin, self._kept_objects)
                        held = "; ".join(holders(self.admin, self.schema, self.role, kept)) if kept else ""
                        why = drop_or_say(self.admin, self.schema, self.role)  # ends connect_as sessions left open too
                    said = [f"schema {self.schema} and role {self.role} kept: {why}"] if why else []
                    if kept:  # the owner's since the reset took them over: nobody else may read them
                        said.append(f"large object {', '.join(map(str, kept[:3]))}{' and others' if len(kept) > 3 else ''} "
                                    f"kept (the owner's, readable by no other role): {held or 'a lock on it timed out'}")
                    if said:
                        warnings.warn("; ".join(said), RuntimeWarning, stacklevel=2)
                except LabError as exc:
                    if not isinstance(exc.__cause__, self._psycopg.OperationalError):
                        raise
                    # A server that is gone cannot be cleaned, and closing must not fail because of it.
                    warnings.warn(
                        f"schema {self.schema} and role {self.role} were not dropped: {exc}", RuntimeWarning, stacklevel=2
                    )
        finally:
            try:
                if self.admin is not None:
                    self.admin.close()
            finally:
                self._stop_server()

