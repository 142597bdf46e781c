"""Qdrant through ``qdrant-client``'s local mode (no server) with a payload filter.

Its documentation's way to filter: ``query_points(..., query_filter=Filter(must=[...]))``
with a ``MatchValue`` on ``region``, a ``MatchAny`` on ``acl_tag`` and ``Range``
conditions on the effective window, applied *during* the search. Dense only
(cosine). Needs the ``audit`` extra (``qdrant-client``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np

from labsrc.audit.common import boundary_metadata, dense_source, document_vectors
from labsrc.errors import MissingDependency
from labsrc.lanes.dense import DenseSource
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["QdrantFilter"]

_COLLECTION = "chunks"


def _qdrant() -> tuple[Any, Any]:
    try:
        from qdrant_client import QdrantClient, models
    except ImportError as exc:
        raise MissingDependency(f"the Qdrant subject needs the audit extra: pip install 'hybrid-retrieval-lab[audit]' ({exc})") from exc
    return QdrantClient, models


class QdrantFilter:
    """``factory(chunks, vectors)``: an in-memory Qdrant collection of every stored chunk's vector."""

    def __init__(self, chunks: Sequence[PolicyChunk], vectors: DenseSource | None) -> None:
        client_type, self.models = _qdrant()
        self.source = dense_source(vectors)
        self.client = client_type(":memory:")
        self.size = len(chunks)
        if not chunks:
            return
        matrix = document_vectors(self.source, chunks)
        m = self.models
        self.client.create_collection(_COLLECTION, vectors_config=m.VectorParams(size=matrix.shape[1], distance=m.Distance.COSINE))
        points = [m.PointStruct(id=i, vector=row.tolist(), payload=boundary_metadata(c))
                  for i, (c, row) in enumerate(zip(chunks, matrix)) if np.any(row)]
        if points:
            self.client.upsert(_COLLECTION, points=points)

    def search(self, query: str, caller: Caller, on_date: dt.date, top_k: int) -> list[tuple[str, float]]:
        vector = self.source.query_vector(query)
        if not self.size or not query.strip() or not np.any(vector) or not caller.acl_tags:
            return []
        m, day = self.models, on_date.toordinal()
        where = m.Filter(must=[
            m.FieldCondition(key="region", match=m.MatchValue(value=caller.region)),
            m.FieldCondition(key="acl_tag", match=m.MatchAny(any=sorted(caller.acl_tags))),
            m.FieldCondition(key="effective_from", range=m.Range(lte=day)),
            m.FieldCondition(key="effective_to", range=m.Range(gte=day)),
        ])
        hits = self.client.query_points(_COLLECTION, query=vector.tolist(), query_filter=where, limit=top_k).points
        return [(p.payload["chunk_id"], float(p.score)) for p in hits]

    def close(self) -> None:
        self.client.close()
