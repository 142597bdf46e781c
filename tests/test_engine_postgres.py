"""The PostgreSQL engine on the lesson fixtures: parity with PolicyRetriever, RLS as the boundary, bad input."""

from __future__ import annotations

import datetime as dt

import pytest
from pg_support import lanes_of, replay_stable, requires_postgres

import labsrc
from labsrc.engines import PostgresRetriever, RetrieverUnderTest

pytestmark = requires_postgres


@pytest.fixture(scope="module")
def engine(server, data):
    with PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn) as retriever:
        yield retriever


@pytest.fixture(scope="module")
def memory(data):
    return labsrc.PolicyRetriever(data.chunks, data.vectors)


def test_every_lesson_case_equals_the_in_memory_retriever(engine, memory, data):
    compared = 0
    for case in data.cases:
        caller, day = data.callers_by_id[case.caller], case.on_date or data.eval_date
        for top_k in (1, 2, 5, len(data.chunks) + 3):
            got = engine.search(case.query, caller, day, top_k, query_kind=case.kind)
            want = memory.search(case.query, caller, day, top_k, query_kind=case.kind)
            assert lanes_of(got) == lanes_of(want), (case.name, top_k)
            assert replay_stable(got.trace) == replay_stable(want.trace)
            compared += 1
    assert compared == 4 * len(data.cases)


def test_trace_names_the_engine_versions_and_stages(engine, data):
    trace = engine.search("RPL-14", data.luna, data.eval_date, 2).trace
    assert trace.versions["engine"] == "postgres"
    assert trace.versions["postgresql"].startswith("18")
    assert trace.versions["pgvector"].startswith("0.8")
    assert trace.versions["dense_index"] == "exact"
    assert set(trace.timings_ms) == {"authorize", "bm25", "dense", "fusion"}
    assert all(ms >= 0 for ms in trace.timings_ms.values())


def test_it_is_a_retriever_under_test_like_the_in_memory_one(engine, memory):
    assert isinstance(engine, RetrieverUnderTest)
    assert isinstance(memory, RetrieverUnderTest)


def test_connect_as_sees_exactly_the_permitted_rows(engine, data):
    days = [data.eval_date, dt.date(2026, 1, 1), dt.date(2027, 1, 1)]
    for caller in data.callers:
        for day in days:
            want = sorted(c.chunk_id for c in labsrc.permitted_chunks(caller, data.chunks, day))
            with engine.connect_as(caller, day) as conn:
                got = sorted(row[0] for row in conn.execute("SELECT chunk_id FROM lab_chunks"))
                posted = {row[0] for row in conn.execute("SELECT DISTINCT chunk_id FROM lab_postings")}
            assert got == want, (caller.actor_id, day)
            assert posted <= set(want)
            assert [c.chunk_id for c in engine.universe(caller, day)] == want


def test_the_reader_role_is_neither_owner_nor_superuser_nor_bypassrls(engine, data):
    with engine.connect_as(data.luna, data.eval_date) as conn:
        user, superuser, bypass = conn.execute(
            "SELECT current_user, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        owners = {row[0] for row in conn.execute(
            "SELECT tableowner FROM pg_tables WHERE tablename IN ('lab_chunks', 'lab_postings') AND schemaname = current_schema()"
        )}  # fmt: skip
        forced = conn.execute(
            "SELECT bool_and(relrowsecurity AND relforcerowsecurity) FROM pg_class "
            "WHERE relname IN ('lab_chunks', 'lab_postings') AND relnamespace = current_schema()::regnamespace"
        ).fetchone()[0]
    assert user == engine.store.role
    assert (superuser, bypass) == (False, False)
    assert len(owners) == 1 and user not in owners
    assert forced is True


def test_hand_written_sql_cannot_read_a_hidden_row(engine, data):
    hidden = sorted(
        c.chunk_id for c in data.chunks if c not in labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date)
    )
    assert hidden  # the lesson has restricted, superseded and wrong-region chunks for Luna
    with engine.connect_as(data.luna, data.eval_date) as conn:
        by_id = conn.execute("SELECT chunk_id FROM lab_chunks WHERE chunk_id = ANY (%s)", (hidden,)).fetchall()
        postings = conn.execute("SELECT count(*) FROM lab_postings WHERE chunk_id = ANY (%s)", (hidden,)).fetchone()
        # Even a query that names no table column in WHERE, or joins the tables, is filtered.
        joined = conn.execute(
            "SELECT count(*) FROM lab_postings p JOIN lab_chunks c USING (chunk_id) WHERE c.chunk_id = ANY (%s)", (hidden,)
        ).fetchone()
    assert by_id == [] and postings == (0,) and joined == (0,)


@pytest.mark.parametrize(
    "statement",
    [
        "SET row_security = off",  # is accepted, but then any query on an RLS table errors instead of bypassing
        "ALTER TABLE lab_chunks DISABLE ROW LEVEL SECURITY",
        "DROP POLICY lab_boundary ON lab_chunks",
        "DELETE FROM lab_chunks",
        "SET ROLE postgres",
    ],
)
def test_the_reader_role_cannot_switch_the_boundary_off(engine, data, statement):
    import psycopg

    conn = engine.connect_as(data.luna, data.eval_date)
    try:
        with pytest.raises(psycopg.Error):
            conn.execute(statement)
            conn.execute("SELECT chunk_id FROM lab_chunks")
    finally:
        conn.close()


@pytest.mark.parametrize(
    "statement, refusal",
    [
        ("ALTER TABLE lab_chunks DISABLE ROW LEVEL SECURITY", "must be owner"),
        ("DROP POLICY lab_boundary ON lab_postings", "must be owner"),
        ("DELETE FROM lab_postings", "permission denied"),
        ("INSERT INTO lab_chunks (chunk_id) VALUES ('x')", "permission denied"),
        ("SET ROLE postgres", "permission denied"),
    ],
)
def test_even_a_read_write_transaction_of_the_role_cannot(engine, data, statement, refusal):
    # Requests are read-only transactions; the guarantee underneath is the role's privileges.
    import psycopg

    conn = engine.connect_as(data.luna, data.eval_date)
    try:
        conn.rollback()
        conn.read_only = False
        with pytest.raises(psycopg.Error, match=refusal):
            conn.execute(statement)
    finally:
        conn.close()


def test_a_session_that_never_authorized_sees_nothing(engine, data):
    conn = engine.connect_as(data.luna, data.eval_date)
    try:
        conn.rollback()  # the SET LOCAL settings end with the transaction
        assert conn.execute("SELECT count(*) FROM lab_chunks").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM lab_postings").fetchone() == (0,)
    finally:
        conn.close()


def test_bm25_statistics_are_the_callers_own(engine, data):
    from labsrc.engines import bm25_statistics
    from labsrc.lanes import BM25Index

    universe = labsrc.permitted_chunks(data.luna, data.chunks, data.eval_date)
    index = BM25Index.build((c.chunk_id, c.text) for c in universe)
    with engine.connect_as(data.luna, data.eval_date) as conn:
        stats = bm25_statistics(conn, ["refund", "rpl-14", "unseen"])
    assert stats.n_docs == index.n_docs == len(universe)
    assert stats.avgdl == index.avgdl
    assert stats.df == {t: index.df(t) for t in ("refund", "rpl-14") if index.df(t)}


def test_release_gate_with_the_engine_matches_memory(engine, memory, data):
    import dataclasses

    from labsrc.evaluation.budgets import engine_budgets

    config = labsrc.load_gate_config(labsrc.datasets.fixtures_dir() / "lesson" / "gate.json")
    ran = {}
    for name, retriever in (("memory", memory), ("postgres", engine)):
        budgets = {key: dict(engine_budgets(getattr(config, key), name)) for key in ("p50_budget_ms", "p95_budget_ms")}
        engine_config = dataclasses.replace(config, **budgets)  # as `labsrc gate --engine` applies them
        ran[name] = labsrc.release_gate(retriever, data.cases, data.callers_by_id, engine_config, on_date=data.eval_date)
    assert ran["postgres"].recall == ran["memory"].recall
    assert [(g.name, g.passed, g.failing_cases) for g in ran["postgres"].gates if not g.name.startswith("latency")] == [
        (g.name, g.passed, g.failing_cases) for g in ran["memory"].gates if not g.name.startswith("latency")
    ]
    exclusion = [g for g in ran["postgres"].gates if "exclu" in g.name or "restricted" in g.name]
    assert exclusion and all(g.passed for g in exclusion)
    # Every gate but latency passes on both. Latency is not compared: a p95 over the lesson's seven cases
    # under a loaded CI machine says nothing about the engine matching memory (it failed once so, alone it passes).
    assert [g.name for g in ran["postgres"].failed_gates if not g.name.startswith("latency")] == []


def test_hnsw_view_shares_the_store_and_never_returns_more_than_k(engine, data):
    approx = engine.with_dense("hnsw", ef_search=10, iterative_scan="relaxed_order")
    assert approx.store is engine.store
    for case in data.cases:
        caller, day = data.callers_by_id[case.caller], case.on_date or data.eval_date
        result = approx.search(case.query, caller, day, 3)
        permitted = {c.chunk_id for c in labsrc.permitted_chunks(caller, data.chunks, day)}
        assert len(result.dense) <= 3 and {c.chunk_id for c, _ in result.dense} <= permitted
    assert approx.search("RPL-14", data.luna, data.eval_date).trace.versions["dense_index"].startswith("hnsw(m=16")
    approx.close()  # a view closes nothing
    assert not engine.store.closed


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dense_index": "ivfflat"}, "dense_index must be one of"),
        ({"dense_index": "hnsw", "ef_search": 0}, "ef_search must be an int"),
        ({"dense_index": "hnsw", "iterative_scan": "sometimes"}, "iterative_scan must be one of"),
        ({"ef_search": 40}, "apply to dense_index='hnsw' only"),
        ({"rrf_k": -1}, "rrf_k"),
    ],
)
def test_bad_settings_are_refused_before_any_server_starts(data, kwargs, message):
    with pytest.raises(labsrc.InvalidArgument, match=message):
        PostgresRetriever(data.chunks, data.vectors, **kwargs)


def test_bad_requests_are_refused(engine, data):
    with pytest.raises(labsrc.InvalidArgument, match="top_k"):
        engine.search("refund", data.luna, data.eval_date, 0)
    with pytest.raises(labsrc.InvalidArgument, match="datetime.date"):
        engine.search("refund", data.luna, dt.datetime(2026, 5, 27), 2)
    with pytest.raises(labsrc.InvalidArgument, match="Caller"):
        engine.search("refund", "luna", data.eval_date, 2)
    # The connection is still usable after a refused request.
    assert engine.search("RPL-14", data.luna, data.eval_date, 2).fused


def test_blank_query_returns_nothing(engine, data):
    for query in ("", "   "):
        result = engine.search(query, data.luna, data.eval_date, 2)
        assert (result.sparse, result.dense, result.fused) == ((), (), ())


def test_an_unreachable_dsn_is_a_clear_error(data, tmp_path):
    with pytest.raises(labsrc.InvalidArgument, match="cannot connect to PostgreSQL"):
        PostgresRetriever(data.chunks, data.vectors, dsn=f"postgresql://nobody@/postgres?host={tmp_path}&connect_timeout=2")


def test_close_drops_the_schema_and_the_role(server, data):
    import psycopg

    retriever = PostgresRetriever(data.chunks, data.vectors, dsn=server.dsn)
    schema, role = retriever.store.schema, retriever.store.role
    retriever.close()
    retriever.close()  # idempotent
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (0,)


def test_bm25_adds_term_by_term_in_query_order_through_a_hash_aggregate(engine, data):
    from labsrc.engines import SCORE_SETTINGS, lanes_sql, sparse_lane

    terms = engine.analyzer("refund refund damaged laptop policy refund")
    with engine.connect_as(data.luna, data.eval_date) as conn:
        before = conn.execute("SELECT current_setting('enable_sort'), current_setting('max_parallel_workers_per_gather')").fetchone()
        ranked, stats = sparse_lane(conn, terms, 5, k1=engine.k1, b=engine.b)
        after = conn.execute("SELECT current_setting('enable_sort'), current_setting('max_parallel_workers_per_gather')").fetchone()
        assert after == before == ("on", "2")  # the scoring statement's settings do not outlive it
        for name, value in SCORE_SETTINGS.items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        kept = [t for t in terms if stats.df.get(t, 0) > 0]
        params = {"terms": kept, "idf": [1.0] * len(kept), "k1p1": 2.2, "k1": 1.2, "omb": 0.25, "b": 0.75,
                  "avgdl": stats.avgdl, "top_k": 5}  # fmt: skip
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN (COSTS OFF) " + lanes_sql._SCORE_SQL, params))
    assert ranked and kept.count("refund") == 3
    # The postings arrive term by term (the unnested query terms drive the loop) and are summed as they arrive:
    # no sort between them regroups a chunk's contributions out of query-term order.
    assert "HashAggregate" in plan and "Nested Loop" in plan and "Function Scan on q" in plan
    assert "GroupAggregate" not in plan and "Gather" not in plan
    assert plan.index("HashAggregate") < plan.index("Nested Loop") < plan.index("Function Scan on q")


def test_a_request_waits_for_the_server_once_per_result_it_needs(engine, memory, data, tmp_path):
    from contextlib import contextmanager

    from psycopg import pq

    case = next(
        c for c in data.cases
        if (r := memory.search(c.query, data.callers_by_id[c.caller], c.on_date or data.eval_date, 3)).sparse and r.dense
    )  # fmt: skip
    caller, day = data.callers_by_id[case.caller], case.on_date or data.eval_date
    for view in (engine, engine.with_dense("hnsw")):
        original, trace = view.store.request, tmp_path / f"{view.dense_index}.trace"

        @contextmanager
        def traced(*args, _original=original, _trace=trace, **kwargs):  # libpq's protocol trace of the lanes' statements
            with _trace.open("wb") as out, _original(*args, **kwargs) as conn:
                conn.pgconn.trace(out.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
                try:
                    yield conn
                finally:
                    conn.pgconn.untrace()

        view.store.request = traced
        try:
            result = view.search(case.query, caller, day, 3)
        finally:
            del view.store.request
        sent = [line.split("\t")[2] for line in trace.read_text(errors="replace").splitlines() if line.startswith("F\t")]
        waits = sum(kind in ("Flush", "Sync") for kind in sent)
        assert result.sparse and result.dense
        # Pipelined: the statistics; the settings with the scores; the restore with the dense lane (its HNSW
        # settings too). One statement at a time, the same request waited 5 times (exact) or 6 (HNSW).
        assert sent.count("Execute") >= 5 and waits == 3, (view.dense_index, sent)


def test_hnsw_mode_walks_the_graph_rather_than_sorting_the_callers_rows(engine, data):
    from labsrc.engines import hnsw_settings, lanes_sql, vector_literal

    engine.with_dense("hnsw")  # builds the index
    query = vector_literal(data.vectors.query_vector("damaged laptop refund"))
    with engine.connect_as(data.luna, data.eval_date) as conn:
        # The planner expects a handful of visible rows (the policy hides its values), so by itself it reads
        # them all through the boundary index and sorts them: an exact scan, four times slower at 100k chunks.
        conn.execute("SELECT set_config('enable_seqscan', 'off', true)")
        alone = "\n".join(row[0] for row in conn.execute("EXPLAIN (COSTS OFF) " + lanes_sql._HNSW_SQL, {"q": query, "top_k": 4}))
        for name, value in hnsw_settings(200, "relaxed_order").items():
            conn.execute("SELECT set_config(%s, %s, true)", (name, value))
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN (COSTS OFF) " + lanes_sql._HNSW_SQL, {"q": query, "top_k": 4}))
    assert "lab_vectors_boundary" in alone and "Sort" in alone
    assert "Index Scan using lab_vectors_embedding_hnsw" in plan and "Sort" not in plan
