"""A pooled connection goes back exactly as it came: nothing a request leaves on its session reaches the next one.

Each test stands in for an engine bug or an injected statement: it borrows a
request's connection (``store.request``, exactly as ``search`` does) and runs
one statement that leaves session state behind: a replaced prepared statement,
a ``WITH HOLD`` cursor, an advisory lock, a ``LISTEN``, a ``SET ROLE``. The pool
is cut to one connection, so the next request would get that very session.
Then the next requests must see none of it, and their scores must equal a
fresh retriever's. The same runs on a streaming replica.
"""

from __future__ import annotations

import time

import pytest
from pg_support import as_superuser, lanes_of, requires_postgres

import labsrc
from labsrc.engines import PostgresRetriever, leftover_state

pytestmark = requires_postgres

QUERIES = ("refund laptop", "RPL-14", "damaged parcel", "vip escalation")


@pytest.fixture
def engine(server, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:
        retriever.store.pool.resize(min_size=1, max_size=1)  # every request on the same session, if it survives
        yield retriever


def backend_pid(engine, data) -> int:
    with engine.store.request(data.luna, data.eval_date) as conn:
        return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def state_seen_by_next_request(engine, data) -> dict:
    """What the next request's session holds, read inside it (the next caller is another one: maya)."""
    caller = next(c for c in data.callers if c.actor_id != data.luna.actor_id)
    with engine.store.request(caller, data.eval_date) as conn:
        return {
            "pid": conn.execute("SELECT pg_backend_pid()").fetchone()[0],
            "sql_prepared": conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE from_sql").fetchone()[0],
            "cursors": [r[0] for r in conn.execute("SELECT name FROM pg_cursors")],
            "locks": conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
            ).fetchone()[0],
            "channels": [r[0] for r in conn.execute("SELECT pg_listening_channels()")],
            "role": conn.execute("SELECT current_user = session_user").fetchone()[0],
        }


def clean(state: dict) -> bool:
    return not (state["sql_prepared"] or state["cursors"] or state["locks"] or state["channels"]) and state["role"]


def wait_returned(engine) -> None:
    """The pool resets a returned connection in a worker thread: wait until it is back (or replaced)."""
    store = engine.store.replicas[0] if hasattr(engine.store, "replicas") else engine.store
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if store.pool.get_stats().get("pool_available", 0) >= 1:
            return
        time.sleep(0.01)
    raise AssertionError(f"the pool never got its connection back: {store.pool.get_stats()}")


def leave(engine, data, statement: str) -> int:
    """Run ``statement`` inside luna's request, as a lane's bug would; returns that session's pid."""
    with engine.store.request(data.luna, data.eval_date) as conn:
        conn.execute(statement)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    wait_returned(engine)
    return pid


def test_a_clean_request_keeps_its_session_and_its_prepared_statements(engine, data):
    for _ in range(3):
        for query in QUERIES:  # psycopg prepares a statement from its 5th run on: the lanes' are prepared now
            engine.search(query, data.luna, data.eval_date, 3)
    wait_returned(engine)
    pid = backend_pid(engine, data)
    wait_returned(engine)
    with engine.store.request(data.luna, data.eval_date) as conn:
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql").fetchone()[0]
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
    assert prepared >= 2  # the engine's own statements survive the reset, and help the next request
    assert engine.store.discarded_sessions == 0


@pytest.mark.parametrize(
    "statement, kind",
    [
        ("DECLARE stolen CURSOR WITH HOLD FOR SELECT chunk_id, text FROM lab_chunks", "open cursor"),
        ("SELECT pg_advisory_lock(hashtext('RPL-14'))", "advisory lock"),
        ("LISTEN lab_rows", "LISTEN channel"),
        ("PREPARE lab_bm25 AS SELECT 1", "made with PREPARE"),
    ],
)
def test_a_session_left_with_state_is_closed_and_the_next_request_sees_none_of_it(engine, data, statement, kind):
    before = engine.store.discarded_sessions
    pid = leave(engine, data, statement)
    state = state_seen_by_next_request(engine, data)
    assert clean(state), state
    assert state["pid"] != pid  # a new session: the old one, with its state, was closed
    assert engine.store.discarded_sessions == before + 1


def test_a_held_cursor_cannot_hand_one_callers_rows_to_the_next_request(engine, data):
    leave(engine, data, "DECLARE stolen CURSOR WITH HOLD FOR SELECT chunk_id FROM lab_chunks")
    other = next(c for c in data.callers if c.actor_id != data.luna.actor_id)
    with pytest.raises(labsrc.LabError, match="cursor"):
        with engine.store.request(other, data.eval_date) as conn:
            conn.execute("FETCH ALL FROM stolen")


def test_a_replaced_prepared_statement_cannot_change_another_callers_scores(engine, data, server):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as fresh:
        expected = {q: lanes_of(fresh.search(q, data.luna, data.eval_date, 3)) for q in QUERIES}
    for _ in range(3):
        for query in QUERIES:
            engine.search(query, data.luna, data.eval_date, 3)
    wait_returned(engine)
    # The attack: swap every one of the engine's prepared statements for one that returns a made-up score.
    with engine.store.request(data.luna, data.eval_date) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements WHERE NOT from_sql")]
        assert names, "the lanes' statements were never prepared: the attack has nothing to replace"
        conn.execute("DEALLOCATE " + names[0])
    wait_returned(engine)
    for query in QUERIES:
        assert lanes_of(engine.search(query, data.luna, data.eval_date, 3)) == expected[query]
    assert engine.store.discarded_sessions >= 1


def test_a_set_role_is_closed_with_its_session(engine, data):
    # The reader is a member of no role; a deployment that grants it one must not see it outlive a request.
    store = engine.store
    with store._admin_lock:
        store.admin.execute("CREATE ROLE lab_pool_hygiene_other NOLOGIN")
        store.admin.execute(f"GRANT lab_pool_hygiene_other TO {store.role}")
    try:
        pid = leave(engine, data, "SET ROLE lab_pool_hygiene_other")
        state = state_seen_by_next_request(engine, data)
        assert clean(state) and state["pid"] != pid
    finally:
        with store._admin_lock:
            store.admin.execute(f"REVOKE lab_pool_hygiene_other FROM {store.role}")
            store.admin.execute("DROP ROLE lab_pool_hygiene_other")


def test_leftover_state_names_each_kind(engine, data):
    conn = engine.store._connect_reader()
    try:
        conn.autocommit = True
        assert leftover_state(conn) == []
        conn.execute("PREPARE p1 AS SELECT 1")
        conn.execute("LISTEN c1")
        conn.execute("SELECT pg_advisory_lock(7)")
        found = " | ".join(leftover_state(conn))
        assert "1 statement(s) made with PREPARE" in found
        assert "1 advisory lock(s)" in found and "1 LISTEN channel(s)" in found
    finally:
        conn.close()


def test_on_a_replica_a_session_left_with_state_is_closed_too(server, data):
    from labsrc.engines import StreamingReplica

    with as_superuser(server):
        standby = StreamingReplica(server)  # pg_basebackup copies as a superuser
    with standby, PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as primary:
        with primary.on_replicas(standby.dsn) as view:
            store = view.store.replicas[0]
            store.pool.resize(min_size=1, max_size=1)
            with store.request(data.luna, data.eval_date) as conn:
                conn.execute("DECLARE stolen CURSOR WITH HOLD FOR SELECT chunk_id FROM lab_chunks")
                conn.execute("SELECT pg_advisory_lock(hashtext('RPL-14'))")
                pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            wait_returned(view)
            with store.request(data.luna, data.eval_date) as conn:
                assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] != pid
                assert conn.execute("SELECT count(*) FROM pg_cursors").fetchone()[0] == 0
                # This session holds no advisory lock. pg_locks is server-wide, and the discarded backend lets go
                # of its lock only when it has exited, which under load can trail the close by a moment.
                assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                    "AND pid = pg_backend_pid()").fetchone()[0] == 0
                deadline = time.monotonic() + 30
                while conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0]:
                    held = conn.execute("SELECT array_agg(pid) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0]
                    assert time.monotonic() < deadline, f"advisory lock still held by {held} (discarded: {pid}) after 30 s"
                    time.sleep(0.05)
            assert store.discarded_sessions == 1
