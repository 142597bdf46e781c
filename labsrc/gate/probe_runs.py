"""The builds a factory's gate run makes besides the main one, each in its own worker process.

:class:`Builder` builds the factory in a fresh worker (:mod:`~labsrc.gate.workers`)
on the config's clocks. The probes (:mod:`~labsrc.gate.probes` says what each proves):

* :func:`repeat_probe`: the same chunks again, every case replayed;
* :func:`canary_probe`: a canary added and a returned chunk withheld;
* :func:`concurrency_probe`: every case from many threads at once on the main build;
* :func:`noninterference_probe`: per (caller, date), a build over the caller's permitted
  chunks only and one with bait added; a returned bait chunk is a boundary violation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from labsrc.boundary import block_reasons, permitted_chunks
from labsrc.gate.bait import BaitVectors, bait_chunks
from labsrc.gate.config import GateConfig
from labsrc.evaluation.latency import Progress
from labsrc.gate.noninterference import Comparison, Violation, boundary_violations, compare_observations
from labsrc.gate.outcomes import CaseOutcome
from labsrc.gate.probes import (
    CONCURRENCY_ROUNDS,
    CanaryCheck,
    ConcurrencyCheck,
    Repeatability,
    canary_chunk,
    canary_vectors,
    compare_concurrent,
    interleaved,
    pick_canary_caller,
    pick_withheld,
    repeatability,
    withheld_rank,
)
from labsrc.evaluation.subject import Factory, Observation, Request, SubjectError
from labsrc.gate.workers import IsolatedBuild
from labsrc.lanes.dense import DenseSource
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "Builder",
    "canary_probe",
    "case_groups",
    "case_request",
    "concurrency_probe",
    "noninterference_probe",
    "repeat_probe",
]


def case_groups(cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date) -> dict[tuple[str, dt.date], list[int]]:
    """Case positions by (caller, date): one rebuild and one bait build serve each group."""
    groups: dict[tuple[str, dt.date], list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault((case.caller, case.on_date or on_date), []).append(i)
    return groups


@dataclass(frozen=True)
class Builder:
    """How the gate builds: the factory, in a fresh worker process per build, with the config's clocks.

    ``made`` keeps every build (or the error of one that failed), so that once they are closed the
    run can say what each printed and which processes it left running (:meth:`aftermath`).
    """

    factory: Factory
    vectors: DenseSource | None
    config: GateConfig
    made: list[tuple[str, IsolatedBuild | SubjectError]] = field(default_factory=list, compare=False, repr=False)

    def build(self, chunks: Sequence[PolicyChunk], what: str, vectors: DenseSource | None | str = "same") -> IsolatedBuild:
        try:
            build = IsolatedBuild(
                self.factory, chunks, self.vectors if vectors == "same" else vectors, what=what,  # type: ignore[arg-type]
                build_timeout_s=self.config.build_timeout_s, search_timeout_s=self.config.search_timeout_s,
            )
        except SubjectError as exc:
            self.made.append((what, exc))
            raise
        self.made.append((what, build))
        return build

    def aftermath(self) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """``(leftovers, output)`` of every closed build: each process a build left running, as
        ``"build 'what': pid 1234 `cmd`"``, and ``(what, text)`` for each build that printed something."""
        leftovers: list[str] = []
        output: list[tuple[str, str]] = []
        for what, build in self.made:
            leftovers += [f"build {what!r}: {pid}" for pid in getattr(build, "leftovers", ())]
            text = getattr(build, "output", "") or ""
            if text.strip():
                output.append((what, text))
        return tuple(leftovers), tuple(output)


def case_request(case: Case, callers: Mapping[str, Caller], on_date: dt.date, top_k: int) -> Request:
    return Request(case.query, callers[case.caller], case.on_date or on_date, top_k, case.kind)


def noninterference_probe(
    builder: Builder,
    stored: tuple[PolicyChunk, ...],
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    on_date: dt.date,
    top_k: int,
    observed: Sequence[Observation],
    mode: str,
    unstable: frozenset[str],
    progress: Progress | None,
    *,
    extra: Sequence[tuple[int, Request]] = (),
) -> tuple[dict[int, Comparison], dict[int, Comparison], list[tuple[int, Violation]], dict[int, Observation]]:
    """Per case position: the comparison with the permitted-only rebuild, and with the bait build.

    Cases in ``unstable`` (ids not reproducible between two builds of the same chunks) are not compared.
    The third item holds bait chunks the bait build returned, as boundary violations of their case.
    ``extra`` are more ``(key, request)`` pairs (the generated probes) asked of the rebuild of their
    (caller, date) when the cases made one; the fourth item maps each key to that rebuild's answer.
    """
    rebuild: dict[int, Comparison] = {}
    bait: dict[int, Comparison] = {}
    returned_bait: list[tuple[int, Violation]] = []
    rebuilt: dict[int, Observation] = {}
    groups = case_groups(cases, callers, on_date)
    extra_by_group: dict[tuple[str, dt.date], list[tuple[int, Request]]] = {}
    for key, request in extra:
        extra_by_group.setdefault((request.caller.actor_id, request.on_date), []).append((key, request))
    taken = {c.chunk_id for c in stored}
    skipped = "its ids and order differ between two builds of the same chunks (see 'repeatable builds')"
    for done, ((actor, day), positions) in enumerate(groups.items(), start=1):
        for i in positions:
            if cases[i].name in unstable:
                rebuild[i] = Comparison("rebuild", mode, skipped=skipped)
                bait[i] = Comparison("bait", mode, skipped=skipped)
        positions = [i for i in positions if cases[i].name not in unstable]
        if not positions:
            continue
        caller = callers[actor]
        permitted = tuple(permitted_chunks(caller, stored, day))
        queries = list(dict.fromkeys(cases[i].query for i in positions))
        planted = bait_chunks(queries, caller, day, taken)
        planted_ids = frozenset(c.chunk_id for c in planted)
        planted_by_id = {c.chunk_id: c for c in planted}
        vectors = builder.vectors
        builds = (
            ("rebuild", permitted, vectors, f"over {actor}'s {len(permitted)} permitted chunks on {day}"),
            ("bait", stored + planted, None if vectors is None else BaitVectors.for_queries(vectors, planted),
             f"with {len(planted)} bait chunks hidden from {actor} on {day}"),
        )
        for kind, chunks, source, what in builds:
            target = rebuild if kind == "rebuild" else bait
            try:
                other = builder.build(chunks, what, source)
            except SubjectError as exc:
                for i in positions:
                    target[i] = Comparison(kind, mode, error=str(exc))
                continue
            try:
                for i in positions:
                    case = cases[i]
                    if observed[i].error:  # failed on the main build already: nothing to compare with
                        target[i] = Comparison(kind, mode, error=f"the full build raised {observed[i].error}")
                        continue
                    answer = other.search(case_request(case, callers, on_date, top_k))
                    if kind == "rebuild":
                        target[i] = compare_observations(answer, observed[i], kind=kind, mode=mode)
                        continue
                    target[i] = compare_observations(observed[i], answer, kind=kind, mode=mode, bait_ids=planted_ids)
                    if target[i].bait_returned:
                        found = boundary_violations(case.name, answer, caller, day, planted_by_id,
                                                    where="(bait build)")
                        returned_bait += [(i, v) for v in found if v.chunk_id in planted_ids]
                if kind == "rebuild":
                    for key, request in extra_by_group.get((actor, day), ()):
                        rebuilt[key] = other.search(request)
            finally:
                other.close()
        if progress is not None:
            progress("noninterference", done, len(groups))
    return rebuild, bait, returned_bait, rebuilt


def _replay_on(build: IsolatedBuild, cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date,
               top_k: int, observed: Sequence[Observation]) -> list[Observation]:
    """Every case on ``build``; a case that raised on the main build is not asked again (it keeps that error)."""
    return [answer if answer.error else build.search(case_request(case, callers, on_date, top_k))
            for case, answer in zip(cases, observed)]


def repeat_probe(builder: Builder, stored: tuple[PolicyChunk, ...], cases: Sequence[Case], callers: Mapping[str, Caller],
            on_date: dt.date, top_k: int, observed: Sequence[Observation]) -> Repeatability:
    """Build the same chunks again in another process and replay every case on it."""
    try:
        with builder.build(stored, "every stored chunk, built a second time") as second:
            again = _replay_on(second, cases, callers, on_date, top_k, observed)
    except SubjectError as exc:
        return Repeatability(0, error=str(exc))
    return repeatability(cases, observed, again)


def canary_probe(builder: Builder, stored: tuple[PolicyChunk, ...], cases: Sequence[Case], callers: Mapping[str, Caller],
            on_date: dt.date, top_k: int, observed: Sequence[Observation]) -> CanaryCheck | None:
    """One build with a permitted canary added and one returned permitted chunk withheld (see :mod:`.probes`)."""
    picked = pick_canary_caller(cases, callers, stored, on_date)
    if picked is None:
        return None
    caller, day = picked
    lookup = {c.chunk_id: c for c in stored}
    canary = canary_chunk(caller, day, lookup)
    withheld = pick_withheld(cases, observed, callers, lookup, on_date)
    chunks = tuple(c for c in stored if withheld is None or c.chunk_id != withheld[1]) + (canary,)
    vectors = None if builder.vectors is None else canary_vectors(builder.vectors, canary, cases[0].query)
    base = CanaryCheck(caller.actor_id, day, canary.chunk_id, canary.text,
                       withheld=None if withheld is None else withheld[1],
                       withheld_case=None if withheld is None else cases[withheld[0]].name)
    what = "with a canary chunk added" + ("" if withheld is None else f" and {withheld[1]!r} withheld")
    try:
        with builder.build(chunks, what, vectors) as build:
            answer = build.search(Request(canary.text, caller, day, top_k, "positive"))
            if answer.error:
                return replace(base, error=f"the search for the canary raised {answer.error}")
            rank = None
            if withheld is not None:
                case = cases[withheld[0]]
                deep = build.search(case_request(case, callers, on_date, max(top_k, len(stored))))
                if deep.error:
                    return replace(base, error=f"case {case.name!r} raised {deep.error} on the canary build")
                rank = withheld_rank(deep, withheld[1])
    except SubjectError as exc:
        return replace(base, error=str(exc))
    return replace(base, returned=answer.ids("hybrid"), withheld_rank=rank)


def concurrency_probe(
    build: IsolatedBuild, cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date, top_k: int,
    outcomes: Sequence[CaseOutcome], config: GateConfig, mode: str, progress: Progress | None,
) -> tuple[ConcurrencyCheck, dict[int, Comparison], list[tuple[int, Violation]]]:
    """Every case (but those that raised alone) from ``config.concurrency`` threads at once, against the case alone."""
    skip = {i for i, o in enumerate(outcomes) if o.error}
    plan = interleaved(cases, callers, on_date, top_k, CONCURRENCY_ROUNDS, skip)
    check = ConcurrencyCheck(config.concurrency, CONCURRENCY_ROUNDS, len(plan))
    if not plan:
        return replace(check, error="every case raised when replayed alone"), {}, []
    positions = sorted({i for i, _ in plan})
    alone = {i: build.search(case_request(cases[i], callers, on_date, top_k)) for i in positions}
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress("concurrency", done[0], len(plan))

    together, error = build.concurrently([r for _, r in plan], config.concurrency, tick)
    if together is None:
        return replace(check, error=error), {}, []
    comparisons: dict[int, Comparison] = {}
    violations: list[tuple[int, Violation]] = []
    actors = sorted({cases[i].caller for i in positions})
    stored = {c.chunk_id: c for c in build.chunks}  # once, not per differing answer
    for (i, request), answer in zip(plan, together):
        comparison = compare_concurrent(alone[i], answer, mode)
        if i not in comparisons or (comparison.differs and not comparisons[i].differs):
            comparisons[i] = comparison
        if comparison.differs and not answer.error:
            violations += [(i, v) for v in _concurrent_violations(cases[i], answer, request, callers, actors, stored)]
    return check, comparisons, violations


def _concurrent_violations(case: Case, answer: Observation, request: Request, callers: Mapping[str, Caller],
                           actors: Sequence[str], stored: Mapping[str, PolicyChunk]) -> list[Violation]:
    """Hidden ids a case got under concurrent requests, each naming a caller of the probe who may see it."""
    out = []
    for v in boundary_violations(case.name, answer, request.caller, request.on_date, stored):
        chunk = stored.get(v.chunk_id)
        others = [a for a in actors if a != case.caller and chunk is not None
                  and not block_reasons(callers[a], chunk, request.on_date)]
        whose = f", which {others[0]!r} may see" if others else ""
        out.append(replace(v, where=f"(under concurrent requests{whose})"))
    return out
