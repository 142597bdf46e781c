"""Serving a loaded store's requests from streaming read replicas, round-robin with (or without) the primary.

A :class:`~labsrc.engines.store.PostgresStore` is loaded once, on the primary.
Physical replication copies everything it created to each replica (a
:class:`~labsrc.engines.replica.StreamingReplica`, or a managed read replica):
the schema and its rows, the reader role and its password, the RLS policies,
``lab_request()`` and the signing key's table. So a replica needs nothing
loaded; it needs connections. :class:`ReplicaStore` is the primary's store as
one replica serves it: the same schema, reader role, credentials, session
options and signing key, with a connection pool of its own on the replica's
DSN. Its requests run through the very code of the primary's
(:meth:`PostgresStore.request <labsrc.engines.store.PostgresStore.request>`):
a read-only, repeatable-read transaction in which the token is signed for the
replica's own backend pid and transaction start, which ``lab_request()`` checks
on the replica, read-only, exactly as on the primary.

:class:`ReadReplicas` spreads requests over several such servers, one whole
request each, in turn. A retriever serving from it is built by
:meth:`PostgresRetriever.on_replicas <labsrc.engines.postgres.PostgresRetriever.on_replicas>`.
Writes (loading, the HNSW index) always go to the primary; a replica shows them
once it has replayed them, which :class:`ReadReplicas` waits for when it opens
and after it builds an index. A replica that lags answers from an older
snapshot; each request's BM25 statistics come from the same snapshot as its
rows, so a request is consistent, only older.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from labsrc.engines.errors import driver_errors, server_name
from labsrc.engines.replica import replay_lsn_behind, wait_for_lsn
from labsrc.engines.server import server_versions
from labsrc.engines.sessions import SessionBoundaries
from labsrc.engines.store import PostgresStore
from labsrc.errors import InvalidArgument, LabError

__all__ = ["ReadReplicas", "ReplicaStore"]

#: How long opening :class:`ReadReplicas` waits, by default, for its replicas to replay the primary's WAL (s).
REPLAY_TIMEOUT_S = 60.0


class ReplicaStore(PostgresStore):
    """``primary`` as served by the replica at ``dsn``: its reader role, key and options, on a pool of its own.

    It shares the primary store's state (not a copy of the corpus: the replica holds that) and loads nothing,
    so it does not run :class:`PostgresStore`'s constructor. :meth:`close` closes its pool only: the schema and
    role belong to the primary, whose ``close`` drops them (and the replica replays the drop).
    """

    def __init__(self, primary: PostgresStore, dsn: str) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidArgument(f"a replica's DSN must be a non-blank str, not {dsn!r}")
        if primary.closed:
            raise LabError("the primary's PostgreSQL store is closed")
        own = ("hnsw", "session_boundaries", "discarded_sessions")
        shared = {name: value for name, value in primary.__dict__.items() if name not in own}
        self.__dict__.update(shared)  # schema, role, credentials, signer, timeouts, admin and its lock: shared
        self.primary = primary
        self.dsn = dsn
        self.server_name = server_name(dsn)
        self.server = None  # never stops anything
        self.pool = None
        self.closed = False
        self.discarded_sessions = 0
        self.session_boundaries = SessionBoundaries()  # the replica's sessions are its own
        with driver_errors(self.server_name, self.timeouts):
            self.pool = self._open_pool()  # the primary's pool settings, on self.dsn
            with self.pool.connection(timeout=self.timeouts.connect) as conn:
                self.versions = server_versions(conn)

    @property
    def hnsw(self) -> dict[str, int] | None:  # type: ignore[override]
        """The primary's HNSW parameters (the index is built there and replicated)."""
        return self.primary.hnsw

    def ensure_hnsw(self, m: int = 16, ef_construction: int = 64) -> dict[str, int]:
        """Build the HNSW index on the primary (a replica cannot write); wait for it with :class:`ReadReplicas`."""
        return self.primary.ensure_hnsw(m, ef_construction)

    def replay_behind(self, lsn: str) -> int:
        """Bytes of WAL this replica has yet to replay to reach the primary's ``lsn`` (0 = it has)."""
        with driver_errors(self.server_name, self.timeouts):
            with self.pool.connection(timeout=self.timeouts.connect) as conn:
                return replay_lsn_behind(conn, lsn, server=self.server_name)

    def wait_for(self, lsn: str, timeout: float) -> float:
        """Wait until this replica has replayed the primary's WAL up to ``lsn``; the seconds waited."""
        with driver_errors(self.server_name, self.timeouts):
            with self.pool.connection(timeout=self.timeouts.connect) as conn:
                return wait_for_lsn(conn, lsn, timeout, server=self.server_name)

    def close(self) -> None:
        """Close this replica's pool (idempotent); the schema, role and primary stay."""
        if self.closed:
            return
        self.closed = True
        if self.pool is not None:
            self.pool.close(timeout=1.0)

    def __repr__(self) -> str:
        return f"ReplicaStore(schema={self.schema!r}, server={self.server_name!r})"


class ReadReplicas:
    """A store's requests served in turn by its replicas (and the primary, with ``include_primary=True``).

    Has what :class:`~labsrc.engines.postgres.PostgresRetriever` uses of a store (``request``,
    ``connect_as``, ``ensure_hnsw``, ``schema``, ``versions``), so a retriever serves from it unchanged.
    Opening waits (up to ``timeout`` s) until every replica has replayed the primary's current WAL, so the
    corpus the primary loaded is there. :meth:`close` closes the replicas' pools, never the primary's store.
    """

    def __init__(
        self, primary: PostgresStore, dsns: Sequence[str], *, include_primary: bool = False, timeout: float = REPLAY_TIMEOUT_S
    ) -> None:
        if isinstance(dsns, str) or not dsns:
            raise InvalidArgument(f"dsns must be a non-empty sequence of replica DSNs, not {dsns!r}")
        if isinstance(primary, (ReplicaStore, ReadReplicas)) or not isinstance(primary, PostgresStore):
            raise InvalidArgument(f"primary must be the PostgresStore that loaded the corpus, not {type(primary).__name__}")
        self.primary = primary
        self.timeout = float(timeout)
        self.replicas: tuple[ReplicaStore, ...] = ()
        try:
            for dsn in dsns:
                self.replicas = (*self.replicas, ReplicaStore(primary, dsn))
            self.wait_for_replay()
        except BaseException:
            self.close()
            raise
        #: The servers requests go to, in turn.
        self.servers: tuple[PostgresStore, ...] = ((primary,) if include_primary else ()) + self.replicas
        self._turn = itertools.count()  # next() is atomic in CPython: threads take distinct turns

    # --- what a retriever reads of its store ------------------------------------------------

    @property
    def schema(self) -> str:
        return self.primary.schema

    @property
    def role(self) -> str:
        return self.primary.role

    @property
    def dsn(self) -> str:
        return self.primary.dsn

    @property
    def versions(self) -> dict[str, str]:
        return self.primary.versions

    @property
    def closed(self) -> bool:
        return self.primary.closed or any(r.closed for r in self.replicas)

    @property
    def hnsw(self) -> dict[str, int] | None:
        return self.primary.hnsw

    def ensure_hnsw(self, m: int = 16, ef_construction: int = 64) -> dict[str, int]:
        """Build the HNSW index on the primary if it is not there yet, then wait until the replicas have it."""
        if self.primary.hnsw is not None:
            return self.primary.hnsw
        params = self.primary.ensure_hnsw(m, ef_construction)
        self.wait_for_replay()
        return params

    @contextmanager
    def request(self, caller: Any, on_date: Any, *, pipeline: bool = False) -> Iterator[Any]:
        """:meth:`PostgresStore.request` on the next server in turn (one whole request per server)."""
        server = self.servers[next(self._turn) % len(self.servers)]
        with server.request(caller, on_date, pipeline=pipeline) as conn:
            yield conn

    def connect_as(self, caller: Any, on_date: Any) -> Any:
        """:meth:`PostgresStore.connect_as` on the first replica: an audit through this view audits a replica."""
        return self.replicas[0].connect_as(caller, on_date)

    # --- replication ---------------------------------------------------------------------------

    def primary_lsn(self) -> str:
        """The primary's current WAL position, read through its reader pool."""
        with driver_errors(self.primary.server_name, self.primary.timeouts):
            with self.primary.pool.connection(timeout=self.primary.timeouts.connect) as conn:
                return conn.execute("SELECT pg_catalog.pg_current_wal_lsn()::text").fetchone()[0]

    def wait_for_replay(self, timeout: float | None = None) -> dict[str, float]:
        """Wait until every replica has replayed the primary's current WAL; seconds waited, by server name."""
        lsn = self.primary_lsn()
        limit = self.timeout if timeout is None else float(timeout)
        return {replica.server_name: replica.wait_for(lsn, limit) for replica in self.replicas}

    def close(self) -> None:
        """Close the replicas' pools (idempotent); the primary's store stays open."""
        for replica in self.replicas:
            replica.close()

    def __repr__(self) -> str:
        names = [s.server_name for s in getattr(self, "servers", self.replicas)]
        return f"ReadReplicas(schema={self.primary.schema!r}, servers={names!r})"
