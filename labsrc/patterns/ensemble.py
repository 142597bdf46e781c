"""The 0.6 / 0.4 weighted ensemble: a PolicyRetriever with one existing system's BM25 and RRF settings.

That system (a LangChain-style ``EnsembleRetriever``) fused BM25 with k1 = 0.5,
b = 0.75 and the dense lane at weights 0.6 / 0.4, and returned a placeholder
score of −1 for every fused result; the lab returns the real fused score, in
relevance order, behind the same evidence boundary as every other retriever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from labsrc.fusion.rrf import DEFAULT_RRF_K
from labsrc.lanes.dense import DenseSource, Encoder
from labsrc.records.policy import PolicyChunk
from labsrc.retriever.policy import PolicyRetriever

__all__ = ["ENSEMBLE_B", "ENSEMBLE_K1", "ENSEMBLE_WEIGHTS", "ensemble_retriever"]

#: The ensemble's BM25 parameters (the lesson's default is k1 = 1.2, b = 0.75).
ENSEMBLE_K1 = 0.5
ENSEMBLE_B = 0.75
#: The ensemble's lane weights.
ENSEMBLE_WEIGHTS: Mapping[str, float] = MappingProxyType({"bm25": 0.6, "dense": 0.4})


def ensemble_retriever(
    chunks: Sequence[PolicyChunk],
    vectors: DenseSource | Encoder,
    *,
    k1: float = ENSEMBLE_K1,
    b: float = ENSEMBLE_B,
    bm25_weight: float = ENSEMBLE_WEIGHTS["bm25"],
    dense_weight: float = ENSEMBLE_WEIGHTS["dense"],
    rrf_k: float = DEFAULT_RRF_K,
) -> PolicyRetriever:
    """The weighted ensemble as a :class:`~labsrc.retriever.policy.PolicyRetriever`.

    It keeps the lab's boundary and lanes; only the BM25 parameters and the RRF
    weights differ. ``search(...).fused`` holds ``(chunk, real fused score)`` in
    relevance order, ``top_k`` of them at most; ``.dense`` holds the semantic
    lane's ``(chunk, cosine)`` pairs.
    """
    return PolicyRetriever(
        chunks,
        vectors,
        k1=k1,
        b=b,
        rrf_k=rrf_k,
        weights={"bm25": bm25_weight, "dense": dense_weight},
    )
