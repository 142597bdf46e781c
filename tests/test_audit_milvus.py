"""Milvus Lite's hybrid search as an audit subject: a filter inside the search, BM25 statistics per segment.

The gate runs in a fresh interpreter, so its forked workers never inherit this
process's gRPC threads.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "outside"))
from fresh_audit import audit_in_fresh_interpreter  # noqa: E402

from optional import require  # noqa: E402

require("pymilvus", "milvus_lite")

import labsrc
from labsrc.audit import AuditRow
from factories import make_chunk
from labsrc.audit.milvus_hybrid import COLLECTION, MilvusHybrid, boundary_expr
from labsrc.lanes.dense import FixtureVectors

DAY = dt.date(2026, 5, 27)
LUNA = labsrc.Caller("luna", "EU", frozenset({"support:eu"}))
PERMITTED = make_chunk("eu-laptop", "refund window for a damaged laptop")
OTHER = make_chunk("eu-shoes", "returns of worn shoes")
HIDDEN = [make_chunk(f"us-laptop-{i}", f"laptop laptop battery note {i}", region="US", acl_tag="support:us") for i in range(4)]

@pytest.fixture(scope="module")
def verdicts() -> AuditRow:
    return audit_in_fresh_interpreter("milvus-hybrid")


def test_the_gate_on_the_lesson(verdicts) -> None:
    # Filtered inside the search: nothing hidden returned, and the lesson's hidden chunks
    # (flushed in the same segment) move BM25 scores but no rank; four bait chunks do move one.
    expected = {"recall": "PASS", "exclusion": "PASS", "boundary on every returned id": "PASS",
                "noninterference by rebuild": "PASS", "noninterference by bait": "FAIL"}
    assert {name: verdicts.statuses[name] for name in expected} == expected
    assert verdicts.why["noninterference by bait"] == (
        "case 'shared-language': hybrid: missing ['eu-carrier-loss-v1'], extra ['eu-footwear-v1-rule']")
    assert {verdicts.statuses[n] for n in ("factory indexes what it is handed", "repeatable builds",
                                            "same answers under concurrent requests")} == {"PASS"}
    assert verdicts.exit_code == 1


def _bm25(built: MilvusHybrid, query: str, caller: labsrc.Caller, on_date: dt.date) -> dict[str, float]:
    hits = built.client.search(COLLECTION, data=[query], anns_field="sparse", limit=5,
                               filter=boundary_expr(caller, on_date), output_fields=["id"])[0]
    return {h["id"]: -h["distance"] for h in hits}  # Lite returns BM25 as a negated distance


def test_bm25_statistics_are_the_segments() -> None:
    alone = MilvusHybrid([PERMITTED, OTHER], None)
    together = MilvusHybrid([PERMITTED, OTHER, *HIDDEN], None)
    try:
        before = _bm25(alone, "laptop", LUNA, DAY)
        same_segment = _bm25(together, "laptop", LUNA, DAY)
        alone.add(HIDDEN)  # flushed later: a segment of their own
        later_segment = _bm25(alone, "laptop", LUNA, DAY)
        stored = alone.client.query(COLLECTION, filter='region == "US"', output_fields=["id"])
    finally:
        alone.close()
        together.close()
    assert list(before) == list(same_segment) == list(later_segment) == ["eu-laptop"]  # the filter holds
    assert before["eu-laptop"] == pytest.approx(0.6359, abs=1e-3)
    assert same_segment["eu-laptop"] == pytest.approx(0.2212, abs=1e-3)
    assert later_segment["eu-laptop"] == pytest.approx(before["eu-laptop"], abs=1e-6)
    assert sorted(r["id"] for r in stored) == [c.chunk_id for c in HIDDEN]


def test_the_lesson_code_scores_lower_beside_hidden_chunks(data: labsrc.Lesson, permitted) -> None:
    def score(chunks) -> float:
        built = MilvusHybrid(chunks, data.vectors)
        try:
            return _bm25(built, "RPL-14", data.luna, data.eval_date)["eu-refurb-v2-rule"]
        finally:
            built.close()

    assert score(data.chunks) == pytest.approx(1.4555, abs=1e-3)
    assert score(permitted) == pytest.approx(2.0300, abs=1e-3)


def test_only_permitted_ids_when_the_nearest_are_hidden() -> None:
    permitted = [make_chunk(f"eu-note-{i}", f"refund policy note {i}") for i in range(5)]
    hidden = [make_chunk(f"us-hit-{i}", f"refund refund laptop {i}", region="US", acl_tag="support:us") for i in range(10)]
    docs = {c.chunk_id: [0.0, 1.0, 0.0] for c in permitted} | {c.chunk_id: [1.0, 0.0, 0.0] for c in hidden}
    built = MilvusHybrid(permitted + hidden, FixtureVectors(docs, {"refund laptop": [1.0, 0.0, 0.0]}))
    try:
        hits = built.search("refund laptop", LUNA, DAY, 5)
        unfiltered = built.client.search(COLLECTION, data=[[1.0, 0.0, 0.0]], anns_field="dense", limit=5, output_fields=["id"])[0]
    finally:
        built.close()
    assert sorted(i for i, _ in hits) == [c.chunk_id for c in permitted]
    assert {h["id"] for h in unfiltered} <= {c.chunk_id for c in hidden}  # the nearest five are all hidden


def test_answers_pairs_best_first_and_handles_blank_and_empty(data: labsrc.Lesson) -> None:
    built = MilvusHybrid(data.chunks, data.vectors)
    try:
        hits = built.search("damaged refurbished laptop replacement after delivery", data.luna, data.eval_date, 2)
        assert len(hits) == 2 and all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
        assert hits == sorted(hits, key=lambda p: (-p[1], p[0]))
        assert built.search("   ", data.luna, data.eval_date, 2) == []
        assert "milvus-lite 3." in built.versions(data.eval_date)["retriever"]
    finally:
        built.close()
    empty = MilvusHybrid((), None)
    assert empty.search("anything", data.luna, data.eval_date, 2) == [] and empty.client is None
    empty.close()


def _children() -> set[int]:
    me, found = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                found.add(int(entry.name))
    return found


def test_close_stops_the_server_and_leaves_nothing_on_disk(data: labsrc.Lesson, tmp_path, monkeypatch) -> None:
    from milvus_lite.server_manager import server_manager_instance

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    threads, children = set(threading.enumerate()), _children()
    started = time.perf_counter()
    built = MilvusHybrid(data.chunks, data.vectors)
    build_s = time.perf_counter() - started
    path = built.path
    assert path.startswith(str(tmp_path)) and os.path.abspath(path) in server_manager_instance._servers
    assert set(threading.enumerate()) - threads  # the Lite server runs on threads of this process
    built.close()
    built.close()  # twice is fine
    deadline = time.monotonic() + 5
    while {t for t in threading.enumerate() if t.is_alive()} - threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {t.name for t in threading.enumerate() if t.is_alive()} - {t.name for t in threads} == set()
    assert os.path.abspath(path) not in server_manager_instance._servers
    assert _children() <= children
    assert list(tmp_path.iterdir()) == []
    assert build_s < 30


def test_sixteen_threads_get_the_answers_one_gets(data: labsrc.Lesson) -> None:
    built = MilvusHybrid(data.chunks, data.vectors)
    try:
        asks = [(c.query, data.callers_by_id[c.caller]) for c in data.cases] * 4
        alone = [built.search(q, who, data.eval_date, 2) for q, who in asks]
        with ThreadPoolExecutor(16) as pool:
            together = list(pool.map(lambda a: built.search(a[0], a[1], data.eval_date, 2), asks))
    finally:
        built.close()
    assert any(alone) and together == alone
