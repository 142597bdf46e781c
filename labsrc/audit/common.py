"""What every audited retriever needs from the lab: the boundary as metadata, and some vectors.

Each subject filters by metadata *its own way* (a payload filter, a filter
clause, a callable); this module only writes the chunk's boundary fields into
the shape those filters read, and gives a query encoder when the run has none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np

from labsrc.lanes.dense import DenseSource, as_dense_source
from labsrc.records.policy import Caller, PolicyChunk

__all__ = ["OPEN_END", "boundary_metadata", "dense_source", "document_vectors", "permits"]

#: ``effective_to = None`` ("still in force") stored as the largest ordinal, so a range filter can read it.
OPEN_END = dt.date.max.toordinal()


def boundary_metadata(chunk: PolicyChunk) -> dict[str, Any]:
    """The fields a metadata filter needs: id, region, ACL tag and the effective window as day ordinals."""
    return {
        "chunk_id": chunk.chunk_id,
        "region": chunk.region,
        "acl_tag": chunk.acl_tag,
        "effective_from": chunk.effective_from.toordinal(),
        "effective_to": OPEN_END if chunk.effective_to is None else chunk.effective_to.toordinal(),
    }


def permits(metadata: dict[str, Any], caller: Caller, on_date: dt.date) -> bool:
    """The boundary, written the way a team writes a metadata filter callable."""
    day = on_date.toordinal()
    return (
        metadata["region"] == caller.region
        and metadata["acl_tag"] in caller.acl_tags
        and metadata["effective_from"] <= day <= metadata["effective_to"]
    )


def dense_source(vectors: DenseSource | None) -> DenseSource:
    """The run's vectors, or the lab's hashing encoder when the run has none."""
    return as_dense_source(vectors)


def document_vectors(source: DenseSource, chunks: Sequence[PolicyChunk]) -> np.ndarray:
    """float64 ``[len(chunks), d]`` from the source (``[0, 0]`` for no chunks)."""
    if not chunks:
        return np.zeros((0, 0))
    return np.asarray(source.document_matrix(list(chunks)), dtype=np.float64)
