"""df by binary search in each term's sorted dates (labsrc.engines.term_dates): exact, kept exact, owner-only.

``lab_visible_df`` must return, for every caller and date, exactly the count of
visible postings that a ``count(*)`` under row-level security returns; it must
stay exact through every write to ``lab_postings``; and the reader role must
learn from it nothing a ``count(*)`` would not tell it: a term that only hidden
postings hold looks like an absent one, and the table behind it is not readable.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest
from pg_support import lesson_callers, owner_session, requires_postgres

from labsrc.engines import PostgresRetriever, bm25_statistics

pytestmark = requires_postgres

DAYS = (
    dt.date(2020, 1, 1),
    dt.date(2025, 6, 1),
    dt.date(2026, 5, 27),
    dt.date(2027, 1, 1),
)
# Every 45 days across the windows the write test makes (which start in 2025-2026 and last up to 400 days).
WRITE_DAYS = tuple(dt.date(2024, 12, 1) + dt.timedelta(days=45 * k) for k in range(20))
COUNT = "SELECT term, count(*) FROM lab_postings WHERE term = ANY (%s) GROUP BY term ORDER BY term"
VISIBLE_DF = "SELECT term, df FROM lab_visible_df(%s) ORDER BY term"


@pytest.fixture()
def engine(server, data):
    # Function-scoped: the write tests change the store.
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:
        yield retriever


@pytest.fixture()
def owner(engine):
    yield from owner_session(engine)


def every_term(owner):
    return [t for (t,) in owner.execute("SELECT DISTINCT term FROM lab_postings ORDER BY term").fetchall()]


def add_posting(conn, term, chunk_id, region, tag, start, end):
    conn.execute(
        "INSERT INTO lab_postings (term, chunk_id, tf, doc_len, region, acl_tag, effective_from, effective_to)"
        " VALUES (%s, %s, 1, 5, %s, %s, %s, %s)",
        (term, chunk_id, region, tag, start, end),
    )


def assert_df_equals_count(engine, data, terms, days=DAYS):
    checked = 0
    for caller in lesson_callers(data):
        for day in days:
            with engine.connect_as(caller, day) as conn:
                counted = conn.execute(COUNT, (terms,)).fetchall()
                found = conn.execute(VISIBLE_DF, (terms,)).fetchall()
            assert found == counted, (caller.actor_id, day)
            checked += 1
    return checked


def test_every_terms_df_equals_the_readers_count_for_every_caller_and_date(engine, owner, data):
    terms = every_term(owner)
    assert len(terms) >= 30  # the lesson's 5 chunks; the write test below adds many windows
    assert assert_df_equals_count(engine, data, terms) == len(DAYS) * len(lesson_callers(data))
    assert (
        engine.store.term_rows
        == owner.execute("SELECT count(DISTINCT (region, acl_tag, term)) FROM lab_postings").fetchone()[0]
    )


def test_the_arithmetic_of_one_window(engine, owner, data):
    # One posting valid from 2024-01-01 to 2024-01-31 inclusive, a second from 2024-01-15 with no end:
    # froms = [01-01, 01-15], tos = [01-31]; df(d) = #(froms ≤ d) − #(tos ≤ d − 1). The third posting adds
    # 01-10 to froms and 01-09 (from − 1, not its end 01-05) to tos: +1 − 1 from 01-10 on, 0 before.
    luna = data.luna
    tag = sorted(luna.acl_tags)[0]
    windows = [
        ("zz-1", dt.date(2024, 1, 1), dt.date(2024, 1, 31)),
        ("zz-2", dt.date(2024, 1, 15), None),
        # A window that ends before it begins is never in force: stored as e = from − 1 = 01-09, it cancels itself.
        ("zz-3", dt.date(2024, 1, 10), dt.date(2024, 1, 5)),
    ]
    for chunk_id, start, end in windows:
        add_posting(owner, "zzwindow", chunk_id, luna.region, tag, start, end)
    expected = {
        dt.date(2023, 12, 31): 0,  # 0 − 0
        dt.date(2024, 1, 1): 1,  # 1 − 0
        dt.date(2024, 1, 5): 1,  # 1 − 0: the empty window's "end" is not in force either
        dt.date(2024, 1, 7): 1,  # 1 − 0: stored as 01-05 instead, it would subtract here (1 − 1)
        dt.date(2024, 1, 10): 1,  # 2 − 1
        dt.date(2024, 1, 15): 2,  # 3 − 1
        dt.date(2024, 1, 31): 2,  # 3 − #(01-09, 01-31 ≤ 01-30) = 3 − 1: the end is inclusive
        dt.date(2024, 2, 1): 1,  # 3 − #(01-09, 01-31 ≤ 01-31) = 3 − 2
    }
    for day, df in expected.items():
        with engine.connect_as(luna, day) as conn:
            found = dict(conn.execute(VISIBLE_DF, (["zzwindow"],)).fetchall())
        assert found.get("zzwindow", 0) == df, day


def test_a_repeated_term_is_counted_once_and_unknown_terms_give_no_row(engine, data):
    with engine.connect_as(data.luna, data.eval_date) as conn:
        (term, df), *_ = conn.execute(COUNT, (["refund"],)).fetchall()
        assert conn.execute(VISIBLE_DF, (["refund", "refund", "zz-no-such-term", None],)).fetchall() == [(term, df)]
        assert conn.execute(VISIBLE_DF, ([],)).fetchall() == []
        assert bm25_statistics(conn, ["refund", "zz-no-such-term"]).df == {"refund": df}


def test_without_a_valid_token_the_function_counts_nothing(engine, data):
    with engine.connect_as(data.luna, data.eval_date) as conn:
        conn.execute("SELECT set_config('lab.request', 'forged.' || repeat('0', 64), true)")
        assert conn.execute(VISIBLE_DF, (["refund"],)).fetchall() == []


def test_the_reader_cannot_read_the_dates_table_and_nobody_else_may_call_the_function(engine, owner, data):
    import psycopg

    with engine.connect_as(data.luna, data.eval_date) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            conn.execute("SELECT * FROM lab_term_dates")
    schema = engine.store.schema
    granted = owner.execute(
        "SELECT array_agg(r.rolname ORDER BY r.rolname) FROM pg_proc p, pg_roles r "
        "WHERE p.oid = %s::regprocedure AND has_function_privilege(r.oid, p.oid, 'EXECUTE') AND NOT r.rolsuper "
        "AND r.oid <> p.proowner",  # its owner, who made the store, runs it anyway
        (f"{schema}.lab_visible_df(text[])",),
    ).fetchone()[0]
    assert granted == [engine.store.role]


def test_a_term_only_hidden_postings_hold_looks_absent(engine, owner, data):
    luna, day = data.luna, data.eval_date
    own_tag = sorted(luna.acl_tags)[0]
    add_posting(
        owner,
        "zzothertag",
        "zz-1",
        luna.region,
        "zz-not-lunas-tag",
        dt.date(2020, 1, 1),
        None,
    )
    add_posting(
        owner,
        "zzfuture",
        "zz-2",
        luna.region,
        own_tag,
        day + dt.timedelta(days=1),
        None,
    )
    add_posting(
        owner,
        "zzexpired",
        "zz-3",
        luna.region,
        own_tag,
        dt.date(2020, 1, 1),
        day - dt.timedelta(days=1),
    )
    plan = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS OFF) " + VISIBLE_DF
    buffers = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF, BUFFERS ON) " + VISIBLE_DF
    with engine.connect_as(luna, day) as conn:

        def seen(term):
            return conn.execute(VISIBLE_DF, ([term],)).fetchall(), conn.execute(plan, ([term],)).fetchall()

        absent = seen("zzabsent")
        for hidden in ("zzothertag", "zzfuture", "zzexpired"):
            assert seen(hidden) == absent, hidden
        # Another tag's postings are never looked up, so not even the pages read differ. The caller's own
        # out-of-window versions lengthen the arrays it reads (docs/postgres.md lists that channel).
        assert conn.execute(buffers, (["zzothertag"],)).fetchall() == conn.execute(buffers, (["zzabsent"],)).fetchall()
    assert absent[0] == []


def test_writes_to_the_postings_keep_df_exact(engine, owner, data):
    rng = random.Random(11)
    regions = sorted({c.region for c in data.chunks}) + ["MARS"]
    tags = sorted({c.acl_tag for c in data.chunks})
    terms = ["refund", "zzalpha", "zzbeta"]
    made: list[tuple[str, str]] = []
    for step in range(40):
        action = rng.random()
        if action < 0.5 or not made:
            term, chunk_id = rng.choice(terms), f"zz-{step:03d}"
            start = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randrange(24) * 30)
            end = None if rng.random() < 0.4 else start + dt.timedelta(days=rng.randrange(400))
            add_posting(owner, term, chunk_id, rng.choice(regions), rng.choice(tags), start, end)
            made.append((term, chunk_id))
        elif action < 0.7:
            term, chunk_id = made.pop(rng.randrange(len(made)))
            owner.execute(
                "DELETE FROM lab_postings WHERE term = %s AND chunk_id = %s",
                (term, chunk_id),
            )
        else:
            term, chunk_id = rng.choice(made)
            owner.execute(
                "UPDATE lab_postings SET acl_tag = %s, effective_to = effective_from + %s WHERE term = %s AND chunk_id = %s",
                (rng.choice(tags), rng.randrange(-40, 300), term, chunk_id),
            )
        if step % 8 == 7:
            assert_df_equals_count(engine, data, terms, WRITE_DAYS)
    # Deleting a key's last posting leaves no row behind; a truncate empties the table.
    owner.execute("DELETE FROM lab_postings WHERE term LIKE 'zz%%'")
    assert owner.execute("SELECT count(*) FROM lab_term_dates WHERE term LIKE 'zz%%'").fetchone() == (0,)
    assert_df_equals_count(engine, data, terms)
    owner.execute("TRUNCATE lab_postings")
    assert owner.execute("SELECT count(*) FROM lab_term_dates").fetchone() == (0,)


def test_a_write_is_invisible_to_readers_until_it_commits(engine, owner, data):
    luna, day = data.luna, data.eval_date
    with engine.connect_as(luna, day) as conn:
        before = dict(conn.execute(VISIBLE_DF, (["refund"],)).fetchall())["refund"]
    with owner.transaction():
        add_posting(
            owner,
            "refund",
            "zz-new",
            luna.region,
            sorted(luna.acl_tags)[0],
            dt.date(2020, 1, 1),
            None,
        )
        with engine.connect_as(luna, day) as conn:
            assert dict(conn.execute(VISIBLE_DF, (["refund"],)).fetchall())["refund"] == before
    with engine.connect_as(luna, day) as conn:
        assert dict(conn.execute(VISIBLE_DF, (["refund"],)).fetchall())["refund"] == before + 1
