"""What the reader role can create, and whether it reaches another caller: one test per row of the survey in
docs/postgres.md ("What a reader session can create").

Each test stands in for a SQL injection inside Luna's request (the threat model's assumption): statements run
on the request's own connection, with the pool cut to one connection so the next request would get that very
session. An injected ``COMMIT`` ends the engine's read-only transaction, and ``SET
default_transaction_read_only = off`` (which no privilege can take from a role) makes the statements after it
read-write. The next request is another caller's (Maya's, another region and tags), who must see none of it.
"""

from __future__ import annotations

import time

import pytest
from pg_support import requires_postgres
from test_engine_pool_hygiene import wait_returned

import labsrc
from labsrc.engines import PostgresRetriever

pytestmark = requires_postgres

#: An injected statement's way out of the engine's read-only transaction.
ESCAPE = ("COMMIT", "SET default_transaction_read_only = off")


@pytest.fixture(scope="module")
def engine(server, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:
        retriever.store.pool.resize(min_size=1, max_size=1)  # every request on the same session, if it survives
        yield retriever


@pytest.fixture(scope="module")
def maya(data):
    other = next(c for c in data.callers if c.region != data.luna.region)
    assert set(other.acl_tags) != set(data.luna.acl_tags)
    return other


def inject(engine, caller, on_date, *statements: str) -> int:
    """Run ``statements`` one by one inside ``caller``'s request; returns the session's backend pid."""
    with engine.store.request(caller, on_date) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        for statement in statements:
            conn.execute(statement)
    wait_returned(engine)
    return pid


def read(engine, caller, on_date, statement: str) -> list[tuple]:
    """What ``statement`` returns inside ``caller``'s request."""
    with engine.store.request(caller, on_date) as conn:
        return conn.execute(statement).fetchall()


def owner_reads(engine, statement: str) -> list[tuple]:
    with engine.store._admin_lock:
        return engine.store.admin.execute(statement).fetchall()


def lukas_ids(engine, data) -> list[str]:
    return sorted(r.chunk_id for r in labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date))


# --- the two leaks the attack trial found -------------------------------------------------------------------


def test_a_large_object_made_in_one_request_is_gone_before_another_caller_can_read_it(engine, data, maya):
    before = engine.store.discarded_sessions
    inject(
        engine,
        data.luna,
        data.eval_date,
        "SELECT set_config('x.s', string_agg(chunk_id || '=' || left(text, 40), ' | '), false) FROM lab_chunks",
        *ESCAPE,
        "SELECT lo_from_bytea(0, convert_to(current_setting('x.s'), 'UTF8'))",
    )
    assert read(engine, maya, data.eval_date, "SELECT count(*) FROM pg_largeobject_metadata") == [(0,)]
    assert owner_reads(engine, "SELECT count(*) FROM pg_largeobject_metadata") == [(0,)]
    assert engine.store.discarded_sessions == before + 1


def test_a_large_object_left_by_a_session_that_ended_itself_goes_with_the_next_request(engine, data, maya):
    with pytest.raises(labsrc.LabError):  # the session ends itself before the pool can reset it
        inject(
            engine,
            data.luna,
            data.eval_date,
            *ESCAPE,
            "SELECT lo_from_bytea(0, convert_to('eu_carrier_loss_v1', 'UTF8'))",
            "COMMIT",
            "SELECT pg_terminate_backend(pg_backend_pid())",
        )
    wait_returned(engine)
    engine.search("refund laptop", maya, data.eval_date, 3)  # any request: its reset finds the reader's object
    wait_returned(engine)
    assert owner_reads(engine, "SELECT count(*) FROM pg_largeobject_metadata") == [(0,)]


def test_setting_names_left_in_a_session_never_reach_a_caller_of_another_boundary(engine, data, maya):
    ids = lukas_ids(engine, data)
    switched = engine.store.session_boundaries.closed
    pid = inject(
        engine,
        data.luna,
        data.eval_date,
        "SELECT count(set_config('leak.' || regexp_replace(chunk_id, '[^a-z0-9]', '_', 'g'), '', false)) FROM lab_chunks",
    )
    names = ", ".join(f"current_setting('leak.{i.replace('-', '_')}', true) IS NOT NULL" for i in ids)
    # Luna's own boundary may keep the session: the names spell only rows she sees anyway.
    with engine.store.request(data.luna, data.eval_date) as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] == pid
        assert all(conn.execute(f"SELECT {names}").fetchone())
    wait_returned(engine)
    with engine.store.request(maya, data.eval_date) as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] != pid
        assert not any(conn.execute(f"SELECT {names}").fetchone())
    assert engine.store.session_boundaries.closed == switched + 1


def retag(engine, chunk_id: str, tag: str) -> None:
    """The owner moves ``chunk_id`` to ``tag``, in every table that keeps its boundary, in one transaction."""
    with engine.store._admin_lock, engine.store.admin.transaction():
        for table in ("lab_chunks", "lab_postings", "lab_vectors"):
            engine.store.admin.execute(f"UPDATE {table} SET acl_tag = %s WHERE chunk_id = %s", (tag, chunk_id))


def test_after_a_retag_no_setting_planted_by_an_earlier_request_is_visible(engine, data, maya):
    ids = lukas_ids(engine, data)
    moved = ids[0]
    own_tag = next(c.acl_tag for c in data.chunks if c.chunk_id == moved)
    plant = "SELECT count(set_config('leak.' || regexp_replace(chunk_id, '[^a-z0-9]', '_', 'g'), '', false)) FROM lab_chunks"
    name = f"current_setting('leak.{moved.replace('-', '_')}', true) IS NOT NULL"
    # A write to rows Luna cannot see leaves her session (and what it holds) as it was: her rows did not change.
    pid = inject(engine, data.luna, data.eval_date, plant)
    hidden = next(c for c in data.chunks if c.chunk_id not in ids)
    retag(engine, hidden.chunk_id, hidden.acl_tag + "-moved")
    try:
        assert read(engine, data.luna, data.eval_date, f"SELECT pg_backend_pid(), {name}") == [(pid, True)]
    finally:
        retag(engine, hidden.chunk_id, hidden.acl_tag)

    pid = inject(engine, data.luna, data.eval_date, plant)
    stale = engine.store.session_boundaries.stale
    retag(engine, moved, "retired")  # away from Luna: the name spells a chunk she may no longer see
    try:
        wait_returned(engine)
        [(now, visible)] = read(engine, data.luna, data.eval_date, f"SELECT pg_backend_pid(), {name}")
        assert now != pid and not visible
        assert engine.store.session_boundaries.stale == stale + 1
        assert moved not in {r[0] for r in read(engine, data.luna, data.eval_date, "SELECT chunk_id FROM lab_chunks")}
    finally:
        retag(engine, moved, own_tag)
    wait_returned(engine)
    assert moved in {r[0] for r in read(engine, data.luna, data.eval_date, "SELECT chunk_id FROM lab_chunks")}


def test_the_same_caller_on_another_date_gets_another_session(engine, data):
    pid = inject(engine, data.luna, data.eval_date, "SELECT 1")
    other_day = data.eval_date.replace(year=data.eval_date.year - 1)
    assert read(engine, data.luna, other_day, "SELECT pg_backend_pid()") != [(pid,)]


# --- the rest of the survey -----------------------------------------------------------------------------------


def test_session_defaults_the_role_gives_itself_are_removed_when_the_request_ends(engine, data, maya):
    inject(engine, data.luna, data.eval_date, *ESCAPE, "ALTER ROLE CURRENT_USER SET application_name = 'eu_carrier_loss_v1'")
    assert read(engine, maya, data.eval_date, "SELECT count(*) FROM pg_db_role_setting") == [(0,)]


def test_a_prepared_transaction_is_refused_by_the_labs_server(engine, data):
    with pytest.raises(labsrc.LabError, match="prepared transactions are disabled"):
        inject(engine, data.luna, data.eval_date, "PREPARE TRANSACTION 'eu_carrier_loss_v1'")
    wait_returned(engine)
    assert owner_reads(engine, "SELECT count(*) FROM pg_prepared_xacts") == [(0,)]


def test_temporary_objects_are_dropped_when_the_request_ends(engine, data, maya):
    inject(
        engine,
        data.luna,
        data.eval_date,
        *ESCAPE,
        "CREATE TEMP TABLE leak_eu_carrier_loss_v1 (chunk_id text)",
        "CREATE TEMP SEQUENCE leak_seq",
        "CREATE TEMP VIEW leak_view AS SELECT 1",
    )
    assert read(engine, maya, data.eval_date, "SELECT count(*) FROM pg_class WHERE relname LIKE 'leak%'") == [(0,)]


def test_a_setting_others_can_see_is_reset_when_the_request_ends(engine, data, maya):
    inject(engine, data.luna, data.eval_date, "SELECT set_config('application_name', string_agg(chunk_id, ','), false) FROM lab_chunks")
    rows = read(engine, maya, data.eval_date, "SELECT application_name FROM pg_stat_activity WHERE usename = current_user")
    assert rows and all(name == "" for (name,) in rows)


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE public.leak AS SELECT chunk_id FROM lab_chunks",
        "CREATE SCHEMA leak",
        "INSERT INTO lab_chunks (chunk_id) VALUES ('leak')",
        "UPDATE lab_chunks SET text = 'leak'",
        "CREATE SEQUENCE public.leak_seq",
        "SELECT pg_create_logical_replication_slot('leak', 'test_decoding')",
        "COMMENT ON TABLE lab_chunks IS 'leak'",
        "CREATE FUNCTION public.leak() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "CREATE TYPE public.leak AS (id text)",
    ],
)
def test_nothing_lasting_can_be_made_even_in_a_read_write_transaction(engine, data, statement):
    with pytest.raises(labsrc.LabError, match="permission denied|must be owner|must be superuser|skipping|privilege"):
        inject(engine, data.luna, data.eval_date, *ESCAPE, statement)
    wait_returned(engine)


@pytest.mark.parametrize(
    "statement, left",
    [
        ("SELECT pg_advisory_xact_lock(hashtext('eu_carrier_loss_v1'))", "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
         "WHERE l.locktype = 'advisory' AND a.usename = current_user"),
        ("SELECT pg_export_snapshot()", "SELECT count(*) FROM pg_locks WHERE locktype = 'virtualxid' AND pid <> pg_backend_pid() AND NOT granted"),
        ("DECLARE c CURSOR FOR SELECT chunk_id FROM lab_chunks", "SELECT count(*) FROM pg_cursors WHERE name <> ''"),
    ],
)
def test_what_ends_with_the_transaction_ends_with_the_request(engine, data, maya, statement, left):
    inject(engine, data.luna, data.eval_date, statement)
    assert read(engine, maya, data.eval_date, left) == [(0,)]


def test_statistics_counters_are_a_stated_channel_of_counts(engine, data, maya):
    """Stated, not closed (docs/postgres.md): cumulative counters are readable by every session, so a request
    can move one by a count of its own choosing. This measures that reach, so the table stays true."""
    counter = "SELECT pg_stat_clear_snapshot(), seq_scan FROM pg_stat_user_tables WHERE relname = 'lab_group_stats'"
    start = read(engine, maya, data.eval_date, counter)[0][1]
    inject(
        engine,
        data.luna,
        data.eval_date,
        "SET enable_indexscan = off",
        "SET enable_bitmapscan = off",
        *["SELECT count(*) FROM lab_group_stats"] * 5,
        "SELECT pg_stat_force_next_flush()",
    )
    deadline = time.monotonic() + 10
    while (moved := read(engine, maya, data.eval_date, counter)[0][1] - start) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert moved >= 5


def test_another_reader_backends_io_is_a_stated_channel(engine, data, maya):
    """Stated, not closed: ``pg_stat_get_backend_io(pid)`` answers for any backend of the same role."""
    with engine.store.request(data.luna, data.eval_date) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        other = engine.store._connect_reader()
        try:
            other.autocommit = True
            rows = other.execute("SELECT count(*) FROM pg_stat_get_backend_io(%s)", (pid,)).fetchone()[0]
        finally:
            other.close()
    wait_returned(engine)
    assert rows > 0
