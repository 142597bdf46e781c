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
  chunks crafted to win (:mod:`~labsrc.gate.noninterference`).
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

from labsrc.errors import InvalidArgument
from labsrc.gate import reaping
from labsrc.gate.config import GateConfig
from labsrc.gate.gate_rules import GATE_TABLE, evaluate_gates
from labsrc.evaluation.latency import LatencyReport, Progress, measure_latency
from labsrc.gate.noninterference import Comparison, Violation
from labsrc.gate.outcomes import (
    CaseOutcome,
    as_caller_map,
    lane_recall,
    replay_cases,
    run_cases,
    stored_chunks,
)
from labsrc.gate.probe_runs import (
    Builder,
    canary_probe,
    case_groups,
    concurrency_probe,
    noninterference_probe,
    repeat_probe,
)
from labsrc.gate.generated import ask_generated, judge_generated, probe_vectors, request_of
from labsrc.gate.plan import plan_probes
from labsrc.gate.probes import CanaryCheck, Probes, Repeatability
from labsrc.evaluation.subject import (
    Factory,
    Observation,
    Request,
    Subject,
    factory_name,
    observe_request,
    settle_contract,
    subject_versions,
)
from labsrc.gate.verdicts import GateResult
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
    """Replay every case (and time them, with ``measure``) through ``ask``, its contract settled first."""
    ask = settle_contract(ask, label)
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
         probes: Probes | None = None, timed: bool = False) -> GateRun:
    gates = evaluate_gates(outcomes, config, latency, probes, timed=timed)
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


def _why_not_compared(config: GateConfig, canary: CanaryCheck | None, repeat: Repeatability | None) -> str | None:
    """Why generated answers were not compared with a permitted-only rebuild, or None when they could be."""
    if config.noninterference == "off":
        return "no permitted-only rebuilds were made: the config's comparison mode is 'off'"
    if canary is None or not canary.passed:
        return "the factory was not shown to index what it is handed, so no rebuild was made"
    if repeat is not None and repeat.ids_differ:
        return "ids differ between two builds of the same chunks, so no difference could be told from noise"
    return None


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
    return _run(config, date, outcomes, latency, versions, _dense_model(retriever), label, timed=measure)


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

    Every build runs in a fresh worker process (:mod:`~labsrc.gate.workers`),
    on the config's clocks (``build_timeout_s``, ``search_timeout_s``):

    1. the main build: every case replayed (and timed, with ``measure``), then
       replayed from ``config.concurrency`` threads at once (:mod:`~labsrc.gate.probes`),
       then up to ``config.probe_budget`` generated requests (:mod:`~labsrc.gate.plan`:
       every case's query as every caller, hidden chunks' own codes and terms, edge dates);
    2. with ``noninterference`` on: the same chunks built again (repeatability),
       a build with a canary added and a returned chunk withheld (does the factory
       index what it is handed?), then, per (caller, date) of the cases, a build
       over the caller's permitted chunks only (asked the cases and the generated
       requests of that caller and date) and one with bait added.

    The first answer settles the contract: a shape the gate cannot read stops the run
    with :class:`~labsrc.evaluation.subject.SubjectError`. When the builds end, every
    process they left running is killed and named (:mod:`~labsrc.gate.reaping`), and
    what each printed is kept apart from the verdict (``run.probes.output``).

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
    with reaping.keep_watchdog():  # one watchdog for the run's builds, gone when the run ends
        return _gate_retriever(factory, chunks, callers, cases, vectors, config, on_date=on_date, measure=measure,
                               progress=progress, label=label)


def _gate_retriever(
    factory: Factory,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    cases: Sequence[Case],
    vectors: DenseSource | Encoder | None,
    config: GateConfig | None,
    *,
    on_date: dt.date | None,
    measure: bool,
    progress: Progress | None,
    label: str | None,
) -> GateRun:
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
    plan = None
    if config.probe_budget:
        plan = plan_probes(stored, callers, cases, date, budget=config.probe_budget, seed=config.probe_seed)
        vectors = probe_vectors(vectors, plan, stored)
    builder = Builder(factory, vectors, config)
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
            concurrency, together, violations = concurrency_probe(
                main, cases, callers, date, config.top_k, outcomes, config, "exact", progress)
        generated_answers = None
        if plan is not None:
            generated_answers = ask_generated(main.search, plan.requests, callers, config.top_k, progress)
        restarts = main.restarts
    finally:
        main.close()
    mode = None
    repeat = canary = None
    rebuilt: dict[int, Observation] = {}
    rebuild: dict[int, Comparison] = {}
    bait: dict[int, Comparison] = {}
    bait_violations: list[tuple[int, Violation]] = []
    if config.noninterference != "off":
        repeat = repeat_probe(builder, stored, cases, callers, date, config.top_k, observed)
        canary = canary_probe(builder, stored, cases, callers, date, config.top_k, observed)
        builds += 2 if canary is not None else 1
        mode = config.noninterference
        if repeat.scores_differ:
            mode = "ids"  # noise is not a leak: compare what reproduces
        if canary is not None and canary.passed:
            again = () if plan is None or generated_answers is None or repeat.ids_differ else [
                (i, request_of(plan.requests[i], callers, config.top_k))
                for i, answer in enumerate(generated_answers) if not answer.error]
            rebuild, bait, bait_violations, rebuilt = noninterference_probe(
                builder, stored, cases, callers, date, config.top_k, observed, mode, repeat.unstable(), progress,
                extra=again)
            builds += 2 * len(case_groups(cases, callers, date))
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
    generated = None
    if plan is not None:
        generated = judge_generated(plan, generated_answers, chunk_lookup(stored), callers,  # type: ignore[arg-type]
                                    rebuilt=rebuilt, mode=mode or "exact", not_compared=_why_not_compared(
                                        config, canary, repeat))
    leftovers, output = builder.aftermath()
    probes = Probes(canary=canary, repeat=repeat, concurrency=concurrency, builds=builds, restarts=restarts,
                    noninterference=config.noninterference != "off", generated=generated,
                    leftovers=leftovers if reaping.SUPPORTED else None, output=output)
    return _run(config, date, outcomes, latency, versions, dense_model, label, mode, probes, timed=measure)
