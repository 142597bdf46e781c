"""A drop-in hybrid retriever over plain dicts or JSONL chunks, behind the evidence boundary.

For engineers who want BM25 + embeddings + RRF without the lesson's records::

    retriever = HybridRetriever.from_jsonl("chunks.jsonl")
    for hit in retriever.search("damaged laptop refund", k=5, caller=caller, on_date=today):
        print(hit["chunk_id"], hit["rrf_score"], hit["snippet"])

It is a thin adapter over the lab's one lane engine
(:class:`~labsrc.retriever.engine.LaneEngine`, the same one under
:class:`~labsrc.retriever.PolicyRetriever`) and the lab's
:class:`~labsrc.boundary.BoundaryIndex`:

* records that carry policy fields (``region``, ``acl_tag``, ``effective_from``;
  see :mod:`labsrc.patterns.dropin_records`) are searched only through the
  boundary: ``search`` needs ``caller=`` and ``on_date=`` and raises
  :class:`~labsrc.errors.InvalidArgument` naming whichever is missing;
* plain records (no policy fields) have no boundary: the whole corpus is the universe.

A metadata filter (``where=``) narrows the universe further, **before** either
lane runs: BM25 statistics are computed over the chunks that pass both.

Result fields (one dict per hit):

=============  ====================================================================
chunk_id       the input's ``chunk_id``
doc_id         the input's ``doc_id`` or ``document_id`` (defaults to ``chunk_id``)
path           the input's ``path`` or ``None``
title          the input's title field (``title_key``) or ``""``
snippet        :func:`make_snippet` of the text around the first query term
bm25_rank      1-based rank in the BM25 lane, ``None`` when that lane missed
embed_rank     1-based rank in the embedding lane, ``None`` when that lane missed
rrf_score      Σ w / (rrf_k + rank) over the lanes that found the chunk
metadata       every other input field, passed through untouched (a copy)
=============  ====================================================================
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from labsrc.boundary import BoundaryIndex
from labsrc.errors import InvalidArgument, InvalidRecord
from labsrc.fusion.rrf import fuse_ranked_ids
from labsrc.fusion.weighted import FusionParams, adaptive_fusion_params
from labsrc.lanes.bm25 import DEFAULT_B, DEFAULT_K1
from labsrc.lanes.dense import Encoder, HashingEncoder, MatrixVectors, encode_checked
from labsrc.patterns.dropin_records import POLICY_FIELDS, DropinRecord, record_from_dict, request_date
from labsrc.patterns.dropin_text import DROPIN_ANALYZER, make_snippet, rrf, tokenize
from labsrc.patterns.expansion import QueryExpander
from labsrc.patterns.filters import check_filter, matches_filter
from labsrc.ranking import DEFAULT_MAX_QUERY_CHARS, check_max_query_chars, check_query, check_top_k
from labsrc.records.files import as_path
from labsrc.records.loading import iter_jsonl
from labsrc.records.policy import Caller, chunk_lookup
from labsrc.retriever.engine import LaneEngine

__all__ = ["HybridRetriever", "QueryPlan", "make_snippet", "rrf", "tokenize"]


class _Store(Protocol):
    def iter_chunks(self) -> Iterator[dict[str, Any]]: ...


@dataclass(frozen=True)
class QueryPlan:
    """How one query will run: the text each lane sees and the fusion parameters."""

    query: str
    bm25_query: str
    embed_query: str
    fired: tuple[str, ...]
    fusion: FusionParams


class HybridRetriever:
    """BM25 + embeddings + RRF over in-memory chunks. Build it with a ``from_*`` classmethod.

    Chunks are held sorted by ``chunk_id``, so "ties break on chunk_id" is the
    same as "ties break on position" in both lanes and in fusion.
    """

    def __init__(
        self,
        records: Sequence[DropinRecord],
        *,
        embedder: Encoder | None = None,
        embeddings: np.ndarray | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
    ) -> None:
        self.max_query_chars = check_max_query_chars(max_query_chars)
        kinds = {r.has_policy for r in records}
        if len(kinds) > 1:
            plain = next(r for r in records if not r.has_policy)
            policy = next(r for r in records if r.has_policy)
            raise InvalidRecord(
                f"has none of the policy fields {list(POLICY_FIELDS)}, but {policy.origin} has them; "
                "every record carries them or none does (a chunk without a policy would be visible to everyone)",
                path=plain.origin,
            )
        self.has_policy = kinds == {True}
        chunk_lookup([r.chunk for r in records])  # refuses duplicate ids before anything is encoded
        self.embedder: Encoder = HashingEncoder(analyzer=DROPIN_ANALYZER) if embedder is None else embedder
        if not isinstance(self.embedder, Encoder):
            raise InvalidArgument(f"embedder must have an encode(list[str]) method; {type(self.embedder).__name__} has not")
        self.expander = expander
        self.k1, self.b = k1, b
        texts = [r.index_text for r in records]
        if embeddings is None:
            matrix = encode_checked(self.embedder, texts) if texts else np.zeros((0, 0))
        else:
            matrix = np.array(embeddings, dtype=np.float64)  # a copy: the caller's array may change later
            if matrix.ndim != 2 or matrix.shape[0] != len(records) or not np.all(np.isfinite(matrix)):
                raise InvalidArgument(
                    f"embeddings must be a finite [N, D] array with N = {len(records)}, got shape {matrix.shape}"
                )
        if matrix.ndim != 2:
            matrix = matrix.reshape(len(records), 0)
        matrix.setflags(write=False)
        rows = {r.chunk.chunk_id: i for i, r in enumerate(records)}
        # The one lane engine (refuses duplicate ids) and the boundary over its chunk_id order.
        self.engine = LaneEngine(
            [r.chunk for r in records],
            MatrixVectors(rows, matrix, self.embedder),
            index_texts=texts,
            analyzer=DROPIN_ANALYZER,
            k1=k1,
            b=b,
            max_query_chars=None,  # search() checks the caller's query; the expander may lengthen it
        )
        self.boundary = BoundaryIndex(self.engine.chunks)
        by_id = {r.chunk.chunk_id: r for r in records}
        self._records = tuple(by_id[c.chunk_id] for c in self.engine.chunks)
        self._dimension = int(matrix.shape[1]) if matrix.ndim == 2 else 0

    # --- construction ---------------------------------------------------------------

    @classmethod
    def from_chunks(
        cls,
        chunks: Iterable[Mapping[str, Any]],
        *,
        text_key: str = "text",
        title_key: str = "title",
        embedder: Encoder | None = None,
        embeddings: np.ndarray | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
    ) -> HybridRetriever:
        """Index a list of dicts. Each needs ``chunk_id`` and ``text_key``; see the module docs.

        ``embedder=None`` uses :class:`~labsrc.lanes.dense.HashingEncoder`, a word-overlap
        stand-in (not a semantic model); pass a real encoder for paraphrase recall.
        ``embeddings`` (optional, [N, D], rows in the order of ``chunks``) are
        precomputed document vectors: then the embedder only encodes queries.
        ``expander`` is a :class:`~labsrc.patterns.expansion.QueryExpander` (see :meth:`plan`);
        ``k1`` and ``b`` are the BM25 parameters; ``max_query_chars`` the longest query
        :meth:`search` accepts (``None``: no limit).
        """
        if not isinstance(chunks, Iterable) or isinstance(chunks, (str, bytes, Mapping)):
            raise InvalidArgument(f"chunks must be a list of dicts, not {type(chunks).__name__}")
        records = [
            record_from_dict(record, text_key=text_key, title_key=title_key, where=f"chunks[{i}]")
            for i, record in enumerate(chunks)
        ]
        return cls(records, embedder=embedder, embeddings=embeddings, expander=expander, k1=k1, b=b, max_query_chars=max_query_chars)

    @classmethod
    def from_jsonl(
        cls,
        path: str | Path,
        *,
        text_key: str = "text",
        title_key: str = "title",
        embedder: Encoder | None = None,
        embeddings: np.ndarray | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
    ) -> HybridRetriever:
        """Read one JSON object per line, then as :meth:`from_chunks`. Errors name the file, line and field."""
        records: list[DropinRecord] = []
        seen: dict[str, int] = {}
        for line, record in iter_jsonl(as_path(path)):
            item = record_from_dict(record, text_key=text_key, title_key=title_key, where=str(path), line=line)
            chunk_id = item.chunk.chunk_id
            if chunk_id in seen:
                raise InvalidRecord(
                    f"duplicate chunk_id {chunk_id!r} (first seen on line {seen[chunk_id]})",
                    path=path,
                    line=line,
                    field="chunk_id",
                )
            seen[chunk_id] = line
            records.append(item)
        return cls(records, embedder=embedder, embeddings=embeddings, expander=expander, k1=k1, b=b, max_query_chars=max_query_chars)

    @classmethod
    def from_store(
        cls,
        store: _Store,
        *,
        embedder: Encoder | None = None,
        expander: QueryExpander | None = None,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        max_query_chars: int | None = DEFAULT_MAX_QUERY_CHARS,
    ) -> HybridRetriever:
        """Rebuild from a :class:`~labsrc.patterns.store.SQLiteStore` without re-embedding.

        Stored embeddings are used as they are; the embedder only encodes
        queries (and any chunk stored without an embedding). The BM25 lane
        indexes ``enriched_text`` where present, snippets show ``text``. Policy
        fields in a chunk's stored metadata make it a policy record, as in
        :meth:`from_chunks`.
        """
        records: list[DropinRecord] = []
        vectors: list[np.ndarray | None] = []
        for row in store.iter_chunks():
            title = row.get("title") or ""
            indexed = row.get("enriched_text") or row["text"]
            fields = {**(row.get("metadata") or {}), "chunk_id": row["chunk_id"], "doc_id": row["doc_id"],
                      "path": row.get("path"), "title": title, "text": row["text"]}  # fmt: skip
            where = f"{store!r} chunk {row['chunk_id']!r}"
            records.append(record_from_dict(fields, where=where, index_text=f"{title}\n{indexed}" if title else indexed))
            vectors.append(row.get("embedding"))
        retriever_embedder = HashingEncoder(analyzer=DROPIN_ANALYZER) if embedder is None else embedder
        missing = [i for i, v in enumerate(vectors) if v is None]
        embeddings: np.ndarray | None = None
        if len(missing) < len(vectors):
            # Some or all vectors are stored: encode only the chunks stored without one.
            encoded = encode_checked(retriever_embedder, [records[i].index_text for i in missing]) if missing else None
            filled = dict(zip(missing, encoded)) if encoded is not None else {}
            rows = [np.asarray(v, dtype=np.float64) if v is not None else filled[i] for i, v in enumerate(vectors)]
            shapes = sorted({r.shape for r in rows})
            if len(shapes) > 1:
                raise InvalidArgument(
                    f"embeddings of different shapes {shapes} (stored, or encoded for chunks stored without one); "
                    "pass the embedder that made the stored vectors"
                )
            embeddings = np.stack(rows)
        return cls(records, embedder=retriever_embedder, embeddings=embeddings, expander=expander, k1=k1, b=b, max_query_chars=max_query_chars)

    # --- the universe ------------------------------------------------------------------

    def _mask(self, caller: Caller | None, on_date: object, where: Mapping[str, Any] | None) -> np.ndarray:
        """The chunks this request may reach: the boundary's (policy records), then the filter's."""
        if self.has_policy:
            missing = [name for name, value in (("caller", caller), ("on_date", on_date)) if value is None]
            if missing:
                raise InvalidArgument(
                    f"these chunks carry policy fields {list(POLICY_FIELDS)}, so every request names who asks "
                    f"and when: pass {' and '.join(f'{m}=' for m in missing)} (a Caller and a date); "
                    "the drop-in retriever never searches past the boundary"
                )
            if not isinstance(caller, Caller):
                raise InvalidArgument(f"caller must be a labsrc.Caller, not {type(caller).__name__}")
            mask = self.boundary.mask(caller, request_date(on_date))
        else:
            if caller is not None or on_date is not None:
                raise InvalidArgument(
                    f"these chunks carry no policy fields {list(POLICY_FIELDS)}, so there is no boundary to apply: "
                    "drop caller= and on_date=, or give every chunk region, acl_tag and effective_from"
                )
            mask = np.ones(len(self._records), dtype=bool)
        if where:
            check_filter(where)
            mask = mask & np.array([matches_filter(r.filter_view(), where) for r in self._records], dtype=bool)
        return mask

    # --- querying ---------------------------------------------------------------------------

    def plan(self, query: str) -> QueryPlan:
        """The lanes' query texts and the fusion parameters for ``query``.

        Without an expander, both lanes see the query and fusion is plain RRF
        (rrf_k 60, weights 1). When the expander fires, BM25 searches the
        expanded text, the embedding lane keeps the original wording, and
        :func:`~labsrc.fusion.weighted.adaptive_fusion_params` switches to (10, 3.0, 0.3).
        """
        check_query(query, self.max_query_chars)
        expanded, fired = (query, ()) if self.expander is None else self.expander.expand(query)
        return QueryPlan(query, expanded, query, fired, adaptive_fusion_params(bool(fired)))

    def search(
        self,
        query: str,
        *,
        k_bm25: int = 50,
        k_embed: int = 50,
        k: int = 20,
        where: Mapping[str, Any] | None = None,
        caller: Caller | None = None,
        on_date: dt.date | str | None = None,
    ) -> list[dict[str, Any]]:
        """The top ``k`` fused hits for ``query`` (see the module docs for the fields).

        ``k_bm25`` and ``k_embed`` are how many candidates each lane contributes
        before fusion; ``k`` is how many fused results come back. ``caller`` and
        ``on_date`` are required for policy records and refused for plain ones.
        ``where`` is a metadata filter (:mod:`labsrc.patterns.filters`) applied
        before ranking. Results are sorted by (rrf_score desc, chunk_id asc). A
        blank query returns ``[]``.
        """
        check_query(query, self.max_query_chars)
        k_bm25, k_embed, k = check_top_k(k_bm25, "k_bm25"), check_top_k(k_embed, "k_embed"), check_top_k(k, "k")
        mask = self._mask(caller, on_date, where)
        plan = self.plan(query)
        if not query.strip() or not mask.any():
            return []
        bm25_hits = [(c.chunk_id, s) for c, s in self.engine.sparse(mask, plan.bm25_query, k_bm25)]
        embed_hits = [(c.chunk_id, s) for c, s in self.engine.dense(mask, plan.embed_query, k_embed)]
        rrf_k, bm25_weight, embed_weight = plan.fusion
        fused = fuse_ranked_ids(
            {"bm25": bm25_hits, "embed": embed_hits}, rrf_k, {"bm25": bm25_weight, "embed": embed_weight}
        )[:k]
        bm25_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(bm25_hits, start=1)}
        embed_rank = {chunk_id: rank for rank, (chunk_id, _) in enumerate(embed_hits, start=1)}
        return [
            self._result(chunk_id, score, bm25_rank.get(chunk_id), embed_rank.get(chunk_id), query)
            for chunk_id, score in fused
        ]

    def _result(
        self, chunk_id: str, score: float, bm25_rank: int | None, embed_rank: int | None, query: str
    ) -> dict[str, Any]:
        chunk = self.engine.chunks[self.engine.positions[chunk_id]]
        return {
            "chunk_id": chunk.chunk_id,
            "doc_id": chunk.document_id,
            "path": chunk.path,
            "title": chunk.title or "",
            "snippet": make_snippet(chunk.text, query),
            "bm25_rank": bm25_rank,
            "embed_rank": embed_rank,
            "rrf_score": score,
            "metadata": copy.deepcopy(dict(chunk.metadata or {})),
        }

    def get(
        self, chunk_id: str, *, caller: Caller | None = None, on_date: dt.date | str | None = None
    ) -> dict[str, Any] | None:
        """The stored chunk (with its full ``text``), or ``None``.

        For policy records the same rule as :meth:`search` holds: ``caller`` and
        ``on_date`` are required, and a chunk they may not see is ``None``.
        """
        mask = self._mask(caller, on_date, None)
        position = self.engine.positions.get(chunk_id)
        if position is None or not mask[position]:
            return None
        chunk = self.engine.chunks[position]
        return {
            "chunk_id": chunk.chunk_id,
            "doc_id": chunk.document_id,
            "path": chunk.path,
            "title": chunk.title or "",
            "text": chunk.text,
            "metadata": copy.deepcopy(dict(chunk.metadata or {})),
        }

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        """Every stored chunk id (the operator's view, not any caller's)."""
        return tuple(c.chunk_id for c in self.engine.chunks)

    @property
    def embedding_dimension(self) -> int:
        return self._dimension

    def __len__(self) -> int:
        return len(self._records)

    def close(self) -> None:
        """Release resources. The in-memory retriever holds none; kept for API compatibility."""

    def __enter__(self) -> HybridRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "policy" if self.has_policy else "plain"
        return f"HybridRetriever({len(self._records)} {kind} chunks, embedder={type(self.embedder).__name__})"
