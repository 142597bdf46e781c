"""What a gate run will do, as plain data: every build, the requests asked of it in order, and why.

:func:`plan_gate` reads the stored chunks, the callers, the cases and the config
and returns a :class:`GatePlan`. :mod:`~labsrc.gate.run` executes it (each build
in its own worker process) and :mod:`~labsrc.gate.judge` turns the answers into
findings and verdicts. Every probe is an entry of the plan:

==================  ===================================================================
build               what it is asked (probe), and why
==================  ===================================================================
main                every case at ``top_k`` and as deep as the corpus (``cases``); each
                    positive case at every k of ``recall_at`` (``recall``); every
                    case again, timed (``latency``); every case alone, then every case
                    from many threads at once, callers interleaved (``concurrency``);
                    the made-up requests of :mod:`~labsrc.gate.generate` (``generated``)
repeat              the same chunks built again, every case (``repeat``): which answers
                    reproduce at all, so that noise is never reported as a leak
canary              a permitted canary added and a returned chunk withheld (``canary``):
                    the canary's code, and the withheld chunk's case as deep as the corpus
rebuild, per        the caller's permitted chunks only (``rebuild``): the cases of that
(caller, date)      caller and date, and the generated requests of that caller and date
bait, per           every stored chunk plus bait made to win, hidden from the caller
(caller, date)      (``bait``): the cases of that caller and date
==================  ===================================================================

A built retriever (:func:`~labsrc.gate.gates.release_gate`) gets the main build's
cases and timing only: the gate cannot build it again.

Three things are known only once answers come in, so the plan names a rule for
each and the runner applies it when it gets there:

* ``after``: a request whose case raised on the main build is not asked again (it
  keeps that error): a search that timed out would only time out again;
* :class:`Withhold`: the chunk the canary build leaves out is the first permitted
  chunk a case's fused list returned on the main build, so that its coming back
  shows a build that ignores what it is handed;
* ``when`` (:data:`RULES`): the rebuild and bait builds run only when the canary
  passed, and ask only the cases whose ids reproduced on the repeat build.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from labsrc.boundary import permitted_chunks
from labsrc.errors import InvalidArgument
from labsrc.evaluation.subject import Request
from labsrc.gate.bait import BaitVectors, bait_chunks
from labsrc.gate.config import GateConfig
from labsrc.gate.generate import ProbePlan, plan_probes, probe_vectors
from labsrc.gate.generated import GIVE_UP_AFTER, request_of
from labsrc.gate.verdicts import plural
from labsrc.gate.recall_curve import check_recall_at, recall_key
from labsrc.gate.probes import CONCURRENCY_ROUNDS, canary_chunk, canary_vectors, interleaved, pick_canary_caller
from labsrc.lanes.dense import DenseSource
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["CANARY_CODE", "CANARY_WITHHELD", "RULES", "Ask", "BuildStep", "GatePlan", "Phase", "Withhold", "case_groups",
           "phase_key", "plan_gate"]

#: The canary build's two requests: its code, and the withheld chunk's case at full depth.
CANARY_CODE, CANARY_WITHHELD = "canary code", "canary withheld"

#: The rules a build or a request can wait on, and what each needs of the answers so far.
RULES: Mapping[str, str] = MappingProxyType(
    {
        "canary passed": "the canary build showed that the factory indexes what it is handed",
        "reproducible": "the case's ids and order were the same on the main and the repeat build",
        "all reproducible": "every case's ids and order were the same on the main and the repeat build",
    }
)


@dataclass(frozen=True)
class Ask:
    """One request of the plan, filed under ``key`` (unique in the plan).

    ``index`` is the position of the case (or of the generated request) it asks;
    ``after`` the key of an answer that, when it raised, means this is not asked (it
    keeps that error); ``when`` a rule of :data:`RULES`. ``request`` is ``None`` only
    for the withheld chunk's case, which :class:`Withhold` picks at run time.
    """

    key: str
    request: Request | None
    probe: str
    index: int = -1  # -1: no case or generated request (the canary's code)
    after: str | None = None
    when: str | None = None
    counts: bool = True  # one step of its phase's progress


@dataclass(frozen=True)
class Phase:
    """Requests asked of one build together: ``in turn``, ``timed`` (warm-up, then timed rounds) or ``at once``."""

    probe: str
    how: str
    asks: tuple[Ask, ...]
    why: str
    progress: str | None = None  # the progress stage its steps are reported under
    every: int = 1  # report progress every this many steps (and at the last)
    give_up_after: int | None = None  # in turn: stop after this many failures in a row
    threads: int = 1  # at once: from this many threads
    warmup: int = 0  # timed: untimed rounds first
    repetitions: int = 0  # timed: timed rounds


@dataclass(frozen=True)
class Withhold:
    """The chunk a build leaves out, picked once the main build has answered.

    The first chunk, in the fused list of the first of ``candidates`` that answered,
    that the candidate's caller may see on its date. Each candidate is ``(key of the
    case's main answer, case position, the request the build asks to look for the chunk)``.
    """

    candidates: tuple[tuple[str, int, Request], ...]
    why: str = "a permitted chunk the main build returned: if it comes back, the build ignored what it was handed"


@dataclass(frozen=True)
class BuildStep:
    """One build: the factory handed ``chunks`` (less the withheld one) and ``added``, asked ``phases`` in order.

    ``what`` names it in the worker and in the report; ``required`` makes its failure stop
    the run (the main build); ``when`` is a rule of :data:`RULES`, and a build none of
    whose requests may be asked is not made; ``done`` is the progress ``(stage, n, total)``
    reported when it ends.
    """

    name: str
    probe: str
    what: str
    chunks: tuple[PolicyChunk, ...]
    vectors: DenseSource | None
    phases: tuple[Phase, ...]
    why: str
    when: str | None = None
    withhold: Withhold | None = None
    added: tuple[PolicyChunk, ...] = ()  # chunks the gate made (the canary, bait), after the stored ones
    required: bool = False
    done: tuple[str, int, int] | None = None

    def asks(self) -> Iterator[Ask]:
        for phase in self.phases:
            yield from phase.asks


@dataclass(frozen=True)
class GatePlan:
    """Every build of one gate run, in the order they run, and what the judge needs to read their answers."""

    label: str
    on_date: dt.date
    config: GateConfig
    stored: tuple[PolicyChunk, ...]
    callers: Mapping[str, Caller]
    cases: tuple[Case, ...]
    builds: tuple[BuildStep, ...]
    vectors: DenseSource | None = None
    generated: ProbePlan | None = None
    measure: bool = True
    rebuilds: bool = True
    recall_at: tuple[int, ...] = ()  # the k of the Recall@k curves (:mod:`~labsrc.gate.recall_curve`)

    def step(self, probe: str) -> BuildStep | None:
        return next((b for b in self.builds if b.probe == probe), None)

    def asks(self, probe: str) -> list[Ask]:
        """Every request of ``probe``, in plan order, whichever build asks it."""
        return [a for b in self.builds for a in b.asks() if a.probe == probe]

    def count(self) -> dict[str, int]:
        """Requests per probe (a timed request once, not once per round)."""
        counts: dict[str, int] = {}
        for b in self.builds:
            for a in b.asks():
                counts[a.probe] = counts.get(a.probe, 0) + 1
        return counts

    def describe(self) -> list[str]:
        """One line per build and phase: what the gate will run, and why."""
        lines = []
        for b in self.builds:
            when = f" (only when: {RULES[b.when]})" if b.when else ""
            made = f" + {len(b.added)} made by the gate" if b.added else ""
            lines.append(f"build {b.name!r}: {b.what} ({len(b.chunks)} chunks{made}{', one withheld' if b.withhold else ''})"
                         f": {b.why}{when}")
            for p in b.phases:
                how = p.how
                if p.how == "timed":
                    how = f"timed ({p.warmup} warm-up and {p.repetitions} timed rounds)"
                elif p.how == "at once":
                    how = f"at once (from {p.threads} threads)"
                rules = sorted({RULES[a.when] for a in p.asks if a.when})
                only = f" (each only when: {'; '.join(rules)})" if rules else ""
                lines.append(f"  {p.probe}: {plural(len(p.asks), 'request')} {how}: {p.why}{only}")
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"on_date": self.on_date.isoformat(), "requests": self.count(),
                "builds": [{"name": b.name, "probe": b.probe, "what": b.what, "chunks": len(b.chunks), "added": len(b.added),
                            "why": b.why, "when": b.when, "withhold": b.withhold is not None,
                            "phases": [{"probe": p.probe, "how": p.how, "requests": len(p.asks), "why": p.why}
                                       for p in b.phases]} for b in self.builds]}


def phase_key(step: BuildStep, phase: Phase) -> str:
    """How a run files a phase that gave no answers: ``"main: concurrency at once"``."""
    return f"{step.name}: {phase.probe} {phase.how}"


def case_groups(cases: Sequence[Case], on_date: dt.date) -> dict[tuple[str, dt.date], list[int]]:
    """Case positions by (caller, date): one rebuild and one bait build serve each group."""
    groups: dict[tuple[str, dt.date], list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault((case.caller, case.on_date or on_date), []).append(i)
    return groups


def _request(case: Case, callers: Mapping[str, Caller], on_date: dt.date, top_k: int, *,
             payload: bool = True) -> Request:
    """The case's request; ``payload=False`` for a request as deep as the corpus, read for its ids alone."""
    return Request(case.query, callers[case.caller], case.on_date or on_date, top_k, case.kind, payload=payload)


def _main(cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date, config: GateConfig, depth: int,
          top: Sequence[Request], measure: bool, rebuilds: bool, generated: ProbePlan | None,
          recall_at: tuple[int, ...]) -> tuple[Phase, ...]:
    phases = [Phase("cases", "in turn", tuple(a for i, case in enumerate(cases) for a in (
        Ask(f"case {i}", top[i], "cases", i, counts=False),
        Ask(f"case {i} deep", _request(case, callers, on_date, depth, payload=False), "cases", i, after=f"case {i}"),
    )), "every case at top_k, and as deep as the corpus so that a hidden id below top_k still counts",
        progress="cases")]
    curve = tuple(Ask(recall_key(i, k), replace(top[i], top_k=k, payload=False), "recall", i, after=f"case {i}")
                  for i, case in enumerate(cases) if case.kind == "positive" for k in recall_at if k != config.top_k)
    if curve:
        phases.append(Phase("recall", "in turn", curve, "every positive case at each k of recall_at, for the "
                            "Recall@k curves (at top_k, the case's own answer)"))
    if measure:
        phases.append(Phase("latency", "timed", tuple(
            Ask(f"time {i}", top[i], "latency", i, after=f"case {i} deep") for i in range(len(cases))),
            "every case that answered, timed after a warm-up", warmup=config.warmup, repetitions=config.repetitions))
    if rebuilds and config.concurrency:  # threads need a build of the gate's own
        phases.append(Phase("concurrency", "in turn", tuple(
            Ask(f"alone {i}", top[i], "concurrency", i, after=f"case {i} deep") for i in range(len(cases))),
            "every case alone, to compare each answer under concurrent requests with"))
        together = interleaved(cases, callers, on_date, config.top_k, CONCURRENCY_ROUNDS)
        phases.append(Phase("concurrency", "at once", tuple(
            Ask(f"together {n}", request, "concurrency", i, after=f"case {i} deep")
            for n, (i, request) in enumerate(together)),
            f"every case {CONCURRENCY_ROUNDS} times, neighbours from different callers: what one request leaves "
            "behind must not reach another's", progress="concurrency", threads=config.concurrency))
    if generated is not None:  # every probe at top_k, then every probe at the deep k (ProbePlan.asked)
        phases.append(Phase("generated", "in turn", tuple(
            Ask(f"generated {g}", request_of(probe, callers, config.top_k), "generated", g)
            for g, probe in enumerate(generated.asked)),
            "requests the gate made up: every case's query as every caller, hidden chunks' own text, edge dates",
            progress="generated probes", every=25, give_up_after=GIVE_UP_AFTER))
    return tuple(phases)


def _canary(stored: tuple[PolicyChunk, ...], cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date,
            config: GateConfig, vectors: DenseSource | None) -> BuildStep | None:
    picked = pick_canary_caller(cases, callers, stored, on_date)
    if picked is None:  # no case's caller holds a tag: no permitted canary can be made
        return None
    caller, day = picked
    canary = canary_chunk(caller, day, {c.chunk_id for c in stored})
    depth = max(config.top_k, len(stored))
    order = sorted(range(len(cases)), key=lambda i: (cases[i].kind != "positive", i))
    withhold = Withhold(tuple((f"case {i}", i, _request(cases[i], callers, on_date, depth, payload=False))
                              for i in order))
    asks = (Ask(CANARY_CODE, Request(canary.text, caller, day, config.top_k, "positive"), "canary"),
            Ask(CANARY_WITHHELD, None, "canary", after=CANARY_CODE))
    return BuildStep(
        "canary", "canary", "with a canary chunk added", stored,
        None if vectors is None else canary_vectors(vectors, canary, cases[0].query),
        (Phase("canary", "in turn", asks, "the canary's own code, and the withheld chunk's case at full depth"),),
        "does the factory index what it is handed? Else no comparison across builds means anything",
        withhold=withhold, added=(canary,))


def _comparisons(stored: tuple[PolicyChunk, ...], cases: Sequence[Case], callers: Mapping[str, Caller],
                 on_date: dt.date, config: GateConfig, vectors: DenseSource | None,
                 generated: ProbePlan | None) -> list[BuildStep]:
    """Per (caller, date) of the cases: a build over the caller's permitted chunks only, and one with bait."""
    steps = []
    groups = case_groups(cases, on_date)
    extra: dict[tuple[str, dt.date], list[int]] = {}
    for g, probe in enumerate(generated.asked if generated is not None else ()):  # both depths of each probe
        extra.setdefault((probe.caller, probe.on_date), []).append(g)
    taken = {c.chunk_id for c in stored}
    for n, ((actor, day), positions) in enumerate(groups.items(), start=1):
        caller = callers[actor]
        permitted = tuple(permitted_chunks(caller, stored, day))
        planted = bait_chunks(list(dict.fromkeys(cases[i].query for i in positions)), caller, day, taken)
        asks = {kind: tuple(Ask(f"{kind} {i}", _request(cases[i], callers, on_date, config.top_k), kind, i,
                                after=f"case {i}", when="reproducible") for i in positions)
                for kind in ("rebuild", "bait")}
        again = tuple(Ask(f"rebuild generated {g}", request_of(generated.asked[g], callers, config.top_k),  # type: ignore[union-attr]
                          "generated", g, after=f"generated {g}", when="all reproducible")
                      for g in extra.get((actor, day), ()))
        phases = [Phase("rebuild", "in turn", asks["rebuild"], "each case must get the same ids, order and scores")]
        if again:
            phases.append(Phase("generated", "in turn", again, "each generated request of this caller and date "
                                                               "must get the same answer as on the main build"))
        steps.append(BuildStep(
            f"rebuild {actor} {day}", "rebuild", f"over {actor}'s {len(permitted)} permitted chunks on {day}",
            permitted, vectors, tuple(phases), f"noninterference: what {actor} sees may depend only on what "
            f"{actor} may see", when="canary passed"))
        steps.append(BuildStep(
            f"bait {actor} {day}", "bait", f"with {len(planted)} bait chunks hidden from {actor} on {day}",
            stored, None if vectors is None else BaitVectors.for_queries(vectors, planted),
            (Phase("bait", "in turn", asks["bait"], "no bait may come back, and no answer may move"),),
            f"noninterference: hidden chunks made to win, one per rule the boundary enforces, must change "
            f"nothing {actor} observes", when="canary passed", added=tuple(planted),
            done=("noninterference", n, len(groups))))
    return steps


def plan_gate(
    stored: tuple[PolicyChunk, ...],
    callers: Mapping[str, Caller],
    cases: Sequence[Case],
    config: GateConfig,
    on_date: dt.date,
    vectors: DenseSource | None = None,
    *,
    label: str,
    measure: bool = True,
    rebuilds: bool = True,
    recall_at: Sequence[int] = (),
) -> GatePlan:
    """Every build of a gate run and every request asked of each (see the module docs).

    ``rebuilds`` is False for a retriever already built (it cannot be built again): the plan
    then holds the main build's cases and timing only. ``recall_at`` adds the main build's
    ``recall`` phase: every positive case at each of those k (:mod:`~labsrc.gate.recall_curve`).
    """
    recall_at = check_recall_at(recall_at)
    for case in cases:
        if case.caller not in callers:
            raise InvalidArgument(f"case {case.name!r} names unknown caller {case.caller!r}; known: {sorted(callers)}")
    depth = max(config.top_k, len(stored))
    generated = None
    if rebuilds and config.probe_budget:
        generated = plan_probes(stored, callers, cases, on_date, budget=config.probe_budget, seed=config.probe_seed,
                                top_k=config.top_k, min_coverage=config.min_coverage)
        vectors = probe_vectors(vectors, generated, stored)
    top = [_request(case, callers, on_date, config.top_k) for case in cases]  # each case as its caller asks it
    phases = _main(cases, callers, on_date, config, depth, top, measure, rebuilds, generated, recall_at)
    builds = [BuildStep("main", "cases", "every stored chunk", stored, vectors, phases,
                        "the retriever as it ships: every stored chunk, hidden ones included", required=True)]
    if rebuilds and config.noninterference != "off":
        builds.append(BuildStep(
            "repeat", "repeat", "every stored chunk, built a second time", stored, vectors,
            (Phase("repeat", "in turn", tuple(Ask(f"repeat {i}", top[i], "repeat", i, after=f"case {i}")
                                              for i in range(len(cases))), "every case, as on the main build"),),
            "which answers reproduce at all: a difference that is noise is never reported as a leak"))
        canary = _canary(stored, cases, callers, on_date, config, vectors)
        if canary is not None:
            builds.append(canary)
        builds += _comparisons(stored, cases, callers, on_date, config, vectors, generated)
    return GatePlan(label, on_date, config, stored, MappingProxyType(dict(callers)), tuple(cases), tuple(builds),
                    vectors, generated, measure, rebuilds, recall_at)
