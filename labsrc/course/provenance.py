"""Whose work a submission is: the course's own files recognised inside a hand-in.

The course ships a model answer (``fixtures/coursework/solution``) and the
policy fixtures (``fixtures/policies``): thirty reference cases and their
vectors. A submission made of them, whole or in large part, proves nothing about
the learner, so the rubric names what it recognised and caps the grade below
Applied (:func:`labsrc.course.rubric.grade`). An instructor grading the model
answer itself says so (``model_answer=True``, ``labsrc rubric --model-answer``).

A case is the course's when it asks a course case's *question*: what it asks
(the query) and what it tests (its chunk ids, ``expected`` and ``forbidden`` as
sets), whoever asks it and wherever it stands in the file. So it is the course's
when its query is a course case's (case, spacing and punctuation aside) and

- its ids are that case's, whatever its caller and kind; or
- its caller is that case's, whatever its ids (the round-4 rule, kept: the
  same question by the same caller).

Names and notes are the learner's to change, and so are the caller and the
kind: moving a case to another caller who may ask it leaves the question the
course's. The kind is not compared either. It is a label that the case rule
(:mod:`labsrc.gate.case_rules`) makes fit the caller, so a moved case may need
another (``wrong_region`` becomes ``restricted`` for visitor-9000, who is
hidden from the chunk for both reasons), and requiring it would let a relabel
hide a copy. What the kind tells apart, the ids already do: a case that
expects chunks and one that forbids them never have the same ids.

A case is also the course's when it is a *near-copy* (:func:`near_copy`) of a
course case with the same ids, at least one, whatever its caller and kind (a
case with no ids, an ``absent`` one, is its query alone, and "can I pay in
instalments" is not "can I pay with bitcoin", two edits apart):

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
same ids alone say little, since many honest cases must test the same rule.

Each recognised case is named with the course case it matches and how
(:class:`Recognised`): "'my-a' is course case 'eu-exact-rpl14' (the same
question)", "'my-b' is course case 'eu-paraphrase-rpl14' (1 edit: 'cracked'
for 'broken')"; a line names :data:`NAMED_CASES` and says how many more.

Vectors are the course's when ``queries.npy`` and ``query_ids.txt`` are byte
for byte the course's; a report is when its ``report.json`` is. Bytes are
all they compare: cases moved or re-ordered and embedded again give other rows
in another order, and then only the cases give the copy away.

Measured (``tests/test_rubric_round6_copies.py``, ``tests/test_rubric_round5.py``):
the model answer with every case moved to the first other caller of its region
for whom it stays valid (:func:`labsrc.gate.case_rules.case_problems`; the US
and legal cases have none and keep theirs), in reverse order, as is and
reworded one word per query; the model answer reworded one, two and three words
per query (an exact-code positive becomes its sibling code *and that code's
rule*: other ids, so a new case); five honest submissions written for round 5.
Each has its own vectors (the course's MiniLM rows, through the tests' stand-in
encoder) and report, so only the cases can give a copy away. Levels with
latency measured (the tests run ``measure=False``, where Strong stands in for
Production-ready); "before" is round 5's rule (the same caller and kind)::

    submission                          recognised (before)   before             now
    model answer, moved and reversed    16 of 16  (4 of 16)   Production-ready   Foundational
      the same, 1 word per query        13 of 16  (3 of 16)   Production-ready   Foundational
    model answer, 1 word per query      13 of 16  (13)        Foundational       Foundational
    model answer, 2 words per query     13 of 16  (13)        Foundational       Foundational
    model answer, 3 words per query      0 of 16  (0)         Production-ready   Production-ready (the rule stops)
    honest: EU agent                     0 of 13  (0)         Production-ready   Production-ready
    honest: US agent                     0 of 12  (0)         Production-ready   Production-ready
    honest: APAC agent                   1 of 12  (0)         Production-ready   Production-ready
    honest: legal and VIP agents         0 of 12  (0)         Production-ready   Production-ready
    honest: a first try                  0 of 8   (0)         Applied            Applied

The APAC agent's one is the course's question indeed: "RPL-14" forbidding both
EU refurbished-laptop rules, which the course asks as visitor-9000.
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
    "NAMED_CASES",
    "NEAR_CHANGED",
    "NEAR_EDITS",
    "Borrowed",
    "Recognised",
    "code_shape",
    "course_files_in",
    "course_sources",
    "near_copy",
    "question_key",
    "term_changes",
    "term_edits",
]

#: The share of a submission's cases that are the course's at which it is "in large part" the course's work.
LARGE_PART = 0.5

#: Most edits (an analysed term inserted, deleted or replaced) between a near-copy's query and the course's.
NEAR_EDITS = 2

#: Most share of the longer query's analysed terms a near-copy changes; a sibling code is not a change.
NEAR_CHANGED = 0.5

#: How many recognised cases a "course files" line names before it says how many more.
NAMED_CASES = 3

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


def term_changes(mine: Sequence[str], theirs: Sequence[str]) -> list[str]:
    """The edits :func:`term_edits` counts, in query order: ``["'cracked' for 'broken'", "'please' added"]``.

    One cheapest alignment, read back from the full table; on a tie a kept or replaced term comes before a term
    added, and that before a term dropped, so the same two queries always give the same list.
    """
    table = [[i + j if not i or not j else 0 for j in range(len(theirs) + 1)] for i in range(len(mine) + 1)]
    for i, a in enumerate(mine, start=1):
        for j, b in enumerate(theirs, start=1):
            table[i][j] = min(table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + (a != b))
    changes: list[str] = []
    i, j = len(mine), len(theirs)
    while i or j:
        if i and j and table[i][j] == table[i - 1][j - 1] + (mine[i - 1] != theirs[j - 1]):
            if mine[i - 1] != theirs[j - 1]:
                changes.append(f"{mine[i - 1]!r} for {theirs[j - 1]!r}")
            i, j = i - 1, j - 1
        elif i and table[i][j] == table[i - 1][j] + 1:
            changes.append(f"{mine[i - 1]!r} added")
            i -= 1
        else:
            changes.append(f"{theirs[j - 1]!r} dropped")
            j -= 1
    return changes[::-1]


@dataclass(frozen=True)
class _Question:
    """A case as the rule compares it: its caller, its ids (expected, forbidden), its query's words and terms."""

    name: str
    caller: str
    ids: tuple[frozenset[str], frozenset[str]]
    words: tuple[str, ...]
    terms: tuple[str, ...]

    @classmethod
    def of(cls, name: str, query: str, caller: str, expected: Sequence[str], forbidden: Sequence[str]) -> _Question:
        key_caller, words = question_key(caller, query)
        return cls(name, key_caller, (frozenset(expected), frozenset(forbidden)), words, tuple(tokens(query)))

    @classmethod
    def of_record(cls, record: dict) -> _Question | None:
        """From a raw cases.jsonl record; None for one without a string caller and query (nothing to compare)."""
        caller, query = record.get("caller"), record.get("query")
        if not isinstance(caller, str) or not isinstance(query, str):
            return None
        expected, forbidden = ([i for i in record.get(key) or () if isinstance(i, str)]
                               for key in ("expected", "forbidden"))
        return cls.of(str(record.get("name", "")), query, caller, expected, forbidden)


@dataclass(frozen=True)
class Recognised:
    """One case of a submission that is a course case's question: ``case`` is ``course_case`` (``how``, in words)."""

    case: str
    course_case: str
    how: str
    near: bool = False

    def __str__(self) -> str:
        return f"{self.case!r} is course case {self.course_case!r} ({self.how})"


def _match(mine: _Question, theirs: _Question) -> tuple[tuple[int, int], str] | None:
    """How ``mine`` is ``theirs``'s question, with a rank (lower is closer); None when it is not."""
    if mine.words == theirs.words and mine.ids == theirs.ids:
        return (0, 0), "the same question"
    if mine.words == theirs.words and mine.caller == theirs.caller:
        return (0, 1), "the same question by the same caller"
    edits = near_copy(mine.terms, theirs.terms) if mine.ids == theirs.ids and any(mine.ids) else None
    if edits is None:
        return None
    changes = ", ".join(term_changes(mine.terms, theirs.terms))
    return (1, edits), (f"{edits} edit{'s' if edits != 1 else ''}: {changes}" if edits
                        else "the same question, stopwords aside")


def _recognise(cases: Sequence[Case], theirs: Sequence[_Question]) -> list[Recognised]:
    """Each of ``cases`` that asks a question of ``theirs`` (module docstring), with the closest one, by case name.

    Whatever a case's caller, kind or place in the file; a tie between course cases goes to the first by name.
    """
    found = []
    for case in cases:
        mine = _Question.of(case.name, case.query, case.caller, case.expected, case.forbidden)
        best = min(((m[0], c.name, m[1]) for c in theirs if (m := _match(mine, c)) is not None), default=None)
        if best is not None:
            found.append(Recognised(case.name, best[1], best[2], near=best[0][0] == 1))
    return sorted(found, key=lambda r: (r.case, r.course_case))


@dataclass(frozen=True)
class Borrowed:
    """One part of a submission that is the course's own: ``what`` (its file), ``source`` and how much.

    For cases.jsonl, ``cases`` names each recognised case (:class:`Recognised`); ``near`` of them are near-copies.
    """

    what: str
    source: str
    count: int
    total: int
    near: int = 0
    cases: tuple[Recognised, ...] = ()

    @property
    def large(self) -> bool:
        """Whole, or at least :data:`LARGE_PART` of it."""
        return self.total > 0 and self.count / self.total >= LARGE_PART

    def describe(self) -> str:
        """'cases.jsonl: 2 of 19 cases are the course's own (...): 'my-a' is course case ...', 'vectors/ is ...'."""
        if self.what != "cases.jsonl":
            return f"{self.what} is the course's own ({self.source})"
        share = f"all {self.total}" if self.count == self.total else f"{self.count} of {self.total}"
        text = f"cases.jsonl: {share} cases are the course's own ({self.source})"
        if self.near:
            which = "all of them" if self.near == self.count else f"{self.near} of them"
            text += f", {which} with a word or two or a code changed"
        if self.cases:
            named = ", ".join(str(r) for r in self.cases[:NAMED_CASES])
            more = len(self.cases) - NAMED_CASES
            text += f": {named}" + (f" and {more} more" if more > 0 else "")
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


def _same_vectors(mine: Path, theirs: Path) -> bool:
    pairs = [(_digest(mine / name), _digest(theirs / name)) for name in ("queries.npy", "query_ids.txt")]
    return all(a is not None and a == b for a, b in pairs)


def course_files_in(sub: Submission, cases: Sequence[Case]) -> list[Borrowed]:
    """What of ``sub`` is the course's own: its cases, vectors and report, each with its source; empty when none is."""
    found: list[Borrowed] = []
    sources = course_sources(sub.course)
    if cases:
        # Each course case file read once, every case of the submission matched against its cases.
        counts = [(label, folder, _recognise(cases, _course_cases(folder / "cases.jsonl")))
                  for label, folder in sources]
        best = max(counts, key=lambda item: len(item[2]), default=None)  # the first source on a tie
        if best is not None and best[2]:
            label, folder, named = best
            found.append(Borrowed("cases.jsonl", f"{label}, {_shown(folder / 'cases.jsonl')}", len(named), len(cases),
                                  sum(r.near for r in named), tuple(named)))
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
