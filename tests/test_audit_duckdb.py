"""DuckDB (fts + vss, fused with the lab's RRF) through the gate, and the two behaviours behind its verdicts.

The subject is not registered in :data:`labsrc.audit.SUBJECTS`, so these tests
call :func:`labsrc.gate.gate_retriever` directly with the class as the factory.
Each pins a number measured with duckdb 1.5.5; see ``labsrc/audit/duckdb_hybrid.py``.
"""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("duckdb_extension_fts")
pytest.importorskip("duckdb_extension_vss")

import labsrc  # noqa: E402
from labsrc.audit import load_dataset  # noqa: E402
from labsrc.audit.duckdb_hybrid import DuckDBHybrid  # noqa: E402
from labsrc.datasets.lesson import fixtures_dir  # noqa: E402
from labsrc.gate import gate_retriever  # noqa: E402
from labsrc.lanes.dense import FixtureVectors  # noqa: E402
from labsrc.records.policy import Caller, PolicyChunk  # noqa: E402

DAY = dt.date(2026, 1, 1)
ME = Caller("me", "EU", frozenset({"open"}))


def _chunk(chunk_id: str, text: str, tag: str) -> PolicyChunk:
    return PolicyChunk(chunk_id, chunk_id, chunk_id, "v1", "EU", tag, dt.date(2025, 1, 1), None, text)


@pytest.fixture
def built():
    """``built(chunks, vectors)``: a DuckDBHybrid closed when the test ends."""
    made = []

    def make(chunks, vectors):
        made.append(DuckDBHybrid(chunks, vectors))
        return made[-1]

    yield make
    for m in made:
        m.close()


def _fused(result: labsrc.RetrievalResult) -> list[tuple[str, float]]:
    """The fused list as ``(chunk_id, score)`` pairs (``search`` returns both lanes and their fusion)."""
    return [(c.chunk_id, s) for c, s in result.fused]


@pytest.fixture(scope="module")
def gates():
    data = load_dataset("lesson", fixtures_dir() / "lesson")
    run = gate_retriever(DuckDBHybrid, data.chunks, data.callers, data.cases, data.vectors, data.config,
                         measure=False, label="duckdb-hybrid")
    return {g.name: g for g in run.gates}


def test_answers_pairs_best_first_and_handles_blank_queries_and_an_empty_corpus(built, data: labsrc.Lesson) -> None:
    subject = built(data.chunks, data.vectors)
    hits = _fused(subject.search("damaged refurbished laptop replacement after delivery", data.luna, data.eval_date, 2))
    assert [i for i, _ in hits] == ["eu-refurb-v2-rule", "eu-footwear-v1-rule"]
    assert all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
    assert hits == sorted(hits, key=lambda p: (-p[1], p[0]))
    assert _fused(subject.search("   ", data.luna, data.eval_date, 2)) == []
    assert _fused(built((), None).search("anything", data.luna, data.eval_date, 2)) == []
    assert subject.versions(data.eval_date)["retriever"].startswith(f"duckdb {duckdb.__version__} fts match_bm25 + vss hnsw")


def test_close_releases_the_connection(data: labsrc.Lesson) -> None:
    subject = DuckDBHybrid(data.chunks, data.vectors)
    subject.close()
    with pytest.raises(duckdb.Error):
        subject.con.execute("SELECT 1")


def test_bm25_statistics_come_from_every_stored_chunk_on_the_lesson(built, data: labsrc.Lesson, permitted) -> None:
    full, own = built(data.chunks, data.vectors), built(permitted, data.vectors)
    lane = {name: s.bm25(s.con.cursor(), "RPL-14", data.luna, data.eval_date, 2) for name, s in (("full", full), ("own", own))}
    assert [i for i, _ in lane["full"]] == [i for i, _ in lane["own"]] == ["eu-refurb-v2-rule"]
    assert round(lane["full"][0][1], 4) == 0.1943 and round(lane["own"][0][1], 4) == 0.3610
    # The subject returns RRF sums, which read ranks only: the fused answer is the same.
    assert _fused(full.search("RPL-14", data.luna, data.eval_date, 2)) == _fused(own.search("RPL-14", data.luna, data.eval_date, 2))


def test_hidden_documents_change_a_permitted_score_and_can_reorder_the_answer(built) -> None:
    a, b = _chunk("a", "alpha filler", "open"), _chunk("b", "beta filler words", "open")
    hidden = [_chunk(f"x{i}", "alpha", "secret") for i in range(5)]
    no_query_vectors = FixtureVectors({"unused": [1.0, 0.0]}, {})  # the dense lane is empty: BM25 alone
    alone, crowded = built([a, b], no_query_vectors), built([a, b, *hidden], no_query_vectors)
    lane = lambda s: dict(s.bm25(s.con.cursor(), "alpha beta", ME, DAY, 2))  # noqa: E731
    assert round(lane(alone)["a"], 4) == 0.3279 and round(lane(crowded)["a"], 4) == 0.0775
    assert [i for i, _ in _fused(alone.search("alpha beta", ME, DAY, 2))] == ["a", "b"]
    assert [i for i, _ in _fused(crowded.search("alpha beta", ME, DAY, 2))] == ["b", "a"]


def test_hnsw_takes_the_nearest_k_then_the_where_drops_the_hidden_ones(built) -> None:
    hidden = [_chunk(f"h{i}", f"hidden {i}", "secret") for i in range(5)]
    shown = [_chunk(f"p{i}", f"shown {i}", "open") for i in range(5)]
    vectors = FixtureVectors({**{c.chunk_id: [1.0, 0.01 * i, 0.0] for i, c in enumerate(hidden)},
                              **{c.chunk_id: [0.5, 1.0, 0.1 * i] for i, c in enumerate(shown)}}, {"q": [1.0, 0.0, 0.0]})
    subject = built(hidden + shown, vectors)
    cursor = subject.con.cursor()
    sql, params = subject.dense_sql(ME, DAY)
    plan = cursor.execute("EXPLAIN " + sql, {**params, "vector": [1.0, 0.0, 0.0], "k": 5}).fetchall()[0][1]
    assert "HNSW_INDEX_SCAN" in plan
    assert subject.dense(cursor, "q", ME, DAY, 5) == []
    assert _fused(subject.search("q", ME, DAY, 5)) == []
    # The same SQL without the index, and the index over the permitted chunks only, both find all five.
    assert [i for i, _ in _fused(built(shown, vectors).search("q", ME, DAY, 5))] == ["p0", "p1", "p2", "p3", "p4"]
    cursor.execute("DROP INDEX chunks_vec")
    assert [i for i, _ in subject.dense(cursor, "q", ME, DAY, 5)] == ["p0", "p1", "p2", "p3", "p4"]


def test_sixteen_threads_get_the_answers_each_gets_alone(built, data: labsrc.Lesson) -> None:
    subject = built(data.chunks, data.vectors)
    callers = {c.actor_id: c for c in labsrc.load_callers(fixtures_dir() / "lesson" / "callers.json")}
    cases = [(case.query, callers[case.caller]) for case in labsrc.load_cases(fixtures_dir() / "lesson" / "cases.jsonl")]
    alone = [_fused(subject.search(q, c, data.eval_date, 2)) for q, c in cases]
    assert any(alone) and not all(alone)
    start = threading.Barrier(16)

    def ask(i: int) -> list[list[tuple[str, float]]]:
        start.wait()
        return [_fused(subject.search(q, c, data.eval_date, 2)) for q, c in cases[i % len(cases):] + cases[:i % len(cases)]]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(16)))
    for i, got in enumerate(answers):
        shift = i % len(cases)
        assert got == alone[shift:] + alone[:shift]


def test_gate_boundary_recall_exclusion_and_rebuild_pass_on_the_lesson(gates) -> None:
    names = ("recall@2 hybrid", "restricted exclusion", "superseded exclusion", "wrong_region exclusion", "abstention",
             "boundary on every returned id", "factory indexes what it is handed", "repeatable builds",
             "same answers under concurrent requests", "recall@2 bm25", "recall@2 dense")
    assert {n: (gates[n].passed, gates[n].tested) for n in names} == dict.fromkeys(names, (True, True))


def test_gate_rebuild_fails_on_the_bm25_lane_whose_statistics_are_the_whole_tables(gates) -> None:
    # Luna's eu-refurb-v2-rule: 0.3610 over her permitted chunks, 0.1943 over every stored chunk.
    rebuild = gates["noninterference by rebuild"]
    assert rebuild.tested and not rebuild.passed
    first = rebuild.findings[0]
    assert first.startswith("case 'exact-code': bm25: scores differ by up to ")
    assert float(first.rsplit(" ", 1)[1]) == pytest.approx(0.3610 - 0.1943, abs=1e-4)
    assert all(": bm25: " in f and "dense" not in f and "hybrid" not in f for f in rebuild.findings)


def test_gate_bait_fails_because_hnsw_loses_the_paraphrase_to_hidden_neighbours(gates) -> None:
    bait = gates["noninterference by bait"]
    assert bait.tested and not bait.passed
    assert ("case 'paraphrase': dense: missing ['eu-refurb-v2-rule', 'eu-footwear-v1-rule'] (a short list); "
            "hybrid: missing ['eu-refurb-v2-rule', 'eu-footwear-v1-rule'] (a short list)") in bait.findings
