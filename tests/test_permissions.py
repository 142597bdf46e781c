"""A BEIR collection under a permission layout: deterministic, every case obeys the case rule, and the audit loads it."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from labsrc.boundary import block_reasons
from labsrc.datasets.beir import load_beir
from labsrc.datasets.permissions import AUDIT_DATE, CALLERS, permissioned
from labsrc.errors import InvalidArgument
from labsrc.gate.case_rules import cases_problems

SCIFACT = Path(os.environ.get("LABSRC_SCIFACT_DIR", Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "beir" / "scifact"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """60 documents, 40 queries each judging two documents."""
    root = tmp_path_factory.mktemp("beir") / "tiny"
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": f"d{i:03d}", "title": f"Title {i}", "text": f"word{i} common text {i % 7}"} for i in range(60)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    queries = [{"_id": f"q{i:03d}", "text": f"word{i} common"} for i in range(40)]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries), encoding="utf-8")
    rows = ["query-id\tcorpus-id\tscore"] + [f"q{i:03d}\td{j:03d}\t1" for i in range(40) for j in (i, (i + 20) % 60)]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def test_the_layout_is_drawn_from_the_id_alone(tiny) -> None:
    collection = permissioned(load_beir(tiny))
    chunk = {c.chunk_id: c for c in collection.chunks}["d007"]
    h = int.from_bytes(hashlib.sha256(b"d007").digest()[:8], "big")
    # region = h mod 2, tag = (h div 2) mod 3, window = (h div 6) mod 20: <2 superseded, 2 not yet effective.
    assert chunk.region == ("eu", "us")[h % 2] and chunk.acl_tag == ("public", "staff", "legal")[h // 2 % 3]
    window = h // 6 % 20
    expected_to = AUDIT_DATE - dt.timedelta(days=1) if window < 2 else None
    expected_from = AUDIT_DATE + dt.timedelta(days=1) if window == 2 else dt.date(2020, 1, 1)
    assert (chunk.effective_from, chunk.effective_to) == (expected_from, expected_to)
    # The same ids in another order give the same chunks.
    again = permissioned(load_beir(tiny))
    assert again == collection


def test_every_case_obeys_the_case_rule_and_tests_its_kind(tiny) -> None:
    collection = permissioned(load_beir(tiny))
    callers = {c.actor_id: c for c in collection.callers}
    chunks = {c.chunk_id: c for c in collection.chunks}
    assert cases_problems(collection.cases, callers, chunks, collection.on_date) == []
    assert len(collection.cases) == 40  # every judged query gives one case
    for case in collection.cases:
        caller = callers[case.caller]
        if case.kind == "positive":
            assert case.expected and all(not block_reasons(caller, chunks[d], case.on_date) for d in case.expected)
        else:
            assert case.forbidden and all(block_reasons(caller, chunks[d], case.on_date) for d in case.forbidden)
    # Callers take turns over the queries sorted by id.
    assert [c.caller for c in collection.cases[:4]] == [c.actor_id for c in CALLERS]


def test_caps_keep_the_first_cases_of_each_kind(tiny) -> None:
    whole = permissioned(load_beir(tiny))
    kinds = Counter(c.kind for c in whole.cases)
    assert kinds["positive"] >= 2
    capped = permissioned(load_beir(tiny), max_cases={"positive": 1})
    assert Counter(c.kind for c in capped.cases) == kinds - Counter({"positive": kinds["positive"] - 1})
    assert [c for c in capped.cases if c.kind == "positive"] == [c for c in whole.cases if c.kind == "positive"][:1]
    with pytest.raises(InvalidArgument, match="non-negative ints"):
        permissioned(load_beir(tiny), max_cases={"positive": -1})


@pytest.mark.skipif(not (SCIFACT / "corpus.jsonl").is_file(), reason=f"no BEIR SciFact at {SCIFACT} (set LABSRC_SCIFACT_DIR)")
def test_scifact_under_the_layout() -> None:
    from labsrc.audit import load_dataset

    data = load_dataset("scifact", SCIFACT)
    assert len(data.chunks) == 5183
    kinds = Counter(c.kind for c in data.cases)
    # Measured: 71 judged test queries keep a relevant abstract their caller may see; 20 of each negative kind
    # there are that many of: of the 20 that were all "superseded" before the kinds were split, 12 have ended
    # and 8 are not yet in force (every not_yet_effective case the split has).
    assert kinds == {"positive": 71, "restricted": 20, "superseded": 12, "not_yet_effective": 8, "wrong_region": 20}
    shares = Counter(c.version for c in data.chunks)
    assert shares == {"v1": 4408, "v0": 528, "v2": 247}
    assert data.config.top_k == 10 and data.config.eval_date() == AUDIT_DATE
    # Case names are query ids, so the shipped MiniLM query vectors reach the dense lane.
    assert data.vectors is not None and data.vectors.query_vector(data.cases[0].query).shape == (384,)
