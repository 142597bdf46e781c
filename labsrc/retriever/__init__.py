"""The retriever: boundary → lanes → fusion, wired in one place.

Takes the stored corpus, a caller and a date; returns a :class:`RetrievalResult`
(sparse, dense and fused lists, plus a :class:`~labsrc.trace.RetrievalTrace`).
"""

from labsrc.retriever.engine import (
    LaneEngine,
    mask_key,
)
from labsrc.retriever.policy import (
    PolicyRetriever,
    RetrievalResult,
    hybrid_rank,
    lane_versions,
    retriever_for,
    trace_hybrid_request,
)

__all__ = [
    "LaneEngine",
    "PolicyRetriever",
    "RetrievalResult",
    "hybrid_rank",
    "lane_versions",
    "mask_key",
    "retriever_for",
    "trace_hybrid_request",
]
