"""LanceDB's hybrid search as an audit subject: what its pre-filter keeps out, and what it does not.

The gate runs in a fresh interpreter: a process that has already run LanceDB
cannot safely fork the gate's workers (a forked build segfaulted).
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "outside"))
from fresh_audit import audit_in_fresh_interpreter  # noqa: E402

from optional import require  # noqa: E402

require("lancedb")

import labsrc
from labsrc.audit import AuditRow
from factories import make_chunk
from labsrc.audit.lancedb_hybrid import LanceDBHybrid, boundary_where
from labsrc.lanes.dense import FixtureVectors

DAY = dt.date(2026, 5, 27)
LUNA = labsrc.Caller("luna", "EU", frozenset({"support:eu"}))
PERMITTED = make_chunk("eu-laptop", "refund window for a damaged laptop")
OTHER = make_chunk("eu-shoes", "returns of worn shoes")
HIDDEN = [make_chunk(f"us-laptop-{i}", f"laptop laptop battery note {i}", region="US", acl_tag="support:us") for i in range(4)]

@pytest.fixture(scope="module")
def verdicts() -> AuditRow:
    return audit_in_fresh_interpreter("lancedb-hybrid")


def test_the_gate_on_the_lesson(verdicts) -> None:
    # Pre-filtered: nothing hidden comes back, and bait does not shorten a list; but the
    # full-text statistics are the whole table's, so hidden chunks reorder a permitted list.
    expected = {"recall": "PASS", "exclusion": "PASS", "boundary on every returned id": "PASS",
                "noninterference by rebuild": "FAIL", "noninterference by bait": "PASS"}
    assert {name: verdicts.statuses[name] for name in expected} == expected
    assert verdicts.why["noninterference by rebuild"].startswith("case 'superseded-wording': hybrid: order differs")
    assert {verdicts.statuses[n] for n in ("factory indexes what it is handed", "repeatable builds",
                                            "same answers under concurrent requests")} == {"PASS"}
    assert verdicts.exit_code == 1


def _text_scores(chunks: list[labsrc.PolicyChunk], query: str) -> dict[str, float]:
    built = LanceDBHybrid(chunks, None)
    try:
        found = built.table.search(query, query_type="fts").where(boundary_where(LUNA, DAY), prefilter=True).limit(5).to_arrow()
        return dict(zip(found["chunk_id"].to_pylist(), found["_score"].to_pylist()))
    finally:
        built.close()


def test_full_text_statistics_are_the_whole_tables() -> None:
    alone = _text_scores([PERMITTED, OTHER], "laptop")
    beside_hidden = _text_scores([PERMITTED, OTHER, *HIDDEN], "laptop")
    assert list(alone) == list(beside_hidden) == ["eu-laptop"]  # the filter holds
    assert alone["eu-laptop"] == pytest.approx(0.6549, abs=1e-3)
    assert beside_hidden["eu-laptop"] == pytest.approx(0.2526, abs=1e-3)  # moved by rows the caller cannot see


def test_the_lesson_code_scores_lower_beside_hidden_chunks(data: labsrc.Lesson, permitted) -> None:
    def score(chunks) -> float:
        built = LanceDBHybrid(chunks, data.vectors)
        try:
            found = built.table.search("RPL-14", query_type="fts").where(
                boundary_where(data.luna, data.eval_date)).limit(2).to_arrow()
            return dict(zip(found["chunk_id"].to_pylist(), found["_score"].to_pylist()))["eu-refurb-v2-rule"]
        finally:
            built.close()

    assert score(data.chunks) == pytest.approx(1.4729, abs=1e-3)
    assert score(permitted) == pytest.approx(1.9966, abs=1e-3)


def _outranked() -> tuple[list[labsrc.PolicyChunk], FixtureVectors]:
    """Five permitted chunks, and ten hidden ones nearer the query in both lanes."""
    permitted = [make_chunk(f"eu-note-{i}", f"refund policy note {i}") for i in range(5)]
    hidden = [make_chunk(f"us-hit-{i}", f"refund refund laptop {i}", region="US", acl_tag="support:us") for i in range(10)]
    docs = {c.chunk_id: [0.0, 1.0, 0.0] for c in permitted} | {c.chunk_id: [1.0, 0.0, 0.0] for c in hidden}
    return permitted + hidden, FixtureVectors(docs, {"refund laptop": [1.0, 0.0, 0.0]})


def test_prefilter_keeps_only_permitted_ids_when_the_nearest_are_hidden() -> None:
    chunks, vectors = _outranked()
    built = LanceDBHybrid(chunks, vectors)
    try:
        hits = built.search("refund laptop", LUNA, DAY, 5)
    finally:
        built.close()
    assert sorted(i for i, _ in hits) == [f"eu-note-{i}" for i in range(5)]


def test_post_filtering_loses_every_row() -> None:
    chunks, vectors = _outranked()
    built = LanceDBHybrid(chunks, vectors, prefilter=False)
    try:
        assert built.search("refund laptop", LUNA, DAY, 5) == []  # 0 of 5: each leg's 5 were hidden
        assert "prefilter=False" in built.versions(DAY)["config"]
    finally:
        built.close()


def test_answers_pairs_best_first_and_handles_blank_and_empty(data: labsrc.Lesson) -> None:
    built = LanceDBHybrid(data.chunks, data.vectors)
    try:
        hits = built.search("damaged refurbished laptop replacement after delivery", data.luna, data.eval_date, 2)
        assert len(hits) == 2 and all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
        assert hits == sorted(hits, key=lambda p: (-p[1], p[0]))
        assert built.search("   ", data.luna, data.eval_date, 2) == []
        assert built.versions(data.eval_date)["retriever"].startswith("lancedb 0.")
    finally:
        built.close()
    empty = LanceDBHybrid((), None)
    assert empty.search("anything", data.luna, data.eval_date, 2) == []
    empty.close()


def test_close_leaves_nothing_on_disk(data: labsrc.Lesson, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    built = LanceDBHybrid(data.chunks, data.vectors)
    assert [p.name for p in tmp_path.iterdir()] and built.directory.startswith(str(tmp_path))
    built.close()
    built.close()  # twice is fine
    assert list(tmp_path.iterdir()) == []


def test_sixteen_threads_get_the_answers_one_gets(data: labsrc.Lesson) -> None:
    built = LanceDBHybrid(data.chunks, data.vectors)
    try:
        asks = [(c.query, data.callers_by_id[c.caller]) for c in data.cases] * 4
        alone = [built.search(q, who, data.eval_date, 2) for q, who in asks]
        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda a: built.search(a[0], a[1], data.eval_date, 2), asks))
    finally:
        built.close()
    assert any(alone) and together == alone


def test_the_post_filter_subject_loses_permitted_rows_to_hidden_ones() -> None:
    # where(..., prefilter=False): each leg takes its limit of the whole table, then the filter drops
    # the hidden rows, so a build holding them answers with a short list.
    row = audit_in_fresh_interpreter("lancedb-postfilter", "policies")
    assert row.statuses["boundary on every returned id"] == "PASS"
    assert row.statuses["noninterference by rebuild"] == row.statuses["noninterference by bait"] == "FAIL"
    assert row.why["noninterference by rebuild"] == "case 'eu-exact-rpl14': hybrid: missing ['eu-refurb-tablet-rule'] (a short list)"
