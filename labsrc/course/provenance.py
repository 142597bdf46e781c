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

Measured (``tests/test_rubric_round5.py``; the model answer's 16 cases reworded
by a swap table, a code-only query switched to a sibling code; vectors and
report made afresh from the reworded cases, so only the cases can give the copy
away; ``--no-latency``, where Strong is the highest level)::

    submission                               recognised       old rule      this rule
    model answer, 1 word per query           16 of 16 cases   Strong        Foundational
    model answer, 2 words per query          16 of 16 cases   Strong        Foundational
    model answer, 3 words per query           0 of 16 cases   (see tests)   unchanged
    five honest submissions (see the tests)   0 cases each    their level   the same level
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from labsrc.course.submission import MODEL_FOLDER, Submission
from labsrc.datasets.lesson import fixtures_dir
from labsrc.records.cases import Case
from labsrc.records.loading import iter_jsonl

__all__ = ["LARGE_PART", "Borrowed", "course_sources", "course_files_in", "question_key"]

#: The share of a submission's cases that are the course's at which it is "in large part" the course's work.
LARGE_PART = 0.5

_WORDS = re.compile(r"[^\W_]+")


def question_key(caller: str, query: str) -> tuple[str, tuple[str, ...]]:
    """``(caller, the query's words, case-folded)``: ``("luna-48291", ("can", "i", "swap"))`` for "Can I swap?"."""
    return caller.strip(), tuple(w.casefold() for w in _WORDS.findall(query))


@dataclass(frozen=True)
class Borrowed:
    """One part of a submission that is the course's own: ``what`` (its file), ``source`` and how much."""

    what: str
    source: str
    count: int
    total: int

    @property
    def large(self) -> bool:
        """Whole, or at least :data:`LARGE_PART` of it."""
        return self.total > 0 and self.count / self.total >= LARGE_PART

    def describe(self) -> str:
        """'cases.jsonl: all 16 cases are the course's own (...)', 'vectors/ is the course's own (...)'."""
        if self.what != "cases.jsonl":
            return f"{self.what} is the course's own ({self.source})"
        share = f"all {self.total}" if self.count == self.total else f"{self.count} of {self.total}"
        return f"cases.jsonl: {share} cases are the course's own ({self.source})"


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


def _questions(path: Path) -> set[tuple[str, tuple[str, ...]]]:
    keys = set()
    if path.is_file():
        for _, record in iter_jsonl(path):
            if isinstance(record, dict) and isinstance(record.get("caller"), str) and isinstance(record.get("query"), str):
                keys.add(question_key(record["caller"], record["query"]))
    return keys


def _same_vectors(mine: Path, theirs: Path) -> bool:
    pairs = [(_digest(mine / name), _digest(theirs / name)) for name in ("queries.npy", "query_ids.txt")]
    return all(a is not None and a == b for a, b in pairs)


def course_files_in(sub: Submission, cases: Sequence[Case]) -> list[Borrowed]:
    """What of ``sub`` is the course's own: its cases, vectors and report, each with its source; empty when none is."""
    found: list[Borrowed] = []
    sources = course_sources(sub.course)
    keys = [question_key(c.caller, c.query) for c in cases]
    if keys:
        # Each course case file read once, its questions matched against every case of the submission.
        counts = []
        for label, folder in sources:
            questions = _questions(folder / "cases.jsonl")
            counts.append((label, folder, sum(k in questions for k in keys)))
        best = max(counts, key=lambda item: item[2], default=None)
        if best is not None and best[2]:
            label, folder, count = best
            found.append(Borrowed("cases.jsonl", f"{label}, {_shown(folder / 'cases.jsonl')}", count, len(keys)))
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
