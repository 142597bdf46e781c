"""Timeouts and driver errors: a silent or blocked server, bad values and a dead server end in one clear LabError.

Each case of the issue's list: a silent server (a socket that accepts and never
answers), a search blocked by an owner's LOCK TABLE, a statement past its
timeout, a NUL byte in a caller's region, a lone surrogate in a chunk, a 1 MB
field, top_k=10**20, a DSN that is not one, a killed server; and the CLI's
exit status 2 with that one line. Time bounds are "within the timeout plus a
generous margin", never tight: the machine is shared.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import socket
import string
import threading
import time
from pathlib import Path

import psycopg
import pytest
from pg_support import lanes_of, requires_postgres, start_server

import labsrc
from labsrc.cli.main import main
from labsrc.engines import EmbeddedServer, PostgresRetriever, Timeouts

pytestmark = requires_postgres

MARGIN_S = 30.0  # generous: only "it ended, and not much later than its timeout", never a tight bound
FAST = Timeouts(connect=2, statement=2, lock=1)


@pytest.fixture(scope="module")
def server():
    """A server of its own: these tests stop and kill it (the others share the session's, tests/conftest.py)."""
    yield from start_server()


@pytest.fixture(scope="module")
def engine(server, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn, timeouts=FAST) as retriever:
        yield retriever


class SilentServer:
    """A TCP socket that accepts connections and never says a word."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)  # kept open, never read, never answered

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent():
    server = SilentServer()
    yield server
    server.close()


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# --- timeouts ---------------------------------------------------------------------------------


def test_a_silent_server_ends_in_a_lab_error_naming_it_and_the_timeout(silent, data):
    started = time.monotonic()
    with pytest.raises(labsrc.LabError) as caught:
        PostgresRetriever(data.chunks, data.vectors, dsn=f"postgresql://nobody@127.0.0.1:{silent.port}/db", timeouts=FAST)
    elapsed = time.monotonic() - started
    message = one_line(caught.value)
    assert f"127.0.0.1:{silent.port}" in message and "connect timeout 2 s" in message
    assert silent.accepted  # it really connected, and then waited
    assert elapsed < FAST.connect + MARGIN_S


def test_a_search_blocked_by_the_owners_lock_ends_at_the_lock_timeout(engine, data):
    owner = psycopg.connect(engine.dsn)
    try:
        owner.execute(f"LOCK TABLE {engine.store.schema}.lab_postings IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(labsrc.LabError) as caught:
            engine.search("refund", data.luna, data.eval_date, 2)
        elapsed = time.monotonic() - started
    finally:
        owner.close()
    message = one_line(caught.value)
    assert "lock timeout (1 s)" in message and engine.store.server_name in message
    assert elapsed < FAST.lock + MARGIN_S
    assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused  # and the engine works again


def test_a_slow_statement_ends_at_the_statement_timeout(engine, data):
    started = time.monotonic()
    with pytest.raises(labsrc.LabError, match=r"statement timeout \(2 s for the lab.s readers") as caught:
        with engine.store.request(data.luna, data.eval_date) as conn:
            conn.execute("SELECT pg_sleep(600)")
    assert time.monotonic() - started < FAST.statement + MARGIN_S
    one_line(caught.value)


def test_the_timeouts_are_the_sessions_settings(engine, data):
    with engine.connect_as(data.luna, data.eval_date) as conn:
        shown = [conn.execute(f"SHOW {name}").fetchone()[0] for name in ("statement_timeout", "lock_timeout")]
    assert shown == ["2s", "1s"]
    with pytest.raises(labsrc.InvalidArgument, match="timeouts.lock"):
        Timeouts(lock=0)
    with pytest.raises(labsrc.InvalidArgument, match="at least 2 s"):
        Timeouts(connect=1)


def stop_server(embedded: EmbeddedServer) -> list:
    """SIGSTOP the postmaster first (so it forks no new backend), then every process it had; returns them all."""
    import psutil

    postmaster = psutil.Process(int((embedded.data_directory / "postmaster.pid").read_text().split()[0]))
    postmaster.suspend()
    children = postmaster.children(recursive=True)
    for proc in children:
        proc.suspend()
    return [postmaster, *children]


def test_a_stopped_server_ends_in_flight_and_new_requests_within_the_request_deadline(data):
    """SIGSTOP freezes every server process: no server-side timeout can fire, only the client's deadline."""
    with PostgresRetriever(data.chunks, data.vectors, timeouts=FAST) as engine:  # its own embedded server
        assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused
        frozen: list = []
        outcome: dict = {}

        def in_flight() -> None:
            started = time.monotonic()
            try:
                with engine.store.request(data.luna, data.eval_date) as conn:
                    conn.execute("SELECT pg_sleep(1)")
            except labsrc.LabError as exc:
                outcome["error"] = str(exc)
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=in_flight, daemon=True)
        try:
            thread.start()
            time.sleep(0.3)  # inside pg_sleep
            frozen = stop_server(engine.store.server)
            thread.join(timeout=FAST.request + MARGIN_S)
            started = time.monotonic()
            with pytest.raises(labsrc.LabError) as caught:
                engine.search("RPL-14", data.luna, data.eval_date, 2)
            new_seconds = time.monotonic() - started
            still_stopped = all(proc.status() == "stopped" for proc in frozen)
        finally:
            for proc in frozen:
                proc.resume()
        assert still_stopped  # so nothing but the client's own clock ended them
        assert not thread.is_alive() and "request deadline (4 s" in outcome["error"], outcome
        assert outcome["seconds"] < FAST.request + 10
        message = one_line(caught.value)
        assert engine.store.server_name in message and ("request deadline" in message or "connect timeout" in message)
        assert new_seconds < FAST.request + FAST.connect + 10
        for _ in range(3):  # the server runs again: the pool replaces the cut connections
            try:
                assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused
                break
            except labsrc.LabError:
                time.sleep(1)
        else:
            raise AssertionError("the engine never recovered after the server resumed")


# --- errors -----------------------------------------------------------------------------------


def chunk(chunk_id: str = "c1", *, text: str = "refund laptop", region: str = "EU", acl_tag: str = "t") -> labsrc.PolicyChunk:
    return labsrc.PolicyChunk(chunk_id, "d", "p", "v", region, acl_tag, dt.date(2026, 1, 1), None, text)


def test_a_lone_surrogate_in_a_chunk_is_refused_naming_it(server, data):
    bad = chunk("c-bad", text="refund \ud800 laptop")
    with pytest.raises(labsrc.InvalidArgument) as caught:
        PostgresRetriever([chunk(), bad], labsrc.HashingEncoder(dimension=8), dsn=server.dsn)
    message = one_line(caught.value)
    assert "'c-bad'" in message and "'text'" in message and "lone surrogate" in message


@pytest.mark.parametrize("field", ["region", "acl_tag"])
def test_a_chunk_with_a_blank_region_or_tag_is_refused_like_the_records_do(server, field):
    bad = chunk("c-blank")
    object.__setattr__(bad, field, " ")  # built past the record constructor, which may refuse it itself
    with pytest.raises(labsrc.InvalidArgument, match="non-blank") as caught:
        PostgresRetriever([chunk(), bad], labsrc.HashingEncoder(dimension=8), dsn=server.dsn)
    assert "'c-blank'" in one_line(caught.value) and repr(field) in str(caught.value)


def test_a_one_megabyte_term_is_refused_naming_the_size_limit(server):
    rng = random.Random(7)
    giant = "".join(rng.choice(string.ascii_lowercase) for _ in range(1_000_000))  # one 1 MB token, incompressible
    with pytest.raises(labsrc.InvalidArgument) as caught:
        PostgresRetriever([chunk(), chunk("c-big", text=f"refund {giant}")], labsrc.HashingEncoder(dimension=8), dsn=server.dsn)
    message = one_line(caught.value)
    assert "cannot index this corpus" in message and "2,700 bytes" in message and "'c-big'" in message


def test_a_one_megabyte_caller_region_is_just_nobody(engine, data):
    caller = labsrc.Caller("x", "E" * 1_000_000, {"support:eu"})
    result = engine.search("refund", caller, data.eval_date, 2)
    assert (result.sparse, result.dense, result.fused) == ((), (), ())


def test_a_huge_top_k_equals_memory(engine, data):
    memory = labsrc.PolicyRetriever(data.chunks, data.vectors)
    for query in ("refund", "damaged refurbished laptop replacement"):
        got = engine.search(query, data.luna, data.eval_date, 10**20)
        assert lanes_of(got) == lanes_of(memory.search(query, data.luna, data.eval_date, 10**20))


def test_a_nul_in_a_callers_region_is_refused(engine, data):
    with pytest.raises(labsrc.InvalidArgument, match="NUL") as caught:
        engine.search("refund", labsrc.Caller("x", "EU\x00", {"support:eu"}), data.eval_date, 2)
    one_line(caught.value)


def test_a_query_over_the_limit_is_refused_before_it_is_sent_as_in_memory(engine, data):
    query = "refund " * 600_000  # 4.2 MB, 600k terms: the server once spent 4 s on it
    started = time.monotonic()
    with pytest.raises(labsrc.InvalidArgument, match="limit is 100,000") as caught:
        engine.search(query, data.luna, data.eval_date, 2)
    assert time.monotonic() - started < 1.0  # refused at once, not analysed, nothing sent
    with pytest.raises(labsrc.InvalidArgument) as in_memory:
        labsrc.PolicyRetriever(data.chunks, data.vectors).search(query, data.luna, data.eval_date, 2)
    assert one_line(caught.value) == one_line(in_memory.value)
    assert engine.with_dense("exact").max_query_chars == 100_000


@pytest.mark.parametrize(
    "dsn",
    [
        "password=s3cret-pw bogus",
        "postgresql://bob:s3cret pw@h/db",
        "host=x password='s3cret pw' user",
        "postgresql://bob:s3cret-pw@127.0.0.1:1/db",
    ],
)
def test_a_dsns_password_never_appears_in_the_error(data, dsn):
    with pytest.raises(labsrc.LabError) as caught:
        PostgresRetriever(data.chunks, data.vectors, dsn=dsn, timeouts=FAST)
    message = one_line(caught.value)
    assert "s3cret" not in message and "cannot connect to PostgreSQL" in message


def test_a_dsn_that_is_not_one_is_refused_naming_it(data):
    with pytest.raises(labsrc.InvalidArgument) as caught:
        PostgresRetriever(data.chunks, data.vectors, dsn="this is not a dsn")
    message = one_line(caught.value)
    assert "'this is not a dsn'" in message and "cannot connect to PostgreSQL" in message


def kill_postmaster(embedded: EmbeddedServer) -> None:
    pid = int((embedded.data_directory / "postmaster.pid").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def test_a_killed_server_ends_in_a_lab_error_and_close_leaves_nothing(data, tmp_path):
    engine = PostgresRetriever(data.chunks, data.vectors, timeouts=FAST)  # its own embedded server
    pgdata = engine.store.server.data_directory
    assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused
    kill_postmaster(engine.store.server)
    for _ in range(2):  # the broken pooled connection, then the pool's failed reconnection
        started = time.monotonic()
        with pytest.raises(labsrc.LabError) as caught:
            engine.search("RPL-14", data.luna, data.eval_date, 2)
        assert engine.store.server_name in one_line(caught.value)
        assert time.monotonic() - started < FAST.connect + MARGIN_S
    engine.close()  # no NoSuchProcess, no leftovers
    engine.close()
    assert not pgdata.exists() and not pgdata.parent.exists()


# --- the CLI ----------------------------------------------------------------------------------


def test_cli_exits_2_with_one_line_for_a_dsn_that_is_not_one(capsys):
    assert main(["search", "RPL-14", "--as", "luna-48291", "--engine", "postgres", "--dsn", "this is not a dsn"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "this is not a dsn" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_exits_2_with_one_line_for_a_lone_surrogate_in_a_chunk(tmp_path: Path, capsys):
    lesson = labsrc.datasets.fixtures_dir() / "lesson"
    lines = (lesson / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["text"] += " \ud800"
    lines[0] = json.dumps(record)  # JSON's \ud800 escape: a lone surrogate once loaded
    chunks = tmp_path / "chunks.jsonl"
    chunks.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["search", "RPL-14", "--as", "luna-48291", "--chunks", str(chunks), "--callers", str(lesson / "callers.json")]
    assert main([*args, "--engine", "postgres"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "lone surrogate" in err and record["chunk_id"] in err
    assert len(err.strip().splitlines()) == 1
