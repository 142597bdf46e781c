"""Answers in the lesson notebooks' "Check yourself" exercises: blank, or of the wrong type or shape.

Each lesson notebook ``notebooks/NN-name.ipynb`` is the solution: its answer lines
carry the marker comment ``# ANSWER``. ``notebooks/make_students.py`` writes a
student twin (``notebooks/student/``) in which every marked answer is ``...``.
A check cell calls :func:`require_answer` before it compares anything, so a blank
answer, or one of the wrong type or shape (a list where one term is asked for, a
dict without the ``"hybrid"`` lane), stops with a hint that says what to fill in,
never with a ``TypeError`` or an ``AttributeError`` from the comparison after it.
An answer that is the hint's own ``example`` is still blank: the example shows the
shape, and pasting it in is not an answer.

:data:`ANSWER_SHAPES` says what each lesson answer is, by its name; a check cell may
also pass the shape itself (``kind=``, ``keys=``, ``values=``, ``length=``).
A check that asks for the one closest (highest-scoring) item calls :func:`require_closest`,
so a tie is never taken as a win.
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from labsrc.course.checks.result import CheckFailed, CheckResult
from labsrc.errors import InvalidArgument
from labsrc.records.cases import Case
from labsrc.records.policy import PolicyChunk

__all__ = ["ANSWER_SHAPES", "AnswerShape", "BLANK_ANSWERS", "BlankAnswer", "TIE_TOLERANCE", "WrongAnswer",
           "answer_problem", "is_blank", "require_answer", "require_closest"]

#: Values that mean "not answered yet": the twin's ``...`` and a learner's ``None``.
BLANK_ANSWERS = (Ellipsis, None)


class BlankAnswer(CheckFailed):
    """A "Check yourself" answer is still blank, or is the hint's example; the message says what to fill in."""


class WrongAnswer(CheckFailed):
    """A "Check yourself" answer has the wrong type or shape, or ties where one winner is asked for.

    The message says what the answer is and what is asked.
    """


#: Names for the types an answer may have, as a learner reads them.
_TYPE_NAMES = {"str": "a string", "int": "a whole number", "number": "a number", "date": "a datetime.date",
               "set": "a set", "dict": "a dict", "sequence": "a list or tuple", "Case": "a labsrc.Case",
               "PolicyChunk": "a labsrc.PolicyChunk", "bool": "True or False"}


def _is(value: object, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":  # numpy integers are whole numbers too; True is not
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if kind == "date":
        return isinstance(value, dt.date) and not isinstance(value, dt.datetime)
    if kind == "set":
        return isinstance(value, (set, frozenset))
    if kind == "dict":
        return isinstance(value, Mapping)
    if kind == "sequence":
        return isinstance(value, (list, tuple))
    if kind == "Case":
        return isinstance(value, Case)
    if kind == "PolicyChunk":
        return isinstance(value, PolicyChunk)
    raise ValueError(f"unknown answer kind {kind!r}; valid kinds are {sorted(_TYPE_NAMES)}")


def _what(value: object) -> str:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{type(value).__name__} {shown}"


@dataclass(frozen=True)
class AnswerShape:
    """What an answer must be: its ``kind``; for a dict its exact ``keys``; its items' ``values`` kind; a ``length``.

    ``example`` is the value the check cell's hint shows as the shape (a sequence as a tuple):
    an answer equal to it is the example pasted in, not an answer.
    """

    kind: str
    keys: tuple[str, ...] | None = None
    values: str | None = None
    length: int | None = None
    example: object = None

    def is_example(self, value: object) -> bool:
        """True when ``value`` (already of this shape) is :attr:`example`; a list and a tuple of equal items match."""
        if self.example is None:
            return False
        if isinstance(self.example, tuple):
            return isinstance(value, (list, tuple)) and tuple(value) == self.example
        return value == self.example

    def problem(self, name: str, value: object) -> str | None:
        """What is wrong with ``value`` as this shape, or None."""
        if not _is(value, self.kind):
            return f"`{name}` is {_what(value)}, not {_TYPE_NAMES[self.kind]}"
        if self.keys is not None and isinstance(value, Mapping):
            missing = [k for k in self.keys if k not in value]
            extra = sorted(repr(k) for k in value if k not in self.keys)
            if missing:
                return f"`{name}` has no {', '.join(repr(k) for k in missing)} key: give every one of {list(self.keys)}"
            if extra:
                return f"`{name}` has key(s) {', '.join(extra)} besides {list(self.keys)}: keep those keys only"
        if self.length is not None and isinstance(value, Collection) and len(value) != self.length:
            return f"`{name}` holds {len(value)} item(s), not {self.length}"
        if self.values is not None:
            items = value.items() if isinstance(value, Mapping) else enumerate(value)  # type: ignore[arg-type]
            for key, item in items:
                if not _is(item, self.values):
                    where = f"[{key!r}]" if isinstance(value, Mapping) else (
                        f" item {item!r}" if isinstance(value, (set, frozenset)) else f"[{key}]")
                    return f"`{name}`{where} is {_what(item)}, not {_TYPE_NAMES[self.values]}"
        return None


#: Every lesson notebook's answer, by name (notebooks/NN-name.ipynb, the lines marked ``# ANSWER``).
ANSWER_SHAPES: dict[str, AnswerShape] = {
    "visitor_v1_reasons": AnswerShape("set", values="str"),
    "first_day_v2": AnswerShape("date"),
    "zero_term": AnswerShape("str"),
    "carrier_query": AnswerShape("str"),
    "paraphrase_vs_carrier": AnswerShape("number"),
    # The example is no answer either way: its closest chunk is the carrier rule.
    "my_query_vector": AnswerShape("sequence", values="number", length=3, example=(0.1, 0.2, 0.7)),
    "rrf_winner": AnswerShape("str"),
    "my_rrf_score": AnswerShape("number"),
    "my_hidden": AnswerShape("PolicyChunk"),
    "direction": AnswerShape("str"),
    "my_recall_at_1": AnswerShape("dict", keys=("bm25", "dense", "hybrid"), values="number"),
    "my_case": AnswerShape("Case"),
    "my_timings": AnswerShape("dict", keys=("authorize", "bm25", "dense", "fusion"), values="number"),
    "my_sample_count": AnswerShape("int"),
    "my_alpha": AnswerShape("number"),
    "my_convex": AnswerShape("number"),
    "my_dense_wins": AnswerShape("int"),
    "my_k": AnswerShape("int"),
    "score_both_lanes": AnswerShape("number"),
    "score_bm25_only": AnswerShape("number"),
    "short_share": AnswerShape("number"),
    "enough_ef": AnswerShape("int"),
    "which_gate": AnswerShape("str"),
}


def is_blank(value: object) -> bool:
    """True for ``...`` and ``None`` (identity, so an empty set or 0 is an answer)."""
    return any(value is blank for blank in BLANK_ANSWERS)


def answer_problem(name: str, value: object, shape: AnswerShape | None = None) -> str | None:
    """What is wrong with the type or shape of a (non-blank) answer, or None; ``shape`` defaults to :data:`ANSWER_SHAPES`."""
    shape = shape or ANSWER_SHAPES.get(name)
    return None if shape is None else shape.problem(name, value)


def require_answer(
    name: str,
    value: object,
    hint: str,
    *,
    kind: str | None = None,
    keys: tuple[str, ...] | None = None,
    values: str | None = None,
    length: int | None = None,
) -> object:
    """Return ``value``; raise :class:`BlankAnswer` while it is blank, :class:`WrongAnswer` while it has the wrong shape.

    The shape is ``kind`` (with ``keys``, ``values``, ``length``) when given,
    else the answer's entry in :data:`ANSWER_SHAPES`; both messages end with ``hint``.
    An answer equal to the shape's ``example`` raises :class:`BlankAnswer` too: it is the example, not an answer.

    >>> require_answer("first_day_v2", dt.date(2026, 4, 1), "a date")
    datetime.date(2026, 4, 1)
    """
    if is_blank(value):
        shown = "..." if value is ... else repr(value)
        problem = f"`{name}` is still blank ({shown}): {hint}"
        raise BlankAnswer(CheckResult(f"exercise answer {name}", problems=(problem,)))
    shape = AnswerShape(kind, keys, values, length) if kind is not None else ANSWER_SHAPES.get(name)
    wrong = answer_problem(name, value, shape)
    if wrong is not None:
        raise WrongAnswer(CheckResult(f"exercise answer {name}", problems=(f"{wrong}: {hint}",)))
    # After the shape check, so the comparison only ever sees values of the example's shape.
    if shape is not None and shape.is_example(value):
        problem = f"`{name}` is the example {value!r}, not an answer: {hint}"
        raise BlankAnswer(CheckResult(f"exercise answer {name}", problems=(problem,)))
    return value


#: Scores this close (absolute) to the highest one tie with it: 1e-12 is far below the 6 decimals the lessons
#: print, and far above the last-bit noise of two cosines computed in different orders.
TIE_TOLERANCE = 1e-12


def _listed(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else f"{', '.join(ids[:-1])} and {ids[-1]}"


def require_closest(name: str, scores: Mapping[str, float], hint: str) -> str:
    """The one id with the highest score (the chunk an answer ``name`` is closest to), or :class:`WrongAnswer`.

    Two or more ids within :data:`TIE_TOLERANCE` of the highest score tie: no one of
    them is the closest, so the check raises, naming them (sorted by id), instead of
    letting a tie-break pick a winner. A score that is not a finite number raises too.
    The message ends with ``hint``.

    >>> require_closest("v", {"b": 0.2, "a": 0.9}, "hint")
    'a'
    """
    if not scores:
        raise InvalidArgument(f"require_closest({name!r}): no scores to compare")
    for chunk_id in sorted(scores):
        if not math.isfinite(scores[chunk_id]):
            problem = f"`{name}` scores {float(scores[chunk_id])} against {chunk_id}, not a number to compare: {hint}"
            raise WrongAnswer(CheckResult(f"exercise answer {name}", problems=(problem,)))
    top = max(scores.values())
    tied = sorted(chunk_id for chunk_id, score in scores.items() if top - score <= TIE_TOLERANCE)
    if len(tied) > 1:
        problem = (f"`{name}` is equally close to {_listed(tied)} (score {top:.6f}): a tie is not a closest chunk, "
                   f"the answer must single one out: {hint}")
        raise WrongAnswer(CheckResult(f"exercise answer {name}", problems=(problem,)))
    return tied[0]
