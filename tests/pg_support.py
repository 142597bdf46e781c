"""Shared helpers for the PostgreSQL engine's tests: embedded servers (the session's is the ``server`` fixture in
tests/conftest.py) and lane comparisons.

Without the ``postgres`` extra every engine test is skipped with the install command as the reason.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from labsrc.engines import EmbeddedServer, postgres_available

#: Why the engine tests cannot run here (None: they can).
SKIP_REASON = postgres_available()

requires_postgres = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


#: The role the engine tests load stores as: what a managed PostgreSQL gives its admin (CREATEROLE, CREATE on
#: the database, no superuser), with an ordinary co-tenant role, :data:`CO_TENANT`, beside it.
OWNER = "lab_owner"
CO_TENANT = "eve"


def start_server(*, least_privileged: bool = True):
    """An embedded server for a fixture (its body: ``yield from start_server()``), stopped when the fixture ends.

    With ``least_privileged`` (the default) ``server.dsn`` connects as :data:`OWNER`, a role with ``CREATEROLE``
    and ``CREATE`` on the database and no superuser, as a managed service grants; the superuser only created it
    (and pgvector, which a service's admin installs), and its DSN is ``server.superuser_dsn``. :data:`CO_TENANT`
    is an ordinary role that may log in (``co_tenant_dsn``).
    """
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    server = EmbeddedServer()
    try:
        server.superuser_dsn = server.dsn
        if least_privileged:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict, make_conninfo

            with psycopg.connect(server.dsn, autocommit=True, connect_timeout=10) as conn:
                database = conninfo_to_dict(server.dsn).get("dbname", "postgres")
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                conn.execute(f"CREATE ROLE {OWNER} LOGIN CREATEROLE NOSUPERUSER")
                conn.execute(f'GRANT CREATE ON DATABASE "{database}" TO {OWNER}')
                conn.execute(f"CREATE ROLE {CO_TENANT} LOGIN")
            server.dsn = make_conninfo(server.dsn, user=OWNER)
            server.co_tenant_dsn = make_conninfo(server.dsn, user=CO_TENANT)
        yield server
    finally:
        server.stop()


@contextmanager
def as_superuser(server):
    """``server.dsn`` is the superuser's inside the block (a streaming replica copies the server as one)."""
    owner_dsn = server.dsn
    server.dsn = server.superuser_dsn
    try:
        yield server
    finally:
        server.dsn = owner_dsn


def owner_session(engine):
    """An autocommit session as the loading user (its own policy lets it read and write every row), on the store's schema
    (use as a pytest fixture body: ``yield from owner_session(engine)``)."""
    import psycopg

    with psycopg.connect(engine.dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path = {engine.store.schema}")
        yield conn


def lesson_callers(data) -> list:
    """The lesson's callers and one who matches nothing (a region and tag no chunk has)."""
    import labsrc

    return [*data.callers_by_id.values(), labsrc.Caller("nobody", "MARS", {"none"})]


def lanes_of(result) -> dict[str, list[tuple[str, float]]]:
    """The three ranked lists as (chunk_id, score) pairs, for == comparison (scores compared exactly)."""
    return {lane: [(c.chunk_id, s) for c, s in getattr(result, lane)] for lane in ("sparse", "dense", "fused")}


def replay_stable(trace) -> dict:
    """The trace without timings and without the engine-specific version keys."""
    out = trace.to_dict(include_timings=False)
    out["versions"] = {k: v for k, v in out["versions"].items() if k not in ENGINE_ONLY_VERSIONS}
    out["versions"]["retriever"] = "*"
    return out


ENGINE_ONLY_VERSIONS = frozenset({"engine", "postgresql", "pgvector", "dense_index"})
