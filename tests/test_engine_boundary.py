"""The reader role cannot widen its own boundary: SET, SET LOCAL, set_config, RESET, SET ROLE, ALTER ROLE ... SET.

Row-level security used to trust three settings the reader role could write
itself. Now the policies trust only a request token signed for this session and
this transaction (labsrc.engines.authorize). Every statement below is run from a
reader connection; afterwards the session sees exactly the caller's rows and
statistics, or (when the statement destroyed its own token) nothing at all. It
never sees a hidden row, and nothing it did reaches a later session.
"""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from pg_support import lanes_of, requires_postgres

import labsrc
from labsrc.engines import PostgresRetriever, RequestSigner, bm25_statistics

pytestmark = requires_postgres

TERMS = ["refund", "refurbished", "laptop", "vip", "merchant"]
VIP = labsrc.Caller("vip-ops-1", "EU", {"support:eu", "merchant:vip-ops"})
OLD_DAY = dt.date(2025, 6, 1)  # the superseded v1 rule is in force


@pytest.fixture(scope="module")
def engine(server, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:
        yield retriever


def observe(conn):
    """What a session can see: its ids, its postings' and vectors' ids, its groups and its BM25 statistics."""
    ids = sorted(row[0] for row in conn.execute("SELECT chunk_id FROM lab_chunks"))
    posted = sorted({row[0] for row in conn.execute("SELECT chunk_id FROM lab_postings")})
    embedded = sorted(row[0] for row in conn.execute("SELECT chunk_id FROM lab_vectors"))
    groups = conn.execute("SELECT count(*) FROM lab_group_stats").fetchone()[0]
    stats = bm25_statistics(conn, TERMS)
    return ids, posted, embedded, groups, (stats.n_docs, stats.total_len, stats.df)


def luna_view(engine, data):
    with engine.connect_as(data.luna, data.eval_date) as conn:
        return observe(conn)


EMPTY = ([], [], [], 0, (0, 0, {}))


def test_the_policies_read_a_signed_token_not_the_old_settings(engine, data):
    want = luna_view(engine, data)
    assert want[0] == sorted(c.chunk_id for c in labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date))
    assert want[2] == want[0]  # every lesson chunk has a vector, and the reader sees exactly the permitted ones
    assert "merchant-vip-refurb" not in want[0] and "eu-refurb-v1-rule" not in want[0]
    with engine.connect_as(data.luna, data.eval_date) as conn:
        # The attack: widen tags and move the date with the settings the policies used to read.
        conn.execute("SET LOCAL lab.acl_tags = '{support:eu,merchant:vip-ops}'")
        conn.execute("SET LOCAL lab.region = 'EU'")
        conn.execute("SELECT set_config('lab.on_date', '2025-06-01', true)")
        assert observe(conn) == want


@pytest.mark.parametrize(
    "statement",
    [
        "SET lab.request = '{forged}'",
        "SET LOCAL lab.request = '{forged}'",
        "SELECT set_config('lab.request', '{forged}', true)",
        "SELECT set_config('lab.request', '{forged}', false)",
        "RESET lab.request",
        "RESET ALL",
    ],
)
def test_a_forged_or_reset_token_shows_nothing(engine, data, statement):
    # A token for the VIP caller on the old date, right pid and transaction, signed with a key that is not the store's.
    with engine.connect_as(data.luna, data.eval_date) as conn:
        pid, start = conn.execute("SELECT pg_backend_pid(), extract(epoch FROM transaction_timestamp())::text").fetchone()
        forged = RequestSigner().token(pid, start, VIP, OLD_DAY)
        conn.execute(statement.replace("{forged}", forged.replace("'", "''")))
        assert observe(conn) == EMPTY  # fail closed: not the VIP's rows, not even Luna's


def test_a_token_copied_from_another_session_shows_nothing(engine, data):
    with engine.connect_as(VIP, data.eval_date) as vip:
        vip_token = vip.execute("SELECT current_setting('lab.request')").fetchone()[0]
        assert "merchant-vip-refurb" in observe(vip)[0]  # the token is good in its own session
        with engine.connect_as(data.luna, data.eval_date) as conn:
            conn.execute("SELECT set_config('lab.request', %s, true)", (vip_token,))
            assert observe(conn) == EMPTY


def test_a_token_kept_from_an_earlier_transaction_shows_nothing(engine, data):
    conn = engine.connect_as(data.luna, data.eval_date)
    try:
        engine.store._signer.authorize(conn, VIP, data.eval_date)  # as if a VIP request had run on this session before
        kept = conn.execute("SELECT current_setting('lab.request')").fetchone()[0]
        assert "merchant-vip-refurb" in observe(conn)[0]
        conn.commit()
        conn.execute("SELECT set_config('lab.request', %s, false)", (kept,))  # even session-wide
        assert observe(conn) == EMPTY
    finally:
        conn.close()


@pytest.mark.parametrize(
    "statement",
    ["SET ROLE postgres", "SET SESSION AUTHORIZATION postgres", "SET row_security = off"],
)
def test_switching_role_or_row_security_is_refused(engine, data, statement):
    conn = engine.connect_as(data.luna, data.eval_date)
    try:
        with pytest.raises(psycopg.Error):
            conn.execute(statement)
            conn.execute("SELECT chunk_id FROM lab_chunks")
    finally:
        conn.close()
    assert luna_view(engine, data)[0] == sorted(
        c.chunk_id for c in labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date)
    )


def test_the_signing_key_and_the_old_channel_are_out_of_reach(engine, data):
    with engine.connect_as(data.luna, data.eval_date) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM lab_signing_key")
    with engine.connect_as(data.luna, data.eval_date) as conn:
        # pg_stats would list the most common terms and ids, hidden ones included: none are collected.
        shown = conn.execute(
            "SELECT attname FROM pg_stats WHERE schemaname = current_schema() "
            "AND (most_common_vals IS NOT NULL OR histogram_bounds IS NOT NULL) "
            "AND attname IN ('term', 'chunk_id', 'text', 'document_id', 'version')"
        ).fetchall()
    assert shown == []


@pytest.mark.parametrize(
    "setting, value",
    [
        ("statement_timeout", "'1ms'"),  # the lasting denial of service
        ("extra_float_digits", "0"),  # would round every score to 15 digits
        ("default_transaction_read_only", "off"),
        ("search_path", "pg_temp"),
        ("idle_in_transaction_session_timeout", "'1ms'"),
    ],
)
def test_alter_role_set_never_reaches_a_later_session(engine, data, setting, value):
    before = engine.search("damaged refurbished laptop", data.luna, data.eval_date, 3)
    conn = engine.connect_as(data.luna, data.eval_date)
    try:
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):  # a request's transaction is read-only...
            conn.execute(f"ALTER ROLE CURRENT_USER SET {setting} = {value}")
        conn.rollback()
        conn.read_only = False  # ...but PostgreSQL lets any role set its own defaults outside one
        conn.execute(f"ALTER ROLE CURRENT_USER SET {setting} = {value}")
        conn.execute(f"ALTER ROLE CURRENT_USER IN DATABASE {conn.info.dbname} SET {setting} = {value}")
        conn.commit()
    finally:
        conn.close()
    engine.store.pool.drain()  # every pooled session is replaced: the next requests run in new sessions
    after = engine.search("damaged refurbished laptop", data.luna, data.eval_date, 3)
    assert lanes_of(after) == lanes_of(before)
    with engine.connect_as(data.luna, data.eval_date) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "30s"
        assert conn.execute("SHOW extra_float_digits").fetchone()[0] == "1"
        assert conn.execute(
            "SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname = current_user"
        ).fetchone() == (0,)
        assert observe(conn) == luna_view(engine, data)


def test_what_a_request_sets_or_creates_never_reaches_the_next_request(engine, data):
    before = engine.search("damaged refurbished laptop", data.luna, data.eval_date, 3)
    for _ in range(engine.store.pool.max_size + 1):  # touch every pooled connection
        with engine.store.request(VIP, OLD_DAY) as conn:
            conn.execute("SET extra_float_digits = 0")  # session-level: would outlive a committed transaction
            conn.execute("SET search_path = pg_temp, public")
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):  # no shadow table either
                conn.execute("CREATE TEMP TABLE lab_chunks (chunk_id text)")
    after = engine.search("damaged refurbished laptop", data.luna, data.eval_date, 3)
    assert lanes_of(after) == lanes_of(before)
    assert after.trace.to_dict(include_timings=False) == before.trace.to_dict(include_timings=False)


def test_blank_or_unstorable_caller_fields_are_refused_like_the_records_do(engine, data):
    bad = [
        (object.__new__(labsrc.Caller), "region", "   ", "non-blank"),
        (object.__new__(labsrc.Caller), "region", "EU\x00", "NUL"),
        (object.__new__(labsrc.Caller), "region", "EU\ud800", "lone surrogate"),
        (object.__new__(labsrc.Caller), "acl_tags", frozenset({""}), "non-blank"),
        (object.__new__(labsrc.Caller), "acl_tags", frozenset({"support:\x00"}), "NUL"),
    ]
    for caller, field, value, message in bad:
        # Built field by field: the record constructor may refuse these values itself.
        object.__setattr__(caller, "actor_id", "x")
        object.__setattr__(caller, "region", "EU")
        object.__setattr__(caller, "acl_tags", frozenset({"support:eu"}))
        object.__setattr__(caller, field, value)
        with pytest.raises(labsrc.InvalidArgument, match=message):
            engine.search("refund", caller, data.eval_date, 2)
        with pytest.raises(labsrc.InvalidArgument, match=message):
            engine.connect_as(caller, data.eval_date)
    assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused


def test_explain_analyze_does_not_count_other_tenants_rows(server):
    # The postings key leads with region and tag, so the policy bounds the scan instead of filtering it:
    # "Rows Removed by Filter" no longer counts the chunks of other regions and tags (the README's threat
    # model says what it still counts: the caller's own region and tags outside the date window).
    day = dt.date(2026, 5, 27)
    own = [
        labsrc.PolicyChunk(f"v{i}", "d", "p", "v", "EU", "support:eu", day - dt.timedelta(days=3), None, "refund laptop")
        for i in range(30)
    ]
    others = [
        labsrc.PolicyChunk(f"h{i}", "d", "p", "v", ("EU", "US")[i % 2], ("merchant:vip-ops", "support:eu")[i % 2],
                           day - dt.timedelta(days=3), None, "zebrafix refund")
        for i in range(300)
    ]  # fmt: skip
    caller = labsrc.Caller("l", "EU", {"support:eu"})
    with PostgresRetriever(own + others, labsrc.HashingEncoder(dimension=8), dsn=server.dsn) as engine:
        with engine.connect_as(caller, day) as conn:
            plans = {
                query: "\n".join(
                    row[0] for row in conn.execute(f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {query}")
                )
                for query in (
                    "SELECT count(*) FROM lab_postings WHERE term = 'zebrafix'",
                    "SELECT count(*), sum(doc_len) FROM lab_chunks",
                )
            }
        assert engine.search("zebrafix", caller, day, 5).fused == ()
    for query, plan in plans.items():
        assert "Index Only Scan" in plan, plan
        assert "Rows Removed" not in plan, (query, plan)
