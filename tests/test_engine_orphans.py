"""Orphaned stores on someone else's server: found and dropped, and nothing else is (issue 32).

An embedded server stands in for a server the lab does not own. A subprocess
loads the lesson into a store on it by DSN and dies without ``close()``
(``SIGKILL``, or a plain exit), leaving its schema (every chunk's text) and its
LOGIN reader role behind. :func:`find_orphans` must name exactly that schema:
not a live store's (one in this process), not a schema the lab did not make
(``lab_deadbeef`` by hand, or one whose comment is not the lab's marker); and
:func:`drop_orphans` and ``labsrc engines clean`` drop it with its role.
"""

from __future__ import annotations

import signal
import time

import pytest
from pg_support import requires_postgres, start_server
from test_engine_socket import WAIT_S, Child

from labsrc.cli.main import main
from labsrc.engines import EmbeddedServer, PostgresRetriever
from labsrc.engines.orphans import MARKER_PREFIX, drop_orphans, find_orphans, lock_key, mark_owned, reader_role
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
