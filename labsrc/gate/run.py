"""Running a gate's plan: each build in a fresh worker process, its requests in plan order, on the config's clocks.

:func:`run_plan` executes a :class:`~labsrc.gate.plan.GatePlan` and files every
answer under its request's key (:class:`~labsrc.gate.answers.Answers`); it judges nothing. Where the
plan names a rule that depends on earlier answers (did the canary pass, which
cases reproduced), it asks the judge it is handed (:func:`~labsrc.gate.judge.rules_now`); where a build
fails, the failure is filed in place of its answers, except the main build's,
which stops the run. :class:`Builder` makes the factory's builds
(:mod:`~labsrc.gate.workers`); :class:`Prebuilt` stands for a retriever already
built (:func:`~labsrc.gate.gates.release_gate`), asked in this process.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labsrc.boundary import block_reasons
from labsrc.evaluation.latency import Progress, time_requests
from labsrc.evaluation.subject import (
    Factory,
    Observation,
    Request,
    Subject,
    BuildError,
    SubjectError,
    observe_request,
    settle_contract,
    subject_versions,
)
from labsrc.gate import reaping
from labsrc.gate.answers import Answers
from labsrc.gate.config import GateConfig, check_same_fusion
from labsrc.gate.plan import RULES, Ask, BuildStep, GatePlan, Phase, Withhold, phase_key
from labsrc.gate.workers import IsolatedBuild
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import PolicyChunk

__all__ = ["Builder", "Prebuilt", "run_plan"]


@dataclass(frozen=True)
class Builder:
    """How the gate builds: the factory, in a fresh worker process per build, with the config's clocks.

    ``made`` keeps every build (or the error of one that failed), so that once they are closed the
    run can say what each printed and which processes it left running (:meth:`aftermath`).
    """

    factory: Factory
    config: GateConfig
    made: list[tuple[str, IsolatedBuild | SubjectError]] = field(default_factory=list, compare=False, repr=False)

    def build(self, chunks: Sequence[PolicyChunk], what: str, vectors: DenseSource | None) -> IsolatedBuild:
        try:
            build = IsolatedBuild(self.factory, chunks, vectors, what=what, build_timeout_s=self.config.build_timeout_s,
                                  search_timeout_s=self.config.search_timeout_s)
        except SubjectError as exc:
            self.made.append((what, exc))
            raise
        self.made.append((what, build))
        return build

    def aftermath(self) -> tuple[tuple[str, ...] | None, tuple[tuple[str, str], ...]]:
        """``(leftovers, output)`` of every closed build: each process a build left running, as
        ``"build 'what': pid 1234 `cmd`"`` (``None`` where they cannot be found), and ``(what, text)``
        for each build that printed something."""
        leftovers: list[str] = []
        output: list[tuple[str, str]] = []
        for what, build in self.made:
            leftovers += [f"build {what!r}: {pid}" for pid in getattr(build, "leftovers", ())]
            text = getattr(build, "output", "") or ""
            if text.strip():
                output.append((what, text))
        return (tuple(leftovers) if reaping.SUPPORTED else None), tuple(output)

    def containment(self) -> str | None:
        """What held the builds' processes (each build's ``containment``; the weakest when they differ)."""
        kinds = {getattr(build, "containment", None) for _, build in self.made} - {None}
        for kind in ("process-group", "subreaper", "pid-namespace"):
            if kind in kinds:
                return kind
        return None


class _Local:
    """A retriever already built, asked in this process: the plan's one build."""

    restarts = 0

    def __init__(self, retriever: Subject) -> None:
        self.retriever = retriever
        source = getattr(retriever, "vectors", None)
        self.info = {"rrf_k": getattr(retriever, "rrf_k", None),
                     "dense_model": dict(getattr(source, "model", None) or {})}

    def search(self, request: Request) -> Observation:
        return observe_request(self.retriever, request)

    def versions(self, on_date: dt.date, fallback: str) -> dict[str, str]:
        return subject_versions(self.retriever, on_date, fallback)

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Prebuilt:
    """Stands in for :class:`Builder` when the retriever is already built: every build is that retriever."""

    retriever: Subject

    def build(self, chunks: Sequence[PolicyChunk], what: str, vectors: DenseSource | None) -> _Local:
        return _Local(self.retriever)

    def aftermath(self) -> tuple[tuple[str, ...] | None, tuple[tuple[str, str], ...]]:
        return (), ()

    def containment(self) -> str | None:
        return None  # asked in the calling process: nothing of its own to contain


def _pick(withhold: Withhold, answers: Answers, stored: dict[str, PolicyChunk]) -> tuple[int, str, Request] | None:
    """The chunk to withhold (see :class:`~labsrc.gate.plan.Withhold`), or None when no case returned one."""
    for key, position, request in withhold.candidates:
        answer = answers.got.get(key)
        if answer is None or answer.error:
            continue
        for chunk_id in answer.ids("hybrid"):
            chunk = stored.get(chunk_id)
            if chunk is not None and not block_reasons(request.caller, chunk, request.on_date):
                return position, chunk_id, request
    return None


def _stopped(ask: Ask, answers: Answers) -> bool:
    """Whether the answer ``ask`` waits on was not given or raised: then it is not asked."""
    if ask.after is None:
        return False
    before = answers.got.get(ask.after)
    return before is None or bool(before.error)


def _in_turn(phase: Phase, asks: list[Ask], search: Any, answers: Answers, progress: Progress | None) -> None:
    total = sum(a.counts for a in asks)
    done = failed = 0
    for ask in asks:
        if not _stopped(ask, answers) and ask.request is not None:
            answer = search(ask.request)
            answers.got[ask.key] = answer
            failed = failed + 1 if answer.error else 0
        if ask.counts:
            done += 1
            if progress is not None and phase.progress and (done % phase.every == 0 or done == total):
                progress(phase.progress, done, total)
        if phase.give_up_after is not None and failed >= phase.give_up_after:
            return  # the retriever stopped answering: the rest are not asked (the judge says so)


def _at_once(step: BuildStep, phase: Phase, asks: list[Ask], build: Any, answers: Answers,
             progress: Progress | None) -> None:
    todo = [a for a in asks if not _stopped(a, answers)]
    if not todo:
        return
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None and phase.progress:
            progress(phase.progress, done[0], len(todo))

    together, error = build.concurrently([a.request for a in todo], phase.threads, tick)
    if together is None:
        answers.failed[phase_key(step, phase)] = error
        return
    answers.got.update({a.key: answer for a, answer in zip(todo, together)})


def _run_build(plan: GatePlan, step: BuildStep, builder: Builder | Prebuilt, answers: Answers, allowed: set[str],
               progress: Progress | None) -> None:
    chunks, what, picked = step.chunks, step.what, None
    if step.withhold is not None:
        picked = _pick(step.withhold, answers, {c.chunk_id: c for c in plan.stored})
        if picked is not None:
            answers.withheld[step.name] = picked[:2]
            chunks = tuple(c for c in chunks if c.chunk_id != picked[1])
            what += f" and {picked[1]!r} withheld"
    answers.made.append(step.name)
    try:
        build = builder.build(chunks + step.added, what, step.vectors)
    except SubjectError as exc:
        if step.required and not isinstance(exc, BuildError):  # the factory could not even be imported: input
            raise
        answers.failed[step.name] = str(exc)
        return
    try:
        search = build.search
        if step.required:  # the main build: its answers settle the contract, and it states what ran
            check_same_fusion(build.info.get("rrf_k"), plan.config)
            answers.info = dict(build.info)
            answers.versions = build.versions(plan.on_date, plan.label)
            if "dense" not in answers.versions and plan.vectors is not None:
                answers.versions["dense"] = plan.vectors.version
            search = settle_contract(build.search, plan.label)
        for phase in step.phases:
            asks = [a for a in phase.asks if a.key in allowed]
            if phase.how == "timed":
                todo = [a.request for a in asks if not _stopped(a, answers)]
                if todo:
                    answers.latency = time_requests(search, todo, warmup=phase.warmup,  # type: ignore[arg-type]
                                                    repetitions=phase.repetitions, progress=progress)
            elif phase.how == "at once":
                _at_once(step, phase, asks, build, answers, progress)
            else:
                if picked is not None:  # the withheld chunk's case, as the plan's rule picked it
                    asks = [Ask(a.key, picked[2], a.probe, picked[0], a.after) if a.request is None else a
                            for a in asks]
                _in_turn(phase, asks, search, answers, progress)
        answers.restarts = build.restarts if step.required else answers.restarts
    finally:
        build.close()


def run_plan(plan: GatePlan, builder: Builder | Prebuilt, rules: Callable[[GatePlan, Answers], Any],
             progress: Progress | None = None) -> Answers:
    """Every build of ``plan`` in order, every request asked as the plan says (see the module docs).

    ``rules(plan, answers)`` says what the answers so far allow, as an object whose
    ``allows(rule, index)`` reads each rule of :data:`~labsrc.gate.plan.RULES`
    (:func:`~labsrc.gate.judge.rules_now`: only the judge reads answers).
    """
    answers = Answers()
    allowing: Any = None
    read = -1
    sources = {b.name for b in plan.builds if b.probe in ("repeat", "canary")}  # the builds rules read
    for step in plan.builds:
        allowed = {a.key for a in step.asks()}
        if step.when is not None or any(a.when for a in step.asks()):
            made = sum(name in sources for name in answers.made)
            if made != read:  # judged again only when a build the rules read has run since
                allowing, read = rules(plan, answers), made
            if step.when is not None and not allowing.allows(step.when):
                answers.skipped[step.name] = f"not made: {RULES[step.when]} did not hold"
                continue
            allowed = {a.key for a in step.asks() if a.when is None or allowing.allows(a.when, a.index)}
            if not allowed:
                answers.skipped[step.name] = "not made: no request it holds may be asked"
                continue
        _run_build(plan, step, builder, answers, allowed, progress)
        if step.required and step.name in answers.failed:  # nothing to compare with, and nothing left to judge
            answers.skipped.update({b.name: "not made: the main build failed" for b in plan.builds[1:]})
            break
        if step.done is not None and progress is not None:
            progress(*step.done)
    answers.leftovers, answers.output = builder.aftermath()
    answers.containment = builder.containment()
    return answers
