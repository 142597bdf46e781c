"""Coursework round 6 (issue 58, parts 1 and 6): exercise 1 and 2's checks, tried as a new student would.

Each test makes one mistake the issue reports, in the exercise's own terms, and asserts the message the check
now gives: a query of stop words only, a caller id off by letter case, whitespace or one character, a superseded
expected chunk (with the last day it was in force), and a not_yet_effective case counted in the summary. The
notebooks say up front what exercise 3 will need and list every kind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import io
import json
from pathlib import Path

import pytest

import labsrc
from labsrc import EVAL_DATE, Case, load_callers, load_cases, load_chunks, tokens
from labsrc.course import CheckFailed, checks, save_my_cases
from labsrc.course.checks import check_adversarial_cases, check_positive_cases, empty_query_message, stop_words_in
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.records import caller_hint, within_one_edit
from labsrc.lanes.embed import load_embeddings

ROOT = Path(__file__).resolve().parent.parent
POLICIES = ROOT / "fixtures" / "policies"
SOLUTION = ROOT / "fixtures" / "coursework" / "solution"
EXERCISES = ROOT / "notebooks" / "exercises"


@pytest.fixture(scope="module")
def corpus():
    chunks = load_chunks(POLICIES / "chunks.jsonl")
    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    return chunks, callers


@pytest.fixture(scope="module")
def solution_cases():
    """The model answer's cases: every one passes its check, so a test adds one mistake and sees only it."""
    return load_cases(SOLUTION / "cases.jsonl")


def _positives(cases):
    return [c for c in cases if c.kind == "positive"]


def _adversarial(cases):
    return [c for c in cases if c.kind != "positive"]


# --- 1. a query the lesson analyzer reduces to nothing -----------------------------------------------


def test_the_lesson_analyzer_drops_every_word_of_the_issue_query():
    # The premise, from the library's own analyzer: all six words are in LESSON_STOPWORDS.
    assert tokens("the a of an is for") == []
    assert stop_words_in("the a of an is for") == ("the", "a", "of", "an", "is", "for")
    # Normalised as the analyzer reads them (case-folded), in order, each once.
    assert stop_words_in("The form of THE claim") == ("the", "of")


def test_a_positive_case_of_stop_words_only_is_refused_naming_them(corpus, solution_cases):
    chunks, callers = corpus
    empty = Case(name="x", query="the a of an is for", caller="luna-48291", kind="positive",
                 expected=("eu-refurb-v2-rule",))
    problems = check_positive_cases([*_positives(solution_cases), empty], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'x', field 'query', value 'the a of an is for': every word is a stop word (the, a, of, an, is, for), "
        "so BM25 has no term to match: ask with a content word or a code",
    )


def test_exercise_1_save_cell_no_longer_saves_a_stop_word_case(tmp_path, corpus, solution_cases):
    chunks, callers = corpus
    (tmp_path / "cases.jsonl").write_bytes((SOLUTION / "cases.jsonl").read_bytes())
    before = (tmp_path / "cases.jsonl").read_bytes()
    empty = Case(name="x", query="the a of an is for", caller="luna-48291", kind="positive",
                 expected=("eu-refurb-v2-rule",))
    with pytest.raises(CheckFailed) as info:
        save_my_cases(tmp_path, [*_positives(solution_cases), empty],
                      lambda cases: check_positive_cases(cases, chunks, callers, EVAL_DATE), part="positive",
                      chunk_ids={c.chunk_id for c in chunks}, caller_ids=set(callers))
    assert "case 'x', field 'query', value 'the a of an is for': every word is a stop word" in str(info.value)
    assert (tmp_path / "cases.jsonl").read_bytes() == before  # nothing saved for `labsrc gate` to find later


def test_an_adversarial_case_of_stop_words_only_is_refused_once(corpus, solution_cases):
    chunks, callers = corpus
    empty = Case(name="restricted-empty", query="The of is", caller="luna-48291", kind="restricted",
                 forbidden=("merchant-vip-refurb",))
    problems = check_adversarial_cases([*_adversarial(solution_cases), empty], chunks, callers, EVAL_DATE).problems
    # One problem: not also "shares no word with forbidden chunk ...", which would send the learner to the dense lane.
    assert problems == (
        "case 'restricted-empty', field 'query', value 'The of is': every word is a stop word (the, of, is), "
        "so BM25 has no term to match: ask with a content word or a code",
    )


def test_a_query_of_punctuation_only_is_refused_and_a_blank_one_is_left_to_the_case_rule(corpus, solution_cases):
    chunks, callers = corpus
    marks = Case(name="marks", query="?! ...", caller="luna-48291", kind="positive", expected=("eu-refurb-v2-rule",))
    blank = Case(name="blank", query="   ", caller="luna-48291", kind="positive", expected=("eu-refurb-v2-rule",))
    problems = check_positive_cases([*_positives(solution_cases), marks, blank], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'marks', field 'query', value '?! ...': it holds no letter or digit, so the analyzer finds no word in "
        "it and BM25 has no term to match: ask with a content word or a code",
        "case 'blank', field 'query', value '   ': the query is blank; write the question the caller asks",
    )
    assert empty_query_message("RPL-14") is None and empty_query_message("   ") is None


def test_the_stop_word_helpers_refuse_a_non_string():
    with pytest.raises(InvalidArgument, match=r"empty_query_message: query must be a string, got NoneType None"):
        empty_query_message(None)
    with pytest.raises(InvalidArgument, match=r"stop_words_in: query must be a string, got int 3"):
        stop_words_in(3)


# --- 2. a caller id off by letter case, whitespace or one character -----------------------------------


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("Luna-48291", "did you mean 'luna-48291'? (only the letter case differs: caller ids are case-sensitive)"),
        ("luna-48291 ", "did you mean 'luna-48291'? (only whitespace differs)"),
        ("luna- 48291", "did you mean 'luna-48291'? (only whitespace differs)"),
        (" LUNA-48291", "did you mean 'luna-48291'? (only the letter case and whitespace differ: "
                        "caller ids are case-sensitive)"),
        ("luna-4829", "did you mean 'luna-48291'? (one character differs)"),  # a deletion
        ("luna-482911", "did you mean 'luna-48291'? (one character differs)"),  # an insertion
        ("luna-48292", "did you mean 'luna-48291'? (one character differs)"),  # a replacement
        ("Luna-4829", "did you mean 'luna-48291'? (the letter case and one character differ: "
                      "caller ids are case-sensitive)"),
    ],
)
def test_a_near_caller_gets_did_you_mean_in_the_check_message(corpus, solution_cases, value, hint):
    chunks, callers = corpus
    case = Case(name="typo-caller", query="RPL-14 cracked screen", caller=value, kind="positive",
                expected=("eu-refurb-v2-rule",))
    problems = check_positive_cases([*_positives(solution_cases), case], chunks, callers, EVAL_DATE).problems
    assert problems == (f"case 'typo-caller', field 'caller', value {value!r}: unknown caller; {hint}",)


def test_a_far_caller_keeps_the_list_of_known_callers(corpus, solution_cases):
    chunks, callers = corpus
    case = Case(name="stranger", query="RPL-14 cracked screen", caller="luna-1234", kind="positive",
                expected=("eu-refurb-v2-rule",))  # five edits from luna-48291
    problems = check_positive_cases([*_positives(solution_cases), case], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'stranger', field 'caller', value 'luna-1234': unknown caller; known callers: ['dana-us-17', "
        "'kenji-apac-03', 'luna-48291', 'marco-eu-vip-07', 'priya-eu-legal-12', 'visitor-9000']",
    )


def test_an_adversarial_case_gets_the_caller_hint_too(corpus, solution_cases):
    chunks, callers = corpus
    case = Case(name="restricted-typo", query="VIP-RPL-1 refurbished", caller="LUNA-48291", kind="restricted",
                forbidden=("merchant-vip-refurb",))
    problems = check_adversarial_cases([*_adversarial(solution_cases), case], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'restricted-typo', field 'caller', value 'LUNA-48291': unknown caller; did you mean 'luna-48291'? "
        "(only the letter case differs: caller ids are case-sensitive)",
    )


def test_caller_hint_names_every_caller_one_edit_away_in_order():
    assert caller_hint("ab-2", ["ab-1", "ab-3", "zz-9"]) == "did you mean 'ab-1' or 'ab-3'? (one character differs)"
    assert caller_hint("luna-48291", ["luna-48291"]) is None  # known: nothing to hint
    assert caller_hint("nobody", ["luna-48291"]) is None
    with pytest.raises(InvalidArgument, match=r"caller_hint: caller must be a string, got int 7"):
        caller_hint(7, ["luna-48291"])


@pytest.mark.parametrize(
    ("a", "b", "near"),
    [
        ("luna", "luna", True),  # no edit
        ("luna", "lunar", True),  # insert at the end
        ("luna", "xluna", True),  # insert at the start
        ("luna", "lna", True),  # delete
        ("luna", "lubna", True),  # insert inside
        ("luna", "lupa", True),  # replace
        ("luna", "lpua", False),  # two replacements
        ("luna", "lu", False),  # two deletions
        ("", "x", True),
    ],
)
def test_within_one_edit(a, b, near):
    assert within_one_edit(a, b) is near
    assert within_one_edit(b, a) is near  # symmetric


# --- 3. a superseded expected chunk: the last day it was in force -------------------------------------


def test_a_superseded_expected_chunk_is_offered_its_last_day_in_force(corpus, solution_cases):
    chunks, callers = corpus
    by_id = {c.chunk_id: c for c in chunks}
    old, new = by_id["eu-refurb-v1-rule"], by_id["eu-refurb-v2-rule"]
    # effective_to is inclusive (labsrc.records.policy), so the last day is effective_to itself: the day before
    # the successor's first day, 2026-04-01 - 1 day = 2026-03-31.
    assert old.effective_to == new.effective_from - dt.timedelta(days=1) == dt.date(2026, 3, 31)
    case = Case(name="old-rule", query="RPL-14 thirty day window", caller="luna-48291", kind="positive",
                expected=("eu-refurb-v1-rule",))
    problems = check_positive_cases([*_positives(solution_cases), case], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'old-rule', field 'expected', value 'eu-refurb-v1-rule': caller 'luna-48291' cannot see this chunk on "
        "2026-05-27 (superseded), so no retriever may return it; expect a chunk the caller can see, or make it a "
        "safety case; it was in force from 2025-02-01 until 2026-03-31 (effective_to is inclusive: its last day); "
        'to expect it, date the case within those days ("on_date": "2026-03-31" at the latest)',
    )
    # Dated on the day offered, the same case passes; a day later the version has ended and it fails again.
    last = dataclasses.replace(case, on_date=dt.date(2026, 3, 31))
    assert check_positive_cases([*_positives(solution_cases), last], chunks, callers, EVAL_DATE).passed
    later = dataclasses.replace(case, on_date=dt.date(2026, 4, 1))
    [problem] = check_positive_cases([*_positives(solution_cases), later], chunks, callers, EVAL_DATE).problems
    assert "cannot see this chunk on 2026-04-01 (superseded)" in problem and '"on_date": "2026-03-31"' in problem


def test_no_day_is_offered_when_the_caller_could_not_see_the_version_even_then(corpus, solution_cases):
    chunks, callers = corpus
    # legal-chargeback-v1 (2025-05-01 to 2026-02-28) carries legal:internal, which Luna lacks: no date would help.
    case = Case(name="old-legal", query="LGL-3 chargeback", caller="luna-48291", kind="positive",
                expected=("legal-chargeback-v1",))
    problems = check_positive_cases([*_positives(solution_cases), case], chunks, callers, EVAL_DATE).problems
    assert problems == (
        "case 'old-legal', field 'expected', value 'legal-chargeback-v1': caller 'luna-48291' cannot see this chunk "
        "on 2026-05-27 (restricted, superseded), so no retriever may return it; expect a chunk the caller can see, "
        "or make it a safety case",
    )


# --- 5. not_yet_effective counted in exercise 2's summary ---------------------------------------------


def test_the_summary_counts_every_kind_seen_including_not_yet_effective(corpus, solution_cases):
    chunks, callers = corpus
    holiday = Case(name="not-yet-holiday", query="HOL-26 holiday purchases returned until January 31",
                   caller="dana-us-17", kind="not_yet_effective", forbidden=("us-holiday-returns-2026",))
    cases = [*_adversarial(solution_cases), holiday]
    before = list(cases)
    result = check_adversarial_cases(cases, chunks, callers, EVAL_DATE)
    assert result.passed, result.problems
    n = len(cases)
    kinds = {k: sum(c.kind == k for c in cases) for k in ("restricted", "superseded", "wrong_region", "absent")}
    assert f"{n} adversarial cases by kind: " + ", ".join(f"{v} {k}" for k, v in kinds.items()) + \
        ", 1 not_yet_effective" in result.passes
    assert cases == before  # the input list is not reordered or changed
    assert check_adversarial_cases(cases, chunks, callers, EVAL_DATE) == result  # deterministic


def test_a_lone_not_yet_effective_case_is_counted_not_silently_left_out(corpus):
    chunks, callers = corpus
    holiday = Case(name="not-yet-holiday", query="HOL-26 holiday purchases returned until January 31",
                   caller="dana-us-17", kind="not_yet_effective", forbidden=("us-holiday-returns-2026",))
    result = check_adversarial_cases([holiday], chunks, callers, EVAL_DATE, minimum=1)
    assert "1 adversarial cases by kind: 1 not_yet_effective" in result.passes


# --- 4 and 5. the notebooks ---------------------------------------------------------------------------


def _notebook(name: str) -> list[dict]:
    return json.loads((EXERCISES / name).read_text(encoding="utf-8"))["cells"]


@pytest.mark.parametrize("name", ["01-positive-cases.ipynb", "01-positive-cases-solution.ipynb"])
def test_exercise_1_says_up_front_that_exercise_3_needs_a_bm25_win_of_your_own(name):
    intro = "".join(_notebook(name)[0]["source"])
    assert intro.startswith("# Exercise 1")
    assert "Exercise 3 will ask for a case of *your own* where BM25 wins and the dense lane loses" in intro
    assert "An exact code lookup" in intro and "write one here" in intro


@pytest.mark.parametrize("name", ["02-adversarial-cases.ipynb", "02-adversarial-cases-solution.ipynb"])
def test_exercise_2_kinds_table_lists_not_yet_effective_as_optional(name):
    [table] = ["".join(c["source"]) for c in _notebook(name) if "| kind | caller asks |" in "".join(c["source"])]
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| `")]
    assert rows == ["`restricted`", "`superseded`", "`wrong_region`", "`absent`", "`not_yet_effective` (optional)"]
    assert "counts\ntoward the minimum of 4" in table


def test_exercise_1_lanes_cell_names_an_unknown_caller_instead_of_a_key_error(corpus):
    chunks, callers = corpus
    [cell] = ["".join(c["source"]) for c in _notebook("01-positive-cases-solution.ipynb")
              if c["cell_type"] == "code" and "retriever = labsrc.PolicyRetriever" in "".join(c["source"])]
    my_cases = [Case(name="eu-exact-rpl14", query="RPL-14", caller="Luna-48291", kind="positive",
                     expected=("eu-refurb-v2-rule",))]
    scope = {"labsrc": labsrc, "checks": checks, "load_embeddings": load_embeddings, "COURSE": POLICIES,
             "chunks": chunks, "callers": callers, "EVAL_DATE": EVAL_DATE, "my_cases": my_cases}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell, scope)  # noqa: S102 - the notebook's own cell, run as the learner runs it
    assert out.getvalue().splitlines()[-1] == (
        "eu-exact-rpl14             unknown caller 'Luna-48291': fix it as the check says")


def test_the_case_loader_and_the_gates_case_rule_offer_the_caller_too(tmp_path):
    """The hint lives in the records layer, so `labsrc gate`, the pytest form and the loader say it as well."""
    from labsrc.gate.case_rules import case_problems

    callers = {c.actor_id: c for c in load_callers(POLICIES / "callers.json")}
    chunks = {c.chunk_id: c for c in load_chunks(POLICIES / "chunks.jsonl")}
    record = json.loads((POLICIES / "cases.jsonl").read_text(encoding="utf-8").splitlines()[0])
    record["caller"] = record["caller"].upper()
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    with pytest.raises(InvalidRecord, match=r"line 1, field .caller.: unknown caller .[A-Z0-9-]+.; did you mean '[a-z0-9-]+'\? "
                                              r"\(only the letter case differs: caller ids are case-sensitive\)"):
        load_cases(path, chunk_ids=set(chunks), caller_ids=set(callers))
    [case] = load_cases(path)
    [problem] = [p for p in case_problems(case, callers, chunks, EVAL_DATE) if p.field == "caller"]
    assert problem.message == (f"unknown caller; did you mean {record['caller'].lower()!r}? "
                               "(only the letter case differs: caller ids are case-sensitive)")
