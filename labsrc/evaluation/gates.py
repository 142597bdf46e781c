"""Release gates: replay frozen cases and decide whether a retriever may ship.

The lesson's gate table (spec, "Release gate"), plus the lab's latency gate:

* **Permitted Recall@k** per lane: the required current chunk reaches the top k.
* **Hybrid vs each lane**: fusion must not lose (``at_least``) or must add
  (``strict``, the lesson) evidence compared with either lane alone.
* **Restricted / superseded / wrong-region exclusion**: no forbidden id appears
  in *any* lane's candidates or in the fused list. This is checked with a probe
  as deep as the whole corpus, so it holds whatever ``top_k`` is.
* **Abstention**: for questions no permitted evidence supports, the fused list
  holds nothing the case forbids; what it did return is reported for review.
* **Boundary on every returned id**: every id any lane or the fused list
  returns, for every case, at ``top_k`` and at full depth, is one the case's
  caller may see on its date. No case has to name it as forbidden.
* **Noninterference by rebuild** and **by bait** (with a factory,
  :func:`gate_retriever`): each case gives the same ids, order and scores as a
  build over the caller's permitted chunks only, and as a build holding hidden
  chunks crafted to win (:mod:`~labsrc.evaluation.noninterference`).
* **Latency**: p50 and p95 of each stage, measured after a warm-up, within budget.

Any retriever can be judged: :func:`release_gate` takes a built one,
:func:`gate_retriever` takes a factory (:mod:`~labsrc.evaluation.subject`), so
that it can also rebuild it over each caller's permitted chunks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from types import MappingProxyType, SimpleNamespace
from typing import Any

from labsrc.boundary import block_reasons, permitted_chunks
from labsrc.errors import InvalidArgument
from labsrc.evaluation.bait import BaitVectors, bait_chunks
from labsrc.evaluation.config import GateConfig
from labsrc.evaluation.gate_rules import GATE_TABLE, evaluate_gates
from labsrc.evaluation.latency import LatencyReport, Progress, measure_latency
from labsrc.evaluation.noninterference import Comparison, Violation, boundary_violations, compare_observations
from labsrc.evaluation.outcomes import (
    CaseOutcome,
    as_caller_map,
    lane_recall,
    replay_cases,
    run_cases,
    stored_chunks,
)
from labsrc.evaluation.probes import (
    CONCURRENCY_ROUNDS,
    CanaryCheck,
    ConcurrencyCheck,
    Probes,
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
from labsrc.evaluation.subject import (
    Factory,
    Observation,
    Request,
    Subject,
    SubjectError,
    factory_name,
    observe_request,
    subject_versions,
)
from labsrc.evaluation.verdicts import GateResult
from labsrc.evaluation.workers import IsolatedBuild
from labsrc.lanes.dense import DenseSource, Encoder, as_dense_source
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk, chunk_lookup
from labsrc.retriever.policy import PolicyRetriever

__all__ = [
    "GATE_TABLE",
    "CaseOutcome",
    "GateRun",
    "evaluate_gates",
    "gate_retriever",
    "lane_recall",
    "release_gate",
    "run_cases",
]


def _groups(cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date) -> dict[tuple[str, dt.date], list[int]]:
    """Case positions by (caller, date): one rebuild and one bait build serve each group."""
    groups: dict[tuple[str, dt.date], list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault((case.caller, case.on_date or on_date), []).append(i)
    return groups


@dataclass(frozen=True)
class _Builder:
    """How the gate builds: the factory, in a fresh worker process per build, with the config's clocks."""

    factory: Factory
    vectors: DenseSource | None
    config: GateConfig

    def build(self, chunks: Sequence[PolicyChunk], what: str, vectors: DenseSource | None | str = "same") -> IsolatedBuild:
        return IsolatedBuild(
            self.factory, chunks, self.vectors if vectors == "same" else vectors, what=what,  # type: ignore[arg-type]
            build_timeout_s=self.config.build_timeout_s, search_timeout_s=self.config.search_timeout_s,
        )


def _request(case: Case, callers: Mapping[str, Caller], on_date: dt.date, top_k: int) -> Request:
    return Request(case.query, callers[case.caller], case.on_date or on_date, top_k, case.kind)


def _noninterference(
    builder: _Builder,
    stored: tuple[PolicyChunk, ...],
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    on_date: dt.date,
    top_k: int,
    observed: Sequence[Observation],
    mode: str,
    unstable: frozenset[str],
    progress: Progress | None,
) -> tuple[dict[int, Comparison], dict[int, Comparison], list[tuple[int, Violation]]]:
    """Per case position: the comparison with the permitted-only rebuild, and with the bait build.

    Cases in ``unstable`` (ids not reproducible between two builds of the same chunks) are not compared.
    The third item holds bait chunks the bait build returned, as boundary violations of their case.
    """
    rebuild: dict[int, Comparison] = {}
    bait: dict[int, Comparison] = {}
    returned_bait: list[tuple[int, Violation]] = []
    groups = _groups(cases, callers, on_date)
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
                    answer = other.search(_request(case, callers, on_date, top_k))
                    if kind == "rebuild":
                        target[i] = compare_observations(answer, observed[i], kind=kind, mode=mode)
                        continue
                    target[i] = compare_observations(observed[i], answer, kind=kind, mode=mode, bait_ids=planted_ids)
                    if target[i].bait_returned:
                        found = boundary_violations(case.name, answer, caller, day, planted_by_id,
                                                    where="(bait build)")
                        returned_bait += [(i, v) for v in found if v.chunk_id in planted_ids]
            finally:
                other.close()
        if progress is not None:
            progress("noninterference", done, len(groups))
    return rebuild, bait, returned_bait


def _replay_on(build: IsolatedBuild, cases: Sequence[Case], callers: Mapping[str, Caller], on_date: dt.date,
               top_k: int, observed: Sequence[Observation]) -> list[Observation]:
    """Every case on ``build``; a case that raised on the main build is not asked again (it keeps that error)."""
    return [answer if answer.error else build.search(_request(case, callers, on_date, top_k))
            for case, answer in zip(cases, observed)]


def _repeat(builder: _Builder, stored: tuple[PolicyChunk, ...], cases: Sequence[Case], callers: Mapping[str, Caller],
            on_date: dt.date, top_k: int, observed: Sequence[Observation]) -> Repeatability:
    """Build the same chunks again in another process and replay every case on it."""
    try:
        with builder.build(stored, "every stored chunk, built a second time") as second:
            again = _replay_on(second, cases, callers, on_date, top_k, observed)
    except SubjectError as exc:
        return Repeatability(0, error=str(exc))
    return repeatability(cases, observed, again)


def _canary(builder: _Builder, stored: tuple[PolicyChunk, ...], cases: Sequence[Case], callers: Mapping[str, Caller],
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
                deep = build.search(_request(case, callers, on_date, max(top_k, len(stored))))
                if deep.error:
                    return replace(base, error=f"case {case.name!r} raised {deep.error} on the canary build")
                rank = withheld_rank(deep, withheld[1])
    except SubjectError as exc:
        return replace(base, error=str(exc))
    return replace(base, returned=answer.ids("hybrid"), withheld_rank=rank)


def _concurrency(
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
    alone = {i: build.search(_request(cases[i], callers, on_date, top_k)) for i in positions}
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
    for (i, request), answer in zip(plan, together):
        comparison = compare_concurrent(alone[i], answer, mode)
        if i not in comparisons or (comparison.differs and not comparisons[i].differs):
            comparisons[i] = comparison
        if comparison.differs and not answer.error:
            violations += [(i, v) for v in _concurrent_violations(cases[i], answer, request, callers, actors, build)]
    return check, comparisons, violations


def _concurrent_violations(case: Case, answer: Observation, request: Request, callers: Mapping[str, Caller],
                           actors: Sequence[str], build: IsolatedBuild) -> list[Violation]:
    """Hidden ids a case got under concurrent requests, each naming a caller of the probe who may see it."""
    stored = {c.chunk_id: c for c in build.chunks}
    out = []
    for v in boundary_violations(case.name, answer, request.caller, request.on_date, stored):
        chunk = stored.get(v.chunk_id)
        others = [a for a in actors if a != case.caller and chunk is not None
                  and not block_reasons(callers[a], chunk, request.on_date)]
        whose = f", which {others[0]!r} may see" if others else ""
        out.append(replace(v, where=f"(under concurrent requests{whose})"))
    return out


@dataclass(frozen=True)
class GateRun:
    """Everything one release-gate run produced: the input of every report.

    ``subject`` names what was judged (``"memory"``, ``"postgres"``, or a
    plug-in's ``module:factory``); ``noninterference`` is the comparison mode the
    rebuild and bait gates used, or ``None`` when they did not run; ``probes``
    holds what the canary, repeat and concurrency probes found (a factory's run only).
    """

    config: GateConfig
    on_date: dt.date
    outcomes: tuple[CaseOutcome, ...]
    gates: tuple[GateResult, ...]
    recall: Mapping[str, float]
    versions: Mapping[str, str]
    dense_model: Mapping[str, Any]
    latency: LatencyReport | None = None
    subject: str = ""
    noninterference: str | None = None
    probes: Probes | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcomes", tuple(self.outcomes))
        object.__setattr__(self, "gates", tuple(self.gates))
        object.__setattr__(self, "recall", MappingProxyType(dict(self.recall)))
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        object.__setattr__(self, "dense_model", MappingProxyType(dict(self.dense_model)))

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def failed_gates(self) -> tuple[GateResult, ...]:
        """Gates that fail the run (an untested gate only under ``require_cases``)."""
        return tuple(g for g in self.gates if not g.passed)

    @property
    def untested_gates(self) -> tuple[GateResult, ...]:
        """Gates with no cases to replay (status ``NOT TESTED``)."""
        return tuple(g for g in self.gates if not g.tested)

    @property
    def failed_outcomes(self) -> tuple[CaseOutcome, ...]:
        """Cases whose own check failed (see :attr:`CaseOutcome.passed`), in case order."""
        return tuple(o for o in self.outcomes if not o.passed)


def _check_rrf_k(subject: object, config: GateConfig) -> None:
    rrf_k = getattr(subject, "rrf_k", None)
    if rrf_k is not None and float(rrf_k) != float(config.rrf_k):
        raise InvalidArgument(
            f"the retriever fuses with rrf_k={rrf_k} but the config says rrf_k={config.rrf_k}; "
            "build the retriever with PolicyRetriever(..., rrf_k=config.rrf_k)"
        )


def _dense_model(subject: object, vectors: object = None) -> dict[str, Any]:
    source = getattr(subject, "vectors", None) or vectors
    return dict(getattr(source, "model", None) or {})


def _judge(
    ask: Callable[[Request], Observation],
    stored: tuple[PolicyChunk, ...],
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    config: GateConfig,
    date: dt.date,
    versions: dict[str, str],
    *,
    label: str,
    measure: bool,
    progress: Progress | None,
) -> tuple[list[CaseOutcome], list[Observation], LatencyReport | None]:
    """Replay every case (and time them, with ``measure``) through ``ask``."""
    pairs = replay_cases(ask, cases, callers, date, config.top_k, chunk_lookup(stored), versions, progress)
    latency = None
    # A case that raised or timed out has failed already; timing it again would only wait for it again.
    answered = [case for case, (outcome, _) in zip(cases, pairs) if not outcome.error]
    if measure and answered:
        latency = measure_latency(
            None, answered, callers, date, config.top_k,  # type: ignore[arg-type]
            warmup=config.warmup, repetitions=config.repetitions, progress=progress, ask=ask,
        )
    return [o for o, _ in pairs], [obs for _, obs in pairs], latency


def _run(config: GateConfig, date: dt.date, outcomes: Sequence[CaseOutcome], latency: LatencyReport | None,
         versions: Mapping[str, str], dense_model: Mapping[str, Any], label: str, mode: str | None = None,
         probes: Probes | None = None) -> GateRun:
    gates = evaluate_gates(outcomes, config, latency, probes)
    return GateRun(
        config=config,
        on_date=date,
        outcomes=tuple(outcomes),
        gates=tuple(gates),
        recall=lane_recall(outcomes, config.top_k),
        versions=versions,
        dense_model=dense_model,
        latency=latency,
        subject=label,
        noninterference=mode,
        probes=probes,
    )


def _check_cases(cases: Sequence[Case]) -> None:
    if not cases:
        raise InvalidArgument("no cases: a release gate with nothing to replay cannot pass")


def release_gate(
    retriever: PolicyRetriever | Subject,
    cases: Sequence[Case],
    callers: Mapping[str, Caller] | Sequence[Caller],
    config: GateConfig | None = None,
    *,
    on_date: dt.date | None = None,
    measure: bool = True,
    progress: Progress | None = None,
    stored: Sequence[PolicyChunk] | None = None,
) -> GateRun:
    """Replay the cases on a built retriever, evaluate every gate and (with ``measure``) time the stages.

    ``on_date`` overrides ``config.on_date``; with neither, today's date is used.
    The retriever's ``rrf_k`` (when it has one) must match the config's, so the
    report never describes a different fusion than the one that ran. ``stored``
    is every stored chunk (default: ``retriever.chunks``), for the boundary gate.
    The noninterference gates need to rebuild the retriever: use :func:`gate_retriever`.
    """
    config = config or GateConfig()
    _check_rrf_k(retriever, config)
    _check_cases(cases)
    chunks = tuple(stored_chunks(retriever, stored).values())
    date = on_date or config.eval_date()
    label = type(retriever).__name__
    versions = subject_versions(retriever, date, label)
    outcomes, _, latency = _judge(partial(observe_request, retriever), chunks, cases, as_caller_map(callers), config,
                                  date, versions, label=label, measure=measure, progress=progress)
    return _run(config, date, outcomes, latency, versions, _dense_model(retriever), label)


def gate_retriever(
    factory: Factory,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    cases: Sequence[Case],
    vectors: DenseSource | Encoder | None = None,
    config: GateConfig | None = None,
    *,
    on_date: dt.date | None = None,
    measure: bool = True,
    progress: Progress | None = None,
    label: str | None = None,
) -> GateRun:
    """Judge any retriever by its factory: every gate, plus the probes that need builds of their own.

    ``factory(chunks, vectors)`` is called with every stored chunk (a tuple,
    hidden ones included) and ``vectors`` (the dense source, or ``None``), and
    must return an object with ``search(query, caller, on_date, top_k)`` giving
    a :class:`~labsrc.retriever.policy.RetrievalResult` or ``(chunk_id, score)``
    pairs, best first (:mod:`~labsrc.evaluation.subject`).

    Every build runs in a fresh worker process (:mod:`~labsrc.evaluation.workers`),
    on the config's clocks (``build_timeout_s``, ``search_timeout_s``):

    1. the main build: every case replayed (and timed, with ``measure``), then
       replayed from ``config.concurrency`` threads at once (:mod:`~labsrc.evaluation.probes`);
    2. with ``noninterference`` on: the same chunks built again (repeatability),
       a build with a canary added and a returned chunk withheld (does the factory
       index what it is handed?), then, per (caller, date) of the cases, a build
       over the caller's permitted chunks only and one with bait added.

    A factory that fails the canary cannot be tested for noninterference: the
    rebuild and bait gates say NOT TESTED and fail the run. Cases whose ids differ
    between the two builds of the same chunks are not compared; scores that differ
    make the comparisons use ids and order only.

    A factory that raises (anything, ``SystemExit`` included) or does not return
    in time while building the full corpus raises
    :class:`~labsrc.evaluation.subject.SubjectError` naming the user's file and
    line. ``PolicyRetriever`` and ``PostgresRetriever`` are factories as they are::

        run = gate_retriever(PolicyRetriever, data.chunks, data.callers, data.cases, data.vectors)
    """
    config = config or GateConfig()
    _check_cases(cases)
    if vectors is not None and not isinstance(vectors, DenseSource):
        vectors = as_dense_source(vectors)  # a bare encoder: the factory, and the bait, get a dense source
    stored = tuple(chunk_lookup(chunks).values())
    callers = as_caller_map(callers)
    for case in cases:
        if case.caller not in callers:
            raise InvalidArgument(f"case {case.name!r} names unknown caller {case.caller!r}; known: {sorted(callers)}")
    date = on_date or config.eval_date()
    label = label or factory_name(factory)
    builder = _Builder(factory, vectors, config)
    builds = 1
    main = builder.build(stored, "every stored chunk")
    try:
        rrf_k = main.info.get("rrf_k")
        if rrf_k is not None:
            _check_rrf_k(SimpleNamespace(rrf_k=rrf_k), config)
        versions = main.versions(date, label)
        if "dense" not in versions and vectors is not None:
            versions["dense"] = vectors.version
        outcomes, observed, latency = _judge(main.search, stored, cases, callers, config, date, versions,
                                             label=label, measure=measure, progress=progress)
        dense_model = dict(main.info.get("dense_model") or {}) or _dense_model(None, vectors)
        concurrency = None
        if config.concurrency:
            concurrency, together, violations = _concurrency(
                main, cases, callers, date, config.top_k, outcomes, config, "exact", progress)
        restarts = main.restarts
    finally:
        main.close()
    mode = None
    repeat = canary = None
    rebuild: dict[int, Comparison] = {}
    bait: dict[int, Comparison] = {}
    bait_violations: list[tuple[int, Violation]] = []
    if config.noninterference != "off":
        repeat = _repeat(builder, stored, cases, callers, date, config.top_k, observed)
        canary = _canary(builder, stored, cases, callers, date, config.top_k, observed)
        builds += 2 if canary is not None else 1
        mode = config.noninterference
        if repeat.scores_differ:
            mode = "ids"  # noise is not a leak: compare what reproduces
        if canary is not None and canary.passed:
            rebuild, bait, bait_violations = _noninterference(
                builder, stored, cases, callers, date, config.top_k, observed, mode, repeat.unstable(), progress)
            builds += 2 * len(_groups(cases, callers, date))
    if concurrency is not None and repeat is not None and repeat.scores_differ:
        together = {i: replace(c, mode="ids") for i, c in together.items()}
    extra: dict[int, list[Violation]] = {}
    for i, v in bait_violations + (violations if concurrency is not None else []):
        extra.setdefault(i, []).append(v)
    outcomes = [
        replace(o, rebuild=rebuild.get(i), bait=bait.get(i),
                concurrency=together.get(i) if concurrency is not None else None,
                violations=o.violations + tuple(extra.get(i, ())))
        for i, o in enumerate(outcomes)
    ]
    probes = Probes(canary=canary, repeat=repeat, concurrency=concurrency, builds=builds, restarts=restarts,
                    noninterference=config.noninterference != "off")
    return _run(config, date, outcomes, latency, versions, dense_model, label, mode, probes)
