"""Why filters run *before* ranking: a measured comparison with post-filtering.

Post-filtering is the tempting shortcut: rank the whole corpus once, then drop
the results the caller may not see and keep the top k. It fails three ways,
and :func:`compare_filter_placement` counts each of them:

* **Lost recall.** Hidden chunks occupy top-k slots; after they are dropped,
  fewer than k results remain and permitted evidence that pre-filtering finds
  never appears. Over-fetching (ask for 4 × k, then filter) pushes the problem
  further down the list but never removes it: a caller who may see 1 % of the
  corpus needs ~100 × k to be safe, and nobody can know the factor in advance.
* **Short lists leak.** The number of results the caller gets back shrinks by
  the number of hidden chunks that ranked above them: a count of things the
  caller may not see.
* **Hidden chunks shape the scores.** The ranking ran over hidden chunks, so
  their ids, ranks and scores passed through the lane (and any log or trace
  of it), and BM25's N, n_t and avgdl counted them: the permitted chunks' scores
  differ from the ones a boundary-first search computes.

Pre-filtering (the lab's boundary, then the lane over the permitted universe
only) has none of these problems by construction.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from labsrc.boundary import is_permitted, permitted_chunks
from labsrc.errors import InvalidArgument
from labsrc.evaluation.metrics import recall_at_k
from labsrc.lanes.sparse import bm25_rank
from labsrc.ranking import check_top_k
from labsrc.records.policy import Caller, PolicyChunk

__all__ = [
    "FilterPlacement",
    "acl_overlay_chunks",
    "compare_filter_placement",
    "post_filter",
]

Ranker = Callable[[str, Sequence[PolicyChunk], int], list[tuple[PolicyChunk, float]]]

#: Scores closer than this are "the same" when checking for score drift.
SCORE_TOLERANCE = 1e-9


def post_filter(
    ranked: Sequence[tuple[PolicyChunk, float]], caller: Caller, on_date: dt.date, top_k: int
) -> list[tuple[PolicyChunk, float]]:
    """The unsafe pattern, for measurement only: drop what ``caller`` may not see, keep ``top_k``."""
    top_k = check_top_k(top_k)
    return [(chunk, score) for chunk, score in ranked if is_permitted(caller, chunk, on_date)][:top_k]


@dataclass(frozen=True)
class FilterPlacement:
    """One strategy's results over a query set (means over the queries counted).

    ``recall`` is permitted Recall@k: relevant chunks the caller may see, found in the top k.
    ``lost_queries``: queries where the strategy found fewer permitted relevant chunks than pre-filtering.
    ``short_lists``: queries that got fewer than k results although the universe had k matches.
    ``hidden_ranked``: mean number of hidden chunks the lane ranked (0 for pre-filtering).
    ``score_drift``: share of returned chunks whose score differs from the score the
    boundary-first lane gives the same chunk (BM25 statistics counted hidden chunks).
    """

    strategy: str
    overfetch: int | None
    queries: int
    recall: float
    lost_queries: int
    short_lists: int
    hidden_ranked: float
    score_drift: float


def acl_overlay_chunks(
    records: Iterable[tuple[str, str]],
    tags: Sequence[str],
    *,
    region: str = "GLOBAL",
    effective_from: dt.date = dt.date(2000, 1, 1),
) -> list[PolicyChunk]:
    """Turn ``(id, text)`` records into chunks with a synthetic, deterministic ACL tag each.

    The tag is ``tags[BLAKE2b(id) mod len(tags)]``: stable across runs and
    machines, and independent of the text, so it behaves like an arbitrary
    organisational boundary laid over a public corpus.
    """
    tags = tuple(tags)
    if not tags or not all(isinstance(t, str) and t for t in tags):
        raise InvalidArgument(f"tags must be a non-empty list of non-empty strings, not {tags!r}")
    chunks = []
    for chunk_id, text in records:
        slot = int.from_bytes(hashlib.blake2b(chunk_id.encode("utf-8"), digest_size=8).digest(), "little")
        chunks.append(
            PolicyChunk(
                chunk_id=chunk_id,
                document_id=chunk_id,
                parent_id=chunk_id,
                version=f"{chunk_id}/v1",
                region=region,
                acl_tag=tags[slot % len(tags)],
                effective_from=effective_from,
                effective_to=None,
                text=text,
            )
        )
    return chunks


def compare_filter_placement(
    queries: Mapping[str, str],
    qrels: Mapping[str, Iterable[str] | Mapping[str, float]],
    chunks: Sequence[PolicyChunk],
    caller: Caller,
    on_date: dt.date,
    *,
    top_k: int = 10,
    overfetch: Sequence[int] = (1, 4),
    rank: Ranker = bm25_rank,
) -> list[FilterPlacement]:
    """Pre-filtering against post-filtering at each over-fetch factor, on the same queries.

    ``qrels`` maps a query id to its relevant ids, or to ``{id: grade}``.
    Only queries with at least one *permitted* relevant chunk are counted (a
    query whose evidence is all hidden has nothing a safe system may find).
    ``rank(query, universe, k)`` is the lane, BM25 by default. Returns the
    pre-filter row first, then one post-filter row per factor.
    """
    top_k = check_top_k(top_k)
    factors = [check_top_k(f, "overfetch") for f in overfetch]
    universe = permitted_chunks(caller, chunks, on_date)
    visible = {c.chunk_id for c in universe}
    counted = []
    for query_id in sorted(queries):
        judged = qrels.get(query_id, ())
        # Graded qrels ({doc: grade}) count grades > 0 as relevant, as trec_eval does.
        relevant = {d for d, g in judged.items() if g > 0} if isinstance(judged, Mapping) else set(judged)
        relevant &= visible
        if relevant:
            counted.append((query_id, relevant))
    if not counted:
        raise InvalidArgument("no query has a relevant chunk the caller may see; nothing to compare")
    deepest = top_k * max(factors, default=1)
    # query id -> (results, number of hidden chunks the lane ranked)
    pre_runs: dict[str, tuple[list[tuple[PolicyChunk, float]], int]] = {}
    post_runs: dict[int, dict[str, tuple[list[tuple[PolicyChunk, float]], int]]] = {f: {} for f in factors}
    for query_id, _ in counted:
        text = queries[query_id]
        pre_runs[query_id] = (rank(text, universe, top_k), 0)
        fetched = rank(text, chunks, deepest) if factors else []
        for factor in factors:
            head = fetched[: top_k * factor]
            hidden = sum(1 for chunk, _ in head if chunk.chunk_id not in visible)
            post_runs[factor][query_id] = (post_filter(head, caller, on_date, top_k), hidden)
    pre_scores = {
        query_id: {chunk.chunk_id: score for chunk, score in rank(queries[query_id], universe, deepest)}
        for query_id, _ in counted
    }

    def row(strategy: str, factor: int | None, runs: Mapping[str, tuple[list[tuple[PolicyChunk, float]], int]]) -> FilterPlacement:
        recall, lost, short, hidden, drifted, compared = 0.0, 0, 0, 0, 0, 0
        for query_id, relevant in counted:
            results, hidden_ranked = runs[query_id]
            ids = [chunk.chunk_id for chunk, _ in results]
            pre_ids = [chunk.chunk_id for chunk, _ in pre_runs[query_id][0]]
            recall += recall_at_k(ids, relevant, top_k)
            lost += len(relevant.intersection(ids)) < len(relevant.intersection(pre_ids))
            short += len(ids) < len(pre_ids)
            hidden += hidden_ranked
            for chunk, score in results:
                # Compared where the boundary-first lane also scored the chunk (its top k × max factor).
                reference = pre_scores[query_id].get(chunk.chunk_id)
                if reference is not None:
                    compared += 1
                    drifted += abs(reference - score) > SCORE_TOLERANCE
        n = len(counted)
        return FilterPlacement(strategy, factor, n, recall / n, lost, short, hidden / n, drifted / compared if compared else 0.0)

    rows = [row("pre-filter (boundary first)", None, pre_runs)]
    rows.extend(row(f"post-filter, {f}x over-fetch", f, post_runs[f]) for f in factors)
    return rows
