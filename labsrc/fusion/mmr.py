"""Maximal Marginal Relevance: diversify a candidate list after retrieval.

Carbonell & Goldstein (SIGIR 1998) pick results one at a time, each time taking
the candidate that best balances relevance to the query against similarity to
what is already picked. Near-duplicates of an earlier pick lose their place to
something new.

MMR only reorders and thins the candidates it is given. It cannot bring back a
document that retrieval missed, so measure Recall@k before reaching for it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from labsrc.errors import InvalidArgument
from labsrc.ranking import check_top_k

__all__ = ["maximal_marginal_relevance", "mmr_score"]

K = TypeVar("K", bound=Hashable)


def mmr_score(relevance: float, max_similarity: float, lambda_: float) -> float:
    """λ · rel(d, q) − (1 − λ) · max_{s ∈ S} sim(d, s)  (Carbonell & Goldstein 1998).

    ``max_similarity`` is 0 while nothing has been selected.
    """
    return lambda_ * relevance - (1.0 - lambda_) * max_similarity


def maximal_marginal_relevance(
    candidates: Sequence[tuple[K, float]],
    vectors: Mapping[K, np.ndarray],
    *,
    lambda_: float = 0.5,
    top_k: int,
) -> list[tuple[K, float]]:
    """Greedy MMR selection of ``top_k`` of ``candidates``.

    ``candidates`` are ``(id, relevance)`` pairs, e.g. a lane's ``(id, cosine to
    the query)``; ``vectors`` gives each id's embedding, and ``sim`` is their
    cosine. ``lambda_ = 1`` keeps the relevance order, ``lambda_ = 0`` only
    spreads out. Returns ``(id, MMR score when picked)`` in pick order; ties
    break on id ascending.
    """
    top_k = check_top_k(top_k)
    if isinstance(lambda_, bool) or not isinstance(lambda_, (int, float)) or not 0.0 <= lambda_ <= 1.0:
        raise InvalidArgument(f"lambda_ must be a number in [0, 1], not {lambda_!r}")
    ids = [item for item, _ in candidates]
    if len(set(ids)) != len(ids):
        raise InvalidArgument("candidates contain the same id more than once")
    missing = [item for item in ids if item not in vectors]
    if missing:
        raise InvalidArgument(f"no vector for candidate(s) {sorted(missing)[:5]}")
    if not ids:
        return []
    # Sort once by id so "first maximum" below means "smallest id among ties".
    order = sorted(range(len(ids)), key=lambda i: ids[i])
    ids = [ids[i] for i in order]
    relevance = np.array([candidates[i][1] for i in order], dtype=np.float64)
    matrix = np.array([np.asarray(vectors[item], dtype=np.float64) for item in ids])
    norms = np.linalg.norm(matrix, axis=1)
    unit = np.divide(matrix, norms[:, None], out=np.zeros_like(matrix), where=norms[:, None] > 0)
    similarity = unit @ unit.T

    selected: list[tuple[K, float]] = []
    max_sim = np.zeros(len(ids))
    available = np.ones(len(ids), dtype=bool)
    for _ in range(min(top_k, len(ids))):
        scores = np.where(available, mmr_score(relevance, max_sim, float(lambda_)), -np.inf)
        pick = int(np.argmax(scores))  # first maximum: ties go to the smaller id
        selected.append((ids[pick], float(scores[pick])))
        available[pick] = False
        max_sim = np.maximum(max_sim, similarity[pick])
    return selected
