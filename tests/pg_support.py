"""Shared helpers for the PostgreSQL engine's tests: embedded servers (the session's is the ``server`` fixture in
tests/conftest.py) and lane comparisons.

Without the ``postgres`` extra every engine test is skipped with the install command as the reason.
"""

from __future__ import annotations

import pytest

from labsrc.engines import EmbeddedServer, postgres_available

#: Why the engine tests cannot run here (None: they can).
SKIP_REASON = postgres_available()

requires_postgres = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def start_server():
    """An embedded server for a fixture (its body: ``yield from start_server()``), stopped when the fixture ends."""
    if SKIP_REASON is not None:
        pytest.skip(SKIP_REASON)
    server = EmbeddedServer()
    try:
        yield server
    finally:
        server.stop()


def owner_session(engine):
    """An autocommit session as the loading user (row-level security does not filter it), on the store's schema
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
