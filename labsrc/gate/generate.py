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

**Aimed where leaks live.** On a corpus of 50,000 chunks a few callers already
have 200,000 (caller, date, hidden chunk) triples to attack, and a budget of a
few hundred probes is a sample. The hidden-chunk family spends it tier by tier
(:data:`~labsrc.gate.config.PROBE_TIERS`), per caller and date:

* ``sibling``: a hidden chunk of a document (``document_id``) or a parent
  (``parent_id``) of which the caller may see a chunk: another version, another
  region's edition. A boundary that checks documents, parents or the newest
  version instead of each chunk leaks these first;
* ``shared``: a hidden chunk one of whose attack terms (its code, its rarest
  terms: :mod:`~labsrc.gate.attack_queries`) is *rare* (in at most
  :func:`rare_df` stored chunks) and is also in a chunk the caller may see, or in
  a case's query: what the caller's own questions reach. Rarest shared term first;
* ``rest``: every other hidden chunk.

Siblings first: the family deals two siblings, then one shared target, then
one of the rest (:data:`TIER_WEIGHTS`), each tier's targets taken from every
(caller, date) in turn; a tier with nothing left gives its turns to the others.
A strict order would spend every probe on siblings at scale (thousands of them
per caller and date), and a leak that only the other tiers show would
never be asked about. The tiers cost a few array passes per (caller, date)
(documents, parents and terms indexed once), never a pass per pair of chunks.

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
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from labsrc.boundary import BlockReason, BoundaryIndex, block_reasons
from labsrc.errors import LabError
from labsrc.gate.bait import BaitVectors
from labsrc.gate.attack_queries import AttackQueries, attack_queries, shown_query
from labsrc.gate.config import (AUTO_PROBE_BUDGET, DEFAULT_PROBE_BUDGET, PROBE_TIERS, check_min_coverage,
                                deep_top_k, default_probe_budget)
from labsrc.gate.verdicts import plural
from labsrc.lanes.analysis import lesson_analyzer
from labsrc.lanes.coverage import query_lookup
from labsrc.lanes.dense import DenseSource
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["DEFAULT_PROBE_BUDGET", "FAMILIES", "PROBE_TIERS", "TIER_LABELS", "TIER_WEIGHTS", "GeneratedRequest",
           "ProbePlan", "hidden_tiers", "plan_probes", "probe_vectors", "rare_df"]

#: The families of generated requests, in report order, with what each asks.
FAMILIES: Mapping[str, str] = MappingProxyType(
    {
        "cross-caller": "every case's query as every caller, on every case date, one caller right after another",
        "hidden-chunk": "a hidden chunk's own code and rarest terms, asked as a caller it is hidden from",
        "boundary-date": "a version's own text on its first and last effective day and the day either side",
    }
)
#: How the coverage line names each tier of :data:`~labsrc.gate.config.PROBE_TIERS`.
TIER_LABELS: Mapping[str, str] = MappingProxyType(
    {"sibling": "siblings", "shared": "sharing a code or rare term", "rest": "the rest"})
#: Targets each tier takes per turn of the hidden-chunk family: two siblings, then one shared, then one of the rest.
#: A strict order (every sibling first) would leave the other tiers nothing at scale: at 20,000 chunks the generated
#: corpus of benchmarks/bench_gate_scale.py has 83,175 sibling targets, so a bug only they catch would never be asked.
TIER_WEIGHTS: Mapping[str, int] = MappingProxyType({"sibling": 2, "shared": 1, "rest": 1})
#: A term is rare (for the ``shared`` tier) when at most this share of the stored chunks hold it, or at most
#: :data:`RARE_DF_MIN` chunks on a small corpus (:func:`rare_df`).
RARE_SHARE = 0.001
RARE_DF_MIN = 5
_DAY = dt.timedelta(days=1)
#: Block reasons in the order hidden chunks of one tier are dealt (as the families always were: by name).
_REASON_ORDER = sorted(r.value for r in BlockReason)


def rare_df(chunks: int) -> int:
    """The most stored chunks a term may be in and still be rare: ``max(5, floor(0.001 * chunks))``.

    A code or a word in a handful of chunks names what they are about; one in more than 0.1% of
    the corpus is its vocabulary, and links a hidden chunk to nothing in particular.
    """
    return max(RARE_DF_MIN, int(chunks * RARE_SHARE))


def _counted(count: int, noun: str) -> str:
    """``1 request``, ``1,600 requests``: :func:`~labsrc.gate.verdicts.plural` with thousands separated."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _percent(share: float) -> str:
    """``0.04%``, ``33.3%``, ``100%``: three significant digits, so a small share never prints as 0."""
    return f"{100 * share:.3g}%"


@dataclass(frozen=True)
class GeneratedRequest:
    """One request the gate made up: who asks what on which date, which chunk it aims at, and why.

    ``tier`` is a hidden-chunk target's tier (:data:`~labsrc.gate.config.PROBE_TIERS`); ``top_k`` the
    depth it is asked at (``None``: the run's ``top_k``); ``deep`` marks a probe's second request, at
    :func:`~labsrc.gate.config.deep_top_k`.
    """

    family: str
    caller: str
    on_date: dt.date
    query: str
    target: str | None = None
    why: str = ""
    shown: str | None = None  # how reports show the query when it is words of a hidden chunk
    tier: str | None = None
    top_k: int | None = None
    deep: bool = False

    @property
    def printable(self) -> bool:
        """Whether reports may show the query as it is (a case's query, a code), not only by reference."""
        return self.shown is None

    def describe(self) -> str:
        """``hidden-chunk probe (code of 'x'): as 'bob' on 2026-06-15, query 'CD-12'``; a deep request says its k."""
        why = f" ({self.why})" if self.why else ""
        query = repr(self.query) if self.shown is None else self.shown
        depth = f" at top_k {self.top_k} (deep)" if self.deep else ""
        return f"{self.family} probe{why}: as {self.caller!r} on {self.on_date}{depth}, query {query}"

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "caller": self.caller, "on_date": self.on_date.isoformat(),
                "query": self.query if self.shown is None else self.shown, "target": self.target, "why": self.why,
                "tier": self.tier, "top_k": self.top_k, "deep": self.deep}


@dataclass(frozen=True)
class ProbePlan:
    """The generated probes of one run, and what they cover.

    ``requests`` holds the probes the budget kept, in the order they run; :attr:`asked` is what the
    run asks: every probe at each of ``depths`` (all at the first, then all at the second), or each
    once at the run's ``top_k`` when ``depths`` is empty. ``planned`` counts each family's probes
    before the budget. ``callers_without_case`` names callers of the file that no case asks as.
    ``tiers`` counts the (caller, hidden chunk, date) triples of each tier over the case dates, each
    a target of the hidden-chunk family (``hidden_pairs``: all of them); a hidden chunk with no
    attack query (no code, no term) is no target. ``min_coverage`` is the floor on each tier's share
    attacked (:meth:`below_floor`); ``sized_from`` the number of stored chunks an ``"auto"`` budget
    was sized from.
    """

    requests: tuple[GeneratedRequest, ...]
    budget: int
    seed: int
    planned: Mapping[str, int]
    callers: tuple[str, ...]
    callers_without_case: tuple[str, ...]
    hidden_pairs: int = 0
    dates: tuple[dt.date, ...] = field(default=())
    tiers: Mapping[str, int] = field(default_factory=dict)
    depths: tuple[int, ...] = ()
    min_coverage: Mapping[str, float] | None = None
    sized_from: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "requests", tuple(self.requests))
        object.__setattr__(self, "planned", MappingProxyType(dict(self.planned)))
        object.__setattr__(self, "tiers", MappingProxyType(dict(self.tiers)))
        object.__setattr__(self, "depths", tuple(self.depths))
        if self.min_coverage is not None:
            object.__setattr__(self, "min_coverage", MappingProxyType(dict(self.min_coverage)))

    @cached_property
    def asked(self) -> tuple[GeneratedRequest, ...]:
        """The requests the run asks, in order: every probe at the first depth, then every probe at the next."""
        if not self.depths:
            return self.requests
        return tuple(replace(r, top_k=k, deep=n > 0) for n, k in enumerate(self.depths) for r in self.requests)

    def kept(self) -> dict[str, int]:
        counts = {family: 0 for family in FAMILIES}
        for request in self.requests:
            counts[request.family] += 1
        return counts

    def left_out(self) -> dict[str, int]:
        """Planned probes the budget left out, per family (only families that lost some)."""
        kept = self.kept()
        return {f: self.planned.get(f, 0) - kept[f] for f in FAMILIES if self.planned.get(f, 0) > kept[f]}

    @property
    def callers_probed(self) -> tuple[str, ...]:
        return tuple(sorted({r.caller for r in self.requests}))

    @property
    def hidden_attacked(self) -> int:
        """Distinct (caller, chunk, date) the hidden-chunk family asked about (:attr:`hidden_pairs` counts them all)."""
        return len({(r.caller, r.target, r.on_date) for r in self.requests if r.family == "hidden-chunk"})

    def attacked(self) -> dict[str, int]:
        """Distinct (caller, chunk, date) the hidden-chunk family asked about, per tier."""
        seen: dict[str, set[tuple[str, str | None, dt.date]]] = {tier: set() for tier in PROBE_TIERS}
        for r in self.requests:
            if r.family == "hidden-chunk" and r.tier in seen:
                seen[r.tier].add((r.caller, r.target, r.on_date))
        return {tier: len(triples) for tier, triples in seen.items()}

    def shares(self) -> dict[str, float]:
        """Each tier's share attacked: attacked / targets (1.0 for a tier with no target: nothing was left)."""
        attacked = self.attacked()
        return {tier: attacked[tier] / self.tiers[tier] if self.tiers.get(tier) else 1.0 for tier in PROBE_TIERS}

    def below_floor(self) -> list[tuple[str, float, float]]:
        """``(tier, share, floor)`` for every tier whose share attacked is below ``min_coverage``, in tier order."""
        if not self.min_coverage:
            return []
        shares = self.shares()
        return [(tier, shares[tier], floor) for tier, floor in self.min_coverage.items() if shares[tier] < floor]

    def floor_findings(self) -> tuple[str, ...]:
        """One line per tier below its floor, naming the tier, its share attacked and the floor."""
        attacked = self.attacked()
        return tuple(f"coverage of the hidden chunks, {TIER_LABELS[tier]}: {attacked[tier]:,} of "
                     f"{self.tiers.get(tier, 0):,} (caller, chunk, date) attacked ({_percent(share)}), below "
                     f"min_coverage {_percent(floor)}; raise probe_budget or lower the floor"
                     for tier, share, floor in self.below_floor())

    @property
    def dates_tried(self) -> tuple[dt.date, ...]:
        return tuple(sorted({r.on_date for r in self.requests}))

    def coverage(self) -> str:
        """One line: what was probed, each tier's share, and what the budget left out."""
        count = len(self.requests)
        budget = f"budget {self.budget:,}"
        if self.sized_from is not None and self.budget != DEFAULT_PROBE_BUDGET:
            budget += f" for {self.sized_from:,} chunks"
        if self.depths:
            head = (f"{_counted(count, 'generated probe')} at top_k {' and '.join(map(str, self.depths))} "
                    f"({_counted(len(self.asked), 'request')}; {budget}, seed {self.seed})")
        else:
            head = f"{plural(count, 'generated request')} ({budget}, seed {self.seed})"
        line = f"{head}: {len(self.callers_probed)} of {plural(len(self.callers), 'caller')} probed, "
        if self.tiers:
            attacked = self.attacked()
            line += ("hidden chunks attacked (per caller and date): "
                     + ", ".join(f"{TIER_LABELS[t]} {attacked[t]:,} of {self.tiers.get(t, 0):,}" for t in PROBE_TIERS)
                     + f"; {plural(len(self.dates_tried), 'date')} tried")
        else:
            line += (f"{self.hidden_attacked} of {self.hidden_pairs} hidden chunks attacked (per caller and date), "
                     f"{plural(len(self.dates_tried), 'date')} tried")
        left = self.left_out()
        if left:
            line += "; left out by the budget: " + ", ".join(f"{n:,} {family}" for family, n in left.items())
        if self.callers_without_case:
            line += f"; callers no case asks as: {', '.join(self.callers_without_case)}"
        short = self.below_floor()
        if short:
            line += "; below min_coverage: " + ", ".join(f"{TIER_LABELS[t]} {_percent(s)} < {_percent(f)}"
                                                        for t, s, f in short)
        return line

    def to_dict(self) -> dict[str, Any]:
        attacked, shares = self.attacked(), self.shares()
        return {
            "budget": self.budget, "seed": self.seed, "sized_from": self.sized_from, "probes": len(self.requests),
            "depths": list(self.depths), "requests": len(self.asked),
            "planned": dict(self.planned), "kept": self.kept(), "left_out": self.left_out(),
            "callers": list(self.callers), "callers_probed": list(self.callers_probed),
            "callers_without_case": list(self.callers_without_case),
            "hidden_pairs": self.hidden_pairs, "hidden_attacked": self.hidden_attacked,
            "tiers": {t: {"targets": self.tiers.get(t, 0), "attacked": attacked[t], "share": shares[t]}
                      for t in PROBE_TIERS} if self.tiers else {},
            "min_coverage": None if self.min_coverage is None else dict(self.min_coverage),
            "below_min_coverage": [{"tier": t, "share": s, "floor": f} for t, s, f in self.below_floor()],
            "dates_tried": [d.isoformat() for d in self.dates_tried], "coverage": self.coverage(),
        }


def _shown(how: str, query: str, chunk_id: str) -> str | None:
    shown = shown_query(how, query, chunk_id)
    return None if shown == query else shown


def _case_dates(cases: Sequence[Case], on_date: dt.date) -> tuple[dt.date, ...]:
    return tuple(dict.fromkeys(case.on_date or on_date for case in cases))


class _Vocabulary:
    """Term ids, and each analysed text's distinct term ids (kept as small arrays, not lists of strings).

    :func:`~labsrc.gate.attack_queries.attack_queries` analyses every stored chunk to find its rarest
    terms; the tiers need the same terms again, so :meth:`analyze` is handed to it as its analyzer and
    keeps them: one analysis of the corpus, not two.
    """

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self._words: dict[str, str] = {}
        self._of_text: dict[str, np.ndarray] = {}

    def analyze(self, text: str) -> list[str]:
        # One str object per distinct term: attack_queries holds every chunk's terms at once, and a new
        # string per occurrence cost 200 MiB at 50,000 chunks.
        words, ids = self._words, self.ids
        terms = [words.setdefault(t, t) for t in lesson_analyzer(text)]
        self._of_text[text] = np.fromiter({ids.setdefault(t, len(ids)) for t in terms}, np.int32)
        return terms

    def term_ids(self, text: str) -> np.ndarray:
        if text not in self._of_text:
            self.analyze(text)
        return self._of_text[text]


def _codes(values: Iterator[str]) -> tuple[np.ndarray, int]:
    """Each value as a small int (first seen, first numbered), and how many distinct values there are."""
    numbers: dict[str, int] = {}
    codes = np.fromiter((numbers.setdefault(v, len(numbers)) for v in values), np.int64)
    return codes, len(numbers)


def _dealt(indices: np.ndarray, order_key: np.ndarray, reason: np.ndarray) -> np.ndarray:
    """``indices`` in ``order_key`` order, then dealt round-robin by block reason (one of each reason in turn)."""
    ordered = indices[np.argsort(order_key[indices], kind="stable")]
    reasons = reason[ordered]
    position = np.zeros(len(ordered), dtype=np.int64)
    for value in np.unique(reasons):
        where = reasons == value
        position[where] = np.arange(int(where.sum()))
    return ordered[np.lexsort((reasons, position))]


class _Targets:
    """The stored chunks indexed once for the tiers of hidden-chunk targets (see the module docs).

    Documents and parents become int codes; every chunk's attack terms (the terms of its code and its
    rarest terms) become term ids, with the chunks holding each term (its postings) and its document
    frequency. A (caller, date)'s tiers then cost a handful of array passes over the corpus and the
    postings of the attack terms: no loop over pairs of chunks.
    """

    def __init__(self, stored: Sequence[PolicyChunk], queries: AttackQueries, vocabulary: _Vocabulary,
                 cases: Sequence[Case]) -> None:
        n = len(stored)
        self.size = n
        self.boundary = BoundaryIndex(stored)
        self.asks = np.fromiter((len(queries.of(c.chunk_id)) for c in stored), np.int64, n)
        self.document, self.documents = _codes(c.document_id for c in stored)
        self.parent, self.parents = _codes(c.parent_id for c in stored)
        self.region_code = {r: i for i, r in enumerate(sorted({c.region for c in stored}))}
        self.tag_code = {t: i for i, t in enumerate(sorted({c.acl_tag for c in stored}))}
        self.region = np.fromiter((self.region_code[c.region] for c in stored), np.int64, n)
        self.tag = np.fromiter((self.tag_code[c.acl_tag] for c in stored), np.int64, n)
        self.start = np.fromiter((c.effective_from.toordinal() for c in stored), np.int64, n)
        self.end = np.fromiter((dt.date.max.toordinal() if c.effective_to is None else c.effective_to.toordinal()
                                for c in stored), np.int64, n)
        # Each chunk's own attack terms (the code analysed to its terms, the rarest terms as they are).
        own: list[np.ndarray] = []
        for chunk in stored:
            terms: set[str] = set()
            for how, query in queries.of(chunk.chunk_id):
                terms.update(lesson_analyzer(query) if how == "code" else query.split())
            own.append(np.fromiter(sorted(vocabulary.ids.setdefault(t, len(vocabulary.ids)) for t in terms), np.int64))
        held = [vocabulary.term_ids(c.text) for c in stored]
        asked = [vocabulary.ids[t] for case in cases for t in lesson_analyzer(case.query) if t in vocabulary.ids]
        size = len(vocabulary.ids)
        self.sentinel = size  # the term id of "no term": never a hit (a chunk with no attack term points at it)
        is_attack = np.zeros(size + 1, dtype=bool)
        for terms_of_chunk in own:
            is_attack[terms_of_chunk] = True
        # The postings of the attack terms only: which chunks hold each one.
        flat = np.concatenate(held) if held else np.zeros(0, np.int32)
        holder = np.repeat(np.arange(n, dtype=np.int32), [len(h) for h in held])  # int32: millions of postings
        keep = is_attack[flat]
        flat, holder = flat[keep], holder[keep]
        order = np.argsort(flat, kind="stable")
        self.post_chunks = holder[order]
        self.post_terms, self.post_start, df = np.unique(flat[order], return_index=True, return_counts=True)
        self.df = np.full(size + 1, np.iinfo(np.int64).max, dtype=np.int64)
        self.df[self.post_terms] = df
        self.rare = np.zeros(size + 1, dtype=bool)
        self.rare[self.post_terms] = df <= rare_df(n)
        self.asked = np.zeros(size + 1, dtype=bool)
        self.asked[asked] = True
        lengths = [max(len(o), 1) for o in own]
        self.own = np.concatenate([o if len(o) else np.array([self.sentinel]) for o in own]) if own else \
            np.zeros(0, np.int64)
        self.own_start = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) if own else self.own

    def _reasons(self, caller: Caller, day: dt.date) -> np.ndarray:
        """Each chunk's first block reason for ``caller`` on ``day`` (:func:`~labsrc.boundary.block_reasons`'s
        order), as its position in :data:`_REASON_ORDER`; only read for hidden chunks."""
        allowed = np.zeros(len(self.tag_code), dtype=bool)
        for tag in caller.acl_tags:
            if tag in self.tag_code:
                allowed[self.tag_code[tag]] = True
        ordinal = day.toordinal()
        rules = [(self.region != self.region_code.get(caller.region, -1), BlockReason.WRONG_REGION),
                 (~allowed[self.tag], BlockReason.RESTRICTED), (ordinal < self.start, BlockReason.NOT_YET_EFFECTIVE),
                 (self.end < ordinal, BlockReason.SUPERSEDED)]
        return np.select([m for m, _ in rules], [_REASON_ORDER.index(r.value) for _, r in rules], len(_REASON_ORDER))

    def tiers(self, caller: Caller, day: dt.date, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """The positions of ``caller``'s hidden chunks on ``day`` that can be attacked, per tier, in budget order.

        Siblings and the rest: shuffled by ``rng``, then dealt by block reason; shared: the rarest shared term
        first (its document frequency), ties shuffled.
        """
        permitted = self.boundary.mask(caller, day)
        hidden = ~permitted & (self.asks > 0)
        seen_document = np.zeros(self.documents, dtype=bool)
        seen_document[self.document[permitted]] = True
        seen_parent = np.zeros(self.parents, dtype=bool)
        seen_parent[self.parent[permitted]] = True
        sibling = hidden & (seen_document[self.document] | seen_parent[self.parent])
        hit = self.asked.copy()
        if len(self.post_chunks):
            hit[self.post_terms] |= np.logical_or.reduceat(permitted[self.post_chunks], self.post_start)
        hit &= self.rare
        shared_any = np.zeros(self.size, dtype=bool)
        rarest = np.zeros(self.size, dtype=np.int64)
        if len(self.own):
            own_hit = hit[self.own]
            shared_any = np.logical_or.reduceat(own_hit, self.own_start)
            rarest = np.minimum.reduceat(np.where(own_hit, self.df[self.own], np.iinfo(np.int64).max), self.own_start)
        shared = hidden & ~sibling & shared_any
        rest = hidden & ~sibling & ~shared
        key = rng.random(self.size)
        reason = self._reasons(caller, day)
        shared_at = np.flatnonzero(shared)
        return {"sibling": _dealt(np.flatnonzero(sibling), key, reason),
                "shared": shared_at[np.lexsort((key[shared_at], rarest[shared_at]))],
                "rest": _dealt(np.flatnonzero(rest), key, reason)}


def _cross_caller(cases: Sequence[Case], callers: Mapping[str, Caller], boundary: BoundaryIndex,
                  on_date: dt.date, rng: random.Random) -> tuple[list[list[GeneratedRequest]], int]:
    """One group per (case query, case date): the case's caller, then every other caller, the widest view first."""
    tie = {actor: rng.random() for actor in sorted(callers)}
    dates = _case_dates(cases, on_date)
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


def _by_weight(sources: Mapping[str, Iterator[Any]]) -> Iterator[tuple[str, Any]]:
    """``(tier, item)`` from each tier's source in turn, as often as :data:`TIER_WEIGHTS` says, until all are empty.

    A tier with nothing left gives its turns to the others, so a small tier is spent whole first.
    """
    turns = [tier for tier in PROBE_TIERS for _ in range(TIER_WEIGHTS[tier])]
    open_tiers = dict(sources)
    while open_tiers:
        for tier in turns:
            if tier in open_tiers:
                item = next(open_tiers[tier], None)
                if item is None:
                    del open_tiers[tier]
                else:
                    yield tier, item


def _round_robin(queues: Sequence[tuple[str, dt.date, np.ndarray]]) -> Iterator[tuple[str, dt.date, int]]:
    """One target of each (caller, date) in turn, until every queue is empty."""
    depth = 0
    while True:
        layer = [(actor, day, int(positions[depth])) for actor, day, positions in queues if depth < len(positions)]
        if not layer:
            return
        yield from layer
        depth += 1


_TIER_WHY = {"sibling": ", of a document they may see", "shared": ", shares a rare term with what they may see or "
             "the cases ask", "rest": ""}


def _hidden_chunk(callers: Mapping[str, Caller], stored: Sequence[PolicyChunk], dates: Sequence[dt.date],
                  queries: AttackQueries, targets: _Targets,
                  seed: int) -> tuple[Iterator[list[GeneratedRequest]], int, int, dict[str, int]]:
    """Every (caller, date)'s hidden chunks by tier; each tier's targets dealt across callers and dates in turn.

    Returns the groups (one request each; a chunk's queries together, code first) in budget order, the
    number of targets, of planned requests, and of targets per tier.
    """
    queues: dict[str, list[tuple[str, dt.date, np.ndarray]]] = {tier: [] for tier in PROBE_TIERS}
    counts = {tier: 0 for tier in PROBE_TIERS}
    total = 0
    for number, actor in enumerate(sorted(callers)):
        for day in dates:
            # A generator of its own per (caller, date): the order of one does not depend on the others.
            rng = np.random.default_rng([seed, number, day.toordinal()])
            for tier, positions in targets.tiers(callers[actor], day, rng).items():
                queues[tier].append((actor, day, positions))
                counts[tier] += len(positions)
                total += int(targets.asks[positions].sum())

    def groups() -> Iterator[list[GeneratedRequest]]:
        for tier, (actor, day, position) in _by_weight({t: _round_robin(queues[t]) for t in PROBE_TIERS}):
            chunk = stored[position]
            reason = block_reasons(callers[actor], chunk, day)[0].value.replace("_", " ")
            for how, query in queries.of(chunk.chunk_id):
                yield [GeneratedRequest("hidden-chunk", actor, day, query, chunk.chunk_id,
                                        f"{how} of {chunk.chunk_id!r}, hidden: {reason}{_TIER_WHY[tier]}",
                                        _shown(how, query, chunk.chunk_id), tier=tier)]

    return groups(), sum(counts.values()), total, counts


def hidden_tiers(stored: Sequence[PolicyChunk], callers: Mapping[str, Caller], cases: Sequence[Case],
                 on_date: dt.date, *, seed: int = 0,
                 queries: AttackQueries | None = None) -> dict[tuple[str, dt.date], dict[str, tuple[str, ...]]]:
    """Every (caller, case date)'s hidden-chunk targets per tier, chunk ids in the order the budget takes them."""
    vocabulary = _Vocabulary()
    queries = queries if queries is not None else attack_queries(stored, analyzer=vocabulary.analyze)
    targets = _Targets(stored, queries, vocabulary, cases)
    out = {}
    for number, actor in enumerate(sorted(callers)):
        for day in _case_dates(cases, on_date):
            tiers = targets.tiers(callers[actor], day, np.random.default_rng([seed, number, day.toordinal()]))
            out[(actor, day)] = {tier: tuple(stored[i].chunk_id for i in positions) for tier, positions in tiers.items()}
    return out


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
    vocabulary = _Vocabulary()
    queries = queries if queries is not None else attack_queries(stored, analyzer=vocabulary.analyze)
    targets = _Targets(stored, queries, vocabulary, cases)
    dates = _case_dates(cases, on_date)
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
