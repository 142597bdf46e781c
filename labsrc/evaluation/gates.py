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
* **Latency**: p50 and p95 of each stage, measured after a warm-up, within budget.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from labsrc.errors import InvalidArgument
from labsrc.evaluation.budgets import STAGES
from labsrc.evaluation.config import LANES, GateConfig
from labsrc.evaluation.latency import LatencyReport, Progress, measure_latency
from labsrc.evaluation.metrics import recall_at_k
from labsrc.evaluation.verdicts import GateResult, not_tested, plural
from labsrc.ranking import check_top_k
from labsrc.records.cases import NEGATIVE_KINDS, Case
from labsrc.records.policy import Caller
from labsrc.retriever.policy import PolicyRetriever
from labsrc.trace import RetrievalTrace

__all__ = [
    "GATE_TABLE",
    "CaseOutcome",
    "GateRun",
    "evaluate_gates",
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
    """

    case: Case
    ids: Mapping[str, tuple[str, ...]]
    trace: RetrievalTrace
    scores: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    probe_ids: Mapping[str, tuple[str, ...]] | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
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
        restricted/superseded/wrong_region → nothing leaked; absent → nothing forbidden returned."""
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


def run_cases(
    retriever: PolicyRetriever,
    cases: Sequence[Case],
    callers: Mapping[str, Caller] | Sequence[Caller],
    on_date: dt.date,
    top_k: int = 2,
    *,
    progress: Progress | None = None,
) -> list[CaseOutcome]:
    """Replay every case as its caller; a case's own ``on_date`` wins over ``on_date``.

    Each case runs once at ``top_k``. Cases with ``forbidden`` ids also run a
    probe as deep as the corpus, so the exclusion gates see every candidate
    each lane could produce, not only the top k.
    """
    top_k = check_top_k(top_k)
    callers = as_caller_map(callers)
    depth = max(top_k, len(retriever.chunks))
    outcomes = []
    for done, case in enumerate(cases, start=1):
        if case.caller not in callers:
            raise InvalidArgument(f"case {case.name!r} names unknown caller {case.caller!r}; known: {sorted(callers)}")
        caller, date = callers[case.caller], case.on_date or on_date
        result = retriever.search(case.query, caller, date, top_k, query_kind=case.kind)
        lanes = {"bm25": result.sparse, "dense": result.dense, "hybrid": result.fused}
        probe = None
        if case.forbidden:
            deep = retriever.search(case.query, caller, date, depth, query_kind=case.kind)
            probe = {"bm25": deep.trace.sparse_ids, "dense": deep.trace.dense_ids, "hybrid": deep.trace.fused_ids}
        outcomes.append(
            CaseOutcome(
                case,
                {lane: tuple(c.chunk_id for c, _ in pairs) for lane, pairs in lanes.items()},
                result.trace,
                scores={lane: tuple(s for _, s in pairs) for lane, pairs in lanes.items()},
                probe_ids=probe,
                top_k=top_k,
            )
        )
        if progress is not None:
            progress("cases", done, len(cases))
    return outcomes


def lane_recall(outcomes: Sequence[CaseOutcome], k: int) -> dict[str, float]:
    """Mean permitted Recall@k per lane over the positive cases (0.0 when there are none)."""
    positives = [o for o in outcomes if o.case.kind == "positive"]
    if not positives:
        return {lane: 0.0 for lane in LANES}
    return {
        lane: sum(recall_at_k(o.ids[lane], o.case.expected, k) for o in positives) / len(positives) for lane in LANES
    }


def _latency_gate(latency: LatencyReport, config: GateConfig) -> GateResult:
    exceeded = latency.exceeded(config.p50_budget_ms, config.p95_budget_ms)
    p50, p95 = latency.p50_ms, latency.p95_ms
    over = []
    for stat, values, budgets in (("p50", p50, config.p50_budget_ms), ("p95", p95, config.p95_budget_ms)):
        for stage in exceeded[stat]:
            measured = f"{values[stage]:.3f}" if stage in values else "not measured"
            over.append(f"{stage} {stat} {measured} > {budgets[stage]:g} ms")
    stages = tuple(s for s in (*STAGES, *sorted(set(exceeded["p50"] + exceeded["p95"]) - set(STAGES)))
                   if s in exceeded["p50"] or s in exceeded["p95"])
    summary = f"{len(config.p50_budget_ms)} p50 and {len(config.p95_budget_ms)} p95 budgets, {latency.requests} timed requests"
    detail = summary if not over else f"{summary}; " + "; ".join(over)
    return GateResult("latency p50/p95", not stages, detail, family="latency", failing_stages=stages)


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

    for lane in LANES:
        name = f"recall@{k} {lane}"
        if not positives:
            results.append(not_tested(name, "recall", "positive cases", config))
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

    if latency is not None:
        results.append(_latency_gate(latency, config))
    return results


@dataclass(frozen=True)
class GateRun:
    """Everything one release-gate run produced: the input of every report."""

    config: GateConfig
    on_date: dt.date
    outcomes: tuple[CaseOutcome, ...]
    gates: tuple[GateResult, ...]
    recall: Mapping[str, float]
    versions: Mapping[str, str]
    dense_model: Mapping[str, Any]
    latency: LatencyReport | None = None

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


def release_gate(
    retriever: PolicyRetriever,
    cases: Sequence[Case],
    callers: Mapping[str, Caller] | Sequence[Caller],
    config: GateConfig | None = None,
    *,
    on_date: dt.date | None = None,
    measure: bool = True,
    progress: Progress | None = None,
) -> GateRun:
    """Replay the cases, evaluate every gate and (with ``measure``) time the stages.

    ``on_date`` overrides ``config.on_date``; with neither, today's date is used.
    The retriever's ``rrf_k`` must match the config's, so the report never
    describes a different fusion than the one that ran.
    """
    config = config or GateConfig()
    if float(retriever.rrf_k) != float(config.rrf_k):
        raise InvalidArgument(
            f"the retriever fuses with rrf_k={retriever.rrf_k} but the config says rrf_k={config.rrf_k}; "
            "build the retriever with PolicyRetriever(..., rrf_k=config.rrf_k)"
        )
    if not cases:
        raise InvalidArgument("no cases: a release gate with nothing to replay cannot pass")
    date = on_date or config.eval_date()
    callers = as_caller_map(callers)
    outcomes = run_cases(retriever, cases, callers, date, config.top_k, progress=progress)
    latency = None
    if measure:
        latency = measure_latency(
            retriever, cases, callers, date, config.top_k,
            warmup=config.warmup, repetitions=config.repetitions, progress=progress,
        )
    gates = evaluate_gates(outcomes, config, latency)
    return GateRun(
        config=config,
        on_date=date,
        outcomes=tuple(outcomes),
        gates=tuple(gates),
        recall=lane_recall(outcomes, config.top_k),
        versions=retriever.versions(date),
        dense_model=dict(getattr(retriever.vectors, "model", None) or {}),
        latency=latency,
    )
