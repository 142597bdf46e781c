"""The engine on a server teams rent: an owner that is not a superuser, and an ordinary co-tenant role beside it.

The session's server (tests/conftest.py) is set up as a managed service sets up its admin: the stores here are
made by ``lab_owner`` (``CREATEROLE``, ``CREATE`` on the database, no superuser), and ``eve`` is another tenant
that may log in and nothing more. Requests stand in for a SQL injection as in test_engine_reader_state.py: an
injected ``COMMIT`` and ``SET default_transaction_read_only = off`` make the statements after it read-write.
"""

from __future__ import annotations

import time
import warnings

import pytest
from pg_support import CO_TENANT, OWNER, requires_postgres
from test_engine_pool_hygiene import wait_returned

import labsrc
from labsrc.cli.main import main
from labsrc.engines import LARGE_OBJECT_BATCH, PostgresRetriever, Timeouts

pytestmark = requires_postgres

ESCAPE = ("COMMIT", "SET default_transaction_read_only = off")

#: Short waits, so a test that meets a co-tenant's lock ends in seconds (the bound is what is asserted).
QUICK = Timeouts(connect=2, statement=10, lock=1)


def connect(dsn: str, **kwargs):
    import psycopg

    return psycopg.connect(dsn, connect_timeout=10, **kwargs)


@pytest.fixture(scope="module")
def superuser(server):
    with connect(server.superuser_dsn, autocommit=True) as conn:
        yield conn


def lab_objects(superuser) -> tuple[set[str], set[str]]:
    """Every store schema and reader role on the server."""
    schemas = {n for (n,) in superuser.execute("SELECT nspname FROM pg_namespace WHERE nspname ~ '^lab_[0-9a-f]{8}$'")}
    roles = {r for (r,) in superuser.execute("SELECT rolname FROM pg_roles WHERE rolname ~ '^lab_[0-9a-f]{8}_reader$'")}
    return schemas, roles


#: A large object holding one of the caller's texts.
PLANTED = "SELECT lo_from_bytea(0, convert_to('eu-carrier-loss-v1=Rule CLM-7', 'UTF8'))"


def plant_granted(conn, privileges: str) -> int:
    """Inside a request: out of its read-only transaction, a large object :data:`PLANTED` granted to PUBLIC."""
    for statement in ESCAPE:
        conn.execute(statement)
    oid = conn.execute(PLANTED).fetchone()[0]
    conn.execute(f"GRANT {privileges} ON LARGE OBJECT {oid} TO PUBLIC")
    conn.execute("COMMIT")
    return oid


def reader_objects(superuser, role: str) -> int:
    return superuser.execute(
        "SELECT count(*) FROM pg_largeobject_metadata WHERE lomowner = (SELECT oid FROM pg_roles WHERE rolname = %s)",
        (role,),
    ).fetchone()[0]


# --- an owner that is not a superuser ---------------------------------------------------------------------------


def test_the_owner_is_what_a_managed_service_grants(superuser):
    row = superuser.execute(
        "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, "
        "has_database_privilege(%s, current_database(), 'CREATE') FROM pg_roles WHERE rolname = %s",
        (OWNER, OWNER),
    ).fetchone()
    assert row == (False, True, False, False, False, True)


def test_search_by_dsn_as_that_owner_exits_0_and_leaves_no_schema_or_role(server, superuser, capsys):
    before = lab_objects(superuser)
    status = main(["search", "RPL-14", "--as", "luna-48291", "--engine", "postgres", "--dsn", server.dsn])
    captured = capsys.readouterr()
    assert status == 0 and "eu-refurb-v2-rule" in captured.out
    assert "Traceback" not in captured.err and "warning" not in captured.err
    assert lab_objects(superuser) == before


@pytest.mark.parametrize(
    "attributes, grant, step, allow",
    [
        ("CREATEROLE", False, "create the store's schema", "GRANT CREATE ON DATABASE postgres TO {role}"),
        ("NOCREATEROLE", True, "create the store's reader role", "ALTER ROLE {role} CREATEROLE"),
    ],
    ids=["no-create-on-database", "no-createrole"],
)
def test_a_step_the_owner_may_not_take_names_the_grant_that_allows_it(
    server, superuser, data, attributes, grant, step, allow
):
    from psycopg.conninfo import make_conninfo

    role = f"short_{'db' if grant else 'role'}"
    superuser.execute(f"CREATE ROLE {role} LOGIN {attributes}")
    try:
        if grant:
            superuser.execute(f"GRANT CREATE ON DATABASE postgres TO {role}")
        before = lab_objects(superuser)
        with pytest.raises(labsrc.LabError) as caught:
            PostgresRetriever(data.chunks, data.vectors, dsn=make_conninfo(server.dsn, user=role))
        message = str(caught.value)
        assert message.startswith(f"the owner {role} may not {step} (permission denied")
        assert message.endswith(f"; allow it with {allow.format(role=role)}") and "\n" not in message
        assert lab_objects(superuser) == before  # a store refused half-way leaves nothing
    finally:
        superuser.execute(f"DROP OWNED BY {role}")
        superuser.execute(f"DROP ROLE {role}")


def test_a_streaming_replica_the_owner_may_not_start_names_the_grant(server):
    from labsrc.engines import StreamingReplica

    with pytest.raises(labsrc.LabError) as caught:
        StreamingReplica(server)  # server.dsn is the owner's: pg_basebackup needs a replication role
    message = str(caught.value)
    assert "Only roles with the REPLICATION attribute may start a WAL sender process; allow it with " in message
    assert f"ALTER ROLE {OWNER} REPLICATION" in message and "\n" not in message


# --- what the reader makes that lasts, at any count -------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(server, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn, timeouts=QUICK) as retriever:
        retriever.store.pool.resize(min_size=1, max_size=1)  # every request on the same session, if it survives
        yield retriever


@pytest.fixture(scope="module")
def maya(data):
    return next(c for c in data.callers if c.region != data.luna.region)


def test_twenty_thousand_large_objects_from_one_request_are_read_by_no_later_request(engine, data, maya, superuser):
    planted = 20_000
    assert planted > 6_400  # more than the server's whole lock table (max_locks_per_transaction 64 × 100 sessions)
    before = engine.store.discarded_sessions
    with engine.store.request(data.luna, data.eval_date) as conn:
        conn.execute("SELECT set_config('x.s', string_agg(chunk_id || '=' || text, ' | '), false) FROM lab_chunks")
        for statement in ESCAPE:  # the caller's texts, in a setting that outlives the authorized transaction
            conn.execute(statement)
        made = conn.execute(
            "SELECT count(lo_from_bytea(0, convert_to(g || ':' || current_setting('x.s'), 'UTF8'))) "
            "FROM generate_series(1, %s) AS g",
            (planted,),
        ).fetchone()[0]
        first = conn.execute("SELECT min(oid) FROM pg_largeobject_metadata").fetchone()[0]
        conn.execute("COMMIT")
    assert made >= planted
    started = time.monotonic()
    wait_returned(engine)
    removed_in = time.monotonic() - started

    assert engine.store.discarded_sessions == before + 1
    assert reader_objects(superuser, engine.store.role) == 0 and engine.store._kept_objects == []
    assert removed_in < QUICK.request  # 40 batches of LARGE_OBJECT_BATCH, within one request's deadline
    assert made // LARGE_OBJECT_BATCH >= 40
    for caller in (maya, data.luna):  # later requests, on fresh sessions: the object is gone for everyone
        with engine.store.request(caller, data.eval_date) as conn:
            assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0] == 0
            with pytest.raises(Exception, match="does not exist"):
                conn.execute("SELECT lo_get(%s)", (first,))


def test_a_large_object_granted_to_public_is_gone_before_a_co_tenant_can_read_it(server, engine, data):
    import psycopg

    with engine.store.request(data.luna, data.eval_date) as conn:
        oid = plant_granted(conn, "SELECT")
    wait_returned(engine)
    with connect(server.co_tenant_dsn, autocommit=True) as eve:
        with pytest.raises(psycopg.errors.UndefinedObject):
            eve.execute("SELECT lo_get(%s)", (oid,))


def test_on_its_own_embedded_server_the_reader_cannot_make_a_large_object(data):
    with PostgresRetriever(data.chunks, data.vectors) as own:  # no DSN: a server of its own
        with pytest.raises(labsrc.LabError, match="permission denied for function lo_from_bytea"):
            with own.store.request(data.luna, data.eval_date) as conn:
                for statement in ESCAPE:
                    conn.execute(statement)
                conn.execute("SELECT lo_from_bytea(0, 'x')")
        with pytest.raises(labsrc.LabError, match="permission denied for function lo_create"):
            with own.store.request(data.luna, data.eval_date) as conn:
                for statement in ESCAPE:
                    conn.execute(statement)
                conn.execute("SELECT lo_create(0)")


# --- a co-tenant's lock -----------------------------------------------------------------------------------------


def plant_held_object(server, store, caller, on_date):
    """A large object the reader makes and grants to PUBLIC, and eve's open transaction writing it (her row lock
    on its pages); returns eve's connection and the object."""
    conn = store.connect_as(caller, on_date)
    conn.execute("COMMIT")
    conn.autocommit = True  # as the pool's sessions are: each injected statement its own transaction
    conn.execute(ESCAPE[1])
    oid = conn.execute(PLANTED).fetchone()[0]
    conn.execute(f"GRANT SELECT, UPDATE ON LARGE OBJECT {oid} TO PUBLIC")
    conn.execute("COMMIT")
    conn.close()
    eve = connect(server.co_tenant_dsn)
    eve.execute("SELECT lo_put(%s, 0, 'x')", (oid,))  # and never commits
    return eve, oid


def test_close_clean_and_a_new_store_end_within_the_bound_and_name_the_co_tenants_lock(server, data, superuser, capsys):
    engine = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn, timeouts=QUICK)
    schema, role = engine.store.schema, engine.store.role
    eve, oid = plant_held_object(server, engine.store, data.luna, data.eval_date)
    pid = eve.info.backend_pid
    held = f"role {CO_TENANT} (pid {pid}) holds a lock on large object {oid}"
    try:
        started = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.close()
        assert time.monotonic() - started < 30
        assert [str(w.message) for w in caught] == [f"schema {schema} and role {role} kept: {held}"]
        assert (schema in lab_objects(superuser)[0]) and (role in lab_objects(superuser)[1])

        capsys.readouterr()
        started = time.monotonic()
        assert main(["engines", "clean", "--dsn", server.dsn]) == 0
        assert time.monotonic() - started < 30
        assert capsys.readouterr().out == f"skipped {schema}: kept with role {role}: {held}\n"

        started = time.monotonic()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn, timeouts=QUICK).close()  # cleans when it starts
        assert time.monotonic() - started < 30
        assert [str(w.message) for w in caught] == [
            f"orphaned schema {schema} was not dropped: kept with role {role}: {held}"
        ]
    finally:
        eve.close()
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0  # eve gone, the cleaner finishes the job
    assert schema not in lab_objects(superuser)[0] and role not in lab_objects(superuser)[1]


def test_an_object_a_co_tenant_holds_at_the_reset_is_taken_from_the_reader_and_from_her(server, data, maya, superuser, capsys):
    engine = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn, timeouts=QUICK)
    engine.store.pool.resize(min_size=1, max_size=1)
    before = engine.store.discarded_sessions
    with engine.store.request(data.luna, data.eval_date) as conn:
        oid = plant_granted(conn, "SELECT, UPDATE")
        eve = connect(server.co_tenant_dsn)
        eve.execute("SELECT lo_put(%s, 0, 'x')", (oid,))  # her row lock: the reader's unlink times out
    pid = eve.info.backend_pid
    try:
        wait_returned(engine)
        assert engine.store.discarded_sessions == before + 1
        assert reader_objects(superuser, engine.store.role) == 0  # the owner's now
        with pytest.raises(labsrc.LabError, match="permission denied for large object"):
            with engine.store.request(maya, data.eval_date) as conn:
                conn.execute("SELECT lo_get(%s)", (oid,))
        with connect(server.co_tenant_dsn, autocommit=True) as again:  # her grant went with the object's owner
            with pytest.raises(Exception, match="permission denied for large object"):
                again.execute("SELECT lo_get(%s)", (oid,))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine.close()
        assert [str(w.message) for w in caught] == [
            f"large object {oid} kept (the owner's, readable by no other role): "
            f"role {CO_TENANT} (pid {pid}) holds a lock on large object {oid}"
        ]
    finally:
        eve.close()
    capsys.readouterr()
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0
    assert "removed 1 large object(s) taken over from the readers of stores that are gone" in capsys.readouterr().out
    assert superuser.execute("SELECT count(*) FROM pg_largeobject_metadata WHERE oid = %s", (oid,)).fetchone()[0] == 0


def test_an_orphan_whose_lock_a_co_tenant_holds_is_named_not_kept_in_silence(server, data, superuser, capsys):
    from labsrc.engines.orphans import lock_key

    engine = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn, timeouts=QUICK)
    schema = engine.store.schema
    engine.store.pool.close()
    superuser.execute("SELECT pg_terminate_backend(%s, 5000)", (engine.store.admin.info.backend_pid,))  # its process gone
    with connect(server.co_tenant_dsn, autocommit=True) as eve:
        taken = eve.execute("SELECT pg_try_advisory_lock(%s::int4, %s::int4)", lock_key(schema)).fetchone()[0]
        assert taken  # anyone may take any advisory lock
        capsys.readouterr()
        assert main(["engines", "clean", "--dsn", server.dsn]) == 0
        assert capsys.readouterr().out == (
            f"skipped {schema}: its lock is held by role {CO_TENANT} (pid {eve.info.backend_pid}), "
            f"not by a session of its owner {OWNER}; kept while it is\n"
        )
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0  # her lock gone with her session
    assert f"dropped schema {schema}" in capsys.readouterr().out
    engine.store.closed = True  # its schema is gone: nothing left for close() to do
    engine.store.admin.close()
