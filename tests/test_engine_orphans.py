"""Orphaned stores on someone else's server: found and dropped, and nothing else is (issues 32 and 47).

An embedded server stands in for a server the lab does not own. A subprocess
loads the lesson into a store on it by DSN and dies without ``close()``
(``SIGKILL``, or a plain exit), leaving its schema (every chunk's text) and its
LOGIN reader role behind. :func:`find_orphans` must name exactly that schema:
not a live store's (one in this process), not a schema the lab did not make
(``lab_deadbeef`` by hand, or one whose comment is not the lab's marker); and
:func:`drop_orphans` and ``labsrc engines clean`` drop it with its role.

Issue 47's audit attacks the cleaner, run by a superuser: a copy of the marker
on a schema an ordinary role made, another role's view on a real orphan, and a
look-alike in another database naming a live store's reader role. Each must
leave everything in place, and say why.
"""

from __future__ import annotations

import json
import signal
import time
import warnings

import pytest
from pg_support import OWNER, requires_postgres, start_server
from test_engine_socket import WAIT_S, Child

from labsrc.cli.main import main
from labsrc.engines import EmbeddedServer, PostgresRetriever
from labsrc.engines.orphans import (
    MARKER_PREFIX,
    READER_MARKER_PREFIX,
    clean_orphans,
    drop_orphans,
    find_orphans,
    lock_key,
    mark_owned,
    reader_role,
)
from labsrc.engines.schema import drop_store
from labsrc.errors import InvalidArgument, LabError

pytestmark = requires_postgres

# The child builds a store on someone else's server (by DSN), which marks its schema itself; then it dies.
CHILD = r'''
import sys
import labsrc
from labsrc.engines import PostgresRetriever

dsn, ending = sys.argv[1], sys.argv[2]
data = labsrc.lesson()
engine = PostgresRetriever(data.chunks, data.vectors, dsn=dsn)
assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused
print("ready", engine.store.schema, engine.store.role, flush=True)
if ending == "wait":
    sys.stdin.readline()  # the test kills us here
'''


@pytest.fixture(scope="module")
def server():
    """A server of its own: the orphan cleaner it tests works on the whole cluster (the others share the session's, tests/conftest.py)."""
    yield from start_server()


@pytest.fixture
def conn(server: EmbeddedServer):
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True, connect_timeout=10) as connection:
        yield connection


@pytest.fixture
def live(server: EmbeddedServer, data):
    """A store that is alive: in this process, marked, its admin session holding the lock."""
    engine = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn)
    yield engine
    engine.close()


@pytest.fixture
def foreign(conn):
    """Schemas named like a store's that the lab did not make (no marker, or a comment that is not the marker)."""
    conn.execute("CREATE SCHEMA lab_deadbeef")
    conn.execute("CREATE TABLE lab_deadbeef.notes (text text)")
    conn.execute("CREATE ROLE lab_deadbeef_reader LOGIN")
    conn.execute("CREATE SCHEMA lab_0badc0de")
    conn.execute(f"COMMENT ON SCHEMA lab_0badc0de IS '{MARKER_PREFIX}not json, written by someone else'")
    yield ["lab_0badc0de", "lab_deadbeef"]
    conn.execute("DROP SCHEMA IF EXISTS lab_deadbeef CASCADE")
    conn.execute("DROP SCHEMA IF EXISTS lab_0badc0de CASCADE")
    conn.execute("DROP ROLE IF EXISTS lab_deadbeef_reader")


def orphan_of_a_dead_process(server: EmbeddedServer, ending: str) -> str:
    """Run :data:`CHILD` against ``server``, end it as ``ending`` says, and return the schema it left."""
    child = Child(["-c", CHILD, server.dsn, ending])
    try:
        ready, schema, role = child.line().split()
        assert ready == "ready" and role == reader_role(schema)
        if ending == "wait":
            child.proc.send_signal(signal.SIGKILL)
            assert child.wait() == -signal.SIGKILL
        else:
            assert child.wait() == 0
    finally:
        child.close()
    return schema


def wait_for_orphans(conn, expected: list[str]) -> list[str]:
    """find_orphans, again until it says ``expected``: the server ends a dead client's session within moments."""
    deadline = time.monotonic() + WAIT_S
    while (found := find_orphans(conn)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def exists(conn, schema: str) -> tuple[bool, bool]:
    """Whether the schema and its reader role exist."""
    has_schema = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None
    has_role = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (reader_role(schema),)).fetchone() is not None
    return has_schema, has_role


@pytest.mark.parametrize("ending", ["wait", "exit-without-close"], ids=["sigkill", "exit-without-close"])
def test_the_orphan_of_a_dead_process_is_found_and_dropped_and_nothing_else(server, conn, live, foreign, data, ending):
    orphan = orphan_of_a_dead_process(server, ending)
    assert exists(conn, orphan) == (True, True)  # the problem: the copy outlived its process
    assert wait_for_orphans(conn, [orphan]) == [orphan]  # not the live store's, not the foreign ones
    assert live.store.schema not in find_orphans(live.store.admin)  # a store never finds itself

    assert drop_orphans(conn) == [orphan]
    assert exists(conn, orphan) == (False, False)
    assert find_orphans(conn) == []
    assert exists(conn, live.store.schema) == (True, True)
    assert live.search("RPL-14", data.luna, data.eval_date, 2).fused  # still serving
    assert exists(conn, "lab_deadbeef") == (True, True)
    assert exists(conn, "lab_0badc0de")[0]
    assert conn.execute("SELECT count(*) FROM lab_deadbeef.notes").fetchone()[0] == 0


def test_the_next_store_on_the_server_drops_the_orphan_when_it_starts(server, conn, live, foreign, data):
    orphan = orphan_of_a_dead_process(server, "wait")
    assert wait_for_orphans(conn, [orphan]) == [orphan]
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as next_store:
        assert next_store.store.orphans_dropped == (orphan,)
        assert exists(conn, orphan) == (False, False)
        assert exists(conn, live.store.schema) == (True, True) and exists(conn, "lab_deadbeef") == (True, True)
        assert next_store.search("RPL-14", data.luna, data.eval_date, 2).fused


def test_labsrc_engines_clean_drops_the_orphan_one_line_each(server, conn, live, foreign, capsys):
    orphan = orphan_of_a_dead_process(server, "wait")
    assert wait_for_orphans(conn, [orphan]) == [orphan]
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0
    out = capsys.readouterr().out
    assert out == f"dropped schema {orphan} and role {reader_role(orphan)} (left by a process that is gone)\n"
    assert exists(conn, orphan) == (False, False)
    assert exists(conn, live.store.schema) == (True, True) and exists(conn, "lab_deadbeef") == (True, True)
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0  # nothing left to drop: nothing printed
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("dsn", ["not a dsn", "postgresql://nobody@/nowhere?host=/nonexistent-labsrc-socket"])
def test_labsrc_engines_clean_on_a_bad_dsn_exits_2_with_one_line(dsn, capsys):
    assert main(["engines", "clean", "--dsn", dsn]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("labsrc: error: cannot connect to PostgreSQL at ") and captured.err.count("\n") == 1


def test_a_closed_store_leaves_nothing_to_clean(server, conn, data):
    engine = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn)
    schema = engine.store.schema
    engine.close()
    assert exists(conn, schema) == (False, False)
    assert find_orphans(conn) == []


def test_mark_owned_refuses_a_schema_another_session_holds_and_a_name_that_is_not_a_stores(server, conn):
    import psycopg

    conn.execute("CREATE SCHEMA lab_feedface")
    try:
        with psycopg.connect(server.dsn, autocommit=True, connect_timeout=10) as owner:
            mark_owned(owner, "lab_feedface")
            mark_owned(owner, "lab_feedface")  # again on the same session: harmless
            assert find_orphans(conn) == []  # held by a live session
            with pytest.raises(LabError, match="another live session"):
                mark_owned(conn, "lab_feedface")
        assert wait_for_orphans(conn, ["lab_feedface"]) == ["lab_feedface"]  # its owner's session ended
    finally:
        conn.execute("DROP SCHEMA IF EXISTS lab_feedface CASCADE")
    for name in ("public", "lab_DEADBEEF", "lab_deadbeef_reader", "lab_123"):
        with pytest.raises(InvalidArgument, match="lab_ and 8 hex digits"):
            mark_owned(conn, name)


def test_lock_keys_are_two_int4s_that_differ_per_schema():
    first, second = lock_key("lab_1234abcd")
    assert first == int.from_bytes(b"labs", "big") and -(2**31) <= second < 2**31
    assert lock_key("lab_1234abcd") == (first, second) and lock_key("lab_1234abce") != (first, second)


# --- issue 47: the cleaner touches only what the lab made ------------------------------------------------------


def session_as(server: EmbeddedServer, user: str | None = None, dbname: str | None = None):
    """An autocommit session on ``server`` as ``user`` (the server trusts local connections) in ``dbname``."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    changes = {key: value for key, value in {"user": user, "dbname": dbname}.items() if value is not None}
    return psycopg.connect(make_conninfo(server.dsn, **changes), autocommit=True, connect_timeout=10)


@pytest.fixture
def superuser(server: EmbeddedServer):
    """The server's superuser, who only sets the scene (other roles, another database); the cleaner is the owner."""
    import psycopg

    with psycopg.connect(server.superuser_dsn, autocommit=True, connect_timeout=10) as connection:
        yield connection


@pytest.fixture
def mallory_and_bob(superuser):
    """Two ordinary roles (no superuser, no CREATEROLE): mallory may create schemas, bob has a schema of his own."""
    conn = superuser
    database = conn.info.dbname
    conn.execute("CREATE ROLE mallory LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB")
    conn.execute("CREATE ROLE bob LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB")
    conn.execute(f'GRANT CREATE ON DATABASE "{database}" TO mallory')
    conn.execute("CREATE SCHEMA bob AUTHORIZATION bob")
    yield
    for role in ("bob", "mallory"):  # bob's view first: it depends on what mallory or an orphan made
        conn.execute(f"DROP OWNED BY {role} CASCADE")
        conn.execute(f"DROP ROLE {role}")


def view_exists(conn, name: str) -> bool:
    return conn.execute("SELECT pg_catalog.to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]


def test_a_copied_marker_on_a_schema_another_role_owns_is_skipped_not_dropped(
    server, conn, superuser, live, mallory_and_bob, data, capsys
):
    # Mallory copies the live store's marker onto schemas of her own, naming their own reader roles (which do
    # not exist: she cannot create roles); bob builds a view on one. The superuser's cleaner used to drop both
    # schemas with CASCADE, and bob's view with them.
    copied = conn.execute(
        "SELECT pg_catalog.obj_description(%s::regnamespace, 'pg_namespace')", (live.store.schema,)
    ).fetchone()[0]
    with session_as(server, "mallory") as mallory:
        for forged in ("lab_0badf00d", "lab_0badf00e"):
            mallory.execute(f"CREATE SCHEMA {forged}")
            mallory.execute(f"CREATE TABLE {forged}.notes (text text)")
            mallory.execute(f"INSERT INTO {forged}.notes VALUES ('mallory''s own')")
            marker = copied.replace(live.store.role, reader_role(forged))
            mallory.execute(f"COMMENT ON SCHEMA {forged} IS '{marker}'")
        mallory.execute("GRANT USAGE ON SCHEMA lab_0badf00d TO bob")
        mallory.execute("GRANT SELECT ON lab_0badf00d.notes TO bob")
    with session_as(server, "bob") as bob:
        bob.execute("CREATE VIEW bob.notes AS SELECT text FROM lab_0badf00d.notes")

    assert find_orphans(conn) == []
    assert drop_orphans(conn) == []
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"skipped {forged}: owned by mallory, not by you ({conn.info.user}); run clean as mallory"
        for forged in ("lab_0badf00d", "lab_0badf00e")
    ]
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as next_store:  # cleans when it starts
        assert next_store.store.orphans_dropped == ()
    for forged in ("lab_0badf00d", "lab_0badf00e"):
        assert superuser.execute(f"SELECT text FROM {forged}.notes").fetchall() == [("mallory's own",)]
    with session_as(server, "bob") as bob:
        assert bob.execute("SELECT text FROM bob.notes").fetchall() == [("mallory's own",)]


def test_an_orphan_another_roles_view_depends_on_is_left_with_the_view_named(server, conn, superuser, mallory_and_bob, capsys):
    orphan = orphan_of_a_dead_process(server, "wait")
    assert wait_for_orphans(conn, [orphan]) == [orphan]
    conn.execute(f"GRANT USAGE ON SCHEMA {orphan} TO bob")
    conn.execute(f"GRANT SELECT ON {orphan}.lab_chunks TO bob")
    with session_as(server, "bob") as bob:
        bob.execute(f"CREATE VIEW bob.chunk_ids AS SELECT chunk_id FROM {orphan}.lab_chunks")
    named = f"view bob.chunk_ids depends on {orphan}.lab_chunks"

    with pytest.warns(RuntimeWarning, match=named):
        assert drop_orphans(conn) == []
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0
    assert capsys.readouterr().out == f"skipped {orphan}: {named} (nothing dropped)\n"
    # drop_store itself (close() uses it too) never cascades: PostgreSQL refuses, and the error names the view.
    with pytest.raises(LabError, match=f"left {orphan} in place: view bob.chunk_ids depends on table {orphan}.lab_chunks"):
        drop_store(conn, orphan, reader_role(orphan))
    assert exists(conn, orphan) == (True, True) and view_exists(superuser, "bob.chunk_ids")

    with session_as(server, "bob") as bob:  # once bob drops his view, the orphan goes
        bob.execute("DROP VIEW bob.chunk_ids")
    assert drop_orphans(conn) == [orphan]
    assert exists(conn, orphan) == (False, False)


def reader_pids(conn, role: str) -> list[int]:
    rows = conn.execute("SELECT pid FROM pg_catalog.pg_stat_activity WHERE usename = %s ORDER BY pid", (role,))
    return [pid for (pid,) in rows.fetchall()]


@pytest.fixture
def other_database(server, superuser):
    """A second database on the same server (roles and pg_stat_activity span both), where the owner may create schemas."""
    superuser.execute("CREATE DATABASE lab_other")
    superuser.execute(f"GRANT CREATE ON DATABASE lab_other TO {OWNER}")
    with session_as(server, dbname="lab_other") as other:
        yield other
    superuser.execute("DROP DATABASE lab_other WITH (FORCE)")


def test_a_look_alike_in_another_database_leaves_the_live_stores_sessions_and_role(
    server, conn, live, other_database, data, capsys
):
    # The look-alike passes every check a copy can: same name as the live store's schema, the live marker,
    # owned by the cleaner, USAGE granted to the live reader role. The cleaner used to end that role's sessions
    # in every database before DROP ROLE failed.
    import psycopg
    from psycopg.conninfo import make_conninfo

    schema, role, home = live.store.schema, live.store.role, conn.info.dbname
    marker = conn.execute("SELECT pg_catalog.obj_description(%s::regnamespace, 'pg_namespace')", (schema,)).fetchone()[0]
    other_database.execute(f"CREATE SCHEMA {schema}")
    other_database.execute(f"COMMENT ON SCHEMA {schema} IS '{marker}'")
    other_database.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    assert live.search("RPL-14", data.luna, data.eval_date, 2).fused
    pids = reader_pids(conn, role)
    assert pids  # the live store's pool holds reader sessions

    found = find_orphans(other_database)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dropped = drop_orphans(other_database)
    status = main(["engines", "clean", "--dsn", make_conninfo(server.dsn, dbname="lab_other")])
    out = capsys.readouterr().out
    try:
        drop_store(other_database, schema, role)  # refused before any session is ended
    except (LabError, psycopg.Error) as exc:  # checked below, once the live store is
        refused: Exception | None = exc
    else:
        refused = None

    # First what matters: the live store's sessions, schema and role are as they were, and it still answers.
    assert reader_pids(conn, role) == pids
    assert exists(conn, schema) == (True, True)
    assert live.search("RPL-14", data.luna, data.eval_date, 2).fused
    # Then that each way in says why, in one line.
    reason = f"role {role} belongs to a store in database {home}, not lab_other; run clean there"
    assert found == [] and dropped == [] and status == 0
    assert [str(each.message) for each in caught] == [f"orphaned schema {schema} was not dropped: {reason}"]
    assert out == f"skipped {schema}: {reason}\n"
    assert isinstance(refused, LabError) and str(refused) == (
        f"left {schema} and role {role} in place: the role has a session in database {home}, "
        f"objects or privileges in database {home}"
    )


@pytest.mark.parametrize(
    "doubt, reason",
    [
        ("COMMENT ON ROLE {role} IS NULL", "role {role} carries no labsrc reader marker"),
        ("REVOKE USAGE ON SCHEMA {schema} FROM {role}", "role {role} has no USAGE on the schema from its owner"),
        ("COMMENT ON ROLE {role} IS {elsewhere}", "role {role} belongs to a store in database elsewhere, not "),
    ],
    ids=["no-role-marker", "no-usage-grant", "marker-for-another-database"],
)
def test_an_orphan_whose_role_is_not_proven_the_stores_is_left_with_why(server, conn, doubt, reason):
    from psycopg import sql

    orphan = orphan_of_a_dead_process(server, "exit-without-close")
    role = reader_role(orphan)
    assert wait_for_orphans(conn, [orphan]) == [orphan]
    elsewhere = READER_MARKER_PREFIX + json.dumps({"database": "elsewhere", "owner": conn.info.user, "schema": orphan})
    conn.execute(sql.SQL(doubt).format(role=sql.Identifier(role), schema=sql.Identifier(orphan), elsewhere=sql.Literal(elsewhere)))
    try:
        assert find_orphans(conn) == []
        cleaned = clean_orphans(conn)
        assert cleaned.dropped == () and [each.schema for each in cleaned.skipped] == [orphan]
        assert cleaned.skipped[0].reason.startswith(reason.format(role=role)) and cleaned.skipped[0].yours
        assert exists(conn, orphan) == (True, True)
    finally:
        drop_store(conn, orphan, role)


def test_a_store_killed_before_it_created_its_role_leaves_a_schema_the_cleaner_drops(server, conn, capsys):
    import psycopg

    conn.execute("CREATE SCHEMA lab_5ca1ab1e")
    with psycopg.connect(server.dsn, autocommit=True, connect_timeout=10) as owner:
        mark_owned(owner, "lab_5ca1ab1e")  # marked and locked, then the process is gone before the role is made
    assert wait_for_orphans(conn, ["lab_5ca1ab1e"]) == ["lab_5ca1ab1e"]
    assert main(["engines", "clean", "--dsn", server.dsn]) == 0
    assert capsys.readouterr().out == (
        "dropped schema lab_5ca1ab1e (left by a process that is gone before it created role lab_5ca1ab1e_reader)\n"
    )
    assert exists(conn, "lab_5ca1ab1e") == (False, False)


def test_close_drops_views_and_sequences_the_owner_built_inside_the_store(server, conn, data):
    """Notebook 12 builds materialized views on lab_postings inside the store: close() drops them by name too."""
    import psycopg

    retriever = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn)
    schema = retriever.store.schema
    with psycopg.connect(retriever.dsn, autocommit=True) as owner:
        owner.execute(f"SET search_path = {retriever.store.search_path}")
        owner.execute("CREATE MATERIALIZED VIEW term_stats AS SELECT term, count(*) AS df FROM lab_postings GROUP BY term")
        owner.execute("CREATE VIEW busiest AS SELECT * FROM term_stats ORDER BY df DESC")
        owner.execute("CREATE SEQUENCE counter")
    retriever.close()
    assert exists(conn, schema) == (False, False)
