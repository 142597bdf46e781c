"""Release gates: replay frozen cases and decide whether a retriever may ship.

The lesson's gate table (spec, "Release gate"):

* **Permitted Recall@k** per lane -- the required current chunk reaches the top k.
* **Restricted / superseded / wrong-region exclusion** -- no forbidden id appears in
  *any* lane's candidates or in the fused list.
* **Abstention** -- for questions with no permitted evidence, the fused list holds
  nothing the case forbids (and is reported for review).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from .cases import NEGATIVE_KINDS, Case
from .errors import InvalidArgument
from .metrics import recall_at_k
from .ranking import check_top_k
from .records import Caller
from .retriever import PolicyRetriever
from .trace import RetrievalTrace

__all__ = ["LANES", "CaseOutcome", "GateConfig", "GateResult", "evaluate_gates", "run_cases", "lane_recall"]

#: The ranked lists a gate can inspect, in report order.
LANES = ("bm25", "dense", "hybrid")

_RULES = ("strict", "at_least")


@dataclass(frozen=True)
class GateConfig:
    """Gate thresholds. ``hybrid_rule``: ``"strict"`` (hybrid recall > every lane, the
    lesson's rule) or ``"at_least"`` (hybrid recall ≥ every lane)."""

    top_k: int = 2
    min_recall: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({"hybrid": 1.0}))
    hybrid_rule: str = "strict"

    def __post_init__(self) -> None:
        check_top_k(self.top_k)
        object.__setattr__(self, "min_recall", MappingProxyType(dict(self.min_recall)))
        unknown = sorted(set(self.min_recall) - set(LANES))
        if unknown:
            raise InvalidArgument(f"min_recall names unknown lane(s) {unknown}; valid lanes are {list(LANES)}")
        if self.hybrid_rule not in _RULES:
            raise InvalidArgument(f"hybrid_rule must be one of {list(_RULES)}, not {self.hybrid_rule!r}")


@dataclass(frozen=True)
class CaseOutcome:
    """One replayed case: the ids each lane returned (ranked) and the trace."""

    case: Case
    ids: Mapping[str, tuple[str, ...]]  # lane → ranked ids
    trace: RetrievalTrace

    def leaked(self) -> tuple[str, ...]:
        """Forbidden ids that reached any lane or the fused list, sorted."""
        seen = set().union(*self.ids.values())
        return tuple(sorted(seen.intersection(self.case.forbidden)))


@dataclass(frozen=True)
class GateResult:
    name: str
    passed: bool
    detail: str
    failing_cases: tuple[str, ...] = ()


def run_cases(
    retriever: PolicyRetriever,
    cases: Sequence[Case],
    callers: Mapping[str, Caller],
    on_date: dt.date,
    top_k: int = 2,
) -> list[CaseOutcome]:
    """Replay every case as its caller; a case's own ``on_date`` wins over ``on_date``."""
    outcomes = []
    for case in cases:
        if case.caller not in callers:
            raise InvalidArgument(f"case {case.name!r} names unknown caller {case.caller!r}")
        result = retriever.search(case.query, callers[case.caller], case.on_date or on_date, top_k, query_kind=case.kind)
        ids = {
            "bm25": result.trace.sparse_ids,
            "dense": result.trace.dense_ids,
            "hybrid": result.trace.fused_ids,
        }
        outcomes.append(CaseOutcome(case, MappingProxyType(ids), result.trace))
    return outcomes


def lane_recall(outcomes: Sequence[CaseOutcome], k: int) -> dict[str, float]:
    """Mean permitted Recall@k per lane over the positive cases (0.0 when there are none)."""
    positives = [o for o in outcomes if o.case.kind == "positive"]
    if not positives:
        return {lane: 0.0 for lane in LANES}
    return {
        lane: sum(recall_at_k(o.ids[lane], o.case.expected, k) for o in positives) / len(positives) for lane in LANES
    }


def evaluate_gates(outcomes: Sequence[CaseOutcome], config: GateConfig | None = None) -> list[GateResult]:
    """Every gate's verdict, in the lesson's table order."""
    config = config or GateConfig()
    k = config.top_k
    recall = lane_recall(outcomes, k)
    positives = [o for o in outcomes if o.case.kind == "positive"]
    results: list[GateResult] = []

    for lane in LANES:
        threshold = config.min_recall.get(lane)
        missed = tuple(o.case.name for o in positives if recall_at_k(o.ids[lane], o.case.expected, k) < 1.0)
        passed = bool(positives) and (threshold is None or recall[lane] >= threshold)
        bound = "reported only" if threshold is None else f">= {threshold:.2f}"
        detail = f"{recall[lane]:.2f} ({bound}; {len(positives)} positive cases)"
        results.append(GateResult(f"recall@{k} {lane}", passed, detail, missed if threshold is not None else ()))

    lanes_only = [recall[lane] for lane in LANES if lane != "hybrid"]
    if config.hybrid_rule == "strict":
        passed, relation = all(recall["hybrid"] > r for r in lanes_only), ">"
    else:
        passed, relation = all(recall["hybrid"] >= r for r in lanes_only), ">="
    results.append(
        GateResult(
            f"hybrid {relation} each lane",
            passed and bool(positives),
            f"hybrid {recall['hybrid']:.2f} vs bm25 {recall['bm25']:.2f}, dense {recall['dense']:.2f}",
        )
    )

    for kind in NEGATIVE_KINDS:
        group = [o for o in outcomes if o.case.kind == kind]
        leaks = tuple(o.case.name for o in group if o.leaked())
        detail = f"{len(group)} cases, {len(leaks)} leaked" if group else "no cases"
        results.append(GateResult(f"{kind} exclusion", not leaks, detail, leaks))

    absent = [o for o in outcomes if o.case.kind == "absent"]
    overreach = tuple(o.case.name for o in absent if o.leaked())
    returned = sum(len(o.ids["hybrid"]) for o in absent)
    detail = f"{len(absent)} cases, {returned} fused ids returned for review" if absent else "no cases"
    results.append(GateResult("abstention", not overreach, detail, overreach))
    return results
