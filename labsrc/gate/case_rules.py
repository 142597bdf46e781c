"""The one rule a case must obey against the boundary, used by the lesson, the course and ``labsrc gate``.

A case is evidence only if it tests what its kind says:

* a **positive** case's expected ids are all *visible* to its caller on its date
  (a hidden expected chunk can never be retrieved: the case would fail for a
  reason that is not the retriever's);
* a **restricted**, **superseded**, **not_yet_effective** or **wrong_region**
  case's forbidden ids are all *hidden* from its caller on its date, and at least
  one of them is hidden for the case's own reason (a forbidden chunk the caller
  may see is not a leak when it comes back: the case itself is wrong). The
  reasons are strict: a superseded case needs a version that has *ended*, a
  not_yet_effective case one that has *not started*; a case of the wrong one
  tests the other filter, and the message names the kind that fits;
* an **absent** case may forbid any stored chunk, permitted ones included: they
  are the chunks that must not come back as evidence for a question nothing
  answers;
* a **permitted_only** case names no chunk (the case format refuses ``expected``
  and ``forbidden`` on it): what it states, that the answer equals a build over
  the caller's permitted chunks only, holds for every sound retriever, so only
  its caller and query can be wrong;
* every case names a known caller and stored chunks, and its query is not blank.

:func:`case_problems` lists what is wrong with one case, each problem naming the
case, the field and the value; an empty list means the case obeys the rule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from dataclasses import dataclass
from types import MappingProxyType

from labsrc.boundary import BlockReason, block_reasons
from labsrc.errors import InvalidRecord
from labsrc.records.caller_hints import caller_hint
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["OWN_REASONS", "CaseProblem", "case_problems", "cases_problems", "check_cases"]

#: The block reasons that make a safety case test its own kind.
OWN_REASONS: Mapping[str, frozenset[BlockReason]] = MappingProxyType(
    {
        "restricted": frozenset({BlockReason.RESTRICTED}),
        "superseded": frozenset({BlockReason.SUPERSEDED}),
        "not_yet_effective": frozenset({BlockReason.NOT_YET_EFFECTIVE}),
        "wrong_region": frozenset({BlockReason.WRONG_REGION}),
    }
)


@dataclass(frozen=True)
class CaseProblem:
    """One way a case breaks the rule: which case, which field, which value, and what to do."""

    case: str
    field: str
    value: str
    message: str

    def __str__(self) -> str:
        return f"case {self.case!r}, field {self.field!r}, value {self.value!r}: {self.message}"


def _reasons(reasons: Sequence[BlockReason]) -> str:
    return ", ".join(r.value for r in reasons)


def _successor(chunk: PolicyChunk, chunks: Mapping[str, PolicyChunk]) -> PolicyChunk | None:
    """The version of ``chunk``'s document that takes over when it ends: the first to start after its last day."""
    if chunk.effective_to is None:
        return None
    later = [c for c in chunks.values() if c.document_id == chunk.document_id and c.effective_from > chunk.effective_to]
    return min(later, key=lambda c: (c.effective_from, c.chunk_id), default=None)


def _date_message(case: Case, chunk: PolicyChunk, chunks: Mapping[str, PolicyChunk], day: dt.date,
                  run_date: dt.date) -> str | None:
    """Why a superseded / not_yet_effective case's forbidden ``chunk`` is visible on ``day`` when the case's
    date, not its choice of chunk, is what is wrong (the successor starts later); None when the date is not it."""
    if case.kind == "superseded" and chunk.effective_to is not None and day <= chunk.effective_to:
        successor = _successor(chunk, chunks)
        start = successor.effective_from if successor is not None else chunk.effective_to + dt.timedelta(days=1)
        who = f"its successor {successor.chunk_id}" if successor is not None else "the next version"
        drop = f", or drop on_date (the run's date, {run_date}, is after it)" if case.on_date and run_date >= start else ""
        return (
            f"the forbidden chunk {chunk.chunk_id} is right, the date is not: {who} takes effect on "
            f"{start}, so on {day} {chunk.chunk_id} is still the current version (in force until "
            f"{chunk.effective_to}) and the boundary rightly shows it; date the case on or after {start} "
            f'("on_date": "{start.isoformat()}"){drop}'
        )
    if case.kind == "not_yet_effective" and day >= chunk.effective_from and (
            chunk.effective_to is None or day <= chunk.effective_to):
        start = chunk.effective_from
        last = start - dt.timedelta(days=1)
        drop = f", or drop on_date (the run's date, {run_date}, is before it)" if case.on_date and run_date < start else ""
        return (
            f"the forbidden chunk {chunk.chunk_id} is right, the date is not: it takes effect on {start}, "
            f"so on {day} it is already in force and the boundary rightly shows it; date the case before {start} "
            f'("on_date": "{last.isoformat()}" at the latest){drop}'
        )
    return None


def case_problems(
    case: Case,
    callers: Mapping[str, Caller],
    chunks: Mapping[str, PolicyChunk],
    on_date: dt.date,
) -> list[CaseProblem]:
    """Everything that keeps ``case`` from being valid evidence (see the module docs).

    ``on_date`` is the run's date; a case's own ``on_date`` takes precedence.
    """
    problems: list[CaseProblem] = []

    def problem(field: str, value: object, message: str) -> None:
        problems.append(CaseProblem(case.name, field, str(value), message))

    if not case.query.strip():
        problem("query", case.query, "the query is blank; write the question the caller asks")
    caller = callers.get(case.caller)
    if caller is None:
        problem("caller", case.caller, f"unknown caller; {caller_hint(case.caller, callers) or f'known callers: {sorted(callers)}'}")
    for field in ("expected", "forbidden"):
        for chunk_id in getattr(case, field):
            if chunk_id not in chunks:
                problem(field, chunk_id, "no stored chunk has this id; check the spelling against chunks.jsonl")
    if caller is None or problems:
        return problems
    day = case.on_date or on_date
    if case.kind == "positive":
        for chunk_id in case.expected:
            reasons = block_reasons(caller, chunks[chunk_id], day)
            if reasons:
                problem(
                    "expected",
                    chunk_id,
                    f"caller {caller.actor_id!r} cannot see this chunk on {day} ({_reasons(reasons)}), so no "
                    "retriever may return it; expect a chunk the caller can see, or make it a safety case",
                )
    elif case.kind in OWN_REASONS:
        own = OWN_REASONS[case.kind]
        any_own = False
        hidden: dict[str, tuple[BlockReason, ...]] = {}
        for chunk_id in case.forbidden:
            reasons = block_reasons(caller, chunks[chunk_id], day)
            hidden[chunk_id] = reasons
            dated = None if reasons else _date_message(case, chunks[chunk_id], chunks, day, on_date)
            if dated is not None:  # the right chunk on the wrong day: the date is what to change
                problem("on_date", day.isoformat() if case.on_date else f"(none: the run's date, {day})", dated)
            elif not reasons:
                problem(
                    "forbidden",
                    chunk_id,
                    f"caller {caller.actor_id!r} may see this chunk on {day}, so returning it is not a leak; "
                    "forbid only chunks the boundary hides from this caller",
                )
            any_own = any_own or bool(own & set(reasons))
        if not any_own and not problems:
            wanted = " or ".join(sorted(r.value for r in own))
            why = "; ".join(f"{chunk_id} is hidden as {_reasons(reasons)}" for chunk_id, reasons in hidden.items())
            seen = {r for reasons in hidden.values() for r in reasons}
            fits = [kind for kind, reasons in OWN_REASONS.items() if reasons & seen]
            advice = (f"make it a {' or '.join(repr(k) for k in fits)} case, the kind that matches why they are hidden"
                      if fits else "pick the kind that matches why they are hidden")
            problem(
                "kind",
                case.kind,
                f"none of the forbidden chunks is hidden from {caller.actor_id!r} on {day} for being {wanted} "
                f"({why}); {advice}",
            )
    return problems


def cases_problems(
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    chunks: Mapping[str, PolicyChunk],
    on_date: dt.date,
) -> list[CaseProblem]:
    """:func:`case_problems` for every case, in case order."""
    return [p for case in cases for p in case_problems(case, callers, chunks, on_date)]


def check_cases(
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    chunks: Mapping[str, PolicyChunk],
    on_date: dt.date,
    *,
    path: str | Path | None = None,
    lines: Mapping[str, int] | None = None,
) -> None:
    """Raise :class:`~labsrc.errors.InvalidRecord` if any case breaks the rule (:func:`cases_problems`).

    The error names ``path``, the case's line (``lines`` maps case name → 1-based
    line), the field and the value of the first problem, and lists the others,
    so a case file is fixed in one pass rather than one run per mistake.
    """
    problems = cases_problems(cases, callers, chunks, on_date)
    if not problems:
        return
    lines = lines or {}

    def where(p: CaseProblem) -> str:
        line = lines.get(p.case)
        return ", ".join(x for x in (None if line is None else f"line {line}", f"field {p.field!r}") if x)

    first, rest = problems[0], problems[1:]
    message = f"value {first.value!r} (case {first.case!r}): {first.message}"
    if rest:
        message += f"\n{len(rest)} more problem(s) in the same file:" + "".join(
            f"\n  {where(p)}, value {p.value!r} (case {p.case!r}): {p.message}" for p in rest
        )
    raise InvalidRecord(message, path=path, line=lines.get(first.case), field=first.field)
