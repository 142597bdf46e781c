"""The evidence boundary: authorization plus freshness, applied before any lane.

The boundary turns the stored corpus into the *searchable universe* for one
caller on one date. Both lanes, and the BM25 corpus statistics, see only that
universe, so a new ranking method can never widen what a caller may see.
Filters here *remove* chunks; they never zero a score.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from enum import Enum

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.records.checks import check_caller, check_chunks
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "BlockReason",
    "BoundaryIndex",
    "block_reasons",
    "unmatched_callers",
    "is_current",
    "is_permitted",
    "permitted_chunks",
]


class BlockReason(str, Enum):
    """Why the boundary keeps a chunk from a caller. A chunk may have several."""

    WRONG_REGION = "wrong_region"
    RESTRICTED = "restricted"  # the caller lacks the chunk's ACL tag
    NOT_YET_EFFECTIVE = "not_yet_effective"
    SUPERSEDED = "superseded"  # effective_to is in the past


def _check_date(on_date: object) -> dt.date:
    # datetime is a subclass of date; comparing the two raises TypeError, so refuse it early.
    if not isinstance(on_date, dt.date) or isinstance(on_date, dt.datetime):
        raise InvalidArgument(f"on_date must be a datetime.date, not {type(on_date).__name__}")
    return on_date


def is_current(chunk: PolicyChunk, on_date: dt.date) -> bool:
    """``effective_from <= on_date`` and (``effective_to`` is None or ``on_date <= effective_to``)."""
    on_date = _check_date(on_date)
    return chunk.effective_from <= on_date and (chunk.effective_to is None or on_date <= chunk.effective_to)


def is_permitted(caller: Caller, chunk: PolicyChunk, on_date: dt.date) -> bool:
    """Same region, an ACL tag the caller holds, and current on ``on_date``."""
    return chunk.region == caller.region and chunk.acl_tag in caller.acl_tags and is_current(chunk, on_date)


def permitted_chunks(caller: Caller, chunks: Iterable[PolicyChunk], on_date: dt.date) -> list[PolicyChunk]:
    """The caller's searchable universe on ``on_date``, in corpus order."""
    check_caller(caller)
    _check_date(on_date)
    chunks = check_chunks(chunks)
    return [chunk for chunk in chunks if is_permitted(caller, chunk, on_date)]


def block_reasons(caller: Caller, chunk: PolicyChunk, on_date: dt.date) -> tuple[BlockReason, ...]:
    """Every reason the boundary blocks ``chunk`` for ``caller``; empty when permitted."""
    on_date = _check_date(on_date)
    reasons = []
    if chunk.region != caller.region:
        reasons.append(BlockReason.WRONG_REGION)
    if chunk.acl_tag not in caller.acl_tags:
        reasons.append(BlockReason.RESTRICTED)
    if on_date < chunk.effective_from:
        reasons.append(BlockReason.NOT_YET_EFFECTIVE)
    if chunk.effective_to is not None and chunk.effective_to < on_date:
        reasons.append(BlockReason.SUPERSEDED)
    return tuple(reasons)


class BoundaryIndex:
    """The same rule as :func:`permitted_chunks`, vectorised for large corpora.

    Region, ACL tag and the effective window become integer arrays once, so the
    boundary for one request is a handful of NumPy comparisons instead of a Python
    loop over every chunk. The tests check that both give the same universe.
    """

    # effective_to = None is stored as the largest ordinal, i.e. "never expires".
    _OPEN_END = dt.date.max.toordinal()

    def __init__(self, chunks: Sequence[PolicyChunk]) -> None:
        self._chunks = tuple(chunks)
        regions = sorted({c.region for c in self._chunks})
        tags = sorted({c.acl_tag for c in self._chunks})
        self._region_code = {r: i for i, r in enumerate(regions)}
        self._tag_code = {t: i for i, t in enumerate(tags)}
        self._region = np.fromiter((self._region_code[c.region] for c in self._chunks), np.int64, len(self._chunks))
        self._tag = np.fromiter((self._tag_code[c.acl_tag] for c in self._chunks), np.int64, len(self._chunks))
        # One code per (region, tag) group: a request's region and tags become one table lookup per chunk.
        self._group = (self._region * max(len(tags), 1) + self._tag).astype(np.intp)
        self._from = np.fromiter((c.effective_from.toordinal() for c in self._chunks), np.int64, len(self._chunks))
        self._to = np.fromiter(
            (self._OPEN_END if c.effective_to is None else c.effective_to.toordinal() for c in self._chunks),
            np.int64,
            len(self._chunks),
        )

    @property
    def chunks(self) -> tuple[PolicyChunk, ...]:
        return self._chunks

    def mask(self, caller: Caller, on_date: dt.date) -> np.ndarray:
        """Boolean array over the corpus: True where the chunk is permitted."""
        check_caller(caller)
        day = _check_date(on_date).toordinal()
        region = self._region_code.get(caller.region)
        if region is None:
            return np.zeros(len(self._chunks), dtype=bool)
        allowed = np.zeros(len(self._region_code) * max(len(self._tag_code), 1), dtype=bool)
        for tag in caller.acl_tags:
            if tag in self._tag_code:
                allowed[region * len(self._tag_code) + self._tag_code[tag]] = True
        return allowed[self._group] & (self._from <= day) & (day <= self._to)

    def permitted(self, caller: Caller, on_date: dt.date) -> tuple[PolicyChunk, ...]:
        """The permitted chunks, in corpus order."""
        return tuple(self._chunks[i] for i in np.flatnonzero(self.mask(caller, on_date)))


def unmatched_callers(callers: Iterable[Caller], chunks: Iterable[PolicyChunk]) -> list[str]:
    """One note per caller whose region, or whose tags within that region, match no stored chunk on any date.

    Such a caller may see nothing, ever: every request of theirs can only come back empty, so the cases
    asked as them test exclusion alone. That is usually a typo in the callers file (``"EU"`` for ``"eu"``,
    ``"it:staf"``) or a corpus loaded without that region's chunks. A caller who holds no tag at all is a
    visitor by intent (no typo makes an empty list), wherever they are, and gets no note.
    """
    stored = list(chunks)
    regions = {c.region for c in stored}
    tags_in: dict[str, set[str]] = {}
    for c in stored:
        tags_in.setdefault(c.region, set()).add(c.acl_tag)
    notes = []
    for caller in callers:
        if not caller.acl_tags:  # no tag at all: a visitor by intent (no typo makes an empty list)
            continue
        if caller.region not in regions:
            notes.append(f"caller {caller.actor_id!r} is in region {caller.region!r}, which no stored chunk is in "
                         f"(stored regions: {sorted(regions)}): every request of theirs can only answer nothing")
        elif not caller.acl_tags & tags_in[caller.region]:
            notes.append(f"caller {caller.actor_id!r} holds no ACL tag that a stored chunk of region "
                         f"{caller.region!r} carries (they hold {sorted(caller.acl_tags)}; the region's chunks carry "
                         f"{sorted(tags_in[caller.region])}): every request of theirs can only answer nothing")
    return notes
