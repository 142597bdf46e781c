"""Streaming read replicas: a real hot standby of the embedded server serves the same searches, behind the same boundary.

The module starts one primary and one replica of it *before* loading, so the
lesson corpus reaches the replica through the WAL stream, as a production load
would. Each test compares the replica with the primary, or checks the boundary,
the read-only standby and the cleanup there.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from pg_support import as_superuser, lanes_of, requires_postgres, start_server

import labsrc
from labsrc.engines import PostgresRetriever, ReadReplicas, Replay, StreamingReplica, wait_for_lsn
from labsrc.errors import InvalidArgument, LabError

pytestmark = requires_postgres

DAYS = (dt.date(2026, 5, 27), dt.date(2026, 1, 1), dt.date(2027, 1, 1))
EXTRA_QUERIES = ("refund", "laptop", "rule", "")  # ties (one shared term), and the blank query


@pytest.fixture(scope="module")
def server():
    """A server of its own: its replica streams the whole cluster, and the tests stop it (the others share the session's, tests/conftest.py)."""
    yield from start_server()


@pytest.fixture(scope="module")
def replica(server):
    with as_superuser(server), StreamingReplica(server) as standby:  # pg_basebackup copies as a superuser
        yield standby


@pytest.fixture(scope="module")
def engine(server, replica, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:  # loaded after the replica started
        yield retriever


@pytest.fixture(scope="module")
def served(engine, replica):
    with engine.on_replicas(replica.dsn) as view:
        yield view


def _processes_naming(directory: Path) -> list:
    import psutil

    return [p for p in psutil.process_iter(attrs=["cmdline"]) if any(str(directory) in a for a in p.info["cmdline"] or [])]


def test_every_search_on_the_replica_equals_the_primarys(engine, served, data):
    queries = sorted({c.query for c in data.cases} | set(EXTRA_QUERIES))
    compared = 0
    for caller in data.callers:
        for day in DAYS:
            for query in queries:
                for top_k in (1, 5, len(data.chunks) + 3):
                    want = engine.search(query, caller, day, top_k)
                    got = served.search(query, caller, day, top_k)
                    assert lanes_of(got) == lanes_of(want), (caller.actor_id, day, query, top_k)  # ids, scores, ties
                    assert got.trace.versions == want.trace.versions
                    compared += 1
    assert compared == len(data.callers) * len(DAYS) * len(queries) * 3


def served_requests(store) -> int:
    """Requests ``store``'s pool served: connections handed out, less those closed for serving another boundary."""
    return store.pool.get_stats().get("requests_num", 0) - store.session_boundaries.closed


def test_requests_really_run_on_the_replica(served, replica, data):
    store = served.store
    assert isinstance(store, ReadReplicas) and store.servers == store.replicas
    with served.connect_as(data.luna, data.eval_date) as conn:
        in_recovery, cluster = conn.execute("SELECT pg_is_in_recovery(), current_setting('cluster_name')").fetchone()
    assert in_recovery is True and cluster == replica.name
    replica_store = store.replicas[0]
    before = served_requests(replica_store)
    served.search("refund", data.luna, data.eval_date, 2)
    assert served_requests(replica_store) == before + 1


def test_round_robin_takes_turns_between_primary_and_replica(engine, replica, data):
    with engine.on_replicas(replica.dsn, include_primary=True) as spread:
        servers = spread.store.servers
        assert servers[0].pool is engine.store.pool and len(servers) == 2
        before = [served_requests(server) for server in servers]
        results = [spread.search("refund", data.luna, data.eval_date, 3) for _ in range(4)]
        after = [served_requests(server) for server in servers]
    assert [a - b for a, b in zip(after, before)] == [2, 2]
    assert all(lanes_of(r) == lanes_of(results[0]) for r in results)
    assert not engine.store.closed  # closing the view closed the replica's pool only
    assert engine.search("refund", data.luna, data.eval_date, 3).fused == results[0].fused


def test_the_boundary_holds_on_the_replica(served, data):
    for caller in data.callers:
        for day in DAYS:
            want = sorted(c.chunk_id for c in labsrc.permitted_chunks(caller, data.chunks, day))
            with served.connect_as(caller, day) as conn:
                got = sorted(row[0] for row in conn.execute("SELECT chunk_id FROM lab_chunks"))
                posted = {row[0] for row in conn.execute("SELECT DISTINCT chunk_id FROM lab_postings")}
            assert got == want, (caller.actor_id, day)
            assert posted <= set(want)
            assert [c.chunk_id for c in served.universe(caller, day)] == want


def test_no_token_or_a_copied_token_sees_nothing_on_the_replica(engine, served, data):
    conn = served.connect_as(data.luna, data.eval_date)
    try:
        assert conn.execute("SELECT count(*) FROM lab_chunks").fetchone()[0] > 0
        conn.rollback()  # the token ends with its transaction: no token now
        assert conn.execute("SELECT count(*) FROM lab_chunks").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM lab_postings").fetchone() == (0,)
        conn.rollback()
        with engine.connect_as(data.luna, data.eval_date) as primary:  # a valid token, for another server's session
            token = primary.execute("SELECT current_setting('lab.request')").fetchone()[0]
        conn.execute("SELECT set_config('lab.request', %s, true)", (token,))
        assert conn.execute("SELECT count(*) FROM lab_chunks").fetchone() == (0,)
    finally:
        conn.close()


@pytest.mark.parametrize(
    "statement", ["DELETE FROM {schema}.lab_chunks", "CREATE TABLE {schema}.lab_x (x int)", "VACUUM {schema}.lab_chunks"]
)
def test_the_replica_serves_read_only(served, replica, statement):
    import psycopg

    with psycopg.connect(replica.dsn, autocommit=True) as conn:  # even the superuser, outside any request
        assert conn.execute("SHOW transaction_read_only").fetchone() == ("on",)
        with pytest.raises(psycopg.Error, match="read-only transaction|during recovery"):
            conn.execute(statement.format(schema=served.store.schema))


def test_a_store_loaded_later_is_searchable_after_wait_for_replay(server, replica, data):
    import psycopg

    subset = [c for c in data.chunks if c.region == "EU"]
    with PostgresRetriever(subset, data.vectors, dsn=server.dsn) as later:
        replay = replica.wait_for_replay(timeout=60)
        assert isinstance(replay, Replay) and replay.behind_bytes >= 0 and replay.waited_s >= 0
        assert replica.lag_bytes() == 0 and replica.lag_s() >= 0.0
        with psycopg.connect(replica.dsn, autocommit=True) as conn:
            found = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{later.store.schema}.lab_chunks",)).fetchone()
        assert found == (True,)
        with later.on_replicas(replica.dsn, timeout=60) as view:
            for case in data.cases:
                caller, day = data.callers_by_id[case.caller], case.on_date or data.eval_date
                assert lanes_of(view.search(case.query, caller, day, 5)) == lanes_of(later.search(case.query, caller, day, 5))
        schema = later.store.schema
    replica.wait_for_replay(timeout=60)  # the primary's close dropped the schema; the replica replays the drop
    with psycopg.connect(replica.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regnamespace(%s) IS NULL", (schema,)).fetchone() == (True,)


def test_an_hnsw_index_built_through_the_view_is_built_on_the_primary_and_waited_for(engine, replica, data):
    assert engine.store.hnsw is None  # no test before this one built it
    with engine.on_replicas(replica.dsn) as view:
        approx = view.with_dense("hnsw")  # builds on the primary, then waits until the replica has it
        assert approx.store is view.store and engine.store.hnsw == {"m": 16, "ef_construction": 64}
        on_primary = engine.with_dense("hnsw")
        for caller in data.callers:
            got = approx.search("refund laptop", caller, data.eval_date, 3)
            assert lanes_of(got) == lanes_of(on_primary.search("refund laptop", caller, data.eval_date, 3))
        assert got.trace.versions["dense_index"].startswith("hnsw(m=16")
        with approx.connect_as(data.luna, data.eval_date) as conn:
            indexes = {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
    assert "lab_vectors_embedding_hnsw" in indexes


def test_the_cli_searches_on_a_replica_it_starts(capsys):
    from labsrc.cli.main import main

    args = ["search", "refund laptop", "--as", "luna-48291", "--engine", "postgres", "--top-k", "3"]
    assert main(args) == 0
    primary = capsys.readouterr().out
    assert main([*args, "--replica", "start"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "loaded on the primary, searched on the read replica at socket " in lines[2]
    assert [*lines[:2], *lines[3:]] == primary.splitlines()
    assert main(["search", "RPL-14", "--as", "luna-48291", "--replica", "start"]) == 2
    assert "--replica applies to --engine postgres only" in capsys.readouterr().err


def test_misuse_is_one_line(engine, server):
    with pytest.raises(InvalidArgument, match="not a standby"):
        engine.on_replicas(server.dsn, timeout=5)  # the primary is no replica
    with pytest.raises(InvalidArgument, match="non-empty sequence"):
        ReadReplicas(engine.store, [])
    with pytest.raises(InvalidArgument, match="EmbeddedServer or a DSN"):
        StreamingReplica(42)  # type: ignore[arg-type]
    with pytest.raises(LabError, match="cannot connect to the primary") as caught:
        StreamingReplica("host=/nonexistent-socket-dir dbname=postgres")
    assert "\n" not in str(caught.value)


def test_a_wait_that_times_out_says_how_far_the_replica_got(replica):
    import psycopg

    with psycopg.connect(replica.dsn, autocommit=True) as conn, pytest.raises(LabError) as caught:
        wait_for_lsn(conn, "FF/0", 0.2, server="the test's replica")
    message = str(caught.value)
    assert "has not replayed the primary's WAL up to FF/0 within 0.2 s" in message
    assert "bytes behind; WAL receiver streaming" in message and "\n" not in message


def test_stop_leaves_no_process_no_directory_and_no_slot(server):
    import psycopg

    def on_primary(name: str) -> tuple[int, int]:
        with psycopg.connect(server.superuser_dsn, autocommit=True) as conn:
            return conn.execute(
                "SELECT (SELECT count(*) FROM pg_stat_replication WHERE application_name = %s), "
                "(SELECT count(*) FROM pg_replication_slots)",
                (name,),
            ).fetchone()

    slots_before = on_primary("")[1]
    with as_superuser(server):
        standby = StreamingReplica(server)
    directory = standby.data_directory.parent
    assert directory.stat().st_mode & 0o777 == 0o700
    assert _processes_naming(directory)
    standby.wait_for_replay(timeout=60)
    assert on_primary(standby.name) == (1, slots_before + 1)  # streaming, through a temporary slot of its own
    standby.stop()
    standby.stop()  # twice is fine
    assert not directory.exists()
    assert _processes_naming(directory) == []
    deadline = time.monotonic() + 30
    while on_primary(standby.name) != (0, slots_before) and time.monotonic() < deadline:
        time.sleep(0.1)  # the primary's WAL sender notices the replica left; its temporary slot goes with it
    assert on_primary(standby.name) == (0, slots_before)


CHILD = r"""
import sys, time
from labsrc.engines import EmbeddedServer, StreamingReplica
base = sys.argv[1]
server = EmbeddedServer(directory=base)
replica = StreamingReplica(server, directory=base)
print("ready", flush=True)
time.sleep(600)
"""


def test_sigkill_leaves_no_replica_directory():
    parent = Path(tempfile.mkdtemp(prefix="labsrc-replica-test-"))
    parent.chmod(0o755)  # as root, PostgreSQL runs as pgserver's user, which must traverse it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(parent)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        assert sorted(p.name.split("-")[1] for p in parent.iterdir()) == ["pg", "replica"]
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        deadline = time.monotonic() + 90
        while (any(parent.iterdir()) or _processes_naming(parent)) and time.monotonic() < deadline:
            time.sleep(0.2)  # the reapers stop both servers, delete both directories, then exit
        assert list(parent.iterdir()) == []
        assert _processes_naming(parent) == []
    finally:
        child.kill()
        subprocess.run(["rm", "-rf", str(parent)], check=False)
