"""The generated requests: which requests the gate makes up besides the team's cases, and why, as plain data.

The invariant holds for *every* caller, query and date, but a case file asks
only where its authors looked. Leaks live elsewhere: a result cache keyed by the
query answers one caller with another's results; a caller with no case (a
contractor with no tags) is never asked; nobody queries a hidden chunk's own
code; a date check is off by one day at a version's edge. So the gate plans
requests of three families from the corpus and the callers file
(:data:`FAMILIES`); the gate's plan (:mod:`~labsrc.gate.plan`) asks them on the
main build, and each is judged exactly (:mod:`~labsrc.gate.generated`),
as property-based testing does (a deterministic seed, a bounded budget, each
failure handed back as one case to add).

The plan is deterministic for a seed and bounded by a budget of requests. When
the budget cannot hold every planned request, the families share it evenly
(the family with the fewest requests taken so far goes next), and the plan
records what was left out, per family.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from labsrc.boundary import block_reasons
from labsrc.errors import LabError
from labsrc.gate.bait import BaitVectors
from labsrc.gate.attack_queries import AttackQueries, attack_queries, shown_query
from labsrc.gate.config import DEFAULT_PROBE_BUDGET
from labsrc.gate.verdicts import plural
from labsrc.lanes.coverage import query_lookup
from labsrc.lanes.dense import DenseSource
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["DEFAULT_PROBE_BUDGET", "FAMILIES", "GeneratedRequest", "ProbePlan", "plan_probes", "probe_vectors"]

#: The families of generated requests, in report order, with what each asks.
FAMILIES: Mapping[str, str] = MappingProxyType(
    {
        "cross-caller": "every case's query as every caller, on every case date, one caller right after another",
        "hidden-chunk": "a hidden chunk's own code and rarest terms, asked as a caller it is hidden from",
        "boundary-date": "a version's own text on its first and last effective day and the day either side",
    }
)
_DAY = dt.timedelta(days=1)


@dataclass(frozen=True)
class GeneratedRequest:
    """One request the gate made up: who asks what on which date, which chunk it aims at, and why."""

    family: str
    caller: str
    on_date: dt.date
    query: str
    target: str | None = None
    why: str = ""
    shown: str | None = None  # how reports show the query when it is words of a hidden chunk

    @property
    def printable(self) -> bool:
        """Whether reports may show the query as it is (a case's query, a code), not only by reference."""
        return self.shown is None

    def describe(self) -> str:
        """``hidden-chunk probe (code of 'x'): as 'bob' on 2026-06-15, query 'CD-12'``."""
        why = f" ({self.why})" if self.why else ""
        query = repr(self.query) if self.shown is None else self.shown
        return f"{self.family} probe{why}: as {self.caller!r} on {self.on_date}, query {query}"

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "caller": self.caller, "on_date": self.on_date.isoformat(),
                "query": self.query if self.shown is None else self.shown, "target": self.target, "why": self.why}


@dataclass(frozen=True)
class ProbePlan:
    """The generated requests of one run, and what they cover.

    ``planned`` counts each family's requests before the budget; ``requests`` holds
    those kept, in the order they run. ``callers_without_case`` names callers of the
    file that no case asks as; ``hidden_pairs`` counts (caller, hidden chunk, date)
    triples over the case dates, each a target of the hidden-chunk family.
    """

    requests: tuple[GeneratedRequest, ...]
    budget: int
    seed: int
    planned: Mapping[str, int]
    callers: tuple[str, ...]
    callers_without_case: tuple[str, ...]
    hidden_pairs: int = 0
    dates: tuple[dt.date, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", tuple(self.requests))
        object.__setattr__(self, "planned", MappingProxyType(dict(self.planned)))

    def kept(self) -> dict[str, int]:
        counts = {family: 0 for family in FAMILIES}
        for request in self.requests:
            counts[request.family] += 1
        return counts

    def left_out(self) -> dict[str, int]:
        """Planned requests the budget left out, per family (only families that lost some)."""
        kept = self.kept()
        return {f: self.planned.get(f, 0) - kept[f] for f in FAMILIES if self.planned.get(f, 0) > kept[f]}

    @property
    def callers_probed(self) -> tuple[str, ...]:
        return tuple(sorted({r.caller for r in self.requests}))

    @property
    def hidden_attacked(self) -> int:
        """Distinct (caller, chunk, date) the hidden-chunk family asked about (:attr:`hidden_pairs` counts them all)."""
        return len({(r.caller, r.target, r.on_date) for r in self.requests if r.family == "hidden-chunk"})

    @property
    def dates_tried(self) -> tuple[dt.date, ...]:
        return tuple(sorted({r.on_date for r in self.requests}))

    def coverage(self) -> str:
        """One line: what was probed, and what the budget left out."""
        line = (f"{plural(len(self.requests), 'generated request')} (budget {self.budget}, seed {self.seed}): "
                f"{len(self.callers_probed)} of {plural(len(self.callers), 'caller')} probed, "
                f"{self.hidden_attacked} of {self.hidden_pairs} hidden chunks attacked (per caller and date), "
                f"{plural(len(self.dates_tried), 'date')} tried")
        left = self.left_out()
        if left:
            line += "; left out by the budget: " + ", ".join(f"{n} {family}" for family, n in left.items())
        if self.callers_without_case:
            line += f"; callers no case asks as: {', '.join(self.callers_without_case)}"
        return line

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget, "seed": self.seed, "requests": len(self.requests),
            "planned": dict(self.planned), "kept": self.kept(), "left_out": self.left_out(),
            "callers": list(self.callers), "callers_probed": list(self.callers_probed),
            "callers_without_case": list(self.callers_without_case),
            "hidden_pairs": self.hidden_pairs, "hidden_attacked": self.hidden_attacked,
            "dates_tried": [d.isoformat() for d in self.dates_tried], "coverage": self.coverage(),
        }


def _shown(how: str, query: str, chunk_id: str) -> str | None:
    shown = shown_query(how, query, chunk_id)
    return None if shown == query else shown


def _case_dates(cases: Sequence[Case], on_date: dt.date) -> tuple[dt.date, ...]:
    return tuple(dict.fromkeys(case.on_date or on_date for case in cases))


def _visible_count(caller: Caller, stored: Sequence[PolicyChunk], day: dt.date) -> int:
    return sum(1 for c in stored if not block_reasons(caller, c, day))


def _cross_caller(cases: Sequence[Case], callers: Mapping[str, Caller], stored: Sequence[PolicyChunk],
                  on_date: dt.date, rng: random.Random) -> tuple[list[list[GeneratedRequest]], int]:
    """One group per (case query, case date): the case's caller, then every other caller, the widest view first."""
    tie = {actor: rng.random() for actor in sorted(callers)}
    dates = _case_dates(cases, on_date)
    seen = {(day, actor): _visible_count(callers[actor], stored, day) for day in dates for actor in callers}
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


def _round_robin(queues: Sequence[Sequence[Any]]) -> Iterator[Any]:
    depth = 0
    while True:
        layer = [q[depth] for q in queues if depth < len(q)]
        if not layer:
            return
        yield from layer
        depth += 1


def _hidden_chunk(callers: Mapping[str, Caller], stored: Sequence[PolicyChunk], dates: Sequence[dt.date],
                  queries: AttackQueries, rng: random.Random) -> tuple[Iterator[list[GeneratedRequest]], int, int]:
    """Per caller and date, each hidden chunk's attack queries; callers and block reasons dealt round-robin."""
    per_caller: list[list[list[GeneratedRequest]]] = []
    pairs = total = 0
    for actor in sorted(callers):
        caller = callers[actor]
        by_reason: dict[str, list[list[GeneratedRequest]]] = {}
        for day in dates:
            hidden = [(c, block_reasons(caller, c, day)) for c in stored]
            hidden = [(c, r) for c, r in hidden if r]
            rng.shuffle(hidden)
            for chunk, reasons in hidden:
                asks = [GeneratedRequest("hidden-chunk", actor, day, query, chunk.chunk_id,
                                         f"{how} of {chunk.chunk_id!r}, hidden: {reasons[0].value.replace('_', ' ')}",
                                         _shown(how, query, chunk.chunk_id))
                        for how, query in queries.of(chunk.chunk_id)]
                pairs += 1
                total += len(asks)
                if asks:
                    by_reason.setdefault(reasons[0].value, []).append(asks)
        per_caller.append(list(_round_robin([by_reason[r] for r in sorted(by_reason)])))
    # Each chunk's queries stay together (code first), one chunk at a time, callers in turn.
    return ([request] for asks in _round_robin(per_caller) for request in asks), pairs, total


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
    budget: int = DEFAULT_PROBE_BUDGET,
    seed: int = 0,
    queries: AttackQueries | None = None,
) -> ProbePlan:
    """The generated requests of a run: every family planned, then cut to ``budget`` evenly across families."""
    rng = random.Random(seed)
    queries = queries if queries is not None else attack_queries(stored)
    dates = _case_dates(cases, on_date)
    cross, cross_total = _cross_caller(cases, callers, stored, on_date, rng)
    hidden, pairs, hidden_total = _hidden_chunk(callers, stored, dates, queries, rng)
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
        callers_without_case=tuple(sorted(set(callers) - asked)), hidden_pairs=pairs, dates=dates,
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
