"""Which hidden chunks the hidden-chunk probes aim at, in tiers, and in which order a budget takes them.

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

:mod:`~labsrc.gate.generate` plans the requests; this module only ranks targets.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from labsrc.boundary import BlockReason, BoundaryIndex
from labsrc.gate.attack_queries import AttackQueries, attack_queries
from labsrc.gate.config import PROBE_TIERS
from labsrc.lanes.analysis import lesson_analyzer
from labsrc.records.cases import Case
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["RARE_DF_MIN", "RARE_SHARE", "TIER_WEIGHTS", "Targets", "Vocabulary", "by_weight", "case_dates",
           "hidden_tiers", "rare_df", "round_robin"]

#: Targets each tier takes per turn of the hidden-chunk family: two siblings, then one shared, then one of the rest.
#: A strict order (every sibling first) would leave the other tiers nothing at scale: at 20,000 chunks the generated
#: corpus of benchmarks/bench_gate_scale.py has 83,175 sibling targets, so a bug only they catch would never be asked.
TIER_WEIGHTS: Mapping[str, int] = MappingProxyType({"sibling": 2, "shared": 1, "rest": 1})
#: A term is rare (for the ``shared`` tier) when at most this share of the stored chunks hold it, or at most
#: :data:`RARE_DF_MIN` chunks on a small corpus (:func:`rare_df`).
RARE_SHARE = 0.001
RARE_DF_MIN = 5
#: Block reasons in the order hidden chunks of one tier are dealt (as the families always were: by name).
_REASON_ORDER = sorted(r.value for r in BlockReason)


def rare_df(chunks: int) -> int:
    """The most stored chunks a term may be in and still be rare: ``max(5, floor(0.001 * chunks))``.

    A code or a word in a handful of chunks names what they are about; one in more than 0.1% of
    the corpus is its vocabulary, and links a hidden chunk to nothing in particular.
    """
    return max(RARE_DF_MIN, int(chunks * RARE_SHARE))



def case_dates(cases: Sequence[Case], on_date: dt.date) -> tuple[dt.date, ...]:
    return tuple(dict.fromkeys(case.on_date or on_date for case in cases))


class Vocabulary:
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


class Targets:
    """The stored chunks indexed once for the tiers of hidden-chunk targets (see the module's docs).

    Documents and parents become int codes; every chunk's attack terms (the terms of its code and its
    rarest terms) become term ids, with the chunks holding each term (its postings) and its document
    frequency. A (caller, date)'s tiers then cost a handful of array passes over the corpus and the
    postings of the attack terms: no loop over pairs of chunks.
    """

    def __init__(self, stored: Sequence[PolicyChunk], queries: AttackQueries, vocabulary: Vocabulary,
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

    @classmethod
    def index(cls, stored: Sequence[PolicyChunk], cases: Sequence[Case],
              queries: AttackQueries | None = None) -> tuple[Targets, AttackQueries]:
        """The targets of ``stored``, and the attack queries they were indexed from (made here when not given)."""
        vocabulary = Vocabulary()
        queries = queries if queries is not None else attack_queries(stored, analyzer=vocabulary.analyze)
        return cls(stored, queries, vocabulary, cases), queries

    def each_caller_and_date(self, callers: Mapping[str, Caller], dates: Sequence[dt.date],
                             seed: int) -> Iterator[tuple[str, dt.date, dict[str, np.ndarray]]]:
        """``(caller, date, tiers)`` for every caller (by id) and date: :meth:`tiers` with a generator of its own
        per (caller, date), seeded from ``seed``, so the order of one does not depend on the others."""
        for number, actor in enumerate(sorted(callers)):
            for day in dates:
                yield actor, day, self.tiers(callers[actor], day, np.random.default_rng([seed, number, day.toordinal()]))

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



def by_weight(sources: Mapping[str, Iterator[Any]]) -> Iterator[tuple[str, Any]]:
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


def round_robin(queues: Sequence[tuple[str, dt.date, np.ndarray]]) -> Iterator[tuple[str, dt.date, int]]:
    """One target of each (caller, date) in turn, until every queue is empty."""
    depth = 0
    while True:
        layer = [(actor, day, int(positions[depth])) for actor, day, positions in queues if depth < len(positions)]
        if not layer:
            return
        yield from layer
        depth += 1



def hidden_tiers(stored: Sequence[PolicyChunk], callers: Mapping[str, Caller], cases: Sequence[Case],
                 on_date: dt.date, *, seed: int = 0,
                 queries: AttackQueries | None = None) -> dict[tuple[str, dt.date], dict[str, tuple[str, ...]]]:
    """Every (caller, case date)'s hidden-chunk targets per tier, chunk ids in the order the budget takes them."""
    targets, _ = Targets.index(stored, cases, queries)
    return {(actor, day): {tier: tuple(stored[i].chunk_id for i in positions) for tier, positions in tiers.items()}
            for actor, day, tiers in targets.each_caller_and_date(callers, case_dates(cases, on_date), seed)}

