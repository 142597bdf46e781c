"""Blank answers in the lesson notebooks' "Check yourself" exercises.

Each lesson notebook ``notebooks/NN-name.ipynb`` is the solution: its answer lines
carry the marker comment ``# ANSWER``. ``notebooks/make_students.py`` writes a
student twin (``notebooks/student/``) in which every marked answer is ``...``.
A check cell calls :func:`require_answer` before it compares anything, so a blank
answer stops with a hint that says what to fill in, never with a ``TypeError``
from comparing ``...`` with a set.
"""

from __future__ import annotations

from labsrc.course.checks.result import CheckFailed, CheckResult

__all__ = ["BLANK_ANSWERS", "BlankAnswer", "is_blank", "require_answer"]

#: Values that mean "not answered yet": the twin's ``...`` and a learner's ``None``.
BLANK_ANSWERS = (Ellipsis, None)


class BlankAnswer(CheckFailed):
    """A "Check yourself" answer is still blank; the message says what to fill in."""


def is_blank(value: object) -> bool:
    """True for ``...`` and ``None`` (identity, so an empty set or 0 is an answer)."""
    return any(value is blank for blank in BLANK_ANSWERS)


def require_answer(name: str, value: object, hint: str) -> object:
    """Return ``value``; raise :class:`BlankAnswer` naming ``name`` and ``hint`` while it is blank.

    >>> require_answer("first_day_v2", 3, "a date")
    3
    """
    if not is_blank(value):
        return value
    shown = "..." if value is ... else repr(value)
    problem = f"`{name}` is still blank ({shown}): {hint}"
    raise BlankAnswer(CheckResult(f"exercise answer {name}", problems=(problem,)))
