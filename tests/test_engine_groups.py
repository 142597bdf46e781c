"""Statistics per boundary group (labsrc.engines.groups): exact for every caller, kept exact by every write.

A caller's N and total length are sums over the rows of ``lab_group_stats`` that
row-level security lets it read. These tests check the sums against the in-memory
boundary for every lesson caller and date, check that a reader sees no group
holding a chunk it may not see, and check that inserts, deletes and updates of
``lab_chunks`` keep the table equal to a fresh ``GROUP BY`` inside the writing
transaction, invisible to readers until it commits.
"""

from __future__ import annotations

import datetime as dt
import random

import pytest
from pg_support import lesson_callers, owner_session, requires_postgres

import labsrc
from labsrc.engines import PostgresRetriever, bm25_statistics
from labsrc.lanes.analysis import lesson_analyzer

pytestmark = requires_postgres

DAYS = (dt.date(2025, 6, 1), dt.date(2026, 5, 27), dt.date(2027, 1, 1))

RECOMPUTED = """
SELECT region, acl_tag, effective_from, effective_to, count(*), sum(doc_len)
FROM lab_chunks GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 NULLS FIRST
"""
KEPT = """
SELECT region, acl_tag, effective_from, effective_to, n_docs, total_len
FROM lab_group_stats ORDER BY 1, 2, 3, 4 NULLS FIRST
"""


@pytest.fixture()
def engine(server, data):
    # Function-scoped: the write tests change the store.
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:
        yield retriever


@pytest.fixture()
def owner(engine):
    yield from owner_session(engine)


def test_one_row_per_group_after_the_load(engine, owner, data):
    kept = owner.execute(KEPT).fetchall()
    assert kept == owner.execute(RECOMPUTED).fetchall()
    windows = {(c.region, c.acl_tag, c.effective_from, c.effective_to) for c in data.chunks}
    assert len(kept) == len(windows) == engine.store.groups
    assert sum(row[4] for row in kept) == len(data.chunks)


def test_a_caller_sums_exactly_its_permitted_chunks(engine, data):
    checked = 0
    for caller in lesson_callers(data):
        for day in DAYS:
            permitted = labsrc.permitted_chunks(caller, data.chunks, day)
            with engine.connect_as(caller, day) as conn:
                stats = bm25_statistics(conn, ["refund"])
                rows = conn.execute("SELECT region, acl_tag, effective_from, effective_to FROM lab_group_stats").fetchall()
            assert stats.n_docs == len(permitted), (caller.actor_id, day)
            assert stats.total_len == sum(len(lesson_analyzer(c.text)) for c in permitted)
            # Every group the reader can read is made of permitted chunks only.
            visible = {(c.region, c.acl_tag, c.effective_from, c.effective_to) for c in permitted}
            assert set(rows) == visible
            checked += 1
    assert checked == 3 * len(lesson_callers(data))


def insert_chunk(conn, chunk_id, region, tag, start, end, doc_len):
    conn.execute(
        "INSERT INTO lab_chunks (chunk_id, document_id, version, region, acl_tag, effective_from, effective_to, doc_len, text)"
        " VALUES (%s, 'doc', 'v1', %s, %s, %s, %s, %s, 'text')",
        (chunk_id, region, tag, start, end, doc_len),
    )


def test_a_write_updates_the_groups_in_its_own_transaction(engine, owner, data):
    luna, day = data.luna, data.eval_date
    with engine.connect_as(luna, day) as conn:
        before = bm25_statistics(conn, []).n_docs, bm25_statistics(conn, []).total_len
    with owner.transaction():
        insert_chunk(owner, "zz-new", luna.region, sorted(luna.acl_tags)[0], dt.date(2020, 1, 1), None, 7)
        assert owner.execute(KEPT).fetchall() == owner.execute(RECOMPUTED).fetchall()
        # Not committed yet: a reader's snapshot still has the old statistics.
        with engine.connect_as(luna, day) as conn:
            stats = bm25_statistics(conn, [])
            assert (stats.n_docs, stats.total_len) == before
    with engine.connect_as(luna, day) as conn:
        stats = bm25_statistics(conn, [])
    assert (stats.n_docs, stats.total_len) == (before[0] + 1, before[1] + 7)


def test_deleting_a_group_removes_its_row_and_updates_move_counts(engine, owner):
    insert_chunk(owner, "zz-a", "MARS", "crater", dt.date(2020, 1, 1), None, 3)
    insert_chunk(owner, "zz-b", "MARS", "crater", dt.date(2020, 1, 1), None, 4)
    row = owner.execute("SELECT n_docs, total_len FROM lab_group_stats WHERE region = 'MARS'").fetchall()
    assert row == [(2, 7)]
    owner.execute("UPDATE lab_chunks SET acl_tag = 'dune' WHERE chunk_id = 'zz-a'")
    moved = owner.execute("SELECT acl_tag, n_docs, total_len FROM lab_group_stats WHERE region = 'MARS' ORDER BY 1").fetchall()
    assert moved == [("crater", 1, 4), ("dune", 1, 3)]
    owner.execute("DELETE FROM lab_chunks WHERE region = 'MARS'")
    assert owner.execute("SELECT count(*) FROM lab_group_stats WHERE region = 'MARS'").fetchone() == (0,)
    assert owner.execute(KEPT).fetchall() == owner.execute(RECOMPUTED).fetchall()


def test_random_writes_keep_the_table_equal_to_a_fresh_group_by(engine, owner):
    rng = random.Random(7)
    ids: list[str] = []
    for step in range(60):
        action = rng.random()
        if action < 0.5 or not ids:
            chunk_id = f"zz-{step:03d}"
            start = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randrange(3) * 30)
            end = None if rng.random() < 0.5 else start + dt.timedelta(days=10)
            insert_chunk(owner, chunk_id, rng.choice(["EU", "US"]), rng.choice(["a", "b"]), start, end, rng.randrange(1, 50))
            ids.append(chunk_id)
        elif action < 0.75:
            owner.execute("DELETE FROM lab_chunks WHERE chunk_id = %s", (ids.pop(rng.randrange(len(ids))),))
        else:
            owner.execute(
                "UPDATE lab_chunks SET region = %s, doc_len = doc_len + 1 WHERE chunk_id = %s",
                (rng.choice(["EU", "US", "APAC"]), rng.choice(ids)),
            )
        assert owner.execute(KEPT).fetchall() == owner.execute(RECOMPUTED).fetchall(), step
