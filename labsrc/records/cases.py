"""Evaluation cases: the frozen questions a release gate replays.

A case file is JSONL, one case per line::

    {"name": "exact-code", "query": "RPL-14", "caller": "luna-48291",
     "kind": "positive", "expected": ["eu-refurb-v2-rule"]}

``kind`` is one of :data:`CASE_KINDS`. A positive case lists the chunk ids it
requires in ``expected``; the negative kinds (``restricted``, ``superseded``,
``not_yet_effective``, ``wrong_region``) list, in ``forbidden``, the ids that must
never reach any lane, each kind named by why the boundary hides them: an ACL tag
the caller lacks, a version that has ended, one that has not started yet, another region.
An ``absent`` case is a question nothing permitted answers: it expects nothing,
and its optional ``forbidden`` ids must not be returned as evidence. A
``permitted_only`` case names no id at all: it states that the answer to its
request must equal what a build over the caller's permitted chunks only returns
(ids, order and scores), so it holds any sound retriever, whatever its ranking,
and fails one whose answer depends on chunks the caller may not see; the gate's
rebuild, bait and boundary gates judge it. ``on_date`` (ISO) overrides the
evaluation date; ``notes`` is free text for reviewers.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.records.caller_hints import caller_hint
from labsrc.records.loading import Field, iter_jsonl, parse_date

__all__ = [
    "CASE_KINDS",
    "NEGATIVE_KINDS",
    "Case",
    "case_format_problems",
    "cases_digest",
    "iter_cases",
    "load_cases",
    "padded_id_hint",
]

#: The kind that names no chunk: the answer must equal a build over the caller's permitted chunks only.
#: No recall, exclusion or abstention gate counts it; the rebuild, bait and boundary gates judge it.
PERMITTED_ONLY = "permitted_only"
CASE_KINDS = ("positive", "restricted", "superseded", "not_yet_effective", "wrong_region", "absent", PERMITTED_ONLY)
NEGATIVE_KINDS = ("restricted", "superseded", "not_yet_effective", "wrong_region")


@dataclass(frozen=True)
class Case:
    """One frozen question: who asks what, and which chunk ids must (not) come back.

    ``expected`` is what a positive case requires; ``forbidden`` is what the
    negative kinds (and, optionally, an ``absent`` case) must never return. A
    ``permitted_only`` case has neither: its answer must equal the permitted-only build's.
    """

    name: str
    query: str
    caller: str
    kind: str
    expected: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    on_date: dt.date | None = None
    notes: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            problem = "must not be empty or blank" if isinstance(self.name, str) else f"must be a string, got {type(self.name).__name__}"
            raise InvalidArgument(f"Case: field 'name' {problem} (got {self.name!r}); every case needs a name")
        where = f"case {self.name!r}"
        for field in ("query", "caller", "kind"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise InvalidArgument(f"{where}: field {field!r} must be a string, got {type(value).__name__} {value!r}")
            if field != "query" and not value.strip():
                raise InvalidArgument(f"{where}: field {field!r} must not be empty or blank, got {value!r}")
        for field in ("expected", "forbidden"):
            object.__setattr__(self, field, _chunk_ids(where, field, getattr(self, field)))
        if self.on_date is not None and (not isinstance(self.on_date, dt.date) or isinstance(self.on_date, dt.datetime)):
            shown = f"the string {self.on_date!r}" if isinstance(self.on_date, str) else f"{type(self.on_date).__name__} {self.on_date!r}"
            example = ""
            if isinstance(self.on_date, str):
                try:
                    day = parse_date(self.on_date)
                    example = f": write on_date=dt.date({day.year}, {day.month}, {day.day})"
                except ValueError:
                    pass
            raise InvalidArgument(f"{where}: field 'on_date' must be a datetime.date or None, got {shown}{example}")
        if self.notes is not None and not isinstance(self.notes, str):
            raise InvalidArgument(f"{where}: field 'notes' must be a string or None, got {type(self.notes).__name__}")

    def to_dict(self) -> dict[str, Any]:
        """The case as one JSONL record (the format :func:`load_cases` reads)."""
        out: dict[str, Any] = {"name": self.name, "query": self.query, "caller": self.caller, "kind": self.kind}
        if self.expected:
            out["expected"] = list(self.expected)
        if self.forbidden:
            out["forbidden"] = list(self.forbidden)
        if self.on_date is not None:
            out["on_date"] = self.on_date.isoformat()
        if self.notes is not None:
            out["notes"] = self.notes
        return out


def _chunk_ids(where: str, field: str, value: object) -> tuple[str, ...]:
    """``value`` as a tuple of chunk ids; a bare string (which would split into letters) or a blank id is refused."""
    if isinstance(value, str):
        raise InvalidArgument(
            f"{where}: field {field!r} must be a tuple of chunk ids, got the string {value!r}, which would be read "
            f"letter by letter: write {field}=({value!r},)"
        )
    if isinstance(value, Mapping) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{where}: field {field!r} must be a tuple of chunk ids, got {type(value).__name__} {value!r}")
    ids = tuple(value)
    for chunk_id in ids:
        if not isinstance(chunk_id, str) or not chunk_id.strip():
            what = f"the {type(chunk_id).__name__} {chunk_id!r}" if not isinstance(chunk_id, str) else f"the blank id {chunk_id!r}"
            raise InvalidArgument(f"{where}: field {field!r} holds {what}: list chunk ids as non-empty strings")
    return ids


_FIELDS = {"name", "query", "caller", "kind", "expected", "forbidden", "on_date", "notes"}


def padded_id_hint(chunk_id: str, known: Collection[str]) -> str | None:
    """What to say about an unknown id with whitespace around it (``"us-return-window-v2 "``); None when it has none.

    An id with a trailing space looks right when printed and is off by one character
    for every lookup; ``repr`` shows the space, and the message says whether the
    stripped id is a stored one. The course's checks say it too (``checks.cases.id_hint``).
    """
    stripped = chunk_id.strip()
    if stripped == chunk_id or not stripped:
        return None
    lead, trail = chunk_id[: len(chunk_id) - len(chunk_id.lstrip())], chunk_id[len(chunk_id.rstrip()):]
    side = "leading and trailing" if lead and trail else "leading" if lead else "trailing"
    pad = lead + trail
    what = f"a {side} space" if pad == " " else f"{side} spaces" if set(pad) == {" "} else f"{side} whitespace {pad!r}"
    if stripped in known:
        fix = "remove the space" if pad == " " else "remove the spaces" if set(pad) == {" "} else "strip it"
        return f"{chunk_id!r} has {what}: stripped, it is {stripped!r}, a stored chunk's id; {fix}"
    return f"{chunk_id!r} has {what}, and no stored chunk has the stripped id {stripped!r} either"


def case_format_problems(
    case: Case,
    *,
    earlier: Mapping[str, str] | None = None,
    chunk_ids: Collection[str] | None = None,
    caller_ids: Collection[str] | None = None,
) -> list[tuple[str, str]]:
    """Every way ``case`` breaks the case format, as ``(field, message)`` pairs; empty when it is valid.

    This is the one validation of a case: :func:`load_cases` raises on the first
    problem (naming the file and line), the coursework checks list them all.
    ``earlier`` maps the names of the cases before this one to where they were
    first seen (``"line 3"``), so a duplicate name is caught; with ``chunk_ids``
    / ``caller_ids`` given, an unknown chunk or caller is a problem, never a silent miss.
    """
    problems: list[tuple[str, str]] = []
    if case.kind not in CASE_KINDS:
        hint = f" (kinds are lower-case: {case.kind.casefold()!r})" if case.kind.casefold() in CASE_KINDS else ""
        problems.append(("kind", f"{case.kind!r} is not a case kind; valid kinds are {list(CASE_KINDS)}{hint}"))
    for field in ("name", "caller"):
        if not str(getattr(case, field)).strip():
            problems.append((field, "must not be empty or blank"))
    if earlier is not None and case.name in earlier:
        problems.append(("name", f"duplicate case name {case.name!r} (first seen on {earlier[case.name]})"))
    if case.kind == "positive" and not case.expected:
        problems.append(("expected", "a positive case must list at least one expected chunk id"))
    if case.kind == "positive" and case.forbidden:
        problems.append(("forbidden", "a positive case lists expected ids, not forbidden ones"))
    if case.kind in NEGATIVE_KINDS and not case.forbidden:
        problems.append(("forbidden", f"a {case.kind} case must list the chunk ids that must stay out"))
    if case.kind == PERMITTED_ONLY:
        # It expects the permitted-only build's answer, whatever that is: an id named here would pin one ranking.
        for field in ("expected", "forbidden"):
            if getattr(case, field):
                problems.append((field, f"a {PERMITTED_ONLY} case names no chunk ids, got {list(getattr(case, field))}: "
                                        "its answer must equal a build over the caller's permitted chunks only; "
                                        "drop the field, or make it a positive case (expected) or a safety case "
                                        "(forbidden)"))
    elif case.kind in CASE_KINDS and case.kind != "positive" and case.expected:
        problems.append(("expected", f"a {case.kind} case expects no evidence; use 'forbidden'"))
    for field in ("expected", "forbidden"):
        ids = getattr(case, field)
        if len(set(ids)) != len(ids):
            repeated = sorted({cid for cid in ids if ids.count(cid) > 1})
            problems.append((field, f"lists the same chunk id more than once: {repeated}"))
    if caller_ids is not None and case.caller not in caller_ids:
        hint = caller_hint(case.caller, caller_ids) or f"known callers: {sorted(caller_ids)}"
        problems.append(("caller", f"unknown caller {case.caller!r}; {hint}"))
    if chunk_ids is not None:
        for field in ("expected", "forbidden"):
            unknown = [cid for cid in getattr(case, field) if cid not in chunk_ids]
            if unknown:
                hints = [h for h in (padded_id_hint(cid, chunk_ids) for cid in unknown) if h]
                problems.append((field, "; ".join([f"unknown chunk id(s) {unknown}", *hints])))
    return problems


def cases_digest(cases: Sequence[Case]) -> str:
    """SHA-256 of the cases as JSONL records, in order: a report records it, so a stale report is detected."""
    payload = "\n".join(json.dumps(c.to_dict(), sort_keys=True, ensure_ascii=False) for c in cases)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def load_cases(
    path: str | Path,
    *,
    chunk_ids: Collection[str] | None = None,
    caller_ids: Collection[str] | None = None,
) -> list[Case]:
    """Read cases from JSONL. With ``chunk_ids`` / ``caller_ids`` given, a case naming an
    unknown chunk or caller is an error, never a silent miss (see :func:`case_format_problems`)."""
    return [case for _, case in iter_cases(path, chunk_ids=chunk_ids, caller_ids=caller_ids)]


def iter_cases(
    path: str | Path,
    *,
    chunk_ids: Collection[str] | None = None,
    caller_ids: Collection[str] | None = None,
) -> Iterator[tuple[int, Case]]:
    """:func:`load_cases` with each case's 1-based line, so a later check can blame the line."""
    first_line: dict[str, str] = {}
    for number, record in iter_jsonl(path):
        f = Field(record, path=path, line=number)
        f.require_known(_FIELDS)
        case = Case(
            name=f.text("name"),
            query=f.text("query", blank_ok=True),
            caller=f.text("caller"),
            kind=f.text("kind"),
            expected=f.string_list("expected", optional=True),
            forbidden=f.string_list("forbidden", optional=True),
            on_date=f.date("on_date", optional=True),
            notes=f.text("notes", optional=True, blank_ok=True),
        )
        problems = case_format_problems(case, earlier=first_line, chunk_ids=chunk_ids, caller_ids=caller_ids)
        if problems:
            raise f.error(*problems[0])
        first_line[case.name] = f"line {number}"
        yield number, case
