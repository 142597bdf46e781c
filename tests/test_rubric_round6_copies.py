"""Coursework round 6 (issue 58, part 4): the course's cases are recognised whoever asks them, and each is named.

Until round 5 a copy was recognised only when it kept the course case's caller. The model answer with every case
moved to another caller of its region, in reverse order, graded Production-ready. Now a case is the course's when it
asks a course case's question: its query (exact, or a near-copy) and its chunk ids, whatever its caller, its kind and
its place in the file (:mod:`labsrc.course.provenance`). The rubric names each recognised case, in honest work too.

The measured submissions are built as round 5 builds them (:func:`test_rubric_round5._build`): cases.jsonl, vectors/
embedded by the stand-in encoder, and report/ from ``labsrc gate --out``. The five honest submissions are graded in
``tests/test_rubric_round5.py``, whose module fixture this file does not repeat; here their cases are only matched
(:func:`labsrc.course.course_files_in`, no gate run).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from labsrc.course import course_files_in, grade
from labsrc.course.provenance import NAMED_CASES, term_changes
from labsrc.course.submission import find_submission
from labsrc.gate.case_rules import case_problems
from labsrc.gate.config import load_gate_config
from labsrc.lanes.analysis import tokens
from labsrc.records.cases import Case, load_cases
from labsrc.records.loading import load_callers, load_chunks
from test_rubric_round5 import (
    HONEST,
    MINILM,
    OWN_WORK,
    POLICIES,
    ROOT,
    SOLUTION,
    _build,
    _course_line,
    _course_rows,
    _evidence,
    _lines,
    query_rows,
)

MODEL_ANSWER = "(the model answer, fixtures/coursework/solution/cases.jsonl)"
#: Measured with grade(..., measure=False), where Strong is the highest level: (round 5's rule, this round's).
MOVED_LEVELS = {"moved": ("Strong", "Foundational"), "moved-reworded-1": ("Strong", "Foundational")}


def moved(records: list[dict]) -> list[dict]:
    """``records`` in reverse order, each asked by the first other caller of its region (by id) for whom the case
    stays valid (:func:`labsrc.gate.case_rules.case_problems`, on the course's date); a case no other caller may ask
    keeps its caller. Nothing else changes, so every case still passes as it did."""
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    chunks = {c.chunk_id: c for c in load_chunks(POLICIES / "chunks.jsonl")}
    day = load_gate_config(POLICIES / "gate.json").eval_date()
    out = []
    for record in reversed(records):
        region = callers[record["caller"]].region
        others = sorted(a for a, c in callers.items() if c.region == region and a != record["caller"])
        valid = [a for a in others if not case_problems(Case(**{**record, "caller": a}), callers, chunks, day)]
        out.append({**record, "caller": valid[0]} if valid else dict(record))
    return out


def _matched(tmp_path: Path, name: str, records: list[dict]) -> list[str]:
    """What :func:`course_files_in` says of a submission holding only ``records`` as its cases.jsonl."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    sub = find_submission(folder)
    return [b.describe() for b in course_files_in(sub, load_cases(sub.cases))]


# --- the rule ----------------------------------------------------------------------------------------------


def test_term_changes_names_each_edit_in_query_order():
    assert term_changes(tokens("swap a cracked reconditioned notebook"),
                        tokens("swap a broken reconditioned notebook")) == ["'cracked' for 'broken'"]
    assert term_changes(tokens("exchange a broken notebook please"), tokens("swap a broken notebook")) == [
        "'exchange' for 'swap'", "'please' added"]
    assert term_changes(["notebook"], ["swap", "notebook"]) == ["'swap' dropped"]
    assert term_changes(tokens("RPL-15"), tokens("RPL-14")) == ["'rpl-15' for 'rpl-14'"]
    assert term_changes(tokens("Swap the broken notebook!"), tokens("swap a broken notebook")) == []


def test_the_move_picks_a_valid_caller_of_the_same_region_and_keeps_the_rest():
    original = _lines(SOLUTION / "cases.jsonl")
    callers = {case["name"]: case["caller"] for case in moved(original)}
    assert [case["name"] for case in moved(original)] == [case["name"] for case in reversed(original)]
    # EU: marco-eu-vip-07 first (by id), priya-eu-legal-12 where marco may see the forbidden VIP rule; the legal
    # case stays with priya (no other EU caller may see it), the US cases with dana-us-17 (the only US caller).
    assert sorted(name for name, caller in callers.items() if caller == "priya-eu-legal-12") == [
        "legal-mixed-lgl3", "restricted-vip-code"]
    assert sorted(name for name, caller in callers.items() if caller == "dana-us-17") == [
        "superseded-us-45-days", "us-exact-rtn30", "us-paraphrase-price-match"]
    assert sum(caller == "marco-eu-vip-07" for caller in callers.values()) == 11
    assert sum(callers[c["name"]] != c["caller"] for c in original) == 12  # 4 keep their caller
    assert original == _lines(SOLUTION / "cases.jsonl")  # the records handed in are not changed


def test_a_case_is_the_course_s_whoever_asks_it_whatever_its_kind_and_each_is_named(tmp_path):
    cases = [
        {"name": "my-a", "query": "rpl-14", "caller": "marco-eu-vip-07", "kind": "positive",
         "expected": ["eu-refurb-v2-rule"]},  # eu-exact-rpl14 asked by another EU caller
        {"name": "my-b", "query": "swap a cracked reconditioned notebook", "caller": "marco-eu-vip-07",
         "kind": "positive", "expected": ["eu-refurb-v2-rule"]},  # eu-paraphrase-rpl14, one word changed, moved
        {"name": "my-c", "query": "RPL-14-US", "caller": "visitor-9000", "kind": "restricted",
         "forbidden": ["us-refurb-rule"]},  # wrong-region-us-refurb relabelled: visitor has no tag either
        {"name": "my-d", "query": "what grades do refurbished laptops come in", "caller": "luna-48291",
         "kind": "positive", "expected": ["eu-refurb-grading"]},  # the learner's own
        {"name": "my-e", "query": "LGL-3 chargeback", "caller": "luna-48291", "kind": "restricted",
         "forbidden": ["legal-chargeback-v2"]},  # restricted-legal-chargeback, one id dropped: the same caller
        {"name": "my-f", "query": "RPL-14", "caller": "kenji-apac-03", "kind": "wrong_region",
         "forbidden": ["eu-refurb-v2-rule"]},  # a course query, but other ids and another caller: not a copy
    ]
    line = ("cases.jsonl: 4 of 6 cases are the course's own " + MODEL_ANSWER + ", 1 of them with a word or two or a "
            "code changed: 'my-a' is course case 'eu-exact-rpl14' (the same question), 'my-b' is course case "
            "'eu-paraphrase-rpl14' (1 edit: 'cracked' for 'broken'), 'my-c' is course case 'wrong-region-us-refurb' "
            "(the same question) and 1 more")
    assert NAMED_CASES == 3
    assert _matched(tmp_path, "forward", cases) == [line]
    assert _matched(tmp_path, "reversed", cases[::-1]) == [line]  # named by case name, whatever the order
    assert _matched(tmp_path, "the-rest", cases[4:]) == [
        "cases.jsonl: 1 of 2 cases are the course's own " + MODEL_ANSWER + ": 'my-e' is course case "
        "'restricted-legal-chargeback' (the same question by the same caller)"]


def test_a_case_with_no_ids_is_its_query_alone(tmp_path):
    asked = {"caller": "luna-48291", "kind": "absent"}
    assert _matched(tmp_path, "own", [{"name": "pay", "query": "can I pay in instalments", **asked}]) == []
    assert _matched(tmp_path, "copy", [{"name": "pay", "query": "Can I pay with bitcoin?", **asked}]) == [
        "cases.jsonl: all 1 cases are the course's own (the course's reference cases, fixtures/policies/cases.jsonl): "
        "'pay' is course case 'absent-crypto-payment' (the same question)"]


def test_honest_work_is_told_which_of_its_cases_are_the_course_s(tmp_path):
    found = {name: _matched(tmp_path, name, query_rows(name)[0]) for name in HONEST}
    assert found == {"eu-agent": [], "us-agent": [], "legal-and-vip": [], "first-try": [], "apac-agent": [
        "cases.jsonl: 1 of 12 cases are the course's own (the course's reference cases, "
        "fixtures/policies/cases.jsonl): 'eu-code' is course case 'wrong-region-no-access' (the same question)"]}
    # A small part: named in the own-work criterion, which it still meets.
    sub = tmp_path / "graded"
    sub.mkdir()
    records = [case for case, _ in HONEST["apac-agent"]][-3:]  # eu-code and two of the learner's own
    (sub / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert _evidence(grade(sub, measure=False), "Applied")[OWN_WORK] == (
        True, "cases.jsonl: 1 of 3 cases are the course's own (the course's reference cases, "
              "fixtures/policies/cases.jsonl): 'eu-code' is course case 'wrong-region-no-access' (the same question): "
              "a small part, the rest is your own")


# --- measured: the model answer moved to other callers, in reverse order ---------------------------------------


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The model answer moved and reversed, as is and reworded one word per query (round 5's rewording)."""
    root = tmp_path_factory.mktemp("round6")
    _, originals = _course_rows()
    answer = moved(_lines(SOLUTION / "cases.jsonl"))
    reworded, rows = query_rows("reworded-1")
    callers = {case["name"]: case["caller"] for case in answer}
    submissions = {
        "moved": (answer, {case["query"]: originals[case["query"]] for case in answer}),
        "moved-reworded-1": ([{**case, "caller": callers[case["name"]]} for case in reversed(reworded)], rows),
    }
    out = {}
    for name, built in submissions.items():
        folder = _build(root, name, *built)
        out[name] = (folder, grade(folder, measure=False))
    return out


def test_the_model_answer_moved_and_reversed_is_the_course_s_and_below_applied(graded):
    folder, result = graded["moved"]
    assert _course_line(result) == (
        "course files: cases.jsonl: all 16 cases are the course's own " + MODEL_ANSWER + ": 'absent-gift-card-eu' is "
        "course case 'absent-gift-card-eu' (the same question), 'eu-exact-clm7' is course case 'eu-exact-clm7' (the "
        "same question), 'eu-exact-rpl14' is course case 'eu-exact-rpl14' (the same question) and 13 more")
    met, detail = _evidence(result, "Applied")[OWN_WORK]
    assert not met
    assert "this submission is the course's model answer, not your work, so it cannot reach Applied" in detail
    assert result.level == MOVED_LEVELS["moved"][1] == "Foundational"
    # Everything else is sound: without the cases recognised it would reach Strong, as it did under round 5's rule.
    failing = [(v.level, e.criterion) for v in result.levels[:3] for e in v.evidence if e.applicable and not e.met]
    assert failing == [("Applied", OWN_WORK)]


def test_its_vectors_are_the_course_s_rows_in_another_order_so_bytes_do_not_recognise_them(graded):
    folder, result = graded["moved"]
    assert not any(line.startswith(("course files: vectors/", "course files: report/")) for line in result.inputs)
    mine, theirs = folder / "vectors" / "all-MiniLM-L6-v2", MINILM
    my_ids, their_ids = (path.read_text(encoding="utf-8").split() for path in (mine / "query_ids.txt",
                                                                                theirs / "query_ids.txt"))
    assert my_ids == their_ids[::-1]
    assert (mine / "queries.npy").read_bytes() != (theirs / "queries.npy").read_bytes()
    mine_rows = dict(zip(my_ids, np.load(mine / "queries.npy")))
    for name, row in zip(their_ids, np.load(theirs / "queries.npy")):
        assert mine_rows[name] == pytest.approx(row, abs=1e-6)


def test_reworded_as_well_it_is_still_recognised(graded):
    _, result = graded["moved-reworded-1"]
    line = _course_line(result)
    assert line is not None and line.startswith(
        "course files: cases.jsonl: 13 of 16 cases are the course's own " + MODEL_ANSWER + ", all of them with a "
        "word or two or a code changed: 'absent-gift-card-eu' is course case 'absent-gift-card-eu' (1 edit: 'will' "
        "for 'does'), ") and line.endswith(" and 10 more")
    assert result.level == MOVED_LEVELS["moved-reworded-1"][1] == "Foundational"


def test_the_docs_state_the_rule_and_the_table():
    docs = (ROOT / "docs" / "coursework.md").read_text(encoding="utf-8")
    for text in ("whatever its caller, its kind", "model answer, callers moved, order reversed", "16 of 16",
                 "(the same question)", "1 edit: 'cracked' for 'broken'", "and 13 more", "byte for byte"):
        assert text in docs, text
