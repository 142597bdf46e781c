"""labsrc.gate.case_rules: the one rule a case obeys against the boundary."""

from __future__ import annotations

import datetime as dt

from factories import make_chunk

import labsrc
from labsrc.gate.case_rules import case_problems, cases_problems

DAY = dt.date(2026, 5, 27)
LUNA = labsrc.Caller("luna", "EU", frozenset({"support:eu"}))
CALLERS = {"luna": LUNA}
CHUNKS = {
    c.chunk_id: c
    for c in (
        make_chunk("open", "refund rule"),
        make_chunk("vip", "vip rule", acl_tag="merchant:vip"),
        make_chunk("old", "old rule", effective_to=dt.date(2026, 3, 31)),
        make_chunk("future", "holiday rule", effective_from=dt.date(2026, 11, 1)),
        make_chunk("us", "us rule", region="US", acl_tag="support:us"),
    )
}


def problems(**fields: object) -> list[tuple[str, str]]:
    case = labsrc.Case(**{"name": "c", "query": "refund", "caller": "luna", "kind": "positive", **fields})
    return [(p.field, p.value) for p in case_problems(case, CALLERS, CHUNKS, DAY)]


def test_the_lesson_and_policy_fixtures_obey_the_rule(data):
    callers = {c.actor_id: c for c in data.callers}
    chunks = {c.chunk_id: c for c in data.chunks}
    assert cases_problems(data.cases, callers, chunks, data.eval_date) == []


def test_positive_case_expecting_a_visible_chunk_is_fine():
    assert problems(expected=("open",)) == []


def test_positive_case_expecting_a_hidden_chunk_names_the_reason():
    case = labsrc.Case("c", "vip", "luna", "positive", expected=("vip",))
    [problem] = case_problems(case, CALLERS, CHUNKS, DAY)
    assert (problem.field, problem.value) == ("expected", "vip")
    assert "cannot see this chunk on 2026-05-27 (restricted)" in problem.message


def test_safety_case_forbidding_a_visible_chunk_is_not_a_leak():
    assert problems(kind="restricted", forbidden=("vip", "open")) == [("forbidden", "open")]


def test_safety_case_needs_one_chunk_hidden_for_its_own_reason():
    # "old" is hidden, but as superseded: a restricted case about it tests the wrong thing.
    assert problems(kind="restricted", forbidden=("old",)) == [("kind", "restricted")]
    # One restricted chunk among others hidden for other reasons is enough (lesson 06's case).
    assert problems(kind="restricted", forbidden=("vip", "old")) == []


def test_each_direction_of_freshness_has_its_own_kind():
    assert problems(kind="superseded", forbidden=("old",)) == []
    assert problems(kind="not_yet_effective", forbidden=("future",)) == []
    assert problems(kind="wrong_region", forbidden=("us",)) == []


def test_superseded_is_strict_and_names_the_kind_that_fits():
    # A rule that has not started yet is not superseded: the case would test the other end of the window.
    case = labsrc.Case("c", "holiday", "luna", "superseded", forbidden=("future",))
    [problem] = case_problems(case, CALLERS, CHUNKS, DAY)
    assert (problem.field, problem.value) == ("kind", "superseded")
    assert problem.message == (
        "none of the forbidden chunks is hidden from 'luna' on 2026-05-27 for being superseded "
        "(future is hidden as not_yet_effective); make it a 'not_yet_effective' case, the kind that matches why "
        "they are hidden"
    )


def test_not_yet_effective_is_strict_and_names_the_kind_that_fits():
    case = labsrc.Case("c", "old rule", "luna", "not_yet_effective", forbidden=("old",))
    [problem] = case_problems(case, CALLERS, CHUNKS, DAY)
    assert (problem.field, problem.value) == ("kind", "not_yet_effective")
    assert "for being not_yet_effective (old is hidden as superseded); make it a 'superseded' case" in problem.message
    # One chunk hidden for the case's own reason among others is enough, as for the other kinds.
    assert problems(kind="not_yet_effective", forbidden=("future", "old")) == []


def test_the_case_date_takes_precedence():
    # On 2026-11-20 the holiday rule is in force, so it can be expected.
    assert problems(expected=("future",), on_date=dt.date(2026, 11, 20)) == []
    assert problems(expected=("future",)) == [("expected", "future")]


def test_absent_case_may_forbid_permitted_chunks():
    assert problems(kind="absent", forbidden=("open", "us")) == []


def test_blank_query_unknown_caller_and_unknown_chunk():
    assert problems(query="  ", expected=("open",)) == [("query", "  ")]
    assert problems(caller="nobody", expected=("open",)) == [("caller", "nobody")]
    assert problems(expected=("opne",)) == [("expected", "opne")]
