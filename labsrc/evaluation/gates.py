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
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from labsrc.boundary import permitted_chunks
from labsrc.errors import InvalidArgument
from labsrc.evaluation.bait import BAIT_REASONS, BaitVectors, bait_chunks
from labsrc.evaluation.budgets import BUDGET_STAGES, REQUEST_STAGE
from labsrc.evaluation.config import LANES, GateConfig
from labsrc.evaluation.latency import LatencyReport, Progress, measure_latency
from labsrc.evaluation.metrics import recall_at_k
from labsrc.evaluation.noninterference import Comparison, Violation, boundary_violations, compare_observations
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
from labsrc.evaluation.verdicts import GateResult, not_tested, plural
from labsrc.lanes.dense import DenseSource
from labsrc.ranking import check_top_k
from labsrc.records.cases import NEGATIVE_KINDS, Case
from labsrc.records.policy import Caller, PolicyChunk, chunk_lookup
from labsrc.retriever.policy import PolicyRetriever
from labsrc.trace import RetrievalTrace

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

#: Gate family → (what to freeze, what a failure means). The lesson's table, plus latency.
GATE_TABLE: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "recall": (
            "the query and the id of the required current chunk",
            "the right evidence never reaches context selection",
        ),
        "hybrid": (
            "the same positive cases, scored per lane",
            "fusion loses (or, under 'strict', fails to add) evidence a single lane finds",
        ),
        "restricted": ("queries that strongly match hidden chunks", "the retriever boundary is unsafe"),
        "superseded": ("queries that match old policy wording", "the freshness filter regressed"),
        "wrong_region": ("a caller from another region asking a matching query", "the region filter regressed"),
        "abstention": (
            "questions with no permitted supporting evidence",
            "retrieval or the answer layer overreaches",
        ),
        "boundary": (
            "every id each lane and the fused list return, at top_k and at full depth",
            "the retriever returned evidence the caller may not see",
        ),
        "rebuild": (
            "each case replayed on a build over the caller's permitted chunks only",
            "chunks the caller may not see change what the caller observes",
        ),
        "bait": (
            "hidden chunks made to match each query, one per boundary rule",
            "hidden evidence reaches a lane or moves a score",
        ),
        "errors": ("every search call of the run", "the retriever raised instead of answering"),
        "latency": ("per-stage p50 and p95 budgets in ms", "a stage is too slow to ship"),
    }
)


@dataclass(frozen=True)
class CaseOutcome:
    """One replayed case.

    ``ids`` and ``scores`` hold each lane's ranked list at ``top_k`` (lanes
    ``bm25``, ``dense`` and ``hybrid``, the fused list). ``probe_ids`` holds the
    same lanes at the depth of the whole corpus; the exclusion gates read it, so
    a forbidden id ranked below ``top_k`` still counts as a leak.

    ``lanes_reported`` is False for a retriever that returns only its fused list
    (``bm25`` and ``dense`` are then empty and their gates NOT TESTED). ``error``
    is what ``search`` raised, if it did. ``violations`` are returned ids the
    boundary hides from the caller; ``rebuild`` and ``bait`` compare the case
    with a build over the caller's permitted chunks and a build holding bait.
    """

    case: Case
    ids: Mapping[str, tuple[str, ...]]
    trace: RetrievalTrace
    scores: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    probe_ids: Mapping[str, tuple[str, ...]] | None = None
    top_k: int | None = None
    lanes_reported: bool = True
    error: str | None = None
    violations: tuple[Violation, ...] = ()
    rebuild: Comparison | None = None
    bait: Comparison | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "violations", tuple(self.violations))
        object.__setattr__(self, "ids", MappingProxyType({k: tuple(v) for k, v in self.ids.items()}))
        object.__setattr__(self, "scores", MappingProxyType({k: tuple(v) for k, v in self.scores.items()}))
        if self.probe_ids is not None:
            object.__setattr__(self, "probe_ids", MappingProxyType({k: tuple(v) for k, v in self.probe_ids.items()}))

    @property
    def returned(self) -> tuple[str, ...]:
        """The fused list: what the caller actually gets."""
        return self.ids["hybrid"]

    def leaked(self) -> tuple[str, ...]:
        """Forbidden ids that reached any lane or the fused list (at probe depth), sorted."""
        lists = (self.probe_ids or self.ids).values()
        seen = set().union(*lists) if lists else set()
        return tuple(sorted(seen.intersection(self.case.forbidden)))

    def overreach(self) -> tuple[str, ...]:
        """Forbidden ids in the fused list at ``top_k`` (the abstention check), sorted."""
        return tuple(sorted(set(self.returned).intersection(self.case.forbidden)))

    def lane_rank(self, chunk_id: str, lane: str) -> int | None:
        """1-based rank of ``chunk_id`` in ``lane`` at ``top_k``, or None."""
        ids = self.ids[lane]
        return ids.index(chunk_id) + 1 if chunk_id in ids else None

    def recall(self, lane: str, k: int | None = None) -> float:
        """Recall@k of this case's expected ids in ``lane`` (k defaults to ``top_k``)."""
        k = k or self.top_k or max(len(self.ids[lane]), 1)
        return recall_at_k(self.ids[lane], self.case.expected, k)

    @property
    def passed(self) -> bool:
        """This case's own check: positive → all expected ids fused in the top k;
        restricted/superseded/wrong_region → nothing leaked; absent → nothing forbidden returned.
        Every kind also fails on a search error, a returned hidden id, or a rebuild or bait difference."""
        if self.error or self.violations:
            return False
        if any(c is not None and c.differs for c in (self.rebuild, self.bait)):
            return False
        if self.case.kind == "positive":
            return self.recall("hybrid") == 1.0
        if self.case.kind in NEGATIVE_KINDS:
            return not self.leaked()
        return not self.overreach()


def as_caller_map(callers: Mapping[str, Caller] | Sequence[Caller]) -> Mapping[str, Caller]:
    """Callers keyed by ``actor_id`` (a mapping is returned as it is)."""
    if isinstance(callers, Mapping):
        return callers
    return {c.actor_id: c for c in callers}


def _trace(observation: Observation, case: Case, versions: Mapping[str, str]) -> RetrievalTrace:
    """The result's own trace, or, for a pairs-only retriever, one holding its fused ids."""
    if observation.trace is not None:
        t = observation.trace
        return RetrievalTrace(
            versions=t["versions"], query_kind=t["query_kind"], sparse_ids=t["sparse_ids"],
            dense_ids=t["dense_ids"], fused_ids=t["fused_ids"], timings_ms=observation.timings_ms,
        )
    return RetrievalTrace(versions, case.kind, (), (), observation.ids("hybrid"), observation.timings_ms)


def _violations(top: tuple[Violation, ...], deep: tuple[Violation, ...]) -> tuple[Violation, ...]:
    """Violations at top_k, then those only the full-depth probe found (one per lane and chunk)."""
    seen = {(v.lane, v.chunk_id) for v in top}
    return top + tuple(v for v in deep if (v.lane, v.chunk_id) not in seen)


def _replay(
    subject: Subject,
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    on_date: dt.date,
    top_k: int,
    stored: Mapping[str, PolicyChunk],
    versions: Mapping[str, str],
    progress: Progress | None,
) -> list[tuple[CaseOutcome, Observation]]:
    top_k = check_top_k(top_k)
    depth = max(top_k, len(stored))
    out = []
    for done, case in enumerate(cases, start=1):
        if case.caller not in callers:
            raise InvalidArgument(f"case {case.name!r} names unknown caller {case.caller!r}; known: {sorted(callers)}")
        caller, date = callers[case.caller], case.on_date or on_date
        top = observe(subject, case.query, caller, date, top_k, query_kind=case.kind)
        # The probe: as deep as the corpus, so a hidden id ranked below top_k still counts.
        deep = top if top.error else observe(subject, case.query, caller, date, depth, query_kind=case.kind)
        violations = _violations(
            boundary_violations(case.name, top, caller, date, stored),
            boundary_violations(case.name, deep, caller, date, stored, probe=True),
        )
        out.append((
            CaseOutcome(
                case,
                {lane: top.ids(lane) for lane in LANES},
                _trace(top, case, versions),
                scores={lane: top.scores(lane) for lane in LANES},
                probe_ids={lane: deep.ids(lane) for lane in LANES},
                top_k=top_k,
                lanes_reported=top.lanes_reported or bool(top.error),
                error=top.error or deep.error,
                violations=violations,
            ),
            top,
        ))
        if progress is not None:
            progress("cases", done, len(cases))
    return out


def run_cases(
    retriever: PolicyRetriever | Subject,
    cases: Sequence[Case],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    top_k: int = 2,
    *,
    progress: Progress | None = None,
    stored: Sequence[PolicyChunk] | None = None,
) -> list[CaseOutcome]:
    """Replay every case as its caller; a case's own ``on_date`` wins over ``on_date``.

    Each case runs once at ``top_k`` and once as a probe as deep as the corpus,
    so the exclusion gates see every candidate each lane could produce, not only
    the top k. Every id either returns is checked against the boundary.
    ``stored`` is every stored chunk (default: ``retriever.chunks``).
    """
    chunks = _stored(retriever, stored)
    versions = subject_versions(retriever, on_date, type(retriever).__name__)
    return [o for o, _ in _replay(retriever, cases, as_caller_map(callers), on_date, top_k, chunks, versions, progress)]


def _stored(retriever: object, stored: Sequence[PolicyChunk] | None) -> Mapping[str, PolicyChunk]:
    chunks = stored if stored is not None else getattr(retriever, "chunks", None)
    if chunks is None:
        raise InvalidArgument(
            "the gate needs every stored chunk to check returned ids against the boundary: "
            "pass stored=chunks (the retriever has no .chunks)"
        )
    return chunk_lookup(chunks)


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


def lane_recall(outcomes: Sequence[CaseOutcome], k: int) -> dict[str, float]:
    """Mean permitted Recall@k per lane over the positive cases (0.0 when there are none)."""
    positives = [o for o in outcomes if o.case.kind == "positive"]
    if not positives:
        return {lane: 0.0 for lane in LANES}
    return {
        lane: sum(recall_at_k(o.ids[lane], o.case.expected, k) for o in positives) / len(positives) for lane in LANES
    }


def _latency_gate(latency: LatencyReport, config: GateConfig, *, stages_reported: bool = True) -> GateResult:
    """p50/p95 within budget. A retriever that reports no stages is held to the ``request`` budget only."""
    p50_budgets, p95_budgets = dict(config.p50_budget_ms), dict(config.p95_budget_ms)
    skipped: list[str] = []
    if not stages_reported:
        skipped = sorted({s for s in (*p50_budgets, *p95_budgets) if s not in latency.samples},
                         key=BUDGET_STAGES.index)
        p50_budgets = {s: b for s, b in p50_budgets.items() if s in latency.samples}
        p95_budgets = {s: b for s, b in p95_budgets.items() if s in latency.samples}
        if not p50_budgets and not p95_budgets:
            measured = ""
            if REQUEST_STAGE in latency.samples:
                measured = (f"; measured {REQUEST_STAGE} p50 {latency.p50_ms[REQUEST_STAGE]:.3f} ms, "
                            f"p95 {latency.p95_ms[REQUEST_STAGE]:.3f} ms")
            reason = (f"the retriever reports no stage timings and the config budgets no '{REQUEST_STAGE}' stage "
                      f"(add p95_budget_ms.{REQUEST_STAGE} to gate its end-to-end time){measured}")
            return not_tested("latency p50/p95", "latency", "", config, reason=reason)
    exceeded = latency.exceeded(p50_budgets, p95_budgets)
    p50, p95 = latency.p50_ms, latency.p95_ms
    over = []
    for stat, values, budgets in (("p50", p50, p50_budgets), ("p95", p95, p95_budgets)):
        for stage in exceeded[stat]:
            measured = f"{values[stage]:.3f}" if stage in values else "not measured"
            over.append(f"{stage} {stat} {measured} > {budgets[stage]:g} ms")
    known = (*BUDGET_STAGES, *sorted(set(exceeded["p50"] + exceeded["p95"]) - set(BUDGET_STAGES)))
    stages = tuple(s for s in known if s in exceeded["p50"] or s in exceeded["p95"])
    summary = f"{len(p50_budgets)} p50 and {len(p95_budgets)} p95 budgets, {latency.requests} timed requests"
    if skipped:
        summary += f" (not reported by the retriever, so not gated: {', '.join(skipped)})"
    detail = summary if not over else f"{summary}; " + "; ".join(over)
    return GateResult("latency p50/p95", not stages, detail, family="latency", failing_stages=stages)


def _boundary_gate(outcomes: Sequence[CaseOutcome]) -> GateResult:
    flagged = [o for o in outcomes if o.violations]
    hidden = sorted({v.chunk_id for o in flagged for v in o.violations})
    detail = (f"{plural(len(outcomes), 'case')}, every lane at top_k and full depth: "
              f"{plural(len(hidden), 'hidden id')} returned")
    findings = tuple(v.describe() for o in flagged for v in o.violations)
    return GateResult("boundary on every returned id", not flagged, detail,
                      tuple(o.case.name for o in flagged), family="boundary", findings=findings)


def _comparison_gate(outcomes: Sequence[CaseOutcome], kind: str, mode: str) -> GateResult:
    compared = [(o, getattr(o, kind)) for o in outcomes if getattr(o, kind) is not None]
    differing = [(o, c) for o, c in compared if c.differs]
    findings = tuple(f"case {o.case.name!r}: {c.describe()}" for o, c in differing)
    if kind == "rebuild":
        name = "noninterference by rebuild"
        what = "a build over the caller's permitted chunks only"
    else:
        name = "noninterference by bait"
        what = f"a build with {len(BAIT_REASONS)} hidden bait chunks per query"
    largest = max((c.max_score_diff for _, c in compared if not c.error), default=0.0)
    detail = f"{plural(len(compared), 'case')} vs {what} ({mode}): {len(differing)} differ"
    if mode == "exact" and largest:
        detail += f", largest score difference {largest:.6g}"
    return GateResult(name, not differing, detail, tuple(o.case.name for o, _ in differing),
                      family=kind, findings=findings)


def evaluate_gates(
    outcomes: Sequence[CaseOutcome],
    config: GateConfig | None = None,
    latency: LatencyReport | None = None,
) -> list[GateResult]:
    """Every gate's verdict, in the lesson's table order (latency last, when measured)."""
    config = config or GateConfig()
    k = config.top_k
    recall = lane_recall(outcomes, k)
    positives = [o for o in outcomes if o.case.kind == "positive"]
    results: list[GateResult] = []
    lanes_reported = all(o.lanes_reported for o in outcomes)
    fused_only = "the retriever returns only its fused list, so its lanes cannot be measured"

    for lane in LANES:
        name = f"recall@{k} {lane}"
        if not positives:
            results.append(not_tested(name, "recall", "positive cases", config))
            continue
        if lane != "hybrid" and not lanes_reported:
            untested = not_tested(name, "recall", "", config, reason=fused_only)
            if lane in config.min_recall:  # the config requires this lane: not measuring it fails
                untested = GateResult(name, False, f"{fused_only}, but the config sets min_recall[{lane!r}]",
                                      family="recall", tested=False)
            results.append(untested)
            continue
        threshold = config.min_recall.get(lane)
        missed = tuple(o.case.name for o in positives if recall_at_k(o.ids[lane], o.case.expected, k) < 1.0)
        passed = threshold is None or recall[lane] >= threshold
        bound = "reported only" if threshold is None else f">= {threshold:.2f}"
        detail = f"{recall[lane]:.2f} ({bound}; {plural(len(positives), 'positive case')})"
        failing = missed if threshold is not None and not passed else ()
        results.append(GateResult(name, passed, detail, failing, family="recall"))

    if config.hybrid_rule != "off":
        lanes_only = [recall[lane] for lane in LANES if lane != "hybrid"]
        if config.hybrid_rule == "strict":
            passed, relation = all(recall["hybrid"] > r for r in lanes_only), ">"
        else:
            passed, relation = all(recall["hybrid"] >= r for r in lanes_only), ">="
        name = f"hybrid {relation} each lane"
        if not positives:
            results.append(not_tested(name, "hybrid", "positive cases", config))
        elif not lanes_reported:
            results.append(not_tested(name, "hybrid", "", config, reason=fused_only))
        else:
            detail = f"hybrid {recall['hybrid']:.2f} vs bm25 {recall['bm25']:.2f}, dense {recall['dense']:.2f}"
            results.append(GateResult(name, passed, detail, family="hybrid"))

    for kind in NEGATIVE_KINDS:
        group = [o for o in outcomes if o.case.kind == kind]
        if not group:
            results.append(not_tested(f"{kind} exclusion", kind, f"{kind} cases", config))
            continue
        leaks = tuple(o.case.name for o in group if o.leaked())
        detail = f"{plural(len(group), 'case')}, {len(leaks)} leaked (all lanes, full depth)"
        results.append(GateResult(f"{kind} exclusion", not leaks, detail, leaks, family=kind))

    absent = [o for o in outcomes if o.case.kind == "absent"]
    if not absent:
        results.append(not_tested("abstention", "abstention", "absent cases", config))
    else:
        overreach = tuple(o.case.name for o in absent if o.overreach())
        returned = sum(len(o.returned) for o in absent)
        detail = f"{plural(len(absent), 'case')}, {returned} fused ids returned for review"
        results.append(GateResult("abstention", not overreach, detail, overreach, family="abstention"))

    if outcomes:
        results.append(_boundary_gate(outcomes))
    if any(o.rebuild is not None for o in outcomes):
        results.append(_comparison_gate(outcomes, "rebuild", config.noninterference))
    if any(o.bait is not None for o in outcomes):
        results.append(_comparison_gate(outcomes, "bait", config.noninterference))
    raised = [o for o in outcomes if o.error]
    if raised:
        results.append(GateResult(
            "search errors", False, f"{plural(len(raised), 'case')} of {len(outcomes)} raised",
            tuple(o.case.name for o in raised), family="errors",
            findings=tuple(f"case {o.case.name!r}: {o.error}" for o in raised),
        ))

    if latency is not None:
        results.append(_latency_gate(latency, config, stages_reported=lanes_reported))
    return results


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
    pairs = _replay(subject, cases, callers, date, config.top_k, chunk_lookup(stored), versions, progress)
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
    chunks = tuple(_stored(retriever, stored).values())
    date = on_date or config.eval_date()
    label = type(retriever).__name__
    return _judge(retriever, chunks, cases, as_caller_map(callers), config, date,
                  label=label, measure=measure, progress=progress)


def gate_retriever(
    factory: Factory,
    chunks: Sequence[PolicyChunk],
    callers: Mapping[str, Caller] | Sequence[Caller],
    cases: Sequence[Case],
    vectors: DenseSource | None = None,
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
