"""Retrieval metrics, defined as trec_eval defines them (ranks are 1-based).

Per-query metrics take ``ranked`` (ids in rank order) and either a set of
relevant ids or an id → grade mapping (grade > 0 means relevant). Cut-offs count
ranks, so ``k`` is "the top k results". :func:`evaluate_run` aggregates over a
run and qrels in the usual TREC shapes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence

from labsrc.errors import InvalidArgument
from labsrc.ranking import check_top_k

__all__ = [
    "METRICS",
    "evaluate_run",
    "hit_at_k",
    "ndcg_at_k",
    "precision_at_k",
    "rank_run",
    "recall_at_k",
    "reciprocal_rank",
]

Relevance = Collection[str] | Mapping[str, float]


def _relevant(relevant: Relevance) -> set[str]:
    if isinstance(relevant, Mapping):
        return {doc for doc, grade in relevant.items() if grade > 0}
    return set(relevant)


def recall_at_k(ranked: Sequence[str], relevant: Relevance, k: int) -> float:
    """|relevant ∩ ranked[:k]| / |relevant|; 0.0 when nothing is relevant.

    Manning, Raghavan & Schütze (2008), *Introduction to Information Retrieval*, §8.3.
    """
    k = check_top_k(k, "k")
    rel = _relevant(relevant)
    return len(rel.intersection(ranked[:k])) / len(rel) if rel else 0.0


def precision_at_k(ranked: Sequence[str], relevant: Relevance, k: int) -> float:
    """|relevant ∩ ranked[:k]| / k (trec_eval P_k: a short list still divides by k)."""
    k = check_top_k(k, "k")
    return len(_relevant(relevant).intersection(ranked[:k])) / k


def hit_at_k(ranked: Sequence[str], relevant: Relevance, k: int) -> float:
    """1.0 if any relevant id is in ``ranked[:k]``, else 0.0 (a.k.a. success@k)."""
    k = check_top_k(k, "k")
    return 1.0 if _relevant(relevant).intersection(ranked[:k]) else 0.0


def reciprocal_rank(ranked: Sequence[str], relevant: Relevance, k: int | None = None) -> float:
    """1 / rank of the first relevant id (within the top ``k`` if given), else 0.0.

    Voorhees (1999), TREC-8 question answering track.
    """
    limit = len(ranked) if k is None else check_top_k(k, "k")
    rel = _relevant(relevant)
    for rank, doc in enumerate(ranked[:limit], start=1):
        if doc in rel:
            return 1.0 / rank
    return 0.0


def ndcg_at_k(ranked: Sequence[str], gains: Relevance, k: int) -> float:
    """DCG@k / IDCG@k with linear gain: DCG = Σ_i g(d_i) / log2(i + 1).

    Järvelin & Kekäläinen (2002); linear gain as in trec_eval's ``ndcg_cut``.
    A set of relevant ids means gain 1 each. 0.0 when nothing is relevant.
    """
    k = check_top_k(k, "k")
    grades = dict(gains) if isinstance(gains, Mapping) else {doc: 1.0 for doc in gains}
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 1) for i, g in enumerate(ideal, start=1))
    if idcg == 0:
        return 0.0
    dcg = sum(max(grades.get(doc, 0.0), 0.0) / math.log2(i + 1) for i, doc in enumerate(ranked[:k], start=1))
    return dcg / idcg


#: Metric name → per-query function(ranked, qrel, k). Names follow ranx / BEIR.
METRICS: Mapping[str, Callable[[Sequence[str], Mapping[str, float], int | None], float]] = {
    "ndcg": lambda ranked, qrel, k: ndcg_at_k(ranked, qrel, k if k is not None else max(len(ranked), 1)),
    "recall": lambda ranked, qrel, k: recall_at_k(ranked, qrel, k if k is not None else max(len(ranked), 1)),
    "precision": lambda ranked, qrel, k: precision_at_k(ranked, qrel, k if k is not None else max(len(ranked), 1)),
    "hit_rate": lambda ranked, qrel, k: hit_at_k(ranked, qrel, k if k is not None else max(len(ranked), 1)),
    "mrr": lambda ranked, qrel, k: reciprocal_rank(ranked, qrel, k),
}

_METRIC_NAME = re.compile(r"([a-z_]+)(?:@(\d+))?")


def _parse_metric(name: str) -> tuple[str, int | None]:
    match = _METRIC_NAME.fullmatch(name.strip().lower())
    if not match or match.group(1) not in METRICS:
        raise InvalidArgument(
            f"unknown metric {name!r}; valid metrics are {sorted(METRICS)}, optionally with a cut-off like 'ndcg@10'"
        )
    k = int(match.group(2)) if match.group(2) else None
    if k is not None:
        check_top_k(k, f"cut-off in {name!r}")
    return match.group(1), k


def rank_run(scores: Mapping[str, float]) -> list[str]:
    """Doc ids sorted by score descending, ties broken by doc id ascending."""
    return [doc for doc, _ in sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))]


def evaluate_run(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str],
    *,
    per_query: bool = False,
) -> dict[str, float] | dict[str, dict[str, float]]:
    """Mean of each metric over the queries in ``qrels``.

    ``run`` is qid → {doc id → score}; ``qrels`` is qid → {doc id → grade}. A query
    missing from the run scores 0. With ``per_query=True`` the result is
    metric → {qid → value} instead of metric → mean.
    """
    if isinstance(metrics, str):
        metrics = [metrics]
    parsed = {name: _parse_metric(name) for name in metrics}
    if not qrels:
        raise InvalidArgument("qrels is empty: there is nothing to evaluate against")
    ranked = {qid: rank_run(run.get(qid, {})) for qid in qrels}
    table = {
        name: {qid: METRICS[base](ranked[qid], qrels[qid], k) for qid in sorted(qrels)}
        for name, (base, k) in parsed.items()
    }
    if per_query:
        return table
    return {name: sum(values.values()) / len(values) for name, values in table.items()}
