"""labsrc.course.answers: a blank "Check yourself" answer stops its check with the hint, not a TypeError."""

from __future__ import annotations

import pytest

from labsrc.course import BlankAnswer, CheckFailed, is_blank, require_answer


@pytest.mark.parametrize("value", [..., None])
def test_a_blank_answer_raises_with_its_name_and_hint(value):
    with pytest.raises(BlankAnswer) as info:
        require_answer("first_day_v2", value, "a datetime.date, for example dt.date(2026, 1, 1)")
    shown = "..." if value is ... else "None"
    assert f"`first_day_v2` is still blank ({shown}): a datetime.date, for example dt.date(2026, 1, 1)" in str(info.value)
    # A blank answer is a failed check: the coursework's exception, so a notebook shows one line of advice.
    assert isinstance(info.value, CheckFailed)


@pytest.mark.parametrize("value", [0, 0.0, "", set(), [], False, "..."])
def test_falsy_answers_are_answers(value):
    # is-identity, not truthiness: 0 or an empty set can be the right answer.
    assert not is_blank(value)
    assert require_answer("x", value, "hint") is value
