"""labsrc.course.answers: a blank or wrong-typed "Check yourself" answer stops its check with the hint, not a TypeError."""

from __future__ import annotations

import pytest

from labsrc.course import ANSWER_SHAPES, AnswerShape, BlankAnswer, CheckFailed, WrongAnswer, is_blank, require_answer
from labsrc.course.answers import TIE_TOLERANCE, require_closest
from labsrc.errors import InvalidArgument


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


# --- the hint's example is not an answer; a tie is not a closest (issue 31) -----------------------------


@pytest.mark.parametrize("value", [[0.1, 0.2, 0.7], (0.1, 0.2, 0.7)])
def test_the_example_pasted_in_is_still_blank(value):
    assert ANSWER_SHAPES["my_query_vector"].example == (0.1, 0.2, 0.7)
    with pytest.raises(BlankAnswer) as info:
        require_answer("my_query_vector", value, "three numbers of your own, shaped like [0.1, 0.2, 0.7]")
    assert (f"`my_query_vector` is the example {value!r}, not an answer: "
            "three numbers of your own, shaped like [0.1, 0.2, 0.7]") in str(info.value)


@pytest.mark.parametrize("value", [[0.1, 0.2, 0.75], [0.7, 0.2, 0.1], [0.3, 0.9, 0.0]])
def test_a_value_near_the_example_is_an_answer(value):
    assert require_answer("my_query_vector", value, "h") is value


def test_an_example_of_the_wrong_shape_is_a_wrong_answer_first():
    # The shape check runs first, so the example comparison only sees values of the example's shape.
    with pytest.raises(WrongAnswer, match="holds 2 item"):
        require_answer("my_query_vector", [0.1, 0.2], "h")
    assert AnswerShape("number", example=0.5).is_example(0.5)
    assert not AnswerShape("number").is_example(0.5)


def test_the_single_closest_id_is_returned():
    assert require_closest("v", {"b": 0.2, "a": 0.9, "c": 0.0}, "h") == "a"
    # Just above the tolerance is a win, not a tie.
    assert require_closest("v", {"a": 0.5, "b": 0.5 + 2 * TIE_TOLERANCE}, "h") == "b"


@pytest.mark.parametrize(("scores", "said"), [
    ({"eu-refurb-v2-rule": 0.5, "eu-footwear-v1-rule": 0.5, "eu-carrier-loss-v1": 0.0},
     "eu-footwear-v1-rule and eu-refurb-v2-rule (score 0.500000)"),
    ({"c": 0.0, "b": 0.0, "a": 0.0}, "a, b and c (score 0.000000)"),
    # 0.1 + 0.2 is 0.30000000000000004: last-bit noise, still a tie.
    ({"x": 0.1 + 0.2, "y": 0.3, "z": 0.1}, "x and y (score 0.300000)"),
])
def test_a_tie_is_not_a_closest_and_names_the_tied_ids_sorted(scores, said):
    with pytest.raises(WrongAnswer) as info:
        require_closest("my_query_vector", scores, "THE HINT")
    assert (f"`my_query_vector` is equally close to {said}: a tie is not a closest chunk, "
            "the answer must single one out: THE HINT") in str(info.value)
    # The same verdict whatever order the scores come in.
    with pytest.raises(WrongAnswer) as reversed_info:
        require_closest("my_query_vector", dict(reversed(list(scores.items()))), "THE HINT")
    assert str(reversed_info.value) == str(info.value)


def test_closest_refuses_scores_it_cannot_compare():
    with pytest.raises(WrongAnswer, match="`v` scores nan against a, not a number to compare: h"):
        require_closest("v", {"a": float("nan"), "b": 0.1}, "h")
    with pytest.raises(InvalidArgument, match="no scores to compare"):
        require_closest("v", {}, "h")
