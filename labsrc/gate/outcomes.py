"""Replaying cases: what each case showed, checked against the boundary on every returned id.

:func:`run_cases` calls the retriever once per case at ``top_k`` and once as a
probe as deep as the corpus (:func:`~labsrc.evaluation.subject.observe`, so
any retriever of the plug-in contract works), and records a
:class:`CaseOutcome`: each lane's ids and scores, the trace, and every returned
id the boundary hides from the case's caller (:func:`~labsrc.gate.noninterference.boundary_violations`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

from labsrc.errors import InvalidArgument
from labsrc.gate.config import LANES
from labsrc.evaluation.latency import Progress
from labsrc.evaluation.metrics import recall_at_k
from labsrc.gate.noninterference import Comparison, Violation, boundary_violations
from labsrc.evaluation.subject import Observation, Request, Subject, observe_request, subject_versions
from labsrc.ranking import check_top_k
from labsrc.records.cases import NEGATIVE_KINDS, PERMITTED_ONLY, Case
from labsrc.records.policy import Caller, PolicyChunk, chunk_lookup
from labsrc.retriever.policy import PolicyRetriever
from labsrc.trace import RetrievalTrace

__all__ = ["CaseOutcome", "as_caller_map", "case_outcome", "lane_recall", "replay_cases", "run_cases", "stored_chunks"]


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
    with a build over the caller's permitted chunks and a build holding bait;
    ``concurrency`` compares it under concurrent requests with the case alone.
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
    concurrency: Comparison | None = None

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
        restricted/superseded/not_yet_effective/wrong_region → nothing leaked; absent → nothing forbidden returned;
        permitted_only → nothing beyond what every kind is held to (it names no id).
        Every kind also fails on a search error, a returned hidden id, or a rebuild, bait or concurrency difference."""
        if self.error or self.violations:
            return False
        if any(c is not None and c.differs for c in (self.rebuild, self.bait, self.concurrency)):
            return False
        if self.case.kind == PERMITTED_ONLY:  # the comparisons above are its check
            return True
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


def case_outcome(case: Case, top: Observation, deep: Observation, caller: Caller, date: dt.date, top_k: int,
                 stored: Mapping[str, PolicyChunk], versions: Mapping[str, str]) -> CaseOutcome:
    """What one case showed: its answer at ``top_k`` (``top``) and as deep as the corpus (``deep``),
    every returned id checked against the boundary for the case's caller and date."""
    violations = _violations(
        boundary_violations(case.name, top, caller, date, stored),
        boundary_violations(case.name, deep, caller, date, stored, probe=True),
    )
    return CaseOutcome(
        case,
        {lane: top.ids(lane) for lane in LANES},
        _trace(top, case, versions),
        scores={lane: top.scores(lane) for lane in LANES},
        probe_ids={lane: deep.ids(lane) for lane in LANES},
        top_k=top_k,
        lanes_reported=top.lanes_reported or bool(top.error),
        error=top.error or deep.error,
        violations=violations,
    )


def replay_cases(
    ask: Callable[[Request], Observation],
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
        top = ask(Request(case.query, caller, date, top_k, case.kind))
        # The probe: as deep as the corpus, so a hidden id ranked below top_k still counts.
        deep = top if top.error else ask(Request(case.query, caller, date, depth, case.kind))
        out.append((case_outcome(case, top, deep, caller, date, top_k, stored, versions), top))
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
    chunks = stored_chunks(retriever, stored)
    versions = subject_versions(retriever, on_date, type(retriever).__name__)
    ask = partial(observe_request, retriever)
    return [o for o, _ in replay_cases(ask, cases, as_caller_map(callers), on_date, top_k, chunks, versions, progress)]


def stored_chunks(retriever: object, stored: Sequence[PolicyChunk] | None) -> Mapping[str, PolicyChunk]:
    chunks = stored if stored is not None else getattr(retriever, "chunks", None)
    if chunks is None:
        raise InvalidArgument(
            "the gate needs every stored chunk to check returned ids against the boundary: "
            "pass stored=chunks (the retriever has no .chunks)"
        )
    return chunk_lookup(chunks)


def lane_recall(outcomes: Sequence[CaseOutcome], k: int) -> dict[str, float]:
    """Mean permitted Recall@k per lane over the positive cases (0.0 when there are none)."""
    positives = [o for o in outcomes if o.case.kind == "positive"]
    if not positives:
        return {lane: 0.0 for lane in LANES}
    return {
        lane: sum(recall_at_k(o.ids[lane], o.case.expected, k) for o in positives) / len(positives) for lane in LANES
    }
