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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from labsrc.boundary import permitted_chunks
from labsrc.errors import InvalidArgument
from labsrc.evaluation.bait import BaitVectors, bait_chunks
from labsrc.evaluation.config import GateConfig
from labsrc.evaluation.gate_rules import GATE_TABLE, evaluate_gates
from labsrc.evaluation.latency import LatencyReport, Progress, measure_latency
from labsrc.evaluation.noninterference import Comparison, compare_observations
from labsrc.evaluation.outcomes import (
    CaseOutcome,
    as_caller_map,
    lane_recall,
    replay_cases,
    run_cases,
    stored_chunks,
)
from labsrc.evaluation.subject import (
    Factory,
    Observation,
    Subject,
    SubjectError,
    build_subject,
    close_subject,
    factory_name,
    observe,
    subject_versions,
)
from labsrc.evaluation.verdicts import GateResult
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


def _noninterference(
    factory: Factory,
    stored: tuple[PolicyChunk, ...],
    vectors: DenseSource | None,
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    on_date: dt.date,
    top_k: int,
    observed: Sequence[Observation],
    mode: str,
    progress: Progress | None,
) -> tuple[dict[int, Comparison], dict[int, Comparison]]:
    """Per case position: the comparison with the permitted-only rebuild, and with the bait build."""
    rebuild: dict[int, Comparison] = {}
    bait: dict[int, Comparison] = {}
    groups = _groups(cases, callers, on_date)
    taken = {c.chunk_id for c in stored}
    for done, ((actor, day), positions) in enumerate(groups.items(), start=1):
        caller = callers[actor]
        permitted = tuple(permitted_chunks(caller, stored, day))
        queries = list(dict.fromkeys(cases[i].query for i in positions))
        planted = bait_chunks(queries, caller, day, taken)
        planted_ids = frozenset(c.chunk_id for c in planted)
        builds = (
            ("rebuild", permitted, vectors, f"over {actor}'s {len(permitted)} permitted chunks on {day}"),
            ("bait", stored + planted, None if vectors is None else BaitVectors.for_queries(vectors, planted),
             f"with {len(planted)} bait chunks hidden from {actor} on {day}"),
        )
        for kind, chunks, source, what in builds:
            target = rebuild if kind == "rebuild" else bait
            try:
                other = build_subject(factory, chunks, source, what=what)
            except SubjectError as exc:
                for i in positions:
                    target[i] = Comparison(kind, mode, error=str(exc))
                continue
            try:
                for i in positions:
                    case = cases[i]
                    answer = observe(other, case.query, caller, day, top_k, query_kind=case.kind)
                    if kind == "rebuild":
                        target[i] = compare_observations(answer, observed[i], kind=kind, mode=mode)
                    else:
                        target[i] = compare_observations(observed[i], answer, kind=kind, mode=mode, bait_ids=planted_ids)
            finally:
                close_subject(other)
        if progress is not None:
            progress("noninterference", done, len(groups))
    return rebuild, bait


@dataclass(frozen=True)
class GateRun:
    """Everything one release-gate run produced: the input of every report.

    ``subject`` names what was judged (``"memory"``, ``"postgres"``, or a
    plug-in's ``module:factory``); ``noninterference`` is the comparison mode the
    rebuild and bait gates used, or ``None`` when they did not run.
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
    subject: Subject,
    stored: tuple[PolicyChunk, ...],
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    config: GateConfig,
    date: dt.date,
    *,
    label: str,
    measure: bool,
    progress: Progress | None,
    factory: Factory | None = None,
    vectors: DenseSource | None = None,
) -> GateRun:
    versions = subject_versions(subject, date, label)
    if "dense" not in versions and vectors is not None:
        versions["dense"] = vectors.version
    pairs = replay_cases(subject, cases, callers, date, config.top_k, chunk_lookup(stored), versions, progress)
    outcomes = [o for o, _ in pairs]
    mode = None
    if factory is not None and config.noninterference != "off":
        mode = config.noninterference
        rebuild, bait = _noninterference(
            factory, stored, vectors, cases, callers, date, config.top_k, [obs for _, obs in pairs], mode, progress
        )
        outcomes = [replace(o, rebuild=rebuild.get(i), bait=bait.get(i)) for i, o in enumerate(outcomes)]
    latency = None
    if measure:
        latency = measure_latency(
            subject, cases, callers, date, config.top_k,
            warmup=config.warmup, repetitions=config.repetitions, progress=progress,
        )
    gates = evaluate_gates(outcomes, config, latency)
    return GateRun(
        config=config,
        on_date=date,
        outcomes=tuple(outcomes),
        gates=tuple(gates),
        recall=lane_recall(outcomes, config.top_k),
        versions=versions,
        dense_model=_dense_model(subject, vectors),
        latency=latency,
        subject=label,
        noninterference=mode,
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
    return _judge(retriever, chunks, cases, as_caller_map(callers), config, date,
                  label=label, measure=measure, progress=progress)


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
    """Judge any retriever by its factory: every gate, plus noninterference by rebuild and by bait.

    ``factory(chunks, vectors)`` is called with every stored chunk (a tuple,
    hidden ones included) and ``vectors`` (the dense source, or ``None``), and
    must return an object with ``search(query, caller, on_date, top_k)`` giving
    a :class:`~labsrc.retriever.policy.RetrievalResult` or ``(chunk_id, score)``
    pairs, best first (:mod:`~labsrc.evaluation.subject`). It is called again
    for each (caller, date) of the cases, over that caller's permitted chunks
    only, and with bait added; every object it builds is closed at the end.

    A factory that raises while building the full corpus raises
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
    date = on_date or config.eval_date()
    subject = build_subject(factory, stored, vectors, what="every stored chunk")
    try:
        _check_rrf_k(subject, config)
        return _judge(subject, stored, cases, callers, config, date, label=label or factory_name(factory),
                      measure=measure, progress=progress, factory=factory, vectors=vectors)
    finally:
        close_subject(subject)
