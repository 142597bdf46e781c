"""Bait: hidden chunks crafted to match a query as strongly as possible.

Noninterference says that a chunk the caller may not see changes nothing the
caller observes. The strongest test of that is a chunk that *would* win if it
leaked: its text is the query itself (every word and code, nothing else, so it
is as short and as on-topic as a chunk can be; its metadata holds a marker word
no stored chunk holds, so a payload that carries it carries the bait's own), and, with vectors, its document
vector is the query's own vector (cosine 1). :func:`bait_chunks` makes one such
chunk per rule the boundary enforces, each blocked for the caller by that rule
(notebook 05 does the same by hand with four ``hidden-*`` chunks):

==================  =========================================================
reason              how the bait is hidden from the caller on ``on_date``
==================  =========================================================
restricted          the caller's region, a tag the caller does not hold, current
superseded          the caller's region and tag, ended the day before
not_yet_effective   the caller's region and tag, in force from the day after
wrong_region        another region, the caller's tag, current
==================  =========================================================

:class:`BaitVectors` gives the bait its vectors without touching the source.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Collection, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from labsrc.boundary import BlockReason, block_reasons
from labsrc.errors import LabError
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["BAIT_REASONS", "BaitVectors", "bait_chunks", "bait_marker", "bait_markers", "bait_query", "bait_text"]

#: One bait chunk per reason, in this order.
BAIT_REASONS = (
    BlockReason.RESTRICTED,
    BlockReason.SUPERSEDED,
    BlockReason.NOT_YET_EFFECTIVE,
    BlockReason.WRONG_REGION,
)

_YEAR = dt.timedelta(days=365)
_DAY = dt.timedelta(days=1)


_LETTERS = "bcdfghjklmnpqrstvwxz"


def bait_marker(chunk_id: str, query: str) -> str:
    """A word no stored chunk holds, unique to one bait chunk: ``bait`` and ten consonants (deterministic).

    Letters only, lower case. It is kept in the bait's metadata, not its text (a word more would make
    the bait a weaker match): a payload that carries it carries that bait chunk's own record.
    """
    digest = hashlib.sha256(f"{chunk_id}\n{query}".encode()).digest()
    return "bait" + "".join(_LETTERS[b % len(_LETTERS)] for b in digest[:10])


def bait_text(query: str) -> str:
    """The bait's text: the query itself, every word and code of it, nothing else (its marker is in its metadata)."""
    return query


def bait_query(chunk: PolicyChunk) -> str:
    """The query a bait chunk was made for (kept in its metadata beside its marker)."""
    return str((chunk.metadata or {}).get("bait_query", chunk.text))


def bait_markers(chunks: Sequence[PolicyChunk]) -> dict[str, str]:
    """Marker word to bait chunk id, for the bait chunks among ``chunks``."""
    return {str(c.metadata["bait_marker"]): c.chunk_id for c in chunks if c.metadata and "bait_marker" in c.metadata}


def _fresh(base: str, taken: Collection[str]) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


def bait_chunks(
    queries: Sequence[str], caller: Caller, on_date: dt.date, taken_ids: Collection[str]
) -> tuple[PolicyChunk, ...]:
    """Four hidden chunks per query (one per :data:`BAIT_REASONS`), ids unused in ``taken_ids``.

    Each chunk is checked with :func:`~labsrc.boundary.block_reasons`: the
    boundary blocks it for ``caller`` on ``on_date`` for (at least) its reason.
    """
    taken = set(taken_ids)
    held = sorted(caller.acl_tags)
    tag = held[0] if held else "bait:any"  # a caller with no tags is blocked by the tag rule as well
    hidden_tag = _fresh("bait:restricted", set(caller.acl_tags))
    other_region = _fresh(f"{caller.region}-bait", {caller.region})
    start = on_date - _YEAR if on_date - dt.date.min > _YEAR else dt.date.min
    layout = {
        BlockReason.RESTRICTED: (caller.region, hidden_tag, start, None),
        BlockReason.SUPERSEDED: (caller.region, tag, start, on_date - _DAY),
        BlockReason.NOT_YET_EFFECTIVE: (caller.region, tag, on_date + _DAY, None),
        BlockReason.WRONG_REGION: (other_region, tag, start, None),
    }
    out = []
    for number, query in enumerate(queries, start=1):
        for reason in BAIT_REASONS:
            region, acl_tag, begin, end = layout[reason]
            chunk_id = _fresh(f"bait-{number:03d}-{reason.value.replace('_', '-')}", taken)
            taken.add(chunk_id)
            marker = bait_marker(chunk_id, query)
            chunk = PolicyChunk(
                chunk_id=chunk_id, document_id=chunk_id, parent_id=chunk_id, version=f"{chunk_id}/1",
                region=region, acl_tag=acl_tag, effective_from=begin, effective_to=end,
                text=bait_text(query), metadata={"bait_query": query, "bait_marker": marker},
            )
            if reason not in block_reasons(caller, chunk, on_date):  # a bug here would make the probe vacuous
                raise LabError(f"internal: bait {chunk_id} is not blocked as {reason.value} for {caller.actor_id}")
            out.append(chunk)
    return tuple(out)


class BaitVectors:
    """A dense source that gives each bait chunk a vector of its own and every other chunk the source's.

    ``queries`` gives chosen query texts a vector of their own too (the canary's code, which
    no encoder or precomputed file knows). ``version`` and ``model`` are the source's, so
    traces and reports do not change.
    """

    def __init__(
        self, source: DenseSource, bait: Mapping[str, np.ndarray], queries: Mapping[str, np.ndarray] | None = None
    ) -> None:
        self.source = source
        self.version = source.version
        self.model: Mapping[str, Any] = getattr(source, "model", None) or MappingProxyType({})
        self._bait = MappingProxyType({k: np.asarray(v, dtype=np.float64) for k, v in bait.items()})
        self._queries = MappingProxyType({k: np.asarray(v, dtype=np.float64) for k, v in (queries or {}).items()})

    @classmethod
    def for_queries(cls, source: DenseSource, chunks: Sequence[PolicyChunk]) -> BaitVectors:
        """Each bait chunk gets its query's vector (its text *is* the query)."""
        return cls(source, {c.chunk_id: source.query_vector(bait_query(c)) for c in chunks})

    def document_matrix(self, chunks: Sequence[PolicyChunk]) -> np.ndarray:
        plain = [c for c in chunks if c.chunk_id not in self._bait]
        rows = np.asarray(self.source.document_matrix(plain), dtype=np.float64) if plain else None
        dimension = rows.shape[1] if rows is not None and rows.ndim == 2 else None
        out, next_plain = [], 0
        for chunk in chunks:
            if chunk.chunk_id in self._bait:
                out.append(self._bait[chunk.chunk_id])
            else:
                out.append(rows[next_plain])  # type: ignore[index]
                next_plain += 1
        if not out:
            return np.zeros((0, dimension or 0))
        return np.stack(out)

    def query_vector(self, query: str) -> np.ndarray:
        if query in self._queries:
            return self._queries[query]
        return self.source.query_vector(query)

    def __getattr__(self, name: str) -> Any:
        # Anything else a team's code asks of the source (documents, dimension, ...) comes from it.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.source, name)
