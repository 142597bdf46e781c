"""Generated probes, judged exactly: every answer against the boundary, and against the rebuild where one exists.

:mod:`~labsrc.gate.generate` makes the requests up, :mod:`~labsrc.gate.plan` puts
them on the main build (and on the rebuilds of their (caller, date)),
:mod:`~labsrc.gate.run` asks them; this module turns the answers into findings:

* every returned id must be one the asking caller may see on the request's date
  (:func:`~labsrc.gate.noninterference.boundary_violations`); a caller with no
  ACL tag may see nothing, so anything returned to one is a finding;
* where the run built the caller's permitted chunks only for that (caller, date)
  (the rebuild gate's builds), the answer must equal the rebuild's: ids, order
  and scores, or ids and order when the repeat probe found scores that do not
  reproduce (:func:`~labsrc.gate.noninterference.compare_observations`).

A red-team tool needs a model to judge its attacks; the lab knows the boundary,
so each judgement is exact. Each request that broke the invariant is handed back
as the one case to add to ``cases.jsonl`` (the counterexample), and no case pins
one retriever's ranking: hidden ids that came back become a safety case forbidding
them; an answer that returned none but differs from the rebuild becomes a
``permitted_only`` case (its answer must equal the permitted-only build's, which
every sound retriever meets). Cases with the same query, caller, date and kind
are one; each is checked against the case format and the case rules
(:func:`~labsrc.records.cases.case_format_problems`,
:func:`~labsrc.gate.case_rules.case_problems`) before it is printed, so it loads.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from labsrc.boundary import block_reasons
from labsrc.evaluation.subject import Observation, Request
from labsrc.gate.case_rules import OWN_REASONS, case_problems
from labsrc.gate.noninterference import Comparison, Violation, boundary_violations, compare_observations
from labsrc.gate.generate import GeneratedRequest, ProbePlan
from labsrc.gate.verdicts import plural
from labsrc.records.cases import PERMITTED_ONLY, Case, case_format_problems
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["CASES_FILE", "GIVE_UP_AFTER", "GeneratedCheck", "GeneratedFinding", "judge_generated", "request_of"]

#: Where ``--out`` writes the cases the generated probes hand back (queries included).
CASES_FILE = "generated_cases.jsonl"
#: Failures in a row after which the generated probes stop (the retriever stopped answering).
GIVE_UP_AFTER = 5
#: Findings of generated probes printed under a gate; report.json keeps every one.
SHOWN_FINDINGS = 20
_LANE = {"hybrid": "the fused list", "bm25": "the bm25 lane", "dense": "the dense lane"}


def request_of(probe: GeneratedRequest, callers: Mapping[str, Caller], top_k: int) -> Request:
    """The request ``probe`` makes: at its own depth when it has one (a probe's deep request), else at ``top_k``."""
    return Request(probe.query, callers[probe.caller], probe.on_date, probe.top_k or top_k, "adhoc")


@dataclass(frozen=True)
class GeneratedFinding:
    """One generated request that broke the invariant: what it asked, what went wrong, and the case to add."""

    request: GeneratedRequest
    kind: str  # "boundary" (a hidden id came back) or "rebuild" (the answer differs from the permitted-only build)
    problem: str
    chunk_id: str | None = None
    case: Mapping[str, Any] | None = None

    def describe(self) -> str:
        if self.case is None:
            add = "; the case for it is handed back with the first finding of this request"
            if self.chunk_id is not None and self.kind == "boundary" and self.problem.endswith("not a stored chunk"):
                add = "; no case can name an id that is not stored"
            elif self.kind == "rebuild" and self.request.deep:
                add = (f"; no case is handed back: a case is compared with the permitted-only build at top_k only, "
                       f"and this answer differs at top_k {self.request.top_k} only")
        elif self.request.printable:
            add = f"; add to cases.jsonl: {json.dumps(dict(self.case))}"
        else:  # its query is words of a hidden chunk: never printed, written only beside the report
            add = (f"; add case {self.case['name']!r} from {CASES_FILE} (written by --out; its query is words "
                   "of a hidden chunk, so no report prints it)")
        return f"{self.request.describe()}: {self.problem}{add}"

    def to_dict(self) -> dict[str, Any]:
        printable = self.case is not None and self.request.printable
        return {"request": self.request.to_dict(), "kind": self.kind, "problem": self.problem,
                "chunk_id": self.chunk_id, "case": dict(self.case) if printable else None,  # type: ignore[arg-type]
                "case_name": None if self.case is None else self.case["name"], "finding": self.describe()}


@dataclass(frozen=True)
class GeneratedCheck:
    """What the generated probes found: the plan's coverage, how many answered, every finding.

    ``compared`` counts answers compared with a permitted-only rebuild; ``not_compared`` says why
    none were, when the rebuild comparisons could not be trusted or made.
    """

    plan: ProbePlan
    answered: int
    errors: tuple[str, ...] = ()
    findings: tuple[GeneratedFinding, ...] = ()
    compared: int = 0
    not_compared: str | None = None
    not_asked: int = 0

    @property
    def asked(self) -> int:
        """Requests asked (each probe is asked at every depth of the plan: :attr:`ProbePlan.asked`)."""
        return len(self.plan.asked) - self.not_asked

    @property
    def below_floor(self) -> tuple[str, ...]:
        """One line per tier of hidden-chunk targets attacked below the config's ``min_coverage``."""
        return self.plan.floor_findings()

    def of_kind(self, kind: str) -> tuple[GeneratedFinding, ...]:
        return tuple(f for f in self.findings if f.kind == kind)

    def summary(self) -> str:
        line = f"{self.plan.coverage()}; {self.answered} answered"
        if self.errors:
            line += f", {len(self.errors)} raised or timed out"
        if self.not_asked:
            line += f", {self.not_asked} not asked ({GIVE_UP_AFTER} failed in a row, so the probes stopped)"
        line += f"; {self.compared} compared with a permitted-only rebuild"
        if self.not_compared:
            line += f" ({self.not_compared})"
        return line

    def cases_to_add(self) -> list[dict[str, Any]]:
        """Every case handed back, queries as they are: the lines of :data:`CASES_FILE`.

        Safety and ``permitted_only`` cases only, one per query, caller, date and kind, each valid.
        """
        return [dict(f.case) for f in self.findings if f.case is not None]

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "answered": self.answered, "errors": list(self.errors),
                "not_asked": self.not_asked,
                "compared": self.compared, "not_compared": self.not_compared,
                "findings": [f.to_dict() for f in self.findings]}


def shown(findings: Sequence[GeneratedFinding]) -> tuple[str, ...]:
    """The first :data:`SHOWN_FINDINGS` findings as lines, and how many more there are."""
    lines = tuple(f.describe() for f in findings[:SHOWN_FINDINGS])
    if len(findings) > SHOWN_FINDINGS:
        lines += (f"... and {len(findings) - SHOWN_FINDINGS} more generated findings (report.json lists every one)",)
    return lines


def _valid(case: Case, callers: Mapping[str, Caller], stored: Mapping[str, PolicyChunk]) -> dict[str, Any] | None:
    """``case`` as the line to add to ``cases.jsonl``, or None when the case format or the case rules refuse it."""
    if case_format_problems(case, chunk_ids=stored, caller_ids=callers):
        return None
    if case_problems(case, callers, stored, case.on_date or dt.date.today()):
        return None
    out: dict[str, Any] = {"name": case.name, "query": case.query, "caller": case.caller, "kind": case.kind}
    if case.expected:
        out["expected"] = list(case.expected)
    if case.forbidden:
        out["forbidden"] = list(case.forbidden)
    out["on_date"] = case.on_date.isoformat()  # type: ignore[union-attr]
    return out


def _notes(probe: GeneratedRequest) -> str:
    return f"generated by the gate: {probe.family} probe"


def _hidden_case(name: str, probe: GeneratedRequest, chunks: Sequence[PolicyChunk], callers: Mapping[str, Caller],
                 stored: Mapping[str, PolicyChunk]) -> Case | None:
    """A safety case forbidding ``chunks`` (hidden ids the answer returned), of the kind the first chunk's first
    fitting block reason names (else ``absent``); the first chunk alone when the kind does not fit them all."""
    reasons = block_reasons(callers[probe.caller], chunks[0], probe.on_date)
    kinds = [k for r in reasons for k, own in OWN_REASONS.items() if r in own] + ["absent"]
    ids = tuple(dict.fromkeys(c.chunk_id for c in chunks))
    for forbidden in dict.fromkeys((ids, ids[:1])):
        for kind in kinds:
            case = Case(name, probe.query, probe.caller, kind, forbidden=forbidden, on_date=probe.on_date,
                        notes=_notes(probe))
            if _valid(case, callers, stored) is not None:
                return case
    return None


def _permitted_only_case(name: str, probe: GeneratedRequest, callers: Mapping[str, Caller],
                         stored: Mapping[str, PolicyChunk]) -> Case | None:
    """A ``permitted_only`` case for ``probe``: its answer must equal the build over the caller's permitted chunks.

    Never a positive case expecting the rebuild's ids: those are one retriever's ranking, and a sound
    retriever that ranks otherwise would fail them.
    """
    case = Case(name, probe.query, probe.caller, PERMITTED_ONLY, on_date=probe.on_date, notes=_notes(probe))
    return case if _valid(case, callers, stored) is not None else None


def _hidden_chunks(violations: Sequence[Violation], stored: Mapping[str, PolicyChunk]) -> tuple[PolicyChunk, ...]:
    """The stored chunks among ``violations`` (an id no chunk has cannot be forbidden), first seen first."""
    return tuple(stored[i] for i in dict.fromkeys(v.chunk_id for v in violations) if i in stored)


def _rebuild_case(name: str, probe: GeneratedRequest, answer: Observation, callers: Mapping[str, Caller],
                  stored: Mapping[str, PolicyChunk]) -> Case | None:
    """The case for an answer that differs from the permitted-only rebuild's.

    Hidden ids came back: a safety case forbidding them (the boundary finding's case). Otherwise a
    ``permitted_only`` case: the answer must equal the rebuild's, whatever ids that rebuild ranks.
    """
    hidden = _hidden_chunks(boundary_violations(probe.family, answer, callers[probe.caller], probe.on_date, stored),
                            stored)
    if hidden:
        return _hidden_case(name, probe, hidden, callers, stored)
    return _permitted_only_case(name, probe, callers, stored)


_CaseKey = tuple[str, str, dt.date, str]


def _key(case: Case) -> _CaseKey:
    """Cases with the same query, caller, date and kind are one case."""
    return (case.query, case.caller, case.on_date, case.kind)  # type: ignore[return-value]


def _merge(first: Case, other: Case, callers: Mapping[str, Caller], stored: Mapping[str, PolicyChunk]) -> Case:
    """``first`` forbidding ``other``'s ids too, when that case is still valid; else ``first`` as it is."""
    forbidden = tuple(dict.fromkeys(first.forbidden + other.forbidden))
    merged = replace(first, forbidden=forbidden)
    return merged if forbidden != first.forbidden and _valid(merged, callers, stored) is not None else first


def _violation_line(v: Violation) -> str:
    return f"{v.chunk_id!r} at rank {v.rank} of {_LANE.get(v.lane, v.lane)}: {', '.join(v.details or v.reasons)}"


def judge_generated(
    plan: ProbePlan,
    answers: Sequence[Observation],
    stored: Mapping[str, PolicyChunk],
    callers: Mapping[str, Caller],
    *,
    rebuilt: Mapping[int, Observation] | None = None,
    mode: str = "exact",
    not_compared: str | None = None,
) -> GeneratedCheck:
    """Findings of every generated answer (``answers[i]`` answers ``plan.asked[i]``).

    ``rebuilt`` maps a request's position to the answer of the permitted-only rebuild for its
    (caller, date), where the run made one; ``mode`` is how those are compared.

    Each request that broke the invariant hands back one case, on its first finding: a safety case
    forbidding the hidden ids it returned, or, when it returned none but differs from the rebuild, a
    ``permitted_only`` case. Never a positive case: the rebuild's ids are one retriever's ranking. Cases
    with the same query, caller, date and kind are merged into one (the safety cases' forbidden ids
    joined), carried by the first finding of them, and each is checked against the case format and rules.

    A probe's deep request reports only what its ``top_k`` request did not: a hidden id not found there,
    a difference from the rebuild when there was none at ``top_k``.
    """
    rebuilt = rebuilt or {}
    found: list[tuple[GeneratedRequest, str, str, str | None, _CaseKey | None]] = []
    errors: list[str] = []
    answered = compared = 0
    cases: dict[_CaseKey, Case] = {}

    def hand(case: Case | None) -> _CaseKey | None:
        """Keep ``case``; its key when it is a new one (the finding that carries it), else None."""
        if case is None:
            return None
        key = _key(case)
        if key in cases:
            cases[key] = _merge(cases[key], case, callers, stored)
            return None
        cases[key] = case
        return key

    leaked: set[tuple[Any, ...]] = set()  # (probe, chunk id): a hidden id found at top_k is not found again deep
    differed: set[tuple[Any, ...]] = set()  # probes whose top_k answer differed from the rebuild's
    for i, (probe, answer) in enumerate(zip(plan.asked, answers)):
        if answer.error:
            errors.append(f"{probe.describe()}: {answer.error}")
            continue
        answered += 1
        caller = callers[probe.caller]
        same = (probe.family, probe.caller, probe.on_date, probe.query, probe.target)
        returned = boundary_violations(probe.family, answer, caller, probe.on_date, stored)
        violations = [v for v in returned if (same, v.chunk_id) not in leaked]
        leaked.update((same, v.chunk_id) for v in violations)
        hidden = _hidden_chunks(violations, stored)
        carried = hand(_hidden_case("generated", probe, hidden, callers, stored)) if hidden else None
        first = next((n for n, v in enumerate(violations) if v.chunk_id in stored), None)  # carries the case
        for n, v in enumerate(violations):
            found.append((probe, "boundary", _violation_line(v), v.chunk_id, carried if n == first else None))
        reference = rebuilt.get(i)
        if reference is None:
            continue
        comparison: Comparison = compare_observations(reference, answer, kind="rebuild", mode=mode)
        if comparison.error:
            errors.append(f"{probe.describe()} on the permitted-only rebuild: {comparison.error}")
            continue
        compared += 1
        if comparison.differs and (same not in differed or not probe.deep):
            differed.add(same)
            # A hidden id that came back is the boundary finding's case; otherwise the answer must equal the
            # rebuild's. Not for a deep request: a case is compared with the rebuild at top_k only, so a
            # permitted_only case would pass where only the deep answer differs.
            key = None if probe.deep or _hidden_chunks(returned, stored) else hand(
                _rebuild_case("generated", probe, answer, callers, stored))
            problem = f"differs from the build over {probe.caller!r}'s permitted chunks only: {comparison.describe()}"
            found.append((probe, "rebuild", problem, None, key))
    # Each case is named after the finding that carries it (generated-005: the fifth finding), checked once more.
    findings = tuple(
        GeneratedFinding(probe, kind, problem, chunk_id,
                         None if key is None else _valid(replace(cases[key], name=f"generated-{n:03d}"), callers, stored))
        for n, (probe, kind, problem, chunk_id, key) in enumerate(found, start=1))
    if not rebuilt and not_compared is None:
        not_compared = "no permitted-only rebuild was made for any (caller, date) of these requests"
    return GeneratedCheck(plan, answered, tuple(errors), findings, compared, not_compared,
                          not_asked=len(plan.asked) - len(answers))


def probes_detail(check: GeneratedCheck) -> str:
    """The generated-probes gate's detail line: coverage, then what was found (a probe at either depth)."""
    found = len({(f.request.caller, f.request.on_date, f.request.query) for f in check.findings})
    return f"{check.summary()}: {plural(found, 'request')} broke the invariant"
