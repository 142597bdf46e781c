"""Whose work a submission is: the course's own files recognised inside a hand-in.

The course ships a model answer (``fixtures/coursework/solution``) and the
policy fixtures (``fixtures/policies``): thirty reference cases and their
vectors. A submission made of them, whole or in large part, proves nothing about
the learner, so the rubric names what it recognised and caps the grade below
Applied (:func:`labsrc.course.rubric.grade`). An instructor grading the model
answer itself says so (``model_answer=True``, ``labsrc rubric --model-answer``).

A case is the course's when its question is: the same query (case, spacing and
punctuation aside) asked by the same caller. Names and notes are the learner's
to change, so renaming a copied case does not make it new. Vectors are the
course's when ``queries.npy`` and ``query_ids.txt`` are byte for byte the
course's; a report is when its ``report.json`` is.

A case is also the course's when it is a *near-copy* (:func:`near_copy`): it
asks what a course case asks with a small edit. All of these hold:

- the same caller, the same kind and the same chunk ids (``expected`` and
  ``forbidden``, as sets): the case tests what the course's case tests;
- at most :data:`NEAR_EDITS` = 2 edits between the two queries' analysed terms
  (:func:`labsrc.lanes.analysis.tokens`: lowercased, codes kept whole, the
  lesson's stopwords dropped), an edit being a term inserted, deleted or
  replaced: "swap a *cracked* reconditioned notebook" is one edit from "swap a
  broken reconditioned notebook", and "RPL-15" one from "RPL-14";
- at most :data:`NEAR_CHANGED` = half of the longer query's terms changed,
  where a code switched to a *sibling code* (the same shape with other digits:
  ``rpl-14`` → ``rpl-15``, ``vip-rpl-1`` → ``vip-rpl-2``; :func:`code_shape`)
  does not count as changed. So a one-word query is a near-copy only through a
  sibling code, and "chargeback rules" is not "LGL-3 chargeback" (both of its
  two terms changed), while "LGL-3 dispute" is.

Three edits are where the rule stops: a question with three of its words
changed may be genuine work (a learner who asks about the same rule in their own
words shares a word or two with the course's question by necessity), and the
same caller, kind and ids alone say little, since many honest cases must test
the same rule for the same caller.

Measured (``tests/test_rubric_round5.py``): the model answer's 16 cases reworded by
a swap table, one, two or three words per query (an exact-code positive becomes
its sibling code *and that code's rule*, RPL-15 and the tablet rule: other ids,
so a new case); five honest submissions written for the test. Each has its own
vectors (the course's MiniLM rows, through the test's stand-in encoder) and
report, so only the cases can give a copy away. Levels with latency
measured (the tests run ``measure=False``, where Strong stands in for
Production-ready)::

    submission                        recognised   exact rule only    with near-copies
    model answer, 1 word per query    13 of 16     Production-ready   Foundational
    model answer, 2 words per query   13 of 16     Production-ready   Foundational
    model answer, 3 words per query    0 of 16     Production-ready   Production-ready (the rule stops)
    honest: EU agent                   0 of 13     Production-ready   Production-ready
    honest: US agent                   0 of 12     Production-ready   Production-ready
    honest: APAC agent                 0 of 12     Production-ready   Production-ready
    honest: legal and VIP agents       0 of 12     Production-ready   Production-ready
    honest: a first try                0 of 8      Applied            Applied
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from labsrc.course.submission import MODEL_FOLDER, Submission
from labsrc.datasets.lesson import fixtures_dir
from labsrc.lanes.analysis import tokens
from labsrc.records.cases import Case
from labsrc.records.loading import iter_jsonl

__all__ = [
    "LARGE_PART",
    "NEAR_CHANGED",
    "NEAR_EDITS",
    "Borrowed",
    "code_shape",
    "course_files_in",
    "course_sources",
    "near_copy",
    "question_key",
    "term_edits",
]

#: The share of a submission's cases that are the course's at which it is "in large part" the course's work.
LARGE_PART = 0.5

#: Most edits (an analysed term inserted, deleted or replaced) between a near-copy's query and the course's.
NEAR_EDITS = 2

#: Most share of the longer query's analysed terms a near-copy changes; a sibling code is not a change.
NEAR_CHANGED = 0.5

_WORDS = re.compile(r"[^\W_]+")
_DIGITS = re.compile(r"[0-9]+")


def question_key(caller: str, query: str) -> tuple[str, tuple[str, ...]]:
    """``(caller, the query's words, case-folded)``: ``("luna-48291", ("can", "i", "swap"))`` for "Can I swap?"."""
    return caller.strip(), tuple(w.casefold() for w in _WORDS.findall(query))


def code_shape(term: str) -> str | None:
    """A code's shape, its digit runs as ``#``: ``"rpl-#"`` for ``rpl-14`` and ``rpl-15``; None for a plain word.

    A code is an analysed term with a letter and a digit in it. Two codes of one shape are *siblings*.
    """
    if not any(ch.isdigit() for ch in term) or not any(ch.isalpha() for ch in term):
        return None
    return _DIGITS.sub("#", term)


def _same_or_sibling(a: str, b: str) -> bool:
    return a == b or (code_shape(a) is not None and code_shape(a) == code_shape(b))


def term_edits(mine: Sequence[str], theirs: Sequence[str], same: Callable[[str, str], bool] = str.__eq__) -> int:
    """Levenshtein distance over terms: the fewest terms inserted, deleted or replaced to turn ``theirs`` into ``mine``.

    ``same`` says which terms count as equal (exact by default). Wagner & Fischer (1974)'s dynamic programme,
    one row at a time: ``row[j]`` is the distance between ``mine[:i]`` and ``theirs[:j]``.
    """
    row = list(range(len(theirs) + 1))
    for i, a in enumerate(mine, start=1):
        previous, row[0] = row[0], i
        for j, b in enumerate(theirs, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (not same(a, b)))
    return row[-1]


def near_copy(mine: Sequence[str], theirs: Sequence[str]) -> int | None:
    """How many edits make query terms ``mine`` from ``theirs``, when it is a near-copy (module docstring); else None.

    ``near_copy(["swap", "cracked", "reconditioned", "notebook"], ["swap", "broken", "reconditioned", "notebook"])``
    is 1; ``near_copy(["rpl-15"], ["rpl-14"])`` is 1 (a sibling code); ``near_copy(["refund"], ["rpl-14"])`` is None.
    """
    longest = max(len(mine), len(theirs))
    if longest == 0:
        return None
    edits = term_edits(mine, theirs)
    if edits > NEAR_EDITS or term_edits(mine, theirs, _same_or_sibling) > NEAR_CHANGED * longest:
        return None
    return edits


@dataclass(frozen=True)
class _Question:
    """A case as the near-copy rule compares it: what it tests (caller, kind, ids) and its query's analysed terms."""

    name: str
    query: str
    tests: tuple[str, str, frozenset[str], frozenset[str]]  # caller, kind, expected, forbidden
    terms: tuple[str, ...]

    @property
    def caller(self) -> str:
        return self.tests[0]

    @classmethod
    def of(cls, name: str, query: str, caller: str, kind: str, expected: Sequence[str],
           forbidden: Sequence[str]) -> _Question:
        return cls(name, query, (caller.strip(), kind, frozenset(expected), frozenset(forbidden)), tuple(tokens(query)))

    @classmethod
    def of_record(cls, record: dict) -> _Question | None:
        """From a raw cases.jsonl record; None for one without a string caller and query (nothing to compare)."""
        caller, query = record.get("caller"), record.get("query")
        if not isinstance(caller, str) or not isinstance(query, str):
            return None
        expected, forbidden = ([i for i in record.get(key) or () if isinstance(i, str)]
                               for key in ("expected", "forbidden"))
        return cls.of(str(record.get("name", "")), query, caller, str(record.get("kind")), expected, forbidden)


@dataclass(frozen=True)
class Borrowed:
    """One part of a submission that is the course's own: ``what`` (its file), ``source`` and how much.

    ``near`` of the ``count`` cases are near-copies (:func:`near_copy`), ``example`` names one of them.
    """

    what: str
    source: str
    count: int
    total: int
    near: int = 0
    example: str = ""

    @property
    def large(self) -> bool:
        """Whole, or at least :data:`LARGE_PART` of it."""
        return self.total > 0 and self.count / self.total >= LARGE_PART

    def describe(self) -> str:
        """'cases.jsonl: all 16 cases are the course's own (...)', 'vectors/ is the course's own (...)'."""
        if self.what != "cases.jsonl":
            return f"{self.what} is the course's own ({self.source})"
        share = f"all {self.total}" if self.count == self.total else f"{self.count} of {self.total}"
        text = f"cases.jsonl: {share} cases are the course's own ({self.source})"
        if self.near:
            which = "all of them" if self.near == self.count else f"{self.near} of them"
            text += f", {which} with a word or two or a code changed ({self.example})"
        return text


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(fixtures_dir().resolve().parent))
    except ValueError:
        return str(path)


def course_sources(course: Path) -> list[tuple[str, Path]]:
    """The course folders a submission may have copied: ``(label, folder)``, the model answer first."""
    sources = [("the model answer", fixtures_dir() / "coursework" / "solution"), ("the course's reference cases", course)]
    seen: set[Path] = set()
    unique = []
    for label, folder in sources:
        if folder.resolve() not in seen and folder.is_dir():
            seen.add(folder.resolve())
            unique.append((label, folder))
    return unique


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def _course_cases(path: Path) -> list[_Question]:
    found = []
    if path.is_file():
        for _, record in iter_jsonl(path):
            case = _Question.of_record(record) if isinstance(record, dict) else None
            if case is not None:
                found.append(case)
    return found


def _recognised(cases: Sequence[Case], theirs: list[_Question]) -> tuple[int, int, str]:
    """How many of ``cases`` are exact or near copies of ``theirs``, how many of those are near, and one example."""
    exact = {question_key(c.caller, c.query) for c in theirs}
    by_test: dict[tuple[str, str, frozenset[str], frozenset[str]], list[_Question]] = {}
    for c in theirs:
        by_test.setdefault(c.tests, []).append(c)
    count = near = 0
    example = ""
    for case in cases:
        if question_key(case.caller, case.query) in exact:
            count += 1
            continue
        mine = _Question.of(case.name, case.query, case.caller, case.kind, case.expected, case.forbidden)
        for course_case in by_test.get(mine.tests, []):
            edits = near_copy(mine.terms, course_case.terms)
            if edits is not None:
                count, near = count + 1, near + 1
                if not example:
                    words = "1 edit" if edits == 1 else f"{edits} edits"
                    example = (f"case {case.name!r} asks {case.query!r}, {words} from {course_case.name!r}'s "
                               f"{course_case.query!r}")
                break
    return count, near, example


def _same_vectors(mine: Path, theirs: Path) -> bool:
    pairs = [(_digest(mine / name), _digest(theirs / name)) for name in ("queries.npy", "query_ids.txt")]
    return all(a is not None and a == b for a, b in pairs)


def course_files_in(sub: Submission, cases: Sequence[Case]) -> list[Borrowed]:
    """What of ``sub`` is the course's own: its cases, vectors and report, each with its source; empty when none is."""
    found: list[Borrowed] = []
    sources = course_sources(sub.course)
    if cases:
        # Each course case file read once, every case of the submission matched against its cases.
        counts = [(label, folder, *_recognised(cases, _course_cases(folder / "cases.jsonl")))
                  for label, folder in sources]
        best = max(counts, key=lambda item: item[2], default=None)
        if best is not None and best[2]:
            label, folder, count, near, example = best
            found.append(Borrowed("cases.jsonl", f"{label}, {_shown(folder / 'cases.jsonl')}", count, len(cases),
                                  near, example))
    if sub.vectors is not None:
        for label, folder in sources:
            theirs = folder / "vectors" / MODEL_FOLDER
            if _same_vectors(sub.vectors, theirs):
                found.append(Borrowed("vectors/", f"{label}, {_shown(theirs)}", 1, 1))
                break
    if sub.report is not None:
        mine = _digest(sub.report / "report.json")
        for label, folder in sources:
            theirs = folder / "report" / "report.json"
            if mine is not None and mine == _digest(theirs):
                found.append(Borrowed("report/", f"{label}, {_shown(theirs)}", 1, 1))
                break
    return found
