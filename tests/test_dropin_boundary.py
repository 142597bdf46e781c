"""The drop-in retriever behind the evidence boundary (policy records) and without one (plain records)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import invisible_chunks, scenarios

import labsrc
from labsrc.patterns import HybridRetriever

LESSON = Path(__file__).resolve().parents[1] / "fixtures" / "lesson"
TODAY = dt.date(2026, 5, 27)
LUNA = labsrc.Caller("luna-48291", "EU", frozenset({"support:eu"}))


@pytest.fixture(scope="module")
def lesson_retriever():
    return HybridRetriever.from_jsonl(LESSON / "chunks.jsonl")


def as_record(chunk: labsrc.PolicyChunk) -> dict:
    record = dataclasses.asdict(chunk)
    for key in ("effective_from", "effective_to"):
        record[key] = None if record[key] is None else record[key].isoformat()
    for key in ("title", "path", "metadata"):
        record.pop(key)
    return record


def test_policy_records_refuse_to_search_without_caller_or_date(lesson_retriever):
    assert lesson_retriever.has_policy
    with pytest.raises(labsrc.InvalidArgument, match=r"pass caller= and on_date="):
        lesson_retriever.search("damaged refurbished laptop")
    with pytest.raises(labsrc.InvalidArgument, match=r"pass on_date= \(") as info:
        lesson_retriever.search("damaged refurbished laptop", caller=LUNA)
    assert "caller=" not in str(info.value).split("pass ")[1]
    with pytest.raises(labsrc.InvalidArgument, match=r"pass caller= \("):
        lesson_retriever.search("damaged refurbished laptop", on_date=TODAY)
    with pytest.raises(labsrc.InvalidArgument, match="labsrc.Caller"):
        lesson_retriever.search("x", caller={"actor_id": "luna"}, on_date=TODAY)
    with pytest.raises(labsrc.InvalidArgument, match="on_date"):
        lesson_retriever.search("x", caller=LUNA, on_date="2026-02-30")


def test_policy_records_never_return_a_hidden_chunk(lesson_retriever):
    chunks = labsrc.load_chunks(LESSON / "chunks.jsonl")
    permitted = {c.chunk_id for c in labsrc.permitted_chunks(LUNA, chunks, TODAY)}
    hidden = {c.chunk_id for c in chunks} - permitted
    assert {"merchant-vip-refurb", "eu-refurb-v1-rule"} <= hidden  # restricted, superseded
    for query in ["damaged refurbished laptop", "VIP-RPL-1", "immediate refund", "return within 30 days"]:
        hits = lesson_retriever.search(query, caller=LUNA, on_date=TODAY, k=50, k_bm25=50, k_embed=50)
        assert {h["chunk_id"] for h in hits} <= permitted, query
    # The same day as an ISO string.
    assert lesson_retriever.search("laptop", caller=LUNA, on_date="2026-05-27") == lesson_retriever.search(
        "laptop", caller=LUNA, on_date=TODAY
    )
    # get() follows the same rule: a hidden chunk is not there for this caller.
    assert lesson_retriever.get("merchant-vip-refurb", caller=LUNA, on_date=TODAY) is None
    assert lesson_retriever.get("eu-refurb-v2-rule", caller=LUNA, on_date=TODAY)["doc_id"] == "eu-electronics"
    with pytest.raises(labsrc.InvalidArgument, match="caller="):
        lesson_retriever.get("eu-refurb-v2-rule")


def test_the_hidden_code_attack_finds_nothing(lesson_retriever):
    # Notebook 02's attack: the hidden chunk's code. "VIP-RPL-1" is one token, so "1" or "rpl"
    # cannot match a permitted chunk and hint that a VIP rule exists.
    assert labsrc.patterns.tokenize("VIP-RPL-1") == ["vip-rpl-1"]
    hits = lesson_retriever.search("VIP-RPL-1", caller=LUNA, on_date=TODAY)
    assert all(h["bm25_rank"] is None for h in hits)
    vip = labsrc.Caller("vip-ops", "EU", frozenset({"merchant:vip-ops"}))
    top = lesson_retriever.search("VIP-RPL-1", caller=vip, on_date=TODAY)[0]
    assert (top["chunk_id"], top["bm25_rank"]) == ("merchant-vip-refurb", 1)


def test_half_a_policy_and_mixed_corpora_are_refused(tmp_path):
    rows = [json.loads(line) for line in (LESSON / "chunks.jsonl").read_text().splitlines()]
    broken = dict(rows[1])
    del broken["acl_tag"]
    path = tmp_path / "chunks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [rows[0], broken]) + "\n")
    with pytest.raises(labsrc.InvalidRecord, match=r"line 2.*acl_tag.*give acl_tag"):
        HybridRetriever.from_jsonl(path)
    plain = {"chunk_id": "plain-1", "text": "Damaged laptops are replaced."}
    with pytest.raises(labsrc.InvalidRecord, match=r"chunks\[1\].*none of the policy fields.*chunks\[0\]"):
        HybridRetriever.from_chunks([rows[0], plain])
    bad_date = dict(rows[0], effective_from="2026-02-30")
    with pytest.raises(labsrc.InvalidRecord, match="effective_from"):
        HybridRetriever.from_chunks([bad_date])


def test_plain_records_search_everything_and_refuse_a_caller():
    retriever = HybridRetriever.from_chunks([{"chunk_id": "a", "document_id": "doc-a", "text": "Damaged laptops."}])
    assert not retriever.has_policy
    assert [h["chunk_id"] for h in retriever.search("laptops")] == ["a"]
    assert retriever.search("laptops")[0]["doc_id"] == "doc-a"  # from document_id
    with pytest.raises(labsrc.InvalidArgument, match="no policy fields"):
        retriever.search("laptops", caller=LUNA, on_date=TODAY)


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def observe(corpus, query, caller, on_date, top_k):
    if not corpus:
        return []
    retriever = HybridRetriever.from_chunks([as_record(c) for c in corpus])
    return retriever.search(query, caller=caller, on_date=on_date, k=top_k, k_bm25=top_k, k_embed=top_k)


@SETTINGS
@given(scenario=scenarios())
def test_property_results_are_permitted_and_equal_the_permitted_only_corpus(scenario):
    corpus, caller, on_date, query, top_k = scenario
    permitted = labsrc.permitted_chunks(caller, corpus, on_date)
    hits = observe(corpus, query, caller, on_date, top_k)
    assert {h["chunk_id"] for h in hits} <= {c.chunk_id for c in permitted}
    # Everything observed (ids, ranks, scores, snippets) equals the corpus of permitted chunks alone.
    assert hits == observe(permitted, query, caller, on_date, top_k)


@SETTINGS
@given(data=st.data())
def test_property_invisible_chunks_change_nothing(data):
    corpus, caller, on_date, query, top_k = data.draw(scenarios())
    mixed = list(corpus)
    for chunk in data.draw(invisible_chunks(caller, on_date)):
        mixed.insert(data.draw(st.integers(0, len(mixed))), chunk)
    assert observe(mixed, query, caller, on_date, top_k) == observe(corpus, query, caller, on_date, top_k)
