"""The generated requests: which requests the gate makes up besides the team's cases, and why, as plain data.

The invariant holds for *every* caller, query and date, but a case file asks
only where its authors looked. Leaks live elsewhere: a result cache keyed by the
query answers one caller with another's results; a caller with no case (a
contractor with no tags) is never asked; nobody queries a hidden chunk's own
code; a date check is off by one day at a version's edge. So the gate plans
probes of three families from the corpus and the callers file
(:data:`FAMILIES`); the gate's plan (:mod:`~labsrc.gate.plan`) asks them on the
main build, and each is judged exactly (:mod:`~labsrc.gate.generated`),
as property-based testing does (a deterministic seed, a bounded budget, each
failure handed back as one case to add).


**Aimed where leaks live.** The hidden-chunk family spends its share of the budget tier by tier
(siblings, then what shares a rare term with the caller's view, then the rest):
:mod:`~labsrc.gate.probe_targets`.


**Two depths.** Each probe is asked at the run's ``top_k`` and at
:func:`~labsrc.gate.config.deep_top_k` (``max(10, 5 * top_k)``): a retriever that
pads a short list from an unfiltered ranking, or cuts a lane before filtering it,
often does so only at a large ``k``. The budget counts probes; a probe is two
requests (:attr:`ProbePlan.asked`).

The plan is deterministic for a seed and bounded by the budget. When the budget
cannot hold every planned probe, the families share it evenly (the family with
the fewest probes taken so far goes next; a family that needs less leaves the
rest to the others), and the plan records what was left out, per family, and
what each tier got.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from labsrc.boundary import BoundaryIndex, block_reasons
from labsrc.errors import LabError
from labsrc.gate.attack_queries import AttackQueries, shown_query
from labsrc.gate.bait import BaitVectors
from labsrc.gate.config import (AUTO_PROBE_BUDGET, DEFAULT_PROBE_BUDGET, PROBE_TIERS, check_min_coverage,
                                deep_top_k, default_probe_budget)
from labsrc.gate.probe_plan import FAMILIES, TIER_LABELS, GeneratedRequest, ProbePlan
from labsrc.gate.probe_targets import (TIER_WEIGHTS, Targets, by_weight, case_dates, hidden_tiers,
                                       rare_df, round_robin)
from labsrc.lanes.coverage import query_lookup
from labsrc.lanes.dense import DenseSource
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["DEFAULT_PROBE_BUDGET", "FAMILIES", "PROBE_TIERS", "TIER_LABELS", "TIER_WEIGHTS", "GeneratedRequest",
           "ProbePlan", "hidden_tiers", "plan_probes", "probe_vectors", "rare_df"]

_DAY = dt.timedelta(days=1)


def _shown(how: str, query: str, chunk_id: str) -> str | None:
    shown = shown_query(how, query, chunk_id)
    return None if shown == query else shown



def _cross_caller(cases: Sequence[Case], callers: Mapping[str, Caller], boundary: BoundaryIndex,
                  on_date: dt.date, rng: random.Random) -> tuple[list[list[GeneratedRequest]], int]:
    """One group per (case query, case date): the case's caller, then every other caller, the widest view first."""
    tie = {actor: rng.random() for actor in sorted(callers)}
    dates = case_dates(cases, on_date)
    seen = {(day, actor): int(boundary.mask(callers[actor], day).sum()) for day in dates for actor in callers}
    groups, total = [], 0
    asked: dict[tuple[str, dt.date], str] = {}
    for case in cases:
        for day in dates:
            asked.setdefault((case.query, day), case.caller)
    for (query, day), first in asked.items():
        others = sorted((a for a in callers if a != first), key=lambda a: (-seen[(day, a)], tie[a], a))
        group = [GeneratedRequest("cross-caller", first, day, query, None, "a case's query, as its own caller")]
        group += [GeneratedRequest("cross-caller", actor, day, query, None,
                                   f"a case's query, asked right after {prev!r} asked it")
                  for prev, actor in zip([first, *others], others)]
        groups.append(group)
        total += len(group)
    return groups, total



_TIER_WHY = {"sibling": ", of a document they may see", "shared": ", shares a rare term with what they may see or "
             "the cases ask", "rest": ""}


def _hidden_chunk(callers: Mapping[str, Caller], stored: Sequence[PolicyChunk], dates: Sequence[dt.date],
                  queries: AttackQueries, targets: Targets,
                  seed: int) -> tuple[Iterator[list[GeneratedRequest]], int, int, dict[str, int]]:
    """Every (caller, date)'s hidden chunks by tier; each tier's targets dealt across callers and dates in turn.

    Returns the groups (one request each; a chunk's queries together, code first) in budget order, the
    number of targets, of planned requests, and of targets per tier.
    """
    queues: dict[str, list[tuple[str, dt.date, np.ndarray]]] = {tier: [] for tier in PROBE_TIERS}
    counts = {tier: 0 for tier in PROBE_TIERS}
    total = 0
    for actor, day, tiers in targets.each_caller_and_date(callers, dates, seed):
        for tier, positions in tiers.items():
            queues[tier].append((actor, day, positions))
            counts[tier] += len(positions)
            total += int(targets.asks[positions].sum())

    def groups() -> Iterator[list[GeneratedRequest]]:
        for tier, (actor, day, position) in by_weight({t: round_robin(queues[t]) for t in PROBE_TIERS}):
            chunk = stored[position]
            reason = block_reasons(callers[actor], chunk, day)[0].value.replace("_", " ")
            for how, query in queries.of(chunk.chunk_id):
                yield [GeneratedRequest("hidden-chunk", actor, day, query, chunk.chunk_id,
                                        f"{how} of {chunk.chunk_id!r}, hidden: {reason}{_TIER_WHY[tier]}",
                                        _shown(how, query, chunk.chunk_id), tier=tier)]

    return groups(), sum(counts.values()), total, counts



def _boundary_dates(callers: Mapping[str, Caller], stored: Sequence[PolicyChunk], queries: AttackQueries,
                    rng: random.Random) -> tuple[list[list[GeneratedRequest]], int]:
    """Per dated version, a caller who may see it otherwise, its own text on each edge day and the day beyond."""
    groups = []
    order = list(stored)
    rng.shuffle(order)
    for chunk in order:
        asks = queries.of(chunk.chunk_id)
        readers = sorted(a for a, c in callers.items() if c.region == chunk.region and chunk.acl_tag in c.acl_tags)
        if not asks or not readers:
            continue
        actor = readers[rng.randrange(len(readers))]
        days = []
        if chunk.effective_from > dt.date.min:
            days += [(chunk.effective_from - _DAY, "the day before its first day"), (chunk.effective_from, "its first day")]
        if chunk.effective_to is not None:
            days.append((chunk.effective_to, "its last day"))
            if chunk.effective_to < dt.date.max:
                days.append((chunk.effective_to + _DAY, "the day after its last day"))
        how, query = asks[0]
        groups += [[GeneratedRequest("boundary-date", actor, day, query, chunk.chunk_id,
                                     f"{how} of {chunk.chunk_id!r} on {edge}", _shown(how, query, chunk.chunk_id))]
                   for day, edge in days]
    return groups, len(groups)


def plan_probes(
    stored: Sequence[PolicyChunk],
    callers: Mapping[str, Caller],
    cases: Sequence[Case],
    on_date: dt.date,
    *,
    budget: int | str = DEFAULT_PROBE_BUDGET,
    seed: int = 0,
    queries: AttackQueries | None = None,
    top_k: int | None = None,
    min_coverage: float | Mapping[str, float] | None = None,
) -> ProbePlan:
    """The generated probes of a run: every family planned, then cut to ``budget`` probes evenly across families.

    ``budget`` ``"auto"`` is sized from the corpus (:func:`~labsrc.gate.config.default_probe_budget`).
    With ``top_k``, each probe is asked at ``top_k`` and at :func:`~labsrc.gate.config.deep_top_k`
    (:attr:`ProbePlan.asked`); without, once, at the run's ``top_k``. ``min_coverage`` (a floor for every
    tier, or tier to floor; :func:`~labsrc.gate.config.check_min_coverage`) is kept for the generated-probes
    gate (:meth:`ProbePlan.below_floor`).
    """
    sized_from = None
    if budget == AUTO_PROBE_BUDGET:
        budget, sized_from = default_probe_budget(len(stored)), len(stored)
    rng = random.Random(seed)
    targets, queries = Targets.index(stored, cases, queries)
    dates = case_dates(cases, on_date)
    cross, cross_total = _cross_caller(cases, callers, targets.boundary, on_date, rng)
    hidden, pairs, hidden_total, tiers = _hidden_chunk(callers, stored, dates, queries, targets, seed)
    edges, edges_total = _boundary_dates(callers, stored, queries, rng)
    sources: dict[str, Iterator[list[GeneratedRequest]]] = {
        "cross-caller": iter(cross), "hidden-chunk": hidden, "boundary-date": iter(edges)}
    planned = {"cross-caller": cross_total, "hidden-chunk": hidden_total, "boundary-date": edges_total}
    taken = {family: 0 for family in FAMILIES}
    waiting: dict[str, list[GeneratedRequest] | None] = {f: next(s, None) for f, s in sources.items()}
    kept: list[GeneratedRequest] = []
    while True:
        open_families = [f for f in FAMILIES if waiting[f] is not None and len(waiting[f]) <= budget - len(kept)]
        if not open_families:
            break
        family = min(open_families, key=lambda f: (taken[f], list(FAMILIES).index(f)))
        group = waiting[family]
        kept += group  # type: ignore[arg-type]
        taken[family] += len(group)  # type: ignore[arg-type]
        waiting[family] = next(sources[family], None)
    asked = {case.caller for case in cases}
    return ProbePlan(
        requests=tuple(kept), budget=budget, seed=seed, planned=planned, callers=tuple(sorted(callers)),
        callers_without_case=tuple(sorted(set(callers) - asked)), hidden_pairs=pairs, dates=dates, tiers=tiers,
        depths=() if top_k is None else (top_k, deep_top_k(top_k)), min_coverage=check_min_coverage(min_coverage),
        sized_from=sized_from,
    )


def probe_vectors(source: DenseSource | None, plan: ProbePlan,
                  stored: Sequence[PolicyChunk]) -> DenseSource | None:
    """``source``, giving each made-up query it has no stored vector for the vector of the chunk it aims at.

    A precomputed vectors folder knows only the case queries, and embedding a new query may need a
    model the machine lacks; the target's own vector is the strongest dense attack anyway (cosine 1).
    Queries the source knows keep their own vector; an encoder embeds every query itself and is
    returned as it is (:func:`~labsrc.lanes.coverage.query_lookup`).
    """
    has_query = None if source is None else query_lookup(source)
    if has_query is None:
        return source
    by_id = {c.chunk_id: c for c in stored}
    wanted: dict[str, PolicyChunk] = {}
    for probe in plan.requests:
        if probe.target is not None and probe.query not in wanted and not has_query(probe.query):
            wanted[probe.query] = by_id[probe.target]
    if not wanted:
        return source
    vectors, missing = {}, []
    for query, chunk in wanted.items():
        try:
            vectors[query] = np.asarray(source.document_matrix([chunk]), dtype=np.float64)[0]
        except LabError:  # a hidden chunk no case's caller sees may have no vector: give the query one of its own
            missing.append(query)
    dimension = getattr(source, "dimension", None) or next((len(v) for v in vectors.values()), None)
    if dimension:
        vectors.update({query: _unit_vector(query, int(dimension)) for query in missing})
    return BaitVectors(source, {}, queries=vectors)


def _unit_vector(query: str, dimension: int) -> np.ndarray:
    """A unit vector derived from the query's text: the same in every build, near no document in particular."""
    seed = int.from_bytes(hashlib.sha256(query.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return vector / np.linalg.norm(vector)
