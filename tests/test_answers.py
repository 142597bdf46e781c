"""labsrc.course.answers: a blank or wrong-typed "Check yourself" answer stops its check with the hint, not a TypeError."""

from __future__ import annotations

import pytest

from labsrc.course import ANSWER_SHAPES, BlankAnswer, CheckFailed, WrongAnswer, is_blank, require_answer


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


# --- wrong type or shape (issue 23) -----------------------------------------------------------------



@pytest.mark.parametrize(("name", "value", "said"), [
    ("zero_term", ["laptop"], "`zero_term` is list ['laptop'], not a string"),
    ("my_recall_at_1", 0.67, "`my_recall_at_1` is float 0.67, not a dict"),
    ("my_recall_at_1", [2 / 3, 2 / 3, 1.0], "`my_recall_at_1` is list [0.6666666666666666, 0.6666666666666666, 1.0], not a dict"),
    ("my_recall_at_1", {"bm25": 2 / 3, "dense": 2 / 3},
     "`my_recall_at_1` has no 'hybrid' key: give every one of ['bm25', 'dense', 'hybrid']"),
    ("my_recall_at_1", {"bm25": 1, "dense": 1, "hybrid": 1, "rrf": 1},
     "`my_recall_at_1` has key(s) 'rrf' besides ['bm25', 'dense', 'hybrid']: keep those keys only"),
    ("my_recall_at_1", {"bm25": "2/3", "dense": 1, "hybrid": 1}, "`my_recall_at_1`['bm25'] is str '2/3', not a number"),
    ("my_query_vector", [0.3, 0.9], "`my_query_vector` holds 2 item(s), not 3"),
    ("my_sample_count", 70.0, "`my_sample_count` is float 70.0, not a whole number"),
    ("my_sample_count", True, "`my_sample_count` is bool True, not a whole number"),
    ("first_day_v2", "2026-04-01", "`first_day_v2` is str '2026-04-01', not a datetime.date"),
    ("visitor_v1_reasons", ["restricted"], "`visitor_v1_reasons` is list ['restricted'], not a set"),
    ("my_case", {"name": "x"}, "`my_case` is dict {'name': 'x'}, not a labsrc.Case"),
])
def test_a_wrong_typed_answer_is_named_with_its_hint_not_a_raw_error(name, value, said):
    with pytest.raises(WrongAnswer) as info:
        require_answer(name, value, "THE HINT")
    assert f"{said}: THE HINT" in str(info.value)
    assert isinstance(info.value, CheckFailed)


def test_right_shaped_answers_pass():
    import datetime as dt

    import numpy as np

    assert require_answer("my_recall_at_1", {"bm25": 2 / 3, "dense": np.float64(2 / 3), "hybrid": 1}, "h")
    assert require_answer("my_k", np.int64(10), "h") == 10
    assert require_answer("first_day_v2", dt.date(2026, 4, 1), "h") == dt.date(2026, 4, 1)
    assert require_answer("zero_term", "laptop", "h") == "laptop"
    # A cell may give the shape itself.
    with pytest.raises(WrongAnswer, match="`x` is str 'a', not a whole number: h"):
        require_answer("x", "a", "h", kind="int")


def test_every_lesson_answer_has_a_shape():
    import importlib.util
    import json
    from pathlib import Path

    notebooks = Path(__file__).resolve().parent.parent / "notebooks"
    spec = importlib.util.spec_from_file_location("make_students", notebooks / "make_students.py")
    make_students = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_students)
    targets = set()
    for path in make_students.lesson_notebooks():
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                targets.update(make_students.answer_targets("".join(cell["source"])))
    targets.discard("row")  # notebook 11: a helper line of its answer, not checked on its own
    assert targets == set(ANSWER_SHAPES)
