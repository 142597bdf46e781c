"""The LlamaIndex subject: BM25Retriever's ``filters`` are a score mask, not a filter.

Pins what :mod:`labsrc.audit.llamaindex_bm25` measured: filtered-out nodes come
back with score 0 whenever the permitted ones do not fill the top k (hidden ids
included, through the fusion), BM25's statistics count hidden nodes, the vector
store filters before ranking, and the gate fails it on the lesson.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest

from optional import require  # noqa: E402

require("llama_index.retrievers.bm25", "llama_index.core")

import labsrc  # noqa: E402
from labsrc.audit.llamaindex_bm25 import LlamaIndexHybrid, _imports  # noqa: E402
from labsrc.audit import audit_row  # noqa: E402
from labsrc.gate import gate_retriever  # noqa: E402
from factories import make_chunk  # noqa: E402

DAY = dt.date(2026, 5, 1)
EU = labsrc.Caller("agent-1", "EU", frozenset({"support:eu"}))
A = make_chunk("a-refund", "Refund window for damaged laptops is fourteen days.")
B = make_chunk("b-boots", "Boots ship within three days.")
C = make_chunk("c-gift", "Gift cards never expire.")
OLD = make_chunk("h-old", "Refund window for damaged laptops was thirty days.", effective_to=dt.date(2026, 3, 31))
US = make_chunk("h-us", "Refund refund refund: merchant refund codes.", region="US")
VISIBLE = (A, B, C)
HIDDEN = {"h-old", "h-us"}
GATES = ("recall", "exclusion", "boundary on every returned id", "noninterference by rebuild",
         "noninterference by bait")


def _bm25(subject: LlamaIndexHybrid, query: str, top_k: int) -> list[tuple[str, float]]:
    """The BM25 lane alone, built exactly as the subject builds it for ``EU`` on ``DAY``."""
    retriever = subject._li["BM25Retriever"].from_defaults(nodes=subject.nodes, similarity_top_k=top_k,
                                                           filters=subject._filters(EU, DAY))
    return [(n.node.node_id, float(n.score)) for n in retriever.retrieve(query)]


@pytest.fixture(scope="module")
def lesson_row():
    data = labsrc.lesson()
    _imports()  # import LlamaIndex once here: the gate's forked workers then start without re-importing it
    run = gate_retriever(LlamaIndexHybrid, data.chunks, data.callers, data.cases, data.vectors, measure=False,
                         label="llamaindex-bm25")
    return run


def test_bm25_returns_filtered_out_nodes_with_score_zero() -> None:
    subject = LlamaIndexHybrid(VISIBLE + (OLD, US), None)
    hits = _bm25(subject, "refund laptops", 3)
    assert hits[0][0] == "a-refund" and hits[0][1] > 0
    assert {i for i, _ in hits[1:]} & HIDDEN and all(s == 0.0 for _, s in hits[1:])
    # No term matches: every slot is a score-0 node, and the first ones here are hidden.
    nothing = _bm25(subject, "zzz", 3)
    assert all(s == 0.0 for _, s in nothing) and {i for i, _ in nothing} & HIDDEN


def test_hidden_ids_reach_the_fused_list() -> None:
    subject = LlamaIndexHybrid(VISIBLE + (OLD, US), None)
    assert {i for i, _ in subject.search("refund laptops", EU, DAY, 3)} & HIDDEN
    assert not {i for i, _ in LlamaIndexHybrid(VISIBLE, None).search("refund laptops", EU, DAY, 3)} & HIDDEN


def test_bm25_statistics_count_hidden_nodes() -> None:
    alone = dict(_bm25(LlamaIndexHybrid(VISIBLE, None), "refund laptops", 1))["a-refund"]
    with_old = dict(_bm25(LlamaIndexHybrid(VISIBLE + (OLD,), None), "refund laptops", 1))["a-refund"]
    with_us = dict(_bm25(LlamaIndexHybrid(VISIBLE + (US,), None), "refund laptops", 1))["a-refund"]
    assert alone == pytest.approx(0.7199, abs=1e-4)
    assert with_old == pytest.approx(0.5210, abs=1e-4)  # a hidden chunk sharing both terms
    assert with_us == pytest.approx(0.7130, abs=1e-4)  # a hidden chunk sharing one term


def test_the_vector_store_filters_before_ranking() -> None:
    subject = LlamaIndexHybrid(VISIBLE + (OLD, US), None)
    dense = subject.index.as_retriever(similarity_top_k=5, filters=subject._filters(EU, DAY))
    ids = [n.node.node_id for n in dense.retrieve("refund window for damaged laptops was thirty days")]
    assert sorted(ids) == ["a-refund", "b-boots", "c-gift"]


def test_a_caller_who_sees_nothing_gets_only_what_bm25_leaks() -> None:
    # from_defaults raises when the mask is all zero: that lane is empty, and the vector store finds nothing.
    nobody = labsrc.Caller("x", "APAC", frozenset())
    assert LlamaIndexHybrid(VISIBLE + (OLD, US), None).search("refund", nobody, DAY, 3) == []


def test_answers_pairs_best_first_and_handles_an_empty_corpus(data: labsrc.Lesson) -> None:
    subject = LlamaIndexHybrid(data.chunks, data.vectors)
    hits = subject.search(data.cases[0].query, data.luna, data.eval_date, 2)
    assert 0 < len(hits) <= 2 and all(isinstance(i, str) and isinstance(s, float) for i, s in hits)
    assert hits == sorted(hits, key=lambda p: (-p[1], p[0]))
    assert subject.search("   ", data.luna, data.eval_date, 2) == []
    empty = LlamaIndexHybrid((), None)
    assert empty.search("anything", data.luna, data.eval_date, 2) == []
    assert "llama-index-retrievers-bm25 0.8.0" in subject.versions(data.eval_date)["retriever"]
    subject.close()
    empty.close()


def test_sixteen_threads_get_the_answers_one_gets(data: labsrc.Lesson) -> None:
    subject = LlamaIndexHybrid(data.chunks, data.vectors)
    requests = [(c.query, data.luna, data.eval_date, k) for c in data.cases for k in (2, 5)]
    alone = [subject.search(*r) for r in requests]
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda r: subject.search(*r), requests * 4))
    assert together == alone * 4


def test_gate_verdicts_on_the_lesson(lesson_row) -> None:
    row = audit_row("llamaindex-bm25", "lesson", lesson_row)
    assert {gate: row.statuses[gate] for gate in GATES} == {
        "recall": "FAIL",  # score-0 filler outranks the answer in the fusion ('paraphrase')
        "exclusion": "FAIL",
        "boundary on every returned id": "FAIL",
        "noninterference by rebuild": "FAIL",
        "noninterference by bait": "FAIL",
    }
    assert "'merchant-vip-refurb'" in row.why["boundary on every returned id"]
    probes = {g.name: g.passed for g in lesson_row.gates}
    assert probes["factory indexes what it is handed"] and probes["repeatable builds"]
    assert probes["same answers under concurrent requests"]


def test_building_and_searching_never_opens_a_connection(data: labsrc.Lesson, monkeypatch) -> None:
    import socket

    def refuse(self, address):  # an embed model, an LLM or a tokenizer download would come through here
        raise AssertionError(f"connection attempted to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    subject = LlamaIndexHybrid(data.chunks, data.vectors)
    assert any(subject.search(c.query, data.luna, data.eval_date, 2) for c in data.cases)
