"""Issue 48: a code pasted with a Unicode dash (``VIP‑RPL‑1``, U+2011) is the same token as ``VIP-RPL-1``.

The analyzer reads every dash and hyphen as ``-`` (labsrc.lanes.analysis.DASHES); the tests below check it per
dash, in memory, through a saved and loaded index (one saved before the change included), in PostgreSQL, and in
the course's exercise 2 check, which took the pasted code for a meaning-only attack.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from factories import reseal
from pg_support import lanes_of, requires_postgres

import labsrc
from labsrc import EVAL_DATE, Case, load_callers, load_cases, load_chunks
from labsrc.course.checks import check_adversarial_cases
from labsrc.lanes.analysis import DASHES, PROSE_TOKEN_PATTERN, Analyzer, lesson_analyzer, tokens
from labsrc.lanes.dense import HashingEncoder
from labsrc.lanes.persistence import load_bm25_index, save_bm25_index

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "fixtures" / "policies"
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"

#: The lesson's hidden code (fixtures/lesson/chunks.jsonl, merchant-vip-refurb), as typed and as pasted.
CODE = "VIP-RPL-1"
PASTED = CODE.replace("-", "\u2011")  # U+2011 NON-BREAKING HYPHEN

#: Unicode 14's dashes (category Pd, "-" aside) and U+2212 MINUS SIGN, written out.
UNICODE_DASHES = [
    "\u058a", "\u05be", "\u1400", "\u1806", "\u2010", "\u2011", "\u2012", "\u2013", "\u2014", "\u2015", "\u2212",
    "\u2e17", "\u2e1a", "\u2e3a", "\u2e3b", "\u2e40", "\u2e5d", "\u301c", "\u3030", "\u30a0", "\ufe31", "\ufe32",
    "\ufe58", "\ufe63", "\uff0d", "\U00010ead",
]  # fmt: skip


def test_the_dashes_are_unicodes_dashes_and_the_minus_sign():
    assert DASHES == frozenset(UNICODE_DASHES)
    derived = {chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Pd"} | {"\u2212"}
    # A dash this Python's Unicode does not have yet (3.10 lacks U+2E5D) is unassigned ("Cn") here.
    assert {d for d in DASHES if unicodedata.category(d) != "Cn"} == derived - {"-"}, (
        f"Unicode {unicodedata.unidata_version} has other dashes: decide whether DASHES takes them (it changes "
        "the analysis of text that holds them)"
    )


@pytest.mark.parametrize("dash", UNICODE_DASHES, ids=[f"U+{ord(d):04X}" for d in UNICODE_DASHES])
def test_a_code_written_with_any_dash_is_one_token(dash):
    assert tokens(f"vip{dash}rpl{dash}1") == tokens("vip-rpl-1") == ["vip-rpl-1"]
    assert tokens(f"Rule RPL{dash}14.") == ["rule", "rpl-14"]


def test_without_dashes_the_analyzer_splits_as_before():
    assert Analyzer(dashes=False)(PASTED) == ["vip", "rpl", "1"]
    assert Analyzer(dashes=False)(CODE) == lesson_analyzer(CODE) == ["vip-rpl-1"]
    with pytest.raises(labsrc.InvalidArgument, match="dashes must be True or False"):
        Analyzer(dashes="yes")


def test_the_prose_analyzer_splits_at_every_dash_either_way():
    # Folding is harmless there: its pattern splits at "-" and at every other dash alike.
    prose = Analyzer(pattern=PROSE_TOKEN_PATTERN, stopwords=frozenset(), name="prose")
    text = " ".join(f"well{d}known RPL{d}14" for d in ["-", *UNICODE_DASHES])
    assert prose(text) == dataclasses.replace(prose, dashes=False)(text) == ["well", "known", "rpl", "14"] * 27


# --- a saved index -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lesson_docs():
    return [(c.chunk_id, c.text) for c in labsrc.lesson().chunks]


QUERIES = [CODE, "RPL-14", "damaged refurbished laptop replacement", "rpl-14 vip-rpl-1 refund"]


def test_a_saved_index_finds_the_pasted_code(tmp_path, lesson_docs):
    index = labsrc.BM25Index.build(lesson_docs)
    loaded = load_bm25_index(save_bm25_index(index, tmp_path / "idx"))
    assert json.loads((tmp_path / "idx" / "params.json").read_text())["analyzer"]["dashes"] is True
    assert loaded.analyzer == lesson_analyzer
    want = index.search(CODE, 5)
    assert want[0][0] == "merchant-vip-refurb"
    assert index.search(PASTED, 5) == loaded.search(PASTED, 5) == loaded.search(CODE, 5) == want
    assert np.array_equal(loaded.score_all(PASTED), index.score_all(CODE))


def _as_saved_before_dashes(folder):
    """Rewrite ``params.json`` as the code before issue 48 wrote it: the analyzer's fields without ``dashes``."""
    params = json.loads((folder / "params.json").read_text(encoding="utf-8"))
    del params["analyzer"]["dashes"]
    assert set(params["analyzer"]) == {"pattern", "stopwords", "normalize", "casefold", "stemmer", "name"}
    (folder / "params.json").write_text(json.dumps(params), encoding="utf-8")
    reseal(folder)


def test_an_index_saved_before_dashes_loads_and_analyses_as_it_did(tmp_path, lesson_docs):
    index = labsrc.BM25Index.build(lesson_docs)
    folder = save_bm25_index(index, tmp_path / "old")
    _as_saved_before_dashes(folder)
    for loaded in (load_bm25_index(folder), load_bm25_index(folder, analyzer=lesson_analyzer)):
        assert loaded.analyzer == Analyzer(dashes=False)
        for query in QUERIES:  # ASCII: the same results as an index saved now
            assert loaded.search(query, 5) == index.search(query, 5)
            assert np.array_equal(loaded.score_all(query), index.score_all(query))
        assert loaded.search(PASTED, 5) == []  # its vocabulary was analysed without folding: as before
    # An old index with the caller's own pattern loads with that analyzer, as before.
    whitespace = Analyzer(pattern=r"\S+", stopwords=frozenset(), name="whitespace")
    mine = save_bm25_index(labsrc.BM25Index.build(lesson_docs, analyzer=whitespace), tmp_path / "mine")
    _as_saved_before_dashes(mine)
    assert load_bm25_index(mine, analyzer=whitespace).analyzer == dataclasses.replace(whitespace, dashes=False)
    with pytest.raises(labsrc.InvalidRecord, match="differs from the analyzer given"):
        load_bm25_index(mine, analyzer=dataclasses.replace(whitespace, name="other"))


# --- PostgreSQL: the same analyzer, the same results ---------------------------------------------------------------


@requires_postgres
def test_the_pasted_code_gives_the_same_results_in_memory_and_in_postgresql(server, data):
    from labsrc.engines import PostgresRetriever

    vectors = HashingEncoder()  # the lesson's stored vectors hold no vector for these queries
    vip = labsrc.Caller("vip-ops-1", "EU", {"support:eu", "merchant:vip-ops"})
    memory = labsrc.PolicyRetriever(data.chunks, vectors)
    with PostgresRetriever(data.chunks, vectors, dsn=server.dsn) as engine:
        for caller in (vip, data.luna):
            for top_k in (1, 3, len(data.chunks) + 1):
                want = lanes_of(memory.search(CODE, caller, data.eval_date, top_k))
                assert lanes_of(memory.search(PASTED, caller, data.eval_date, top_k)) == want
                assert lanes_of(engine.search(PASTED, caller, data.eval_date, top_k)) == want
                assert lanes_of(engine.search(CODE, caller, data.eval_date, top_k)) == want
    assert lanes_of(memory.search(PASTED, vip, data.eval_date, 1))["sparse"][0][0] == "merchant-vip-refurb"
    assert lanes_of(memory.search(PASTED, data.luna, data.eval_date, 1))["sparse"] == []  # hidden from Luna


# --- the course's exercise 2 check -----------------------------------------------------------------------------------


class _VipAxis:
    """A dense encoder that puts every text mentioning "vip" on one axis: the hidden VIP chunk ranks first at
    cosine 1 for the code, as a live encoder may rank it for the code's letters."""

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.array([[1.0, 0.0] if "vip" in t.casefold() else [0.0, 1.0] for t in texts])


def test_a_pasted_hidden_code_is_judged_as_the_code_not_as_a_meaning_only_attack():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    solution = [c for c in load_cases(SOLUTION / "cases.jsonl") if c.kind != "positive"]
    attack = Case(name="pasted-code", query=PASTED, caller="luna-48291", kind="restricted",
                  forbidden=("merchant-vip-refurb",))  # fmt: skip
    with_dense = check_adversarial_cases([*solution, attack], chunks, callers, EVAL_DATE, dense=_VipAxis())
    assert with_dense.passed, with_dense
    assert not [p for p in with_dense.passes if p.startswith("pasted-code:")], with_dense.passes  # not meaning-only
    # It shares the code with its chunk (BM25), so no dense source is needed to accept it.
    without = check_adversarial_cases([*solution, attack], chunks, callers, EVAL_DATE)
    assert without.passed, without
    assert "vip-rpl-1" in tokens(attack.query)


@pytest.mark.parametrize("dash", ["\u2011", "\u2013", "\u2212"])
def test_the_course_reads_a_pasted_code_as_the_code_it_is(dash):
    from labsrc.course.checks.evidence import policy_codes, query_style

    pasted = f"VIP{dash}RPL{dash}1"
    assert policy_codes(f"is {pasted} still valid, or rpl{dash}14?") == ("VIP-RPL-1", "RPL-14")
    assert query_style(pasted) == "exact_code"
    assert query_style(f"{pasted} refund") == "mixed"
